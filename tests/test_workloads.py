"""The heavy-tailed workload: its lengths, the JSONL that `vllm bench serve` reads
back through vLLM's own dataset code, the replay simulator on the same file, and the Task 3
sweep's flags for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness import sched_sim as ss
from harness import workloads
from harness.run_config import cli_flags

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = str(ROOT / "models" / "qwen3-0.6b")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from harness.offline_model import resolve_model

    out = workloads.dataset_path(tmp_path_factory.mktemp("heavy"), 60, 7)
    return workloads.write_dataset(out, resolve_model(TOKENIZER), 60, 7)


def test_lengths_are_skewed_bounded_and_drawn_from_the_seed():
    spec = workloads.HEAVY
    inputs, outputs = spec.lengths(20_000, 42)
    assert inputs.min() >= spec.input_bounds[0] and inputs.max() <= spec.input_bounds[1]
    assert outputs.min() >= spec.output_bounds[0] and outputs.max() <= spec.output_bounds[1]
    assert (inputs + outputs).max() <= 4096  # the simulator's model length
    # Skewed: the mean is well above the median, and a few percent of prompts reach 4x the median.
    assert inputs.mean() > 1.3 * np.median(inputs) and np.median(inputs) == pytest.approx(spec.input_median, rel=0.05)
    assert 0.02 < (inputs >= 4 * spec.input_median).mean() < 0.15
    again, other = spec.lengths(20_000, 42), spec.lengths(20_000, 43)
    assert (again[0] == inputs).all() and (again[1] == outputs).all() and not (other[0] == inputs).all()


def test_vllm_bench_reads_the_file_back_with_its_lengths_in_file_order(dataset):
    """vLLM's own `bench serve` argument parser and `get_samples` on the flags the sweep passes."""
    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args

    import argparse

    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    sent = {"dataset_name": "random", "random_input_len": 1024, "ignore_eos": True,  # the sweep's base flags,
            **workloads.bench_params(dataset)}                                        # overridden by the load's
    args = parser.parse_args(["--model", TOKENIZER, "--num-prompts", "60", "--seed", "42", *cli_flags(sent)])
    samples = get_samples(args, AutoTokenizer.from_pretrained(TOKENIZER))
    inputs, outputs = workloads.read_lengths(dataset)
    assert [s.prompt_len for s in samples] == inputs.tolist()
    assert [s.expected_output_len for s in samples] == outputs.tolist()
    assert inputs.tolist() == workloads.HEAVY.lengths(60, 7)[0].tolist()  # exact lengths
    prompts = [json.loads(line)["prompt"] for line in dataset.read_text().splitlines()]
    assert len({p[:40] for p in prompts}) == len(prompts)  # no shared prefixes for the cache to reuse


def test_a_dataset_without_lengths_is_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "output_tokens": 3}\n')
    with pytest.raises(ValueError, match="line 1 has not"):
        workloads.read_lengths(bad)


def test_replay_serves_the_file_lengths(tmp_path, dataset):
    coeffs = tmp_path / "coeffs.json"
    coeffs.write_text(json.dumps({"coefficients": {"intercept": 0.003, "prefill_tokens": 4e-6, "decode_requests": 3e-5,
                                                   "context_tokens": 2e-8},
                                  "provenance": {"model": "test"}}))
    out = tmp_path / "sjf_heavy_rate-20.json"
    argv = ["replay", "--strategy", "sjf", "--workload", "heavy", "--rate", "20", "--num-prompts", "50",
            "--dataset-path", str(dataset), "--step-model", str(coeffs), "--out", str(out)]
    assert ss.main(argv) == 0
    record = json.loads(out.read_text())
    from harness.results import load_runs

    detail = load_runs(tmp_path)[0].detail
    inputs, outputs = workloads.read_lengths(dataset)
    assert detail.input_lens == inputs[:50].tolist() and detail.output_lens == outputs[:50].tolist()
    assert record["config"]["bench_params"]["dataset_name"] == "custom"
    assert record["config"]["bench_params"]["dataset_path"] == str(dataset)
    short = ss.main([*argv[:-2], "--num-prompts", "61", "--out", str(tmp_path / "x.json")])
    assert short == 2 and not (tmp_path / "x.json").exists()  # 60 lines: refused, nothing written


def test_task3_sends_the_heavy_load_with_its_burstiness(tmp_path):
    env = dict(os.environ, LAB3_PYTHON=sys.executable)
    done = subprocess.run(["bash", str(ROOT / "task3.sh"), "--dry-run", "--offline", "--workloads", "heavy",
                           "--strategies", "sjf", "--stress-rate", "50", "--burstiness", "0.5",
                           "--out-dir", str(tmp_path / "t3")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(sjf_heavy-burst0.5_rate-50_run-1.json)" in done.stdout
    path = workloads.dataset_path(tmp_path / "t3" / "datasets", 1000, 42)
    run = next(line for line in done.stdout.splitlines() if "would run" in line)
    assert "--dataset-name custom" in run and f"--dataset-path {path}" in run and "--custom-output-len -1" in run
    assert "--dataset-name random" not in run  # the load's dataset replaces the sweep's
    assert done.stdout.rstrip().endswith("--burstiness 0.5")
    assert not path.exists()  # a dry run writes nothing


def test_the_sweep_writes_the_dataset_once(tmp_path):
    from harness import sweep

    args = SimpleNamespace(out_dir=tmp_path, dry_run=False, model=TOKENIZER, num_prompts=12, seed=5)
    path = sweep.heavy_dataset(args)
    assert path == tmp_path / "datasets" / "heavy_n-12_seed-5.jsonl"
    first = path.stat().st_mtime_ns
    assert sweep.heavy_dataset(args) == path and path.stat().st_mtime_ns == first
    assert workloads.read_lengths(path)[0].tolist() == workloads.HEAVY.lengths(12, 5)[0].tolist()
