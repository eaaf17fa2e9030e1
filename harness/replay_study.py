"""Replay every run of a GPU study with a host's step-time fit: the held-out check of a calibration.

    python -m harness.replay_study results/task3_api-4_rate30_varlen \
        --step-model results/steplogs/HOST.fit.json --num-gpu-blocks 40736 --out results/replay_HOST

Why: a fit is judged on runs it did not see, from the machine that measured it. Each GPU run is
replayed once with its own load (strategy, settings, rate, budget, prompt lengths, arrival
seed), so the replays pair with the runs one to one and their spread is the workload's, as the
GPU runs' is; each keeps its summary only (``--no-detail``), which is what the check compares.
``--num-gpu-blocks`` is the KV cache of that machine (the server log's "GPU KV cache size" in
tokens / 16). A custom load (a heavy-tailed draw) is replayed from the lengths its run recorded
(``write_lengths``). Replays already written are skipped. The output folder's ``study.json`` names the
GPU folders it replays (role ``replay-validation``), which the report's section 6b reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.lab_metrics import slo_key  # noqa: E402
from harness.provenance import COMPRESSED_RECORD_SUFFIX  # noqa: E402
from harness.results import load_runs  # noqa: E402
from harness.study_file import STUDY_FILE, Study, read_study, write_study  # noqa: E402


def write_lengths(run: Any, path: Path) -> Path:
    """The prompt and output lengths ``run`` sent, in its order, as a custom dataset (JSONL with
    ``input_tokens`` and ``output_tokens``) that ``sched_sim replay --dataset-path`` reads. Why: a
    heavy-tailed draw is written with the tokenizer, tens of seconds a draw, and the run's own
    per-request record already holds the lengths it sent (every request forced to its full output
    length). A run with failed requests did not record theirs, so it is refused."""
    detail = run.detail
    failed = sum(1 for e in detail.errors if e)
    if failed:
        raise ValueError(f"{run.path}: {failed} requests failed, so their output lengths are not recorded; "
                         "replay it from its draw instead")
    path.write_text("".join(json.dumps({"input_tokens": int(i), "output_tokens": int(o)}) + "\n"
                            for i, o in zip(detail.input_lens, detail.output_lens)))
    return path


def replay_argv(config: Any, step_model: Path, blocks: int, out: Path, dataset: Path | None = None) -> list[str]:
    """The ``sched_sim replay`` arguments that rebuild one GPU run's load and server; a custom
    load's lengths come from ``dataset`` (``write_lengths``), a random load's from its seed."""
    bench = config.bench_params
    argv = ["replay", "--strategy", config.scheduler,
            "--step-model", str(step_model), "--num-gpu-blocks", str(blocks), "--workload", config.workload,
            "--rate", config.rate_label, "--seed", str(config.seed), "--run", str(config.run),
            "--num-prompts", str(config.num_prompts), "--burstiness", f"{bench.get('burstiness', 1.0):g}",
            "--max-num-batched-tokens", str(config.budget_in_force),
            "--max-num-seqs", str(config.server_params["max_num_seqs"]),
            "--warmup-fraction", f"{config.warmup_fraction:g}", "--timeout-s", f"{config.timeout_s:g}",
            "--additional-config", json.dumps(config.strategy_settings or {}), "--no-detail", "--out", str(out)]
    if config.custom_dataset:
        if dataset is None:
            raise ValueError(f"run {config.run} of {config.workload} sent a custom dataset: its replay needs the "
                             "lengths it sent (write_lengths)")
        argv += ["--dataset-path", str(dataset)]
    else:
        input_ratio, output_ratio = config.range_ratios
        argv += ["--input-len", str(bench["random_input_len"]), "--output-len", str(bench["random_output_len"]),
                 "--range-ratio", f"{input_ratio:g}", "--output-range-ratio", f"{output_ratio:g}"]
    return argv + ["--goodput", slo_key(config.goodput)]  # stored: a replay without arrays keeps its attainment


def replay_run(run: Any, step_model: Path, blocks: int, out: Path) -> int:
    """Replay one GPU run (``sched_sim replay``) into ``out``; its exit code."""
    from harness import sched_sim  # imports vLLM

    with tempfile.TemporaryDirectory() as tmp:
        dataset = write_lengths(run, Path(tmp) / "lengths.jsonl") if run.config.custom_dataset else None
        return sched_sim.main(replay_argv(run.config, step_model, blocks, out, dataset))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="GPU study folders")
    parser.add_argument("--step-model", type=Path, required=True, help="the fit of the machine that ran them")
    parser.add_argument("--num-gpu-blocks", type=int, required=True, help="that machine's KV blocks of 16 tokens")
    parser.add_argument("--out", type=Path, required=True, help="the replay folder")
    parser.add_argument("--question", default="", help="what the replays check, for the folder's study.json")
    ns = parser.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    for folder in ns.folders:
        runs = load_runs(folder)
        for i, run in enumerate(runs, 1):
            cfg = run.config
            out = ns.out / f"{cfg.scheduler}_{cfg.workload}_mnbt-{cfg.budget_in_force}_rate-{cfg.rate_label}_run-{cfg.run}{COMPRESSED_RECORD_SUFFIX}"
            if out.exists():
                print(f"[replay_study] {folder.name} {i}/{len(runs)}: {out.name} done, skipped", flush=True)
                continue
            print(f"[replay_study] {folder.name} {i}/{len(runs)}: {out.name}", flush=True)
            if (rc := replay_run(run, ns.step_model, ns.num_gpu_blocks, out)) != 0:
                return rc
    replays_of = tuple(sorted({f.name for f in ns.folders}))
    if (ns.out / STUDY_FILE).exists():
        replays_of = tuple(sorted(set(replays_of) | set(read_study(ns.out).replays_of)))
    write_study(ns.out, Study.from_runs(ns.out, ns.question, ("replay-validation",), replays_of))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
