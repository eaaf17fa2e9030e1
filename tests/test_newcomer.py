"""What a new user meets first: help, clear errors, set-up scripts, the offline kit.

Everything here runs the real scripts in subprocesses, on a CPU, in seconds: no install and no
server is started (run_tests.sh in its dry run, run_lab.sh only where it must stop first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TASK1 = ROOT / "task1_vllm_vs_hf.py"
KIT = ROOT / "offline_gpu"


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 60,
        cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group, which a timeout ends whole: a script that wrongly went
    on to install must not leave its pip behind."""
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{cmd} still running after {timeout} s")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return listing.returncode == 0 and "GPU " in listing.stdout


# --------------------------------------------------------------------------------------------
# run_lab.sh
# --------------------------------------------------------------------------------------------
def test_run_lab_help_is_the_header_comment_only():
    done = run(["bash", "run_lab.sh", "--help"])
    assert done.returncode == 0
    assert "bash run_lab.sh --offline" in done.stdout
    assert "set -euo" not in done.stdout
    assert not any(line.startswith("#") for line in done.stdout.splitlines())


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: run_lab.sh would run the lab")
def test_run_lab_stops_before_installing_anything_without_a_gpu(tmp_path):
    venv = tmp_path / "venv"
    done = run(["bash", "run_lab.sh", "--offline"], env={"LAB3_VENV": str(venv)})
    assert done.returncode != 0
    assert "no CUDA GPU visible" in done.stderr
    assert not venv.exists()  # nothing was installed


# --------------------------------------------------------------------------------------------
# task1_vllm_vs_hf.py
# --------------------------------------------------------------------------------------------
def test_task1_help_keeps_the_line_breaks_of_its_examples():
    done = run([sys.executable, str(TASK1), "--help"])
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "--model models/tiny-qwen3" in line)
    assert lines[first].endswith("\\")
    assert lines[first + 1].strip().startswith("--dummy-weights")


@pytest.mark.parametrize("model, message", [
    ("/nonexistent", "model folder /nonexistent does not exist"),
    ("EMPTY", "has no config.json"),
])
def test_task1_unusable_model_is_a_one_line_error(tmp_path, model, message):
    if model == "EMPTY":
        model = str(tmp_path / "empty-model")
        Path(model).mkdir()
    out = tmp_path / "t1.json"
    done = run([sys.executable, str(TASK1), "--methods", "hf-serial", "--device", "cpu",
                "--model", model, "--out", str(out)])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("task1_vllm_vs_hf.py: error: ")
    assert message in lines[0]
    assert not out.exists()


def test_task1_missing_prompts_file_is_a_one_line_error(tmp_path):
    done = run([sys.executable, str(TASK1), "--methods", "hf-serial", "--device", "cpu",
                "--model", "models/tiny-qwen3", "--prompts", str(tmp_path / "none.jsonl"),
                "--out", str(tmp_path / "t1.json")])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "none.jsonl" in lines[0]


# --------------------------------------------------------------------------------------------
# run_tests.sh: the CPU-server environment only when e2e tests will run
# --------------------------------------------------------------------------------------------
def run_tests_plan(*pytest_args: str) -> str:
    """run_tests.sh's dry run with the pytest running this test as its interpreter."""
    done = run(["bash", "run_tests.sh", *pytest_args],
               env={"LAB3_TESTS_DRY_RUN": "1", "LAB3_VENV": sys.prefix})
    assert done.returncode == 0, done.stderr
    return done.stdout


def pytest_keeps_e2e(tmp_path: Path, expr: str) -> bool:
    """Ask pytest itself: does ``-m expr`` collect a test whose marker is e2e?"""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: probe\n")
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\n\n@pytest.mark.e2e\ndef test_probe():\n    pass\n")
    done = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-m", expr,
                str(tmp_path / "test_probe.py")], cwd=tmp_path)
    return "test_probe" in done.stdout


@pytest.mark.parametrize("args, builds", [
    ((), True),
    (("-m", "not e2e"), False),
    (("-mnot e2e",), False),
    (("-m", "not e2e and not slow"), False),
    (("-m", "e2e"), True),
    (("-m", "e2e or not e2e"), True),
    (("-m", "not e2e", "-m", "e2e"), True),  # pytest uses the last -m
    (("-k", "sjf"), True),  # -k is not read: built as before
])
def test_run_tests_builds_the_cpu_server_only_for_e2e(args, builds):
    plan = run_tests_plan(*args)
    assert ("would run: bash setup_cpu_server.sh" in plan) is builds
    assert ("e2e tests deselected" in plan) is not builds
    assert plan.rstrip().splitlines()[-1].startswith(
        f"[run_tests] would run: {sys.prefix}/bin/python -m pytest -q tests")


@pytest.mark.parametrize("expr", ["e2e", "not e2e", "e2e or slow", "e2e and not slow",
                                  "not (e2e or slow)", "slow or not e2e", "e2e and slow"])
def test_run_tests_decision_agrees_with_pytests_own_selection(tmp_path, expr):
    builds = "would run: bash setup_cpu_server.sh" in run_tests_plan("-m", expr)
    assert builds is pytest_keeps_e2e(tmp_path, expr)


def test_ci_runs_the_full_suite_with_the_cpu_server():
    assert re.search(r"^bash run_tests\.sh$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert "would run: bash setup_cpu_server.sh" in run_tests_plan()


# --------------------------------------------------------------------------------------------
# The offline GPU kit lives in the repository
# --------------------------------------------------------------------------------------------
def test_readme_names_only_kit_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert "../shared/offline-gpu" not in readme
    named = set(re.findall(r"offline_gpu/[\w.-]+", readme))
    assert "offline_gpu/build.sh" in named
    for name in named:
        assert (ROOT / name).is_file(), name
    for script in ("build.sh", "install.sh"):
        assert os.access(KIT / script, os.X_OK), script


def test_every_study_the_readme_and_docs_name_reads_and_dry_runs(tmp_path):
    """A newcomer's study commands: each plan named in README.md or docs/ exists, reads, and its
    dry run lists its order without a GPU, or, for a rate taken from a capacity measured in the
    same sitting, says which study must run first."""
    text = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    named = set(re.findall(r"experiments/[\w.-]+\.json", text))
    assert "experiments/task3_rate8.json" in named and "experiments/calibrate.json" in named
    for plan in sorted(named):
        done = subprocess.run([sys.executable, "-m", "harness.study", "run", plan, "--dry-run", "--results",
                               str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        waits = "holds no capacity run from this machine" in done.stdout and "run the study that measures it first" in done.stdout
        assert done.returncode == 0 and (" 0 of " in done.stdout or waits), plan + done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="no git checkout")
def test_build_outputs_and_environments_are_ignored_by_the_projects_gitignore():
    for path in (".venv/", ".venv-cpu-serve/", ".offline-gpu/"):
        done = run(["git", "check-ignore", "-v", "--no-index", path])
        assert done.returncode == 0, path
        assert done.stdout.startswith(".gitignore:"), done.stdout


@pytest.mark.skipif(shutil.which("xz") is None, reason="needs xz, as the kit does")
def test_install_sh_stages_in_batches_checks_and_activates_a_bundle(tmp_path):
    """A tiny bundle packed as build.sh packs one (xz tar in parts, SHA256SUMS), in two batches."""
    site = tmp_path / "src" / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text('__version__ = "0.26.0"\n')
    with tarfile.open(tmp_path / "bundle.tar.xz", "w:xz") as tar:
        tar.add(site, arcname="site")
    data = (tmp_path / "bundle.tar.xz").read_bytes()
    half = len(data) // 2
    batches = [tmp_path / "batch1", tmp_path / "batch2"]
    for batch, (name, chunk) in zip(batches, [("part-00", data[:half]), ("part-01", data[half:])]):
        batch.mkdir()
        (batch / name).write_bytes(chunk)
    sums = run(["sha256sum", "part-00"], cwd=batches[0]).stdout + run(["sha256sum", "part-01"],
                                                                        cwd=batches[1]).stdout
    (batches[0] / "SHA256SUMS").write_text(sums)
    env = {"LAB3_OFFLINE_GPU_STAGE": str(tmp_path / "stage"),
           "LAB3_OFFLINE_GPU_PREFIX": str(tmp_path / "opt")}
    install = str(KIT / "install.sh")

    first = run(["bash", install, "stage", str(batches[0])], env=env)
    assert first.returncode != 0 and "1 of 2 parts staged" in first.stdout
    second = run(["bash", install, "stage", str(batches[1])], env=env)
    assert second.returncode == 0 and "2 of 2 parts staged" in second.stdout
    activated = run(["bash", "-c", 'source "$LAB3_OFFLINE_GPU_STAGE/install.sh" activate && '
                     'echo "flashinfer=$VLLM_USE_FLASHINFER_SAMPLER"'], env=env)
    assert activated.returncode == 0, activated.stdout + activated.stderr
    assert "[offline-gpu] vllm 0.26.0 ready" in activated.stdout
    assert "flashinfer=0" in activated.stdout


def test_unpack_sh_keeps_a_study_folder_as_results_keeps_it(tmp_path):
    """What device_study.sh brings back, unpacked: the run files as they came, the server log
    without its per-request access lines (its own lines kept), the engine's control files gone,
    every log xz-compressed and readable."""
    study = tmp_path / "host" / "some_study"
    (study / "logs").mkdir(parents=True)
    (study / "mnbt-2048_rate-inf_run-1.json").write_text('{"summary": {}}\n')
    (study / "logs" / "server.log").write_text(
        "INFO 12-06 01:55:57 [api_server.py:1] Starting vLLM API server\n"
        'INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        'INFO:     127.0.0.1:50001 - "GET /metrics HTTP/1.1" 200 OK\n'
        "INFO 12-06 01:56:00 [launcher.py:100] Application startup complete.\n")
    (study / "logs" / "steps.csv").write_text("prefill_tokens,step_time_us\n1024,9000\n")
    for name in ("engine_stats.json", "budget_control.json", "server.json"):
        (study / "logs" / name).write_text("{}")
    tarball = tmp_path / "study.tar.xz"
    with tarfile.open(tarball, "w:xz") as tar:
        tar.add(study, arcname="some_study")
    results = tmp_path / "results"
    results.mkdir()
    done = run(["bash", str(KIT / "unpack.sh"), str(tarball), str(results)])
    assert done.returncode == 0, done.stderr
    folder = results / "some_study"
    assert (folder / "mnbt-2048_rate-inf_run-1.json").read_text() == '{"summary": {}}\n'
    assert sorted(p.name for p in (folder / "logs").iterdir()) == ["server.log.xz", "steps.csv.xz"]
    log = subprocess.run(["xz", "-dc", str(folder / "logs" / "server.log.xz")], capture_output=True, text=True).stdout
    assert log.splitlines() == ["INFO 12-06 01:55:57 [api_server.py:1] Starting vLLM API server",
                                "INFO 12-06 01:56:00 [launcher.py:100] Application startup complete."]
    assert run(["bash", str(KIT / "unpack.sh"), str(tmp_path / "missing.tar.xz"), str(results)]).returncode != 0


def _study_tarball(tmp_path, name: str, boots: list[str], run_file: str):
    """A study folder as device_study.sh packs it: a run file and a study.json naming its hosts."""
    study = tmp_path / name / "some_study"
    study.mkdir(parents=True)
    (study / run_file).write_text('{"summary": {}}\n')
    hosts = [{"machine_boot_id": boot, "runs": [run_file]} for boot in boots]
    (study / "study.json").write_text(json.dumps({"schema_version": 1, "order": [], "hosts": hosts}))
    tarball = tmp_path / f"{name}.tar.xz"
    with tarfile.open(tarball, "w:xz") as tar:
        tar.add(study, arcname="some_study")
    return tarball


def test_unpack_sh_refuses_a_study_restarted_on_another_machine(tmp_path):
    """A later tarball of the same sitting (its hosts include the folder's) is taken; one whose study
    started afresh on another machine is refused with nothing changed, so the order and hosts of
    the runs already held are not overwritten and one folder never mixes machines."""
    results = tmp_path / "results"
    results.mkdir()
    first = _study_tarball(tmp_path, "first", ["boot-a"], "run-1.json")
    assert run(["bash", str(KIT / "unpack.sh"), str(first), str(results)]).returncode == 0
    later = _study_tarball(tmp_path, "later", ["boot-a", "boot-a"], "run-2.json")
    assert run(["bash", str(KIT / "unpack.sh"), str(later), str(results)]).returncode == 0
    folder = results / "some_study"
    assert sorted(p.name for p in folder.iterdir()) == ["run-1.json", "run-2.json", "study.json"]
    held = (folder / "study.json").read_text()
    elsewhere = _study_tarball(tmp_path, "elsewhere", ["boot-b"], "run-3.json")
    refused = run(["bash", str(KIT / "unpack.sh"), str(elsewhere), str(results)])
    assert refused.returncode == 3 and "boot-a" in refused.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["run-1.json", "run-2.json", "study.json"]
    assert (folder / "study.json").read_text() == held
    assert sorted(p.name for p in results.iterdir()) == ["some_study"]


def test_device_chain_runs_plans_in_order_across_calls(tmp_path):
    """device_chain.sh, with device_study.sh in its place answering as a study would (exit 3: runs
    left, 0: done): one command serves every call; a finished plan is skipped, the first with runs
    left continues, each plan that ran comes back as <results_folder>.tar.xz, and a call with too
    little time left starts nothing."""
    repo = tmp_path / "repo"
    (repo / "offline_gpu").mkdir(parents=True)
    shutil.copy(KIT / "device_chain.sh", repo / "offline_gpu")
    (repo / "offline_gpu" / "device_study.sh").write_text(
        '#!/usr/bin/env bash\n'  # the plan's next exit code is the first line of its .codes file
        'set -euo pipefail\n'
        'echo "$1 $2" >> calls.txt\n'
        'code=$(head -n 1 "$1.codes"); sed -i 1d "$1.codes"\n'
        'echo packed > "$OUT/study.tar.xz"\n'
        'exit "$code"\n')
    for name, codes in (("anchor", "0\n"), ("near", "3\n0\n")):
        (repo / f"{name}.json").write_text(json.dumps({"results_folder": f"{name}_folder"}))
        (repo / f"{name}.json.codes").write_text(codes)
    out = tmp_path / "out"
    env = {"LAB3_CHAIN_DONE": str(tmp_path / "done.txt")}

    def call(until_s: int) -> subprocess.CompletedProcess[str]:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        return run(["bash", "offline_gpu/device_chain.sh", str(until_s), "anchor.json", "near.json"],
                   env={**env, "OUT": str(out)}, cwd=repo)

    first = call(500)
    assert first.returncode == 3, first.stderr  # the anchor finished, the second plan has runs left
    assert sorted(p.name for p in out.iterdir()) == ["anchor_folder.tar.xz", "near_folder.tar.xz"]
    assert call(100).returncode == 3  # too little time to start a server: nothing runs
    second = call(500)
    assert second.returncode == 0 and "every plan is done" in second.stdout
    assert sorted(p.name for p in out.iterdir()) == ["near_folder.tar.xz"]
    calls = [line.split()[0] for line in (repo / "calls.txt").read_text().splitlines()]
    assert calls == ["anchor.json", "near.json", "near.json"]
    assert (tmp_path / "done.txt").read_text().split() == ["anchor_folder", "near_folder"]
