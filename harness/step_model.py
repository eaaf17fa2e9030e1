"""The replay simulator's step-time model, fitted to engine step logs (``LAB3_STEP_LOG``).

    step_time_s = a + b * prefill_tokens + c * decode_requests + d * context_tokens

Why these terms: a fixed cost per step (launch, sampling, the host's share of the engine
cycle), the linear layers' work on prompt tokens, the per-sequence cost of a decode, and the
attention reads, which grow with the context of every scheduled request. Least squares over the
non-empty steps of one or more logs (``my_scheduler.StepTimeLog``), numpy only.

    python -m harness.step_model fit LOG.csv [LOG.csv ...] --gpu "NVIDIA H200" --model qwen3-0.6b \
        --out results/sim/step_model_h200.json

The JSON holds the coefficients, the fit's R^2 and relative errors, and its provenance (the logs
with their SHA-256, the model, the GPU, the date). Only a fit to measured logs may be committed as
a coefficient file: the simulator's numbers are only as good as it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

TERMS = ("intercept", "prefill_tokens", "decode_requests", "context_tokens")
FORMULA = "step_time_s = a + b*prefill_tokens + c*decode_requests + d*context_tokens"


def read_step_log(path: Path) -> dict[str, np.ndarray]:
    """A step log's columns by name (the header names them, so column order may change)."""
    with open(path) as handle:
        header = handle.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
    if data.size == 0:
        data = np.zeros((0, len(header)))
    return {name: data[:, i] for i, name in enumerate(header)}


def design(prefill_tokens: Any, decode_requests: Any, context_tokens: Any) -> np.ndarray:
    """The model's regressors, one row per step, in ``TERMS`` order."""
    prefill = np.asarray(prefill_tokens, dtype=np.float64)
    return np.column_stack([np.ones_like(prefill), prefill,
                            np.asarray(decode_requests, dtype=np.float64),
                            np.asarray(context_tokens, dtype=np.float64)])


def fit(logs: list[Path], gpu: str, model: str) -> dict[str, Any]:
    """Least-squares fit over every non-empty step of ``logs``; empty steps run no model."""
    cols = [read_step_log(path) for path in logs]
    merged = {k: np.concatenate([c[k] for c in cols]) for k in cols[0]}
    keep = (merged["prefill_tokens"] + merged["decode_tokens"] > 0) & (merged["step_time_us"] > 0)
    x = design(merged["prefill_tokens"][keep], merged["decode_requests"][keep], merged["context_tokens"][keep])
    y = merged["step_time_us"][keep] / 1e6
    if len(y) < len(TERMS):
        raise ValueError(f"{len(y)} non-empty steps in {[str(p) for p in logs]}: too few to fit")
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = x @ coef
    rel = np.abs(pred - y) / y
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return {
        "formula": FORMULA,
        "coefficients": dict(zip(TERMS, map(float, coef))),
        "r2": 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else None,
        "mean_relative_error": float(rel.mean()),
        "median_relative_error": float(np.median(rel)),
        "p90_relative_error": float(np.percentile(rel, 90)),
        "num_steps": int(len(y)),
        "num_pipelined_steps": int(merged.get("pipelined", np.zeros(0))[keep].sum()),
        "provenance": {
            "logs": [{"path": str(p), "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()}
                     for p in logs],
            "gpu": gpu, "model": model,
            "fitted_at_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }


def load(path: Path | str | None) -> dict[str, Any]:
    """A coefficient file, checked; the replay has no default: step times must be measured."""
    if not path:
        raise ValueError("a step-time model is required (--step-model FILE.json, written by "
                         "`python -m harness.step_model fit` from an H200 calibration run's step log)")
    coeffs = json.loads(Path(path).read_text())
    missing = [t for t in TERMS if t not in coeffs.get("coefficients", {})]
    if missing:
        raise ValueError(f"{path}: not a step-time model (no coefficients {missing})")
    return coeffs


def predict_s(coeffs: dict[str, Any], prefill_tokens: int, decode_requests: int, context_tokens: int) -> float:
    """Predicted seconds of one step; never below zero (a fit can have a negative term)."""
    c = coeffs["coefficients"]
    return max(0.0, c["intercept"] + c["prefill_tokens"] * prefill_tokens
               + c["decode_requests"] * decode_requests + c["context_tokens"] * context_tokens)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit the step-time model to step logs")
    f.add_argument("logs", nargs="+", type=Path)
    f.add_argument("--gpu", required=True, help="the GPU the logs were measured on")
    f.add_argument("--model", required=True, help="the model served (and its settings)")
    f.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = fit(args.logs, args.gpu, args.model)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['num_steps']} steps: R^2 {result['r2']:.4f}, mean relative error "
          f"{result['mean_relative_error']:.3f}; coefficients {result['coefficients']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
