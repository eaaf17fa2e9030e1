"""experiments/sittings.sh: a sitting split in two measures its anchor again, into a folder of its
own, so the anchor is not skipped as done because the other part already measured it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITTINGS = ROOT / "experiments" / "sittings.sh"


def dry_run(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**(os.environ if env is None else env), "LAB3_PYTHON": sys.executable}  # the tests' interpreter has vLLM
    return subprocess.run(["bash", str(SITTINGS), name, "--dry-run", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def test_an_anchor_already_measured_elsewhere_runs_again():
    # task2-inf measured budget 2048 at rate inf into results/task2_api-4_budgets (committed).
    assert (ROOT / "results" / "task2_api-4_budgets" / "mnbt-2048_rate-inf_run-1.json").is_file()
    done = dry_run("task2-inf")
    assert done.returncode == 0
    assert "would run (mnbt-2048_rate-inf_run-1.json)" not in done.stdout + done.stderr
    again = dry_run("task2-inf-high")
    assert again.returncode == 0, again.stderr[-2000:]
    out = again.stdout + again.stderr
    for budget in (2048, 4096, 8192):
        assert f"would run (mnbt-{budget}_rate-inf_run-3.json)" in out
    assert "--max-num-batched-tokens 512 " not in out


def test_an_unknown_sitting_is_refused_with_the_list():
    result = dry_run("no-such-sitting")
    assert result.returncode == 2
    assert "unknown sitting 'no-such-sitting'" in result.stderr and "task2-16-low" in result.stderr


def test_the_heavy_sittings_resume_and_bracket_each_strategy_s_knee():
    """task3-heavy is committed, so its dry run has nothing left to run; task3-heavy-knee runs each
    strategy around its own knee into a folder of its own, F's 60 req/s again beside the default's."""
    assert (ROOT / "results" / "task3_api-4_heavy" / "sjf-ontime_heavy-burst0.5_rate-76_run-3.json").is_file()
    done = dry_run("task3-heavy")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "would run (" not in done.stdout + done.stderr
    knee = dry_run("task3-heavy-knee")
    assert knee.returncode == 0, knee.stderr[-2000:]
    out = knee.stdout + knee.stderr
    assert out.count("would start") == 2 and "--scheduler-cls my_scheduler.OnTimeSJFScheduler" in out
    for strategy, rates in (("default", (48, 54, 60)), ("sjf-ontime", (60, 66, 72))):
        for rate in rates:
            assert f"would run ({strategy}_heavy-burst0.5_rate-{rate}_run-3.json)" in out
    assert "would run (default_heavy-burst0.5_rate-66" not in out and "task3_api-4_heavy-knee/" in out
    assert "--dataset-name custom" in out and "--burstiness 0.5" in out


def test_the_gated_clients_sitting_splits_the_load_behind_the_start_gate():
    """gated-clients measures one and two client processes at rate inf into a folder of its own,
    the two behind bench_gate.py's barrier (the committed capacity sitting's split runs predate it)."""
    # The capacity sitting measured the same setting, ungated, into results/task2_api-4 (committed).
    assert (ROOT / "results" / "task2_api-4" / "mnbt-2048_rate-inf_clients-2_run-3.json").is_file()
    result = dry_run("gated-clients")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout + result.stderr
    assert "--api-server-count 4" in out
    for name in ("rate-inf_run-3.json", "rate-inf_clients-2_run-3.json"):
        assert f"would run (mnbt-2048_{name})" in out
    assert out.count("-m harness.bench_gate") == 2 * 3  # both clients of each of the 3 split runs


# Names the script (and the sweeps it runs) once read from the environment, at odd values.
STRAY_ENV = {"RESULTS": "/nonexistent/results", "API_SERVERS": "2", "RUNS": "1", "STRESS_RATE": "5",
             "HEAVY_RATES": "1 2", "KNEE_DEFAULT_RATES": "1", "KNEE_F_RATES": "2", "MODEL": "no-such/model",
             "SEED": "7", "RATES": "3", "GPUS": "0 1", "STRATEGIES": "sjf", "NUM_PROMPTS": "11"}


def _plan(name: str, env: dict[str, str]) -> str:
    done = dry_run(name, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return re.sub(r"\d\d:\d\d:\d\d", "HH:MM:SS", done.stdout + done.stderr)  # say()'s clock


def test_a_sitting_plans_the_same_whatever_the_shell_exports():
    """The sittings' settings are constants of the script: a shell exporting RESULTS, RUNS,
    STRESS_RATE, the knee rates... (or the sweeps' former MODEL, SEED, RATES) changes nothing."""
    clean = {k: v for k, v in os.environ.items() if k not in STRAY_ENV}
    for name in ("below", "task3-heavy-knee"):
        plan = _plan(name, clean)
        assert "would start" in plan
        assert _plan(name, {**clean, **STRAY_ENV}) == plan, name


def test_results_go_where_the_results_flag_says(tmp_path):
    """--results DIR: the sitting's folders in DIR, so a sitting done in results/ plans every run."""
    done = dry_run("task2-inf", "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert "exists, skipped" not in out and "nothing to do" not in out  # results/ has them all
    for budget in (512, 1024, 2048, 4096):
        assert f"would run (mnbt-{budget}_rate-inf_run-3.json)" in out
    bad = dry_run("task2-inf", "--bogus")
    assert bad.returncode == 2 and "unknown argument '--bogus'" in bad.stderr
