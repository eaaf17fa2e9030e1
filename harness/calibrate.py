"""Calibrate the replay simulator to the machine that ran a calibration study: its step times and
the front end's share of TTFT.

    python -m harness.calibrate results/calib_qwen3-0.6b_api-4 --nonnegative \
        --out results/steplogs/qwen3-0.6b_api-4_HOST.fit.json

Two parts, both from the study's own runs (``experiments/calibrate.json`` records them):

1. The step-time model, fitted to the study's step log (``harness.step_model fit-study``).
2. ``frontend_ttft_s``: every paced run of the study (a rate, not inf) replayed with that model on
   the runs' own KV cache; the GPU run's TTFT P50 less the replay's. Why: the replay times engine
   steps only. A request also spends time outside them (HTTP, tokenising, the API server's hand-over
   to the engine core, the first token's way back), which the step log cannot show. The replay adds
   this constant to every request's TTFT (and so to its end-to-end latency); it shifts when tokens
   reach the client, not when the engine schedules them, so ITL and throughput do not move.

The output is one fit file (the step model's fields, ``frontend_ttft_s`` and how it was measured),
which ``sched_sim.py replay --step-model`` and ``harness.replay_study`` read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.step_model import add_without_argument, fit_study, write_fit  # noqa: E402


def kv_blocks(run: Any) -> int:
    """The KV cache the run's server had, in blocks (its engine metrics)."""
    blocks = (run.engine.get("metrics") or {}).get("num_gpu_blocks")
    if not blocks:
        raise ValueError(f"{run.path}: no engine metrics num_gpu_blocks; give --num-gpu-blocks")
    return int(blocks)


def frontend_ttft(folder: Path, fit_file: Path, blocks: int | None) -> dict[str, Any]:
    """Replay each paced run of the study with ``fit_file``; the front end's TTFT is the GPU's TTFT
    P50 less the replay's, the median over those runs (never below zero)."""
    from harness.replay_study import replay_run
    from harness.results import load_runs

    paced = [run for run in load_runs(folder) if run.config.rate is not None]
    if not paced:
        raise ValueError(f"{folder}: no run at a finite rate, so no TTFT to compare (add a paced arm)")
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in paced:
            out = Path(tmp) / f"{run.path.stem}.replay.json"
            if replay_run(run, fit_file, blocks or kv_blocks(run), out) != 0:
                raise RuntimeError(f"the replay of {run.path} failed")
            points.append({"run": str(run.path), "gpu_ttft_p50_ms": run.summary["ttft_ms"]["p50"],
                           "replay_ttft_p50_ms": json.loads(out.read_text())["summary"]["ttft_ms"]["p50"]})
    median_ms = statistics.median(p["gpu_ttft_p50_ms"] - p["replay_ttft_p50_ms"] for p in points)
    return {"frontend_ttft_s": max(0.0, median_ms / 1e3), "frontend_calibration": {
        "method": "TTFT P50 of each paced GPU run less its replay's (step model only), median over runs",
        "runs": points}}


def calibrate(folder: Path, out: Path, nonnegative: bool, blocks: int | None,
              without: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fit the step model (``without``: terms held at zero), measure the front end's TTFT with it,
    write both into ``out``."""
    steps = fit_study(folder, nonnegative, without)
    write_fit(steps, out)  # the replays below read the step model from the file, as every replay does
    result = {**steps, **frontend_ttft(folder, out, blocks)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"front end: {result['frontend_ttft_s'] * 1e3:.1f} ms of TTFT outside the engine's steps -> {out}")
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a calibration study's results folder (step log, paced run)")
    parser.add_argument("--out", type=Path, required=True, help="the fit file to write")
    parser.add_argument("--nonnegative", action="store_true",
                        help="keep the step model's cost terms at or above zero (harness.step_model)")
    parser.add_argument("--num-gpu-blocks", type=int, default=None,
                        help="the machine's KV blocks of 16 tokens (default: the runs' engine metrics)")
    add_without_argument(parser)
    args = parser.parse_args(argv)
    try:
        calibrate(args.folder, args.out, args.nonnegative, args.num_gpu_blocks, tuple(args.without))
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
