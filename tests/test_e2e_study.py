"""An interleaved study end to end on a real CPU ``vllm serve`` (setup_cpu_server.sh): two arms on
one server, set at run time (budget 64 under the server's scheduler, budget 128 under Strategy A),
the study cut after one run and resumed by a second call that finds the server the first left up."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import host_monitor as hm
from harness.results import BUDGET, Results, prefill_chunk

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
CPU_VENV = Path(os.environ.get("LAB3_CPU_SERVE_VENV", ROOT / ".venv-cpu-serve"))
PLAN = {
    "name": "budgets-on-cpu", "task": "task2", "question": "Does the runtime budget reach the engine?",
    "results_folder": "task2_study",
    "server": {"model": "models/tiny-qwen3", "dummy_weights": True, "max_num_batched_tokens": 128,
               "max_num_seqs": 8, "gpu_memory_utilization": 0.15, "api_servers": 1,
               "scheduler": "kv-recorder", "max_model_len": 512, "dtype": "float32", "enforce_eager": True,
               "step_log": True},
    "load": {"input_len": 300, "output_len": 6, "num_prompts": 10, "rate": 20},
    "arms": [{"token_budget": 64}, {"token_budget": 128, "strategy": "prefill-first"}],
    "runs_per_arm": 2, "seed": 7,
}


def study(tmp_path: Path, *extra: str, plan: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness.study run`` on ``plan`` (default PLAN) into ``tmp_path``/results."""
    python = CPU_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no CPU vLLM server environment at {CPU_VENV}: run `bash setup_cpu_server.sh`")
    env = {**os.environ, "LAB3_SERVE_CMD": f"{python} -m vllm.entrypoints.cli.main serve",
           "VLLM_LOGGING_LEVEL": "INFO"}  # the start-up phases are read from vLLM's INFO lines
    plan = plan or PLAN
    path = tmp_path / f"{plan['results_folder']}.json"
    path.write_text(json.dumps(plan))
    return subprocess.run([sys.executable, "-m", "harness.study", "run", str(path), "--results",
                           str(tmp_path / "results"), *extra], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture
def no_server_left(tmp_path):
    """Whatever the test's end, no study server stays up (a failed call can leave the one an earlier
    call kept up, and a stray server falsifies other tests' count of servers on the host)."""
    yield
    for state in [*(tmp_path / "results").glob("*/logs/server.json"), tmp_path / "results" / "server.json"]:
        if state.exists():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(json.loads(state.read_text())["pid"], signal.SIGKILL)


def test_an_interleaved_study_sets_each_arm_at_run_time_and_resumes_on_the_same_server(tmp_path, no_server_left):
    folder = tmp_path / "results" / "task2_study"
    first = study(tmp_path, "--max-runs", "1", "--keep-server")
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    state = json.loads((folder / "logs" / "server.json").read_text())
    assert hm.live_group_members(state["pid"])  # left up for the next call

    second = study(tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "attached to the server an earlier call left up" in second.stdout
    assert not hm.live_group_members(state["pid"]) and not (folder / "logs" / "server.json").exists()

    record = json.loads((folder / "study.json").read_text())
    order = record["order"]
    assert [o["token_budget"] for o in order[:2]] == [o["token_budget"] for o in order[2:]][::-1]
    assert sorted(o["seed"] for o in order) == [8, 9, 10, 11]
    assert [len(h["runs"]) for h in record["hosts"]] == [1, 3]
    for entry in order:
        data = json.loads((folder / entry["file"]).read_text())
        assert data["config"]["token_budget"] == entry["token_budget"]
        assert data["config"]["seed"] == entry["seed"] and data["config"]["study"]["index"] == entry["index"]
        assert "--max-num-batched-tokens 128" in data["config"]["server_command"]
        engine = data["engine"]["scheduler_stats_cumulative"]["budget"]
        assert engine["token_budget"] == entry["token_budget"]
        assert engine["control_seq"] == f"{PLAN['name']}#{entry['index']}"
        assert engine["control_error"] is None
        strategy_a = entry.get("strategy") == "prefill-first"
        assert data["config"]["scheduler"] == ("prefill-first" if strategy_a else "kv-recorder")
        assert data["engine"]["scheduler_stats_cumulative"]["scheduler_class"] == (
            "my_scheduler.StepExclusivePrefillFirstScheduler" if strategy_a else "my_scheduler.KVPeakRecorder")
        # Strategy A's own counter moves in its runs only (counters survive the switches).
        assert (data["engine"]["scheduler_counts_this_run"]["policy"].get("prefill_steps", 0) > 0) == strategy_a
        counts = data["engine"]["scheduler_counts_this_run"]
        # The load's 10 prompts and the client's test prompt (a copy of the first, so that one is
        # then mostly a prefix-cache hit).
        assert 10 * 300 <= counts["tokens"]["prefill"] <= 11 * 300
        assert data["summary"]["num_requests"] == 10 and data["summary"]["num_failed"] == 0
        timing = data["timing"]
        assert timing["server_reused"] == (entry["index"] > 1)
        phases = timing["server_start_phases_s"]
        assert "engine_ready" in phases and 0 < max(phases.values()) <= timing["server_ready_s"] + 1
        assert 0 < timing["arrival_window_s"] < timing["run_wall_s"]
        assert timing["client_overhead_s"] == pytest.approx(timing["run_wall_s"] - timing["arrival_window_s"], abs=0.02)
        assert data["frontend"]["token_gaps"]["completeness"] is not None
    # The budget in force shapes the steps: a step holding prefill carries at most 64 tokens at
    # budget 64, and at 128 more than 64 allows (about 107 here: 300-token prompts in chunks of
    # up to 128 less the running decodes). Step counts are no check: they follow the arrival timing.
    chunks = {e["index"]: (e["token_budget"], prefill_chunk(json.loads((folder / e["file"]).read_text())
                                                            ["engine"]["scheduler_counts_this_run"])) for e in order}
    assert all(chunk <= 64 if budget == 64 else chunk > 64 for budget, chunk in chunks.values()), chunks
    rows = Results.load(tmp_path / "results").rows("task2")
    assert sorted(rows[BUDGET].unique()) == [64, 128] and len(rows) == 4

    # The server logged its steps (a row per engine step, the prefill the runs scheduled), and the
    # calibration names this machine as the log's host. (A CPU engine does not pipeline its steps,
    # so there is nothing here to fit; tests/test_replay_sim.py fits an H200 log the same way.)
    from harness import step_model

    log = step_model.read_step_log(folder / "logs" / step_model.STEP_LOG_FILE)
    total = json.loads((folder / order[-1]["file"]).read_text())["engine"]["scheduler_stats_cumulative"]
    assert len(log["prefill_tokens"]) == total["steps"]["total"]
    assert log["prefill_tokens"].sum() == total["tokens"]["prefill"]
    host = step_model.study_host(folder)
    assert host["machine_boot_ids"] == [state["machine_boot_id"]] and host["token_budgets"] == [64, 128]

    third = study(tmp_path)
    assert third.returncode == 0 and "0 left" in third.stdout and "starting the server" not in third.stdout


def test_studies_that_share_a_server_state_share_the_server_where_its_settings_match(tmp_path, no_server_left):
    """An anchor and the study that takes its rate from it run on one server (the second attaches
    and runs its first run, named like the anchor's last, under its own budget); a study whose
    server logs its steps stops that server and starts its own."""
    shared = ["--keep-server", "--server-state", str(tmp_path / "results" / "server.json")]
    server = {**PLAN["server"], "step_log": False}
    anchor = {**PLAN, "name": "anchor", "results_folder": "anchor", "server": server,
              "arms": [{"token_budget": 128}], "runs_per_arm": 1}
    near = {**anchor, "name": "near", "results_folder": "near", "arms": [{"token_budget": 64}]}
    logged = {**PLAN, "name": "logged", "results_folder": "logged", "arms": [{"token_budget": 64}],
              "runs_per_arm": 1}

    first = study(tmp_path, *shared, plan=anchor)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    state = json.loads((tmp_path / "results" / "server.json").read_text())
    assert hm.live_group_members(state["pid"])  # left up although the anchor is done

    second = study(tmp_path, *shared, plan=near)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "attached to the server" in second.stdout and "starting the server" not in second.stdout
    record = json.loads(next((tmp_path / "results" / "near").glob("mnbt-64_*.json")).read_text())
    assert record["timing"]["server_reused"] and record["config"]["token_budget"] == 64
    assert record["engine"]["scheduler_stats_cumulative"]["budget"]["control_seq"] == "near#1"
    assert prefill_chunk(record["engine"]["scheduler_counts_this_run"]) <= 64
    assert not (tmp_path / "results" / "near" / "logs" / "server.log").exists()  # the anchor's server

    third = study(tmp_path, "--server-state", str(tmp_path / "results" / "server.json"), plan=logged)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "starting the server" in third.stdout and not hm.live_group_members(state["pid"])
    assert (tmp_path / "results" / "logged" / "logs" / "steps.csv").exists()
    assert not (tmp_path / "results" / "server.json").exists()  # stopped: no --keep-server


def test_a_heavy_sweep_takes_its_rates_from_the_capacity_measured_before_it_on_one_server(tmp_path, no_server_left):
    """The heavy-tailed load's sitting as the GPU host runs it (``offline_gpu/device_chain.sh``): a
    capacity at rate inf, then a study whose arms sit at their own shares of it (``rate_share``)
    on the server the capacity left up, each run's draw written beside the runs (``HeavyDraws``)."""
    from harness.workloads import HEAVY

    shared = ["--keep-server", "--server-state", str(tmp_path / "results" / "server.json")]
    server = {**PLAN["server"], "step_log": False, "max_model_len": 4096}
    heavy = {"num_prompts": 8, "rate": None, "dataset": "heavy"}
    capacity = {**PLAN, "name": "capacity", "task": "calibration", "results_folder": "capacity", "server": server,
                "load": heavy, "arms": [{"token_budget": 128}], "runs_per_arm": 1}
    shares = {"default": 0.5, "sjf-ontime": 1.0}
    sweep = {**capacity, "name": "sweep", "task": "slo", "results_folder": "sweep",
             "load": {**heavy, "burstiness": 0.5,
                      "rate_from": {"results_folder": "capacity", "token_budget": 128, "share": 0.5}},
             "arms": [{"token_budget": 128, "strategy": name, "rate_share": share} for name, share in shares.items()]}

    first = study(tmp_path, *shared, plan=capacity)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = study(tmp_path, *shared, plan=sweep)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "attached to the server" in second.stdout and "drawing 2 heavy-tailed loads" in second.stdout

    tok_s = json.loads(next((tmp_path / "results" / "capacity").glob("mnbt-128_rate-inf_*.json")).read_text())[
        "summary"]["output_throughput_tok_s"]
    runs = [json.loads(p.read_text()) for p in sorted((tmp_path / "results" / "sweep").glob("*_run-1.json"))]
    assert sorted((r["config"]["scheduler"], float(r["config"]["rate"])) for r in runs) == sorted(
        (name, round(share * tok_s / HEAVY.mean_output_len(), 1)) for name, share in shares.items())
    assert all(r["summary"]["num_failed"] == 0 for r in runs)
    study_file = json.loads((tmp_path / "results" / "sweep" / "study.json").read_text())
    assert [arm["rate_share"] for arm in study_file["plan"]["arms"]] == list(shares.values())
