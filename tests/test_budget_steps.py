"""harness/budget_steps.py: vLLM's real scheduler stepped through a rate-inf load; a budget at or
below the CUDA-graph size never schedules a larger step, a larger budget does."""

from __future__ import annotations

import json

from harness import budget_steps


def test_steps_above_the_graph_size_appear_only_above_it():
    small = budget_steps.count_steps(512, num_prompts=12, input_len=1024, output_len=8, max_num_seqs=8,
                                     num_blocks=2000)
    large = budget_steps.count_steps(2048, num_prompts=12, input_len=1024, output_len=8, max_num_seqs=8,
                                     num_blocks=2000)
    assert small.steps_over_graph == 0 and small.share_over_graph == 0.0
    assert large.steps_over_graph > 0 and large.steps < small.steps  # fewer, larger steps


def test_the_command_writes_a_record_with_provenance(tmp_path):
    out = tmp_path / "steps.json"
    assert budget_steps.main(["--budgets", "512", "1024", "--num-prompts", "6", "--output-len", "4",
                              "--max-num-seqs", "4", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["meta"]["simulated"] is True and record["meta"]["versions"]["vllm"] == "0.26.0"
    assert record["meta"]["command"].startswith("python -m harness.budget_steps")
    assert [row["max_num_batched_tokens"] for row in record["budgets"]] == [512, 1024]
    assert record["config"]["graph_tokens"] == budget_steps.GRAPH_TOKENS
