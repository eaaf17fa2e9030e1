"""The sweeps (sweep.py behind task2.sh, task3.sh, slo_study.sh) without a server: the flags,
the errors before any server starts, the stress and near-saturation rates read from committed
Task 2 results, and the strategy settings reaching the server command of the real harness."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import sweep
ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "models" / "tiny-qwen3")
CAPACITY_RUNS = sorted((ROOT / "results" / "task2_api-4").glob("mnbt-2048_rate-inf_run-*.json"))


def wrapper(script: str, *args: str) -> subprocess.CompletedProcess:
    """A sweep through its shell entry point, as the handout runs it."""
    env = dict(os.environ, LAB3_PYTHON=sys.executable)
    return subprocess.run(["bash", str(ROOT / script), *args], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("argv, message", [
    (["task2", "--values", "512 x"], "'x' is not a positive integer"),
    (["task2", "--rates", "16,-1"], "rate '-1' is not a positive number or inf"),
    (["task2", "--gpus", "0 a"], "'a' is not a device index"),
    (["task2", "--clients", "1,0"], "'0' is not a positive integer"),
    (["task2", "--api-servers", "two"], "'two' is not a positive integer"),
    (["task3", "--workloads", "fixed bursty"], "unknown workload 'bursty'"),
    (["slo", "--slo", "ttft=500"], "is not like 'ttft:500 tpot:50'"),
    (["task2", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_stop_with_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        sweep.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["task3", "--strategies", "default slo"], "unknown scheduler 'slo'"),  # C's former name
    (["slo", "--strategies", "default paced"], "unknown scheduler 'paced' (Strategy E"),  # retired
    (["slo", "--strategies", "sjf-ontime@15"], "unknown scheduler 'sjf-ontime@15'"),  # no stall bound any more
    (["task3", "--strategy-setting", "ttft_slo_ms=600"], "no strategy of this sweep takes the setting(s) ttft_slo_ms"),
    (["task3", "--strategies", "sjf", "--strategy-setting", "aging_tokens_per_s=-5"], "must be a number >= 0"),
    (["task3", "--strategies", "sjf", "--strategy-setting", "aging_tokens_per_s"], "expected KEY=NUMBER"),
])
def test_bad_strategies_and_settings_stop_before_any_server(argv, message):
    with pytest.raises(SystemExit) as stop:
        sweep.main([*argv, "--dry-run"])
    assert message in str(stop.value.code)


# What a shell might export for other reasons, under the names the sweeps once read as defaults
# (and experiments/sittings.sh after them): odd values, each of which would change a plan.
STRAY_ENV = {
    "MODEL": "no-such-org/no-such-model", "DUMMY_WEIGHTS": "1", "SEED": "7", "RUNS": "5", "NUM_PROMPTS": "11",
    "INPUT_LEN": "33", "OUTPUT_LEN": "9", "MAX_NUM_SEQS": "3", "GPU_MEMORY_UTILIZATION": "0.123",
    "SERVER_EXTRA": "--enforce-eager", "API_SERVERS": "3", "CLIENTS": "1,2", "OUT_DIR": "/nonexistent/out",
    "GPUS": "4 5 6", "LOCKSTEP": "0", "VALUES": "96", "RATES": "7 inf", "NEAR_SATURATION": "0.5",
    "WORKLOADS": "heavy", "RATE": "3", "STRESS_RATE": "13", "RANGE_RATIO": "0.25", "BURSTINESS": "0.5",
    "SLO": "ttft:100", "STRATEGIES": "sjf-ontime", "MNBT": "96", "TIMEOUT_S": "5",
    "RESULTS": "/nonexistent/results", "HEAVY_RATES": "1 2", "KNEE_DEFAULT_RATES": "1", "KNEE_F_RATES": "2",
}


def test_flags_have_plain_defaults_that_the_environment_does_not_change(monkeypatch):
    for name, value in STRAY_ENV.items():
        monkeypatch.setenv(name, value)
    ns = sweep.parser().parse_args(["task2", "--offline"])
    args = sweep.SweepArgs.from_cli_args(ns)
    assert (args.runs, args.seed, args.gpus, ns.rates, ns.values) == (2, 42, [], ["16", "inf"], [512, 1024, 2048, 4096, 8192])
    assert (args.num_prompts, args.input_len, args.output_len, args.clients, args.api_servers) == (1000, 1024, 256, [1], 1)
    assert args.out_dir == sweep.ROOT / "results" / "task2" and args.server_params == {} and ns.near_saturation is None
    assert args.dummy_weights and args.model.endswith("models/qwen3-0.6b") and args.plot and args.lockstep
    assert not sweep.SweepArgs.from_cli_args(sweep.parser().parse_args(["task2"])).dummy_weights
    ns = sweep.parser().parse_args(["task3", "--gpus", "0,1", "--no-lockstep"])
    args = sweep.SweepArgs.from_cli_args(ns)
    assert (args.gpus, args.lockstep, args.model) == (["0", "1"], False, "Qwen/Qwen3-0.6B")
    assert (ns.strategies, ns.workloads, ns.rate, ns.stress_rate) == (["default", "prefill-first", "sjf"],
                                                                       ["fixed", "varlen"], "8", None)
    assert (ns.max_num_batched_tokens, ns.timeout_s, ns.range_ratio, ns.burstiness) == (2048, 30.0, 0.9, 1.0)
    ns = sweep.parser().parse_args(["slo"])
    assert (ns.rates, ns.slo, ns.strategies) == (["36", "40", "44", "48"], {"ttft": 500.0, "tpot": 50.0},
                                                 ["default", "prefill-first", "sjf-ontime"])
    for flag in ("--dry-run", "--no-plot"):
        assert not sweep.SweepArgs.from_cli_args(sweep.parser().parse_args(["task2", flag])).plot


def _plan(argv: list[str], env: dict[str, str]) -> list[str]:
    """The lines a dry run of ``harness/sweep.py ARGV`` prints, sorted (two GPU lanes print at
    once), with the lockstep folder's random name blanked."""
    done = subprocess.run([sys.executable, str(ROOT / "harness" / "sweep.py"), *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return sorted(re.sub(r"lab3-lockstep-\w+", "lab3-lockstep-X", line) for line in done.stdout.splitlines())


@pytest.mark.parametrize("argv", [
    ["task2", "--offline", "--dry-run", "--values", "64 128 256", "--gpus", "0 1"],
    ["task3", "--dry-run", "--model", TINY],
    ["slo", "--offline", "--dry-run"],
], ids=["task2", "task3", "slo"])
def test_a_sweep_plans_the_same_whatever_the_shell_exports(argv):
    """A user's shell that exports MODEL, SEED, RUNS, RATES, GPUS, LOCKSTEP... (STRAY_ENV) for
    other reasons: the sweep plans exactly what it plans without them, server and client commands
    and result files alike (in the committed results' folders: a dry run writes nothing)."""
    clean = {k: v for k, v in os.environ.items() if k not in STRAY_ENV}
    plan = _plan(argv, clean)
    assert any("would start" in line for line in plan) and any("would r" in line for line in plan)
    assert _plan(argv, {**clean, **STRAY_ENV}) == plan


def test_stress_rate_is_read_from_the_runs_of_the_task2_folder_given(tmp_path):
    """0.9 x the capacity measured in results/task2_api-4 (the front-end study's 39 req/s: its
    one-client rate-inf runs at budget 2048, found by their config, not their names); a folder
    without such runs falls back to 48."""
    assert len(CAPACITY_RUNS) == 3
    assert sweep.stress_rate(ROOT / "results" / "task2_api-4", 256) == "39"
    assert sweep.stress_rate(tmp_path / "task2_api-9", 256) == sweep.FALLBACK_STRESS_RATE
    assert sweep.capacity_rate(tmp_path, 2048, 0.9, 256) is None


def test_near_saturation_and_stress_rates_come_from_done_capacity_runs(tmp_path):
    """With the capacity runs present, task2 --near-saturation skips them and adds 0.9 x the
    capacity to its rates; task3 given that folder (--capacity-from) uses it as its stress rate."""
    task2_dir = tmp_path / "task2_api-4"
    task2_dir.mkdir()
    for path in CAPACITY_RUNS:
        shutil.copy(path, task2_dir / path.name)
    done = wrapper("task2.sh", "--dry-run", "--model", TINY, "--values", "1024", "--rates", "16",
                   "--runs", "3", "--near-saturation", "0.9", "--out-dir", str(task2_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "near saturation: 0.9 x capacity = 39 requests/s" in done.stdout
    assert "mnbt-2048: nothing to do" in done.stdout
    assert "(mnbt-1024_rate-39_run-3.json)" in done.stdout
    done = wrapper("task3.sh", "--dry-run", "--model", TINY, "--strategies", "sjf", "--workloads", "varlen",
                   "--strategy-setting", "aging_tokens_per_s=100", "--out-dir", str(tmp_path / "task3_api-4"),
                   "--capacity-from", str(task2_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rates 8 and 39 (stress)" in done.stdout
    start = re.search(r"would start: (.*)", done.stdout).group(1)
    assert "--scheduler-cls my_scheduler.SJFScheduler --additional-config '{\"aging_tokens_per_s\": 100.0}'" in start
    assert "(sjf_varlen-0.9_rate-39_run-1.json)" in done.stdout
    assert "--random-range-ratio '{\"input\": 0.9, \"output\": 0.0}'" in done.stdout


def test_slo_study_gives_its_ttft_target_only_to_the_strategy_that_aims_at_it(tmp_path):
    """The SLO goes to every client's --goodput; its TTFT target reaches Strategy F (ttft_slo_ms)
    through --additional-config, and no other strategy's server."""
    done = wrapper("slo_study.sh", "--dry-run", "--model", TINY, "--runs", "1", "--rates", "32",
                   "--strategies", "default sjf sjf-ontime", "--slo", "ttft:800 tpot:60",
                   "--out-dir", str(tmp_path / "slo"))
    assert done.returncode == 0, done.stderr[-2000:]
    starts = dict(re.findall(r"would start: .*?--scheduler-cls (\S+) --additional-config '([^']*)'", done.stdout))
    assert starts == {"my_scheduler.OnTimeSJFScheduler": '{"ttft_slo_ms": 800.0}'}
    assert done.stdout.count("would start") == 3 and done.stdout.count("--additional-config") == 1
    assert "--goodput ttft:800 tpot:60" in done.stdout
    assert "(sjf-ontime_fixed_rate-32_run-1.json)" in done.stdout
