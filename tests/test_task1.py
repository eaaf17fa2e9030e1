"""Task 1 on CPU: formulas, the OOM search, prompts, and the transformers paths end to end."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest
import torch

import task1_vllm_vs_hf as t1
from harness.offline_model import QWEN3_DIR, TINY_DIR, kv_bytes_per_token, load_config

TINY_BYTES_PER_TOKEN = 2 * 2 * 1 * 64 * 2  # K+V x 2 layers x 1 KV head x 64 dims x bf16


def test_kv_bytes_per_token_of_the_real_qwen3_config():
    assert kv_bytes_per_token(load_config(QWEN3_DIR)) == 114688
    assert kv_bytes_per_token(load_config(TINY_DIR)) == TINY_BYTES_PER_TOKEN


def test_kv_formulas_follow_the_handout():
    lens = [130, 509, 300, 200]
    assert t1.kv_peak_serial(lens, 128, 114688) == (509 + 128) * 114688
    batches = t1.static_batches(lens, 2)
    assert batches == [[130, 509], [300, 200]]
    assert t1.kv_peak_static(batches, 128, 10) == 2 * (509 + 128) * 10
    assert t1.kv_peak_static([lens], 128, 1) == 4 * 637
    pad = t1.padding_stats([lens], 128)
    assert pad["held_token_slots"] == 4 * 637
    assert pad["real_tokens"] == sum(lens) + 4 * 128
    assert pad["padding_slots"] == 4 * 637 - 1651
    assert pad["padding_share"] == pytest.approx((4 * 637 - 1651) / (4 * 637))


def test_padding_share_of_the_committed_h200_run():
    """The committed run's 64 prompts in one batch: 13,302 of 40,768 slots are padding, 32.6%
    of the slots (not 48.4%, which is padding / real tokens), as stored in results/task1.json."""
    results = json.loads((Path(__file__).resolve().parent.parent / "results" / "task1.json").read_text())
    static = results["methods"]["hf-static"]
    batches = t1.static_batches(results["input_lens"], static["batch_size"])
    pad = t1.padding_stats(batches, results["config"]["max_new_tokens"])
    assert (pad["held_token_slots"], pad["padding_slots"]) == (40768, 13302)
    assert round(pad["padding_share"], 3) == 0.326
    assert static["padding"] == pad


def test_largest_fitting_batch_halves_then_bisects():
    def fits(size: int) -> None:
        if size > 11:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    size, attempts = t1.largest_fitting_batch(fits, 64)
    assert size == 11
    assert [(a["batch_size"], a["fits"]) for a in attempts] == [
        (64, False), (32, False), (16, False), (8, True), (12, False), (10, True), (11, True)]


def test_largest_fitting_batch_gives_up_clearly_when_nothing_fits():
    def never(size: int) -> None:
        raise torch.cuda.OutOfMemoryError("injected")

    with pytest.raises(RuntimeError, match="batch of one"):
        t1.largest_fitting_batch(never, 8)


def _run(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "task1.json"
    argv = ["--methods", "hf-serial,hf-static", "--device", "cpu", "--model", str(TINY_DIR),
            "--dummy-weights", "--num-prompts", "4", "--max-new-tokens", "8", "--out", str(out),
            "--no-progress", *extra]
    assert t1.main(argv) == 0
    return json.loads(out.read_text())


def test_transformers_paths_end_to_end_on_a_tiny_qwen3(tmp_path, capsys):
    results = _run(tmp_path)
    lens = results["input_lens"]
    assert len(lens) == 4 and all(128 <= n <= 512 for n in lens)
    serial, static = results["methods"]["hf-serial"], results["methods"]["hf-static"]
    for entry in (serial, static):
        assert entry["new_tokens_per_prompt"] == [8, 8, 8, 8]
        assert entry["output_tokens"] == 32
        assert entry["output_tokens_per_s"] == pytest.approx(32 / entry["total_s"])
        assert entry["meta"]["weights"].startswith("dummy")
        assert "task1_vllm_vs_hf.py" in entry["meta"]["command"]
    assert serial["kv_peak_bytes"] == (max(lens) + 8) * TINY_BYTES_PER_TOKEN
    assert static["batch_size"] == 4
    assert static["kv_peak_bytes"] == 4 * (max(lens) + 8) * TINY_BYTES_PER_TOKEN
    assert static["padding"]["real_tokens"] == sum(lens) + 32
    assert results["config"]["kv_bytes_per_token"] == TINY_BYTES_PER_TOKEN
    assert "| transformers serial" in capsys.readouterr().out

    before = (tmp_path / "task1.json").read_text()
    _run(tmp_path)
    assert "already in" in capsys.readouterr().out
    assert (tmp_path / "task1.json").read_text() == before

    with pytest.raises(SystemExit, match="another configuration"):
        _run(tmp_path, "--seed", "1")


class _OOMAbove:
    """The real tiny model, except that a batch larger than ``limit`` raises CUDA OOM."""

    def __init__(self, model, limit: int) -> None:
        self.model, self.limit, self.batch_sizes = model, limit, []

    @property
    def device(self):
        return self.model.device

    def generate(self, **kwargs):
        size = kwargs["input_ids"].shape[0]
        self.batch_sizes.append(size)
        if size > self.limit:
            raise torch.cuda.OutOfMemoryError(f"injected: batch {size} > {self.limit}")
        return self.model.generate(**kwargs)


def test_static_batching_survives_oom_with_the_largest_batch_that_fits():
    model, tokenizer = t1.load_hf(str(TINY_DIR), dummy=True, device="cpu", seed=0)
    prompts = t1.load_prompts(t1.DEFAULT_PROMPTS, 7)
    args = Namespace(max_new_tokens=4, fixed_output_len=True, static_batch_size=0, device="cpu", progress=False)
    wrapped = _OOMAbove(model, limit=3)
    entry = t1.run_hf_static(wrapped, tokenizer, prompts, args, TINY_BYTES_PER_TOKEN)
    assert entry["batch_size"] == 3 and entry["requested_batch_size"] == 7
    assert [(a["batch_size"], a["fits"]) for a in entry["oom_search"]] == [(7, False), (3, True)]
    assert entry["new_tokens_per_prompt"] == [4] * 7
    assert wrapped.batch_sizes[-3:] == [3, 3, 1]  # the timed run: 7 prompts in batches of 3
    lens = [p["num_tokens"] for p in prompts]
    assert entry["kv_peak_bytes"] == t1.kv_peak_static(t1.static_batches(lens, 3), 4, TINY_BYTES_PER_TOKEN)


def test_bad_arguments_fail_with_a_clear_message(capsys):
    with pytest.raises(SystemExit):
        t1.parse_args(["--methods", "hf-serial,tensorrt"])
    assert "unknown method" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        t1.parse_args(["--methods", "vllm", "--device", "cpu"])
    assert "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="does not exist"):
        t1.main(["--methods", "hf-serial", "--device", "cpu", "--model", "models/no-such-model"])
