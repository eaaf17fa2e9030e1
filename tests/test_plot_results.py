"""Tables from the committed results, and honest gaps where a task has none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import plot_results

RESULTS = Path(__file__).resolve().parent.parent / "results"


def test_task1_table_from_the_committed_h200_run():
    results = json.loads((RESULTS / "task1.json").read_text())
    table = plot_results.task1_table(results)
    assert list(table["method"]) == ["transformers serial", "transformers static batching (batch=64)",
                                     "vLLM offline"]
    methods = results["methods"]
    for row, key in zip(table.itertuples(), ("hf-serial", "hf-static", "vllm")):
        assert row[2] == round(methods[key]["total_s"], 2)
        assert row[4] == round(methods[key]["kv_peak_bytes"] / 2**20, 1)
    speedup = methods["hf-serial"]["total_s"] / methods["vllm"]["total_s"]
    assert f"{speedup:.1f}x faster than serial" in table.iloc[2]["notes"]
    assert results["meta"]["gpu"]["name"] == "NVIDIA H200"
    assert results["config"]["weights"].startswith("dummy")


def test_missing_tasks_are_reported_not_invented(tmp_path):
    shutil.copy(RESULTS / "task1.json", tmp_path / "task1.json")
    assert plot_results.main(["--results", str(tmp_path)]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert "## Task 1: transformers vs vLLM offline" in text
    assert "No Task 2 results yet" in text and "No Task 3 results yet" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    plot_results.main(["--results", str(empty)])
    assert "No Task 1 results yet" in (empty / "tables.md").read_text()
