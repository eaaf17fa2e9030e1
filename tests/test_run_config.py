"""The one run configuration: every committed result's ``config`` block reads back as a
``RunConfig`` and writes out as the same, settings become flags in one place, and a writer's
record is exactly the type's."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from harness import sched_sim as ss
from harness.provenance import read_json
from harness.run_config import RunConfig, cli_flags, parse_rate, rate_label

ROOT = Path(__file__).resolve().parent.parent


def committed_blocks() -> list[tuple[Path, dict]]:
    blocks = []
    for path in sorted([*(ROOT / "results").rglob("*.json"), *(ROOT / "results").rglob("*.json.xz")]):
        data = read_json(path)
        if isinstance(data, dict) and "config" in data and "summary" in data:
            blocks.append((path, data["config"]))
    return blocks


def test_every_committed_config_reads_as_a_run_config_and_round_trips():
    blocks = committed_blocks()
    assert len(blocks) > 500  # every serving run and replay of results/
    for path, block in blocks:
        config = RunConfig.from_record(block)
        assert RunConfig.from_record(config.to_record()) == config, path
        stored = block["rate"]  # older files kept the rate as its label, newer ones as a number (null: inf)
        assert (config.rate_label == stored) if isinstance(stored, str) else (config.rate == stored), path
        assert config.budget_in_force, path
        assert config.run >= 1 and config.scheduler, path


def test_a_key_the_type_does_not_know_fails_naming_it():
    block = RunConfig("task2", "mnbt-2048", "w", 16.0, 1, "default", {}, {}).to_record()
    assert RunConfig.from_record(block).rate == 16.0
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['max_tokens'\]"):
        RunConfig.from_record({**block, "max_tokens": 5})


def test_settings_become_flags_in_one_place():
    params = {"max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9, "ignore_eos": True,
              "enforce_eager": False, "dtype": None, "random_range_ratio": {"input": 0.9, "output": 0.0}}
    assert cli_flags(params) == ["--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9", "--ignore-eos",
                                 "--random-range-ratio", '{"input": 0.9, "output": 0.0}']


@pytest.mark.parametrize("text, rate, label", [("16", 16.0, "16"), ("inf", None, "inf"), ("39.5", 39.5, "39.5"),
                                               ("Infinity", None, "inf")])
def test_rates_parse_once_and_label_alike(text, rate, label):
    assert parse_rate(text) == rate and rate_label(rate) == label


@pytest.mark.parametrize("text", ["0", "-3", "fast", "nan", "1e999"])
def test_a_rate_that_is_not_one_fails(text):
    with pytest.raises(ValueError, match="not a positive number or inf"):
        parse_rate(text)


def test_a_replay_writes_its_config_as_the_type_with_the_flags_as_values(tmp_path):
    """The replay's record is exactly ``RunConfig.to_record()``: rate a number, settings as values
    (the range ratio an object, not a quoted flag), no flag strings."""
    out = tmp_path / "replay.json"
    fit = ROOT / "results" / "steplogs" / "qwen3-0.6b_api-4.fit.json"
    argv = ["replay", "--strategy", "sjf", "--step-model", str(fit), "--rate", "40", "--num-prompts", "60",
            "--input-len", "512", "--output-len", "16", "--range-ratio", "0.5", "--output-range-ratio", "0.2",
            "--additional-config", '{"aging_tokens_per_s": 100}', "--out", str(out), "--no-detail"]
    assert ss.main(argv) == 0
    block = json.loads(out.read_text())["config"]
    config = RunConfig.from_record(block)
    assert config.to_record() == block
    assert config.rate == 40.0 and config.simulated and config.budget_in_force == 2048
    assert config.bench_params["random_range_ratio"] == {"input": 0.5, "output": 0.2}
    assert config.server_params["additional_config"] == {"aging_tokens_per_s": 100}
    assert config.strategy_settings == {"aging_tokens_per_s": 100.0} and config.strategy_variant == "sjf (aging_tokens_per_s 100)"
    assert "server_args" not in block and "bench_args" not in block
    assert shlex.join(cli_flags(config.bench_params)).count("--random-range-ratio '{") == 1


def test_a_strategy_with_other_settings_is_its_own_variant():
    """Two arms of F, one with a wait bound, never share a table row; the defaults add nothing."""
    base = RunConfig("slo", "f", "heavy", 54.0, 1, "sjf-ontime", {}, {},
                     strategy_settings={"aging_tokens_per_s": 0.0, "ttft_slo_ms": 500.0, "wait_bound_s": 0.0})
    bounded = RunConfig.from_record({**base.to_record(), "strategy_settings": {**base.strategy_settings,
                                                                                "wait_bound_s": 5.0}})
    assert base.strategy_variant == "sjf-ontime"
    assert bounded.strategy_variant == "sjf-ontime (wait_bound_s 5)"
