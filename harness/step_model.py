"""The replay simulator's step-time model, fitted to engine step logs (``LAB3_STEP_LOG``).

    step_time_s = a + b*prefill_tokens + c*decode_requests + d*context_tokens + e*has_prefill
                  + f*prefill_in_graph

Terms: a fixed cost per step (launch, sampling, the host's share of the engine cycle), the linear
layers' work on prompt tokens, the per-sequence cost of a decode, the attention reads (context of
every scheduled request), a fixed extra for a step with any prompt token: vLLM 0.26
(FULL_AND_PIECEWISE) replays one full CUDA graph for a decode-only step but runs piecewise graphs
with eager attention otherwise, and a correction for such a step that fits the largest captured
graph (``GRAPH_TOKENS``): above it no graph runs at all and each kernel is launched from Python.
Without that term a fit at budget 2048, where most steps with prompt tokens are larger, predicted
1.7x the measured time of the smaller ones and got Task 2's budget order wrong. Least squares over
the non-empty pipelined steps of the logs
(``.csv`` or ``.csv.xz``). Why more than the first four terms and a lag: on the H200 SJF log a
step's logged time fits the *next* step's features far better (R^2 0.61 -> 0.83; a decode step
before a prefill step reads ~25 ms, the prefill step ~5 ms): the engine applies step N's output
after N+1 has run. The fit tries lags 0 and 1 and keeps the better (``output_lag_steps``, which
the replay applies); has_prefill then takes R^2 to 0.90. What remains (median error ~7% for
decode-only, ~13% for mixed steps, ~1% of steps over twice their prediction) stays in the fit,
which fits the mean that queueing sums, and is kept as 200 residual quantiles per regime
(shifted to mean zero), which the replay draws per step (seeded) so that the tails see the
measured spread (independently: real slow steps come in runs).

    python -m harness.step_model fit LOG.csv.xz [LOG.csv ...] --gpu "NVIDIA H200" --model qwen3-0.6b \
        --out results/steplogs/qwen3-0.6b_api-4.fit.json
    python -m harness.step_model fit-study results/calib_qwen3-0.6b --out results/steplogs/HOST.fit.json

``fit-study`` fits the step log of an interleaved study whose server logged its steps (a plan with
``"step_log": true``, such as ``experiments/calibrate.json``) and records which host measured it
(GPU, driver, machine boot id, dates, vLLM version, API servers, budgets) from the study's files:
a fit belongs to the machine it was measured on, since machines of one kind differ.

The JSON holds the coefficients, lag, residuals, R^2, relative errors and provenance (logs with
their SHA-256, model, GPU, date). Only a fit to measured logs may be committed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TERMS = ("intercept", "prefill_tokens", "decode_requests", "context_tokens", "has_prefill", "prefill_in_graph")
FORMULA = ("step_time_s = a + b*prefill_tokens + c*decode_requests + d*context_tokens + e*has_prefill"
           " + f*prefill_in_graph")
COST_TERMS = TERMS[:5]  # work a step does: more of it never makes a step faster (prefill_in_graph is a correction)
GRAPH_TOKENS = 512  # vLLM 0.26's max_cudagraph_capture_size for Qwen3-0.6B with 256 sequences (server log)


def in_graph(prefill_tokens: Any, decode_requests: Any, graph_tokens: int = GRAPH_TOKENS) -> Any:
    """A step with prompt tokens whose tokens (one per decoding request besides) fit the largest
    graph; numbers or numpy arrays alike (the replay asks once per step)."""
    return (prefill_tokens > 0) & (prefill_tokens + decode_requests <= graph_tokens)


def read_step_log(path: Path) -> dict[str, np.ndarray]:
    """A step log's columns by name (the header names them); ``.xz`` (lzma) is read as such."""
    frame = pd.read_csv(path, compression="infer")
    return {name: frame[name].to_numpy(np.float64) for name in frame.columns}


def design(prefill_tokens: Any, decode_requests: Any, context_tokens: Any) -> np.ndarray:
    """The model's regressors, one row per step, in ``TERMS`` order."""
    prefill = np.asarray(prefill_tokens, dtype=np.float64)
    decode = np.asarray(decode_requests, dtype=np.float64)
    return np.column_stack([np.ones_like(prefill), prefill, decode, np.asarray(context_tokens, dtype=np.float64),
                            (prefill > 0).astype(np.float64), in_graph(prefill, decode).astype(np.float64)])


def aligned(cols: dict[str, np.ndarray], lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(regressors, seconds) of one log, each row's time against the features of the step ``lag``
    after it; both rows pipelined (measured from the previous output) and non-empty."""
    n = len(cols["step_time_us"]) - lag
    feat = {k: v[lag:lag + n] for k, v in cols.items()}
    keep = ((feat["prefill_tokens"] + feat["decode_tokens"] > 0) & (cols["step_time_us"][:n] > 0)
            & (feat["pipelined"] > 0) & (cols["pipelined"][:n] > 0 if lag else True))
    return design(feat["prefill_tokens"][keep], feat["decode_requests"][keep],
                  feat["context_tokens"][keep]), cols["step_time_us"][:n][keep] / 1e6


def least_squares(x: np.ndarray, y: np.ndarray, nonnegative: bool, without: tuple[str, ...] = ()) -> np.ndarray:
    """Coefficients in ``TERMS`` order, the terms in ``without`` held at zero. With ``nonnegative``,
    the best fit whose cost terms are all at least zero: the least-squares fit over each subset of
    cost terms held at zero, the best of those that keep the rest non-negative (exact: the bounded
    optimum is one of them; 32 small fits). Why: when a calibration's terms rise together, an
    unbounded fit trades them against each other (one below zero, its partner above) and predicts
    steps unlike the fitted ones badly. ``without`` screens which term a held-out error comes from."""
    zero = [TERMS.index(term) for term in without]
    bounded = [TERMS.index(term) for term in COST_TERMS if term not in without] if nonnegative else []
    best: tuple[float, np.ndarray] | None = None
    for held in itertools.chain.from_iterable(itertools.combinations(bounded, k) for k in range(len(bounded) + 1)):
        free = [i for i in range(x.shape[1]) if i not in held and i not in zero]
        coef = np.zeros(x.shape[1])
        coef[free] = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        sse = float(np.sum((x @ coef - y) ** 2))
        if all(coef[i] >= 0 for i in bounded) and (best is None or sse < best[0]):
            best = (sse, coef)
    assert best is not None  # unbounded: the one fit; bounded: every cost term held at zero is feasible
    return best[1]


def correlated_terms(x: np.ndarray, threshold: float = 0.9) -> list[dict[str, Any]]:
    """Pairs of regressors (not the intercept) whose correlation over the fitted steps is at least
    ``threshold`` in size: terms a fit cannot tell apart on these steps."""
    varying = [i for i in range(1, x.shape[1]) if np.ptp(x[:, i]) > 0]
    r = np.corrcoef(x[:, varying].T)
    return [{"terms": [TERMS[varying[a]], TERMS[varying[b]]], "r": round(float(r[a, b]), 3)}
            for a, b in itertools.combinations(range(len(varying)), 2) if abs(r[a, b]) >= threshold]


def fitted_steps(logs: list[Path], lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(regressors, seconds) of every log's steps at one output lag, as ``fit`` used them."""
    x, y = zip(*(aligned(read_step_log(path), lag) for path in logs))
    return np.concatenate(x), np.concatenate(y)


def fit(logs: list[Path], gpu: str, model: str, nonnegative: bool = False, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """Least squares over the non-empty pipelined steps of ``logs`` (its cost terms kept at or
    above zero with ``nonnegative``, the terms in ``without`` held at zero), at the output lag (0
    or 1 step) with the smaller residual; empty steps run no model."""
    fits = []
    for lag in (0, 1):
        x, y = fitted_steps(logs, lag)
        if len(y) < 2 * len(TERMS):
            raise ValueError(f"{len(y)} non-empty steps in {[str(p) for p in logs]}: too few to fit")
        coef = least_squares(x, y, nonnegative, without)
        fits.append((float(np.mean((x @ coef - y) ** 2)), lag, x, y, coef))
    _, lag, x, y, coef = min(fits, key=lambda f: f[0])
    pred = x @ coef
    rel = np.abs(pred - y) / y
    probs = (np.arange(200) + 0.5) / 200
    quantiles = {str(k): np.quantile((y - pred)[x[:, 4] == k], probs) for k in (0, 1) if (x[:, 4] == k).any()}
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return {
        "formula": FORMULA,
        "graph_tokens": GRAPH_TOKENS,
        "method": ("least squares, cost terms at least zero" if nonnegative else "least squares")
                  + (f", {', '.join(without)} held at zero" if without else ""),
        "coefficients": dict(zip(TERMS, map(float, coef))),
        "correlated_terms": correlated_terms(x),
        "output_lag_steps": lag,
        "residual_quantiles_s": {k: [round(float(v), 7) for v in q - q.mean()] for k, q in quantiles.items()},
        "r2": 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else None,
        "mean_relative_error": float(rel.mean()),
        "median_relative_error": float(np.median(rel)),
        "p90_relative_error": float(np.percentile(rel, 90)),
        "num_steps": int(len(y)),
        "per_regime_median_relative_error": {
            kind: float(np.median(rel[mask])) for kind, mask in (
                ("decode_only", x[:, 4] == 0), ("prefill_only", (x[:, 4] > 0) & (x[:, 2] == 0)),
                ("mixed", (x[:, 4] > 0) & (x[:, 2] > 0))) if mask.any()},
        "provenance": {
            "logs": [{"path": str(p), "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()}
                     for p in logs],
            "gpu": gpu, "model": model,
            "fitted_at_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }


STEP_LOG_FILE = "steps.csv"  # a study's step log, in its results folder's logs/ (harness/study.py)


def study_host(folder: Path) -> dict[str, Any]:
    """Who measured a study's step log, from its ``study.json`` (plan, hosts) and its run files'
    provenance: the host identity a fit carries."""
    record = json.loads((folder / "study.json").read_text())
    plan, server = record["plan"], record["plan"]["server"]
    metas = [json.loads(p.read_text())["meta"] for p in sorted(folder.glob("*.json")) if p.name != "study.json"]
    if not metas:
        raise ValueError(f"{folder}: no run files, so no host to name")
    gpus = {json.dumps(m["gpu"], sort_keys=True) for m in metas}
    dates = sorted(m["date_utc"] for m in metas)
    return {"gpu": [json.loads(g) for g in sorted(gpus)], "machine_boot_ids": sorted({m["machine_boot_id"] for m in metas}),
            "dates_utc": [dates[0], dates[-1]], "vllm": sorted({m["versions"]["vllm"] for m in metas}),
            "git_commits": sorted({m.get("git_commit") or "" for m in metas}), "study": plan["name"],
            "model": server["model"], "dummy_weights": server["dummy_weights"], "api_servers": server["api_servers"],
            "max_num_batched_tokens": server["max_num_batched_tokens"],
            "token_budgets": sorted({arm["token_budget"] for arm in plan["arms"]})}


def fit_study(folder: Path, nonnegative: bool = False, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The step-time model of a study's step log, with the host that measured it."""
    logs = sorted((folder / "logs").glob(STEP_LOG_FILE + "*"))
    if not logs:
        raise ValueError(f"{folder}/logs has no {STEP_LOG_FILE}[.xz]: run a plan whose server has \"step_log\": true")
    host = study_host(folder)
    gpu = " / ".join(g.get("name") or "no GPU (CPU)" for g in host["gpu"])
    model = f"{Path(host['model']).name}, {host['api_servers']} API servers"
    return {**fit(logs, gpu, model, nonnegative, without), "host": host}


def load(path: Path | str | None) -> dict[str, Any]:
    """A coefficient file, checked; the replay has no default: step times must be measured."""
    if not path:
        raise ValueError("a step-time model is required (--step-model FILE.json, written by "
                         "`python -m harness.step_model fit` from an H200 calibration run's step log)")
    coeffs = json.loads(Path(path).read_text())
    missing = [t for t in TERMS[:4] if t not in coeffs.get("coefficients", {})]  # the others: 0 if absent
    if missing:
        raise ValueError(f"{path}: not a step-time model (no coefficients {missing})")
    return coeffs


def predict_s(coeffs: dict[str, Any], prefill_tokens: int, decode_requests: int, context_tokens: int,
              rng: np.random.Generator | None = None) -> float:
    """Predicted seconds of one step; never below zero (a fit can have a negative term). With
    ``rng`` and the file's residual quantiles, plus one residual of the step's regime drawn at random."""
    c = coeffs["coefficients"]
    residuals = (coeffs.get("residual_quantiles_s") or {}).get(str(int(prefill_tokens > 0)))
    noise = residuals[rng.integers(len(residuals))] if rng is not None and residuals else 0.0
    return max(0.0, noise + c["intercept"] + c["prefill_tokens"] * prefill_tokens
               + c["decode_requests"] * decode_requests + c["context_tokens"] * context_tokens
               + c.get("has_prefill", 0.0) * (prefill_tokens > 0)
               + c.get("prefill_in_graph", 0.0)
               * in_graph(prefill_tokens, decode_requests, coeffs.get("graph_tokens", GRAPH_TOKENS)))


def write_fit(result: dict[str, Any], out: Path) -> None:
    """Write the coefficients where ``sched_sim.py --step-model`` reads them, and say how well they fit."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['num_steps']} steps, output lag {result['output_lag_steps']}: R^2 {result['r2']:.4f}, "
          f"mean relative error {result['mean_relative_error']:.3f}; coefficients {result['coefficients']} -> {out}")


def add_without_argument(parser: argparse.ArgumentParser) -> None:
    """``--without TERM`` (repeatable): fit with that term held at zero, to screen which term a
    held-out error comes from (docs/simulator.md)."""
    parser.add_argument("--without", action="append", default=[], choices=TERMS[1:], metavar="TERM",
                        help=f"hold this term at zero (repeatable; one of {', '.join(TERMS[1:])})")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit the step-time model to step logs")
    f.add_argument("logs", nargs="+", type=Path)
    f.add_argument("--gpu", required=True, help="the GPU the logs were measured on")
    f.add_argument("--model", required=True, help="the model served (and its settings)")
    f.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("fit-study", help="fit a study's step log and record the host that measured it")
    g.add_argument("folder", type=Path, help="a results folder of a study whose server logged its steps")
    g.add_argument("--out", type=Path, required=True)
    for command in (f, g):
        command.add_argument("--nonnegative", action="store_true",
                             help="keep the cost terms (all but prefill_in_graph) at or above zero: for a "
                                  "calibration whose terms rise together (one prompt length, one budget)")
        add_without_argument(command)
    args = parser.parse_args(argv)
    without = tuple(args.without)
    try:
        result = (fit(args.logs, args.gpu, args.model, args.nonnegative, without) if args.command == "fit"
                  else fit_study(args.folder, args.nonnegative, without))
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_fit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
