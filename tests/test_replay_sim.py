"""The replay simulator: step logs, the step-time fit, and replays through the real
vLLM 0.26 scheduler on a virtual clock. Step times here come from coefficients made up for the
test, never from a measurement."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import harness.step_recorder as sr
import my_scheduler as ms
from harness import sched_engine as engine
from harness import sched_sim as ss
from harness import step_model
from harness.provenance import read_json

COEFFS = {"intercept": 0.003, "prefill_tokens": 4e-6, "decode_requests": 3e-5, "context_tokens": 2e-8}


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "coeffs.json"
    path.write_text(json.dumps({"coefficients": COEFFS, "provenance": {"model": "test", "gpu": "none"}}))
    return path


def simulate(strategy: str, arrivals, inputs, outputs, config: engine.SimConfig | None = None):
    clock = ss.VirtualClock()
    model = {"coefficients": COEFFS}
    detail, _, _ = ss.replay(ss.replay_class(strategy, clock), np.asarray(arrivals, dtype=float),
                             np.asarray(inputs), np.asarray(outputs), model, config or engine.SimConfig(), clock)
    return detail


# ---------------------------------------------------------------------------------------------
# Calibration log and fit
# ---------------------------------------------------------------------------------------------
def test_step_log_of_kv_recorder_has_one_row_per_step_with_its_token_counts(tmp_path, monkeypatch):
    """vLLM's own policy through KVPeakRecorder: prompts of 40 and 20 tokens, then 3 decodes."""
    log = tmp_path / "steps.csv"
    monkeypatch.setenv(ms.STEP_LOG_ENV, str(log))
    sched = engine.make_scheduler(ms.KVPeakRecorder, engine.SimConfig(max_num_seqs=8, max_num_batched_tokens=64))
    traces = engine.run_until_done(sched, [[engine.make_request(40, 4), engine.make_request(20, 4)]])
    sched.flush_stats()
    rows = step_model.read_step_log(log)
    assert len(rows["step_time_us"]) == len(traces) == 4
    for i, trace in enumerate(traces):
        prefill = sum(trace.scheduled[r] for r in trace.prefill_ids)
        assert rows["prefill_tokens"][i] == prefill
        assert rows["decode_tokens"][i] == rows["decode_requests"][i] == len(trace.decode_ids)
        assert rows["num_requests"][i] == len(trace.scheduled)
    assert rows["prefill_tokens"][0] == 60 and rows["context_tokens"][0] == 60
    assert list(rows["context_tokens"][1:]) == [62, 64, 66]
    assert (rows["step_time_us"] >= 0).all()


def test_step_time_is_the_gap_between_outputs_while_a_step_is_in_flight():
    """Planned N+1 before N's output (async): its time starts at N's output, not its planning."""
    now = iter([0.0, 1.0, 5.0, 9.0, 20.0, 23.0])
    log = sr.StepTimeLog("unused", clock=lambda: next(now))
    first, second, third = object(), object(), object()
    log.planned(first, (10, 0, 0, 10, 1))
    log.planned(second, (0, 1, 1, 11, 1))
    log.applied(first)   # 5 - 0: nothing was in flight before it
    log.applied(second)  # 9 - 5: it waited behind the first
    log.planned(third, (0, 1, 1, 12, 1))
    log.applied(third)   # idle in between: 23 - 20
    assert [row.split(",")[-2:] for row in log._rows] == [["5000000", "0"], ["4000000", "1"], ["3000000", "0"]]


def test_fit_recovers_known_coefficients(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for part in range(2):
        n = 400
        prefill = rng.integers(0, 2049, n) * (rng.random(n) < 0.5)
        decode = rng.integers(0, 257, n)
        context = prefill + decode * rng.integers(200, 1300, n)
        secs = (COEFFS["intercept"] + COEFFS["prefill_tokens"] * prefill + COEFFS["decode_requests"] * decode
                + COEFFS["context_tokens"] * context) * rng.normal(1.0, 0.01, n)
        rows = [f"{p},{d},{d},{c},{d + (p > 0)},{round(t * 1e6)},1" for p, d, c, t in zip(prefill, decode, context, secs)]
        path = tmp_path / f"steps-{part}.csv"
        path.write_text(",".join(sr.StepTimeLog.COLUMNS) + "\n" + "\n".join(rows) + "\n")
        paths.append(path)
    out = tmp_path / "fit.json"
    assert step_model.main(["fit", *map(str, paths), "--gpu", "none", "--model", "synthetic", "--out", str(out)]) == 0
    fitted = json.loads(out.read_text())
    for term, value in COEFFS.items():
        assert fitted["coefficients"][term] == pytest.approx(value, rel=0.1)
    assert fitted["r2"] > 0.99 and fitted["mean_relative_error"] < 0.02
    assert [entry["path"] for entry in fitted["provenance"]["logs"]] == [str(p) for p in paths]
    assert fitted["provenance"]["gpu"] == "none" and fitted["num_steps"] <= 800


def test_step_log_reader_takes_xz_and_the_fit_finds_the_output_lag(tmp_path):
    """A log whose every time is the *next* step's (the engine applies N's output after N+1 ran),
    written xz-compressed: read as the plain CSV is, fitted at lag 1 with the coefficients back."""
    import lzma

    rng = np.random.default_rng(1)
    n = 600
    prefill = rng.integers(0, 2049, n) * (rng.random(n) < 0.5)
    decode = rng.integers(1, 257, n)
    context = prefill + decode * rng.integers(200, 1300, n)
    own = design_secs(prefill, decode, context)
    secs = np.append(own[1:], own[-1])  # row i carries step i+1's time
    text = ",".join(sr.StepTimeLog.COLUMNS) + "\n" + "".join(
        f"{p},{d},{d},{c},{d + (p > 0)},{round(t * 1e6)},1\n" for p, d, c, t in zip(prefill, decode, context, secs))
    (tmp_path / "steps.csv").write_text(text)
    (tmp_path / "steps.csv.xz").write_bytes(lzma.compress(text.encode()))
    plain, packed = (step_model.read_step_log(tmp_path / name) for name in ("steps.csv", "steps.csv.xz"))
    assert plain.keys() == packed.keys() and all((plain[k] == packed[k]).all() for k in plain)
    fitted = step_model.fit([tmp_path / "steps.csv.xz"], "none", "synthetic")
    assert fitted["output_lag_steps"] == 1 and fitted["r2"] > 0.999
    for term, value in LAGGED.items():
        assert fitted["coefficients"][term] == pytest.approx(value, rel=0.02, abs=1e-9)
    assert set(fitted["residual_quantiles_s"]) == {"0", "1"}


LAGGED = {**COEFFS, "has_prefill": 0.015}


def design_secs(prefill, decode, context):
    c = LAGGED
    return (c["intercept"] + c["prefill_tokens"] * prefill + c["decode_requests"] * decode
            + c["context_tokens"] * context + c["has_prefill"] * (prefill > 0))


def test_committed_fit_is_the_sjf_log_refitted():
    """results/steplogs' coefficient file is what `step_model fit` gives for the SJF log alone."""
    root = Path(__file__).resolve().parent.parent
    committed = json.loads((root / "results/steplogs/qwen3-0.6b_api-4.fit.json").read_text())
    assert [Path(e["path"]).name for e in committed["provenance"]["logs"]] == ["qwen3-0.6b_api-4_sjf.csv.xz"]
    again = step_model.fit([root / e["path"] for e in committed["provenance"]["logs"]], "x", "x")
    assert again["coefficients"] == pytest.approx(committed["coefficients"])
    assert again["output_lag_steps"] == committed["output_lag_steps"] == 1
    assert again["num_steps"] == committed["num_steps"]


CALIBRATION = Path(__file__).resolve().parent.parent / "results" / "calib_qwen3-0.6b_api-4"


def test_a_bounded_fit_keeps_cost_terms_at_zero_or_above_where_least_squares_trades_them():
    """On the H100 calibration's log (one prompt length, one budget), decoding requests and context
    tokens rise together: least squares puts terms below zero and names the pair; the bounded fit
    keeps every cost term at or above zero, at a residual no smaller than least squares'."""
    logs = [CALIBRATION / "logs" / "steps.csv.xz"]
    free, bounded = (step_model.fit(logs, "x", "x", nonnegative=flag) for flag in (False, True))
    assert any(free["coefficients"][t] < 0 for t in step_model.COST_TERMS)
    assert all(bounded["coefficients"][t] >= 0 for t in step_model.COST_TERMS)
    assert 0 < free["r2"] - bounded["r2"] < 0.02 and bounded["method"] != free["method"]
    pairs = {tuple(p["terms"]): p["r"] for p in free["correlated_terms"]}
    assert pairs[("decode_requests", "context_tokens")] > 0.99


KNOWN_COSTS = np.array([0.003, 4e-6, 3e-5, 2e-8, 0.015, 0.0])  # in step_model.TERMS order


def steps_of_known_cost(seed: int, smallest_prompt_chunk: int, n: int = 800) -> tuple[np.ndarray, np.ndarray]:
    """(regressors, seconds) of ``n`` steps drawn from KNOWN_COSTS with independent terms: half hold
    a prompt chunk of ``smallest_prompt_chunk``-2048 tokens, every one 1-256 decoding requests."""
    rng = np.random.default_rng(seed)
    prefill = rng.integers(smallest_prompt_chunk, 2049, n) * (rng.random(n) < 0.5)
    decode = rng.integers(1, 257, n)
    x = step_model.design(prefill, decode, prefill + decode * rng.integers(200, 1300, n))
    return x, x @ KNOWN_COSTS + rng.normal(0, 1e-5, n)


def test_the_bounded_fit_is_least_squares_when_no_bound_binds():
    """Steps drawn from non-negative costs with independent terms: both fits give those costs."""
    x, y = steps_of_known_cost(3, 0)
    truth = KNOWN_COSTS
    free, bounded = step_model.least_squares(x, y, False), step_model.least_squares(x, y, True)
    assert bounded[:5] == pytest.approx(truth[:5], rel=0.05) and bounded == pytest.approx(free, rel=1e-6, abs=1e-9)


def test_a_term_held_at_zero_stays_there_and_the_others_absorb_its_cost(tmp_path):
    """Steps drawn from known costs: held at zero, a prompt step's fixed cost moves into the cost
    per prompt token (bounded or not), and the fit says what it held. On the committed H100
    calibration, fit-study --without writes a fit with that term at zero and a residual no smaller
    than the full fit's."""
    x, y = steps_of_known_cost(5, 256)
    full = step_model.least_squares(x, y, True)
    for bounded in (False, True):
        held = step_model.least_squares(x, y, bounded, ("has_prefill",))
        assert held[4] == 0.0 and held[1] > 2 * full[1]  # the fixed cost, spread per prompt token
    out = tmp_path / "without.fit.json"
    assert step_model.main(["fit-study", str(CALIBRATION), "--nonnegative", "--without", "has_prefill",
                            "--without", "prefill_in_graph", "--out", str(out)]) == 0
    fit = json.loads(out.read_text())
    assert fit["coefficients"]["has_prefill"] == fit["coefficients"]["prefill_in_graph"] == 0.0
    assert fit["method"].endswith("has_prefill, prefill_in_graph held at zero")
    assert fit["r2"] <= step_model.fit_study(CALIBRATION, True)["r2"]


def test_calibration_adds_the_front_end_s_ttft_that_the_steps_do_not_explain(tmp_path):
    """`harness.calibrate` on the committed H100 study: the front-end term is the paced GPU run's
    TTFT P50 less its step-model replay's; a replay with the fit adds it to TTFT, not to ITL."""
    from harness import calibrate
    from harness.replay_study import replay_argv
    from harness.results import load_runs

    out = tmp_path / "host.fit.json"
    assert calibrate.main([str(CALIBRATION), "--nonnegative", "--out", str(out)]) == 0
    fit = json.loads(out.read_text())
    (point,) = fit["frontend_calibration"]["runs"]
    assert fit["frontend_ttft_s"] * 1e3 == pytest.approx(point["gpu_ttft_p50_ms"] - point["replay_ttft_p50_ms"])
    assert fit["frontend_ttft_s"] > 0 and fit["host"]["machine_boot_ids"]
    steps_only = tmp_path / "steps-only.fit.json"
    steps_only.write_text(json.dumps({k: v for k, v in fit.items() if not k.startswith("frontend")}))
    run = next(r for r in load_runs(CALIBRATION) if r.config.rate is not None)
    summaries = []
    for model in (steps_only, out):
        replayed = tmp_path / f"{model.stem}.replay.json"
        assert ss.main(replay_argv(run.config, model, 40736, replayed)) == 0
        summaries.append(json.loads(replayed.read_text())["summary"])
    assert summaries[0]["ttft_ms"]["p50"] == pytest.approx(point["replay_ttft_p50_ms"])
    assert summaries[1]["ttft_ms"]["p50"] - summaries[0]["ttft_ms"]["p50"] == pytest.approx(fit["frontend_ttft_s"] * 1e3)
    assert summaries[1]["itl_ms"] == summaries[0]["itl_ms"]


def test_a_study_s_step_log_fits_with_the_host_that_measured_it(tmp_path):
    """`fit-study` fits logs/steps.csv[.xz] of a study folder and names its host from the study's
    files (here a committed H200 step log in a folder built like a study's)."""
    import shutil

    root = Path(__file__).resolve().parent.parent
    study = root / "results" / "task3_api-4_rate8"
    folder = tmp_path / "calib"
    (folder / "logs").mkdir(parents=True)
    shutil.copy(study / "study.json", folder)
    shutil.copy(study / "default_mnbt-2048_rate-8_run-1.json", folder)
    out = tmp_path / "host.fit.json"
    assert step_model.main(["fit-study", str(folder), "--out", str(out)]) == 2  # no step log yet
    log = root / "results/steplogs/qwen3-0.6b_api-4_sjf.csv.xz"
    shutil.copy(log, folder / "logs" / "steps.csv.xz")
    assert step_model.main(["fit-study", str(folder), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["coefficients"] == pytest.approx(step_model.fit([log], "x", "x")["coefficients"])
    run = json.loads((study / "default_mnbt-2048_rate-8_run-1.json").read_text())["meta"]
    host = written["host"]
    assert host["machine_boot_ids"] == [run["machine_boot_id"]] and host["gpu"] == [run["gpu"]]
    assert host["vllm"] == ["0.26.0"] and host["api_servers"] == 4 and host["token_budgets"] == [2048]
    assert written["provenance"]["gpu"] == "NVIDIA H200"


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
# Runs the CLI as `python -m harness.sched_sim` (a module) or `python harness/sched_sim.py` (a
# file) would, then says which of the heavy packages the parse loaded.
HELP_PROBE = """
import runpy, sys
how, target = sys.argv[1:3]
sys.argv = ["sched_sim.py", "replay", "--help"]
try:
    runpy.run_module(target, run_name="__main__") if how == "module" else runpy.run_path(target, run_name="__main__")
except SystemExit as exit:
    print("exit", exit.code)
print("loaded", sorted({name.split(".")[0] for name in sys.modules} & {"vllm", "torch"}))
"""


@pytest.mark.parametrize("how,target", [("module", "harness.sched_sim"), ("file", "harness/sched_sim.py")])
def test_replay_help_parses_without_importing_vllm_or_torch(how, target):
    """`replay --help` answers before any vLLM import (they took ~16 s): the usage, exit 0, and
    neither vllm nor torch in sys.modules after the parse. No time is asserted, only the imports."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HELP_PROBE, how, target], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines()[-2:] == ["exit 0", "loaded []"], done.stdout + done.stderr
    assert done.stdout.startswith("usage: sched_sim.py replay") and "--step-model" in done.stdout


def test_replay_refuses_to_run_without_a_step_model(tmp_path, capsys):
    """--step-model is a required argument: argparse's usage error (exit 2), before anything runs."""
    with pytest.raises(SystemExit) as exit:
        ss.main(["replay", "--strategy", "default", "--out", str(tmp_path / "x.json")])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and "the following arguments are required: --step-model" in err
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(ValueError, match="step-time model is required"):  # a caller that skips the parser
        step_model.load(None)


def replay_args(*extra: str):
    """The replay's arguments as parsed, with its required ones."""
    return ss.build_parser().parse_args(["replay", "--strategy", "default", "--step-model", "fit.json",
                                         "--out", "out.json", *extra])


def test_a_replay_leaves_out_the_warm_up_its_gpu_runs_left_out():
    """The report sets a replay's summary beside the GPU runs of its load (rules.replay_validation),
    so both must leave out the same first requests: the replay's default is the GPU harness's, and
    every committed GPU run with a replay folder, and every committed replay, used it."""
    from harness import lab_metrics, serve_bench
    from harness.study import StudyPlan
    from harness.study_file import read_study

    default = replay_args().warmup_fraction
    assert default == lab_metrics.WARMUP_FRACTION
    gpu = serve_bench.parse_args(["--out-dir", "x", "--model", "m", "--task", "t", "--tag", "t"])
    assert gpu.warmup_fraction == default
    assert StudyPlan.__dataclass_fields__["warmup_fraction"].default == default
    results = ROOT / "results"
    studies = {folder.name: read_study(folder) for folder in results.iterdir() if (folder / "study.json").is_file()}
    replays = [name for name, study in studies.items() if study.kind == "replay"]
    paired = sorted({name for name in replays for name in studies[name].replays_of})  # as the report pairs them
    compared = [path for name in paired for path in (results / name).glob("*_run-*.json")]
    assert len(compared) == 154  # task2_api-4 12, task3_api-4 16, task3_api-4_heavy 18, task2_api-4_budgets 12,
    #                              task3_api-4_rate30_varlen 9, task2_api-4_inf_8192 6, task2_api-4_anchor_low 3,
    #                              task2_api-4_near_saturation_low 9, task2_api-4_anchor_high_b 3,
    #                              task2_api-4_inf_1024_b 3, task2_api-4_near_saturation_high_b 9,
    #                              task3_api-4_rate8_varlen_b 9, slo_api-4_heavy_steady 12,
    #                              slo_qwen3-8b_api-4_heavy_steady 6, slo_qwen3-8b_api-4_heavy_steady_b 12,
    #                              slo_api-4_heavy_steady_c 9, slo_api-4_heavy_steady_d 6
    replayed = [p for name in replays for p in (results / name).glob("*_run-*.json.xz")]
    assert len(replayed) > len(compared)  # the replays are stored compressed
    for path in compared + replayed:
        stored = read_json(path)
        assert stored["config"]["warmup_fraction"] == stored["summary"]["warmup_fraction"] == default, path
    with pytest.raises(SystemExit):
        ss.main(["replay", "--strategy", "default", "--step-model", "f", "--out", "o", "--warmup-fraction", "1"])


def test_num_prompts_defaults_to_the_workloads_own_size(tmp_path, model_file, capsys):
    """No --num-prompts: every line of --dataset-path (7 here; the old fixed 1000 refused such a
    file), else the handout's 1000 for a random load; --help says so. An explicit count still wins."""
    dataset = tmp_path / "seven.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": "x", "input_tokens": 40 + i, "output_tokens": 3 + i}) + "\n"
                               for i in range(7)))
    out = tmp_path / "sim" / "default_seven_rate-20.json"
    assert ss.main(["replay", "--strategy", "default", "--rate", "20", "--dataset-path", str(dataset),
                    "--step-model", str(model_file), "--out", str(out)]) == 0
    stored = json.loads(out.read_text())
    assert stored["config"]["num_prompts"] == stored["client"]["num_prompts"] == stored["summary"]["num_requests"] == 7
    assert stored["client"]["completed"] == 7
    random_load = ss.workload_lengths(replay_args("--input-len", "64", "--output-len", "8"))
    assert [len(lengths) for lengths in random_load] == [ss.RANDOM_PROMPTS, ss.RANDOM_PROMPTS] == [1000, 1000]
    assert [len(lengths) for lengths in ss.workload_lengths(replay_args("--dataset-path", str(dataset),
                                                                        "--num-prompts", "5"))] == [5, 5]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        ss.main(["replay", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--num-prompts NUM_PROMPTS requests to replay (default: the workload's own: every line of " \
           "--dataset-path, else 1000" in help_text


# ---------------------------------------------------------------------------------------------
# The workload of vllm bench serve
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate,burstiness", [(40.0, 1.0), (12.5, 0.5)])
def test_arrivals_are_those_of_vllm_bench_serve_for_the_seed(monkeypatch, rate, burstiness):
    """vLLM's own ``get_request`` on a fake clock (its sleeps advance it) after the global seed
    ``vllm bench serve`` sets."""
    serve = pytest.importorskip("vllm.benchmarks.serve")
    fake = SimpleNamespace(now=100.0)

    async def sleep(seconds: float) -> None:
        fake.now += seconds

    monkeypatch.setattr(serve, "time", SimpleNamespace(time=lambda: fake.now))
    monkeypatch.setattr(serve, "asyncio", SimpleNamespace(sleep=sleep))

    async def sent_at() -> list[float]:
        return [fake.now - 100.0 async for _ in serve.get_request(list(range(300)), rate, burstiness)]

    np.random.seed(42)
    expected = asyncio.run(sent_at())
    assert ss.bench_arrivals(300, rate, burstiness, 42) == pytest.approx(expected, abs=1e-9)


def test_lengths_are_those_of_vllm_bench_random_dataset():
    utils = pytest.importorskip("vllm.benchmarks.datasets.utils")
    tokenizer = SimpleNamespace(num_special_tokens_to_add=lambda: 0, vocab_size=151669)
    ins, outs, _ = utils.get_sampling_params(np.random.default_rng(7), 500, 0.9, 1024, 256, tokenizer)
    mine_in, mine_out = ss.bench_lengths(500, 1024, 256, 0.9, 7)
    assert (mine_in == ins).all() and (mine_out == outs).all()


# ---------------------------------------------------------------------------------------------
# Replays
# ---------------------------------------------------------------------------------------------
def test_lone_request_ttft_is_its_prefill_steps():
    c = step_model.predict_s
    model = {"coefficients": COEFFS}
    short = simulate("default", [0.5], [300], [4])
    assert short["ttfts"][0] == pytest.approx(c(model, 300, 0, 300), abs=1e-12)
    chunked = simulate("default", [0.5], [3000], [4], engine.SimConfig(max_model_len=4096))
    assert chunked["ttfts"][0] == pytest.approx(c(model, 2048, 0, 2048) + c(model, 952, 0, 3000), abs=1e-12)
    decode = c(model, 0, 1, 301)
    assert short["itls"][0][0] == pytest.approx(decode, abs=1e-12) and short["output_lens"][0] == 4


def test_strategy_a_trades_decode_stalls_for_first_tokens_against_the_default():
    """A bursty load (burstiness 0.25 at 40 req/s): a burst queues several prompts at once. The
    default gives them what the running decodes leave of each step, and every such step also
    pays for the decodes; A runs them in prefill-only steps back to back (lower TTFT P50) while
    the decodes wait for the whole burst (higher ITL P99). Here: 22.7 vs 18.4 ms, 12.7 vs 40.4 ms."""
    n = 300
    arrivals = ss.bench_arrivals(n, 40.0, 0.25, 42)
    inputs, outputs = ss.bench_lengths(n, 1024, 64, 0.0, 42)
    rows = {}
    for strategy in ("default", "prefill-first"):
        detail = simulate(strategy, arrivals, inputs, outputs)
        assert all(length == 64 for length in detail["output_lens"])
        summary = ss_summary(detail)
        rows[strategy] = (summary["ttft_ms"]["p50"], summary["itl_ms"]["p99"])
    assert rows["prefill-first"][0] < rows["default"][0]
    assert rows["prefill-first"][1] > rows["default"][1]


def ss_summary(detail):
    from harness.lab_metrics import compact_detail, summarize
    return summarize(compact_detail(detail, 0.1), 0.1, 30.0)


def test_replay_writes_a_result_file_that_plot_results_reads(tmp_path, model_file):
    from harness.results import load_runs, run_rows

    out = tmp_path / "sim" / "sjf-ontime_rate-20.json"
    argv = ["replay", "--strategy", "sjf-ontime", "--rate", "20", "--num-prompts", "30", "--input-len", "128",
            "--output-len", "16", "--range-ratio", "0.5", "--step-model", str(model_file), "--out", str(out)]
    assert ss.main(argv) == 0
    runs = load_runs(tmp_path / "sim")
    assert len(runs) == 1 and runs[0].simulated and json.loads(out.read_text())["simulated"]
    assert json.loads(out.read_text())["step_model"]["file"] == str(model_file)
    rows = run_rows(runs)
    assert rows.loc[0, "strategy"] == "sjf-ontime" and rows.loc[0, "rate"] == "20"
    assert rows.loc[0, "completeness"] == 1.0 and not rows.loc[0, "lagged"]
    detail = runs[0].detail
    assert detail.input_lens == [int(n) for n in ss.bench_lengths(30, 128, 16, 0.5, 42)[0]]
    assert all(gaps == n - 1 for gaps, n in zip(detail.gap_counts, detail.output_lens))
    assert rows.loc[0, "TTFT P50 (ms)"] > 0 and not math.isnan(rows.loc[0, "ITL P99 (ms)"])


def test_a_replay_prints_and_stores_its_request_throughput(tmp_path, model_file, capsys):
    """Completed requests per second over the run, as vllm bench serve's request_throughput: all
    30 requests (none dropped as warm-up) from the first arrival to the last token; in the
    summary, the client block (where a GPU run has vLLM's own) and the last line printed. A file
    written before the key existed still loads."""
    from harness.results import load_runs, run_rows

    out = tmp_path / "sim" / "default_rate-20.json"
    assert ss.main(["replay", "--strategy", "default", "--rate", "20", "--num-prompts", "30", "--input-len", "128",
                    "--output-len", "16", "--step-model", str(model_file), "--out", str(out)]) == 0
    stored = json.loads(out.read_text())
    detail = load_runs(out.parent)[0].detail
    last_end = max(start + ttft + gaps for start, ttft, gaps in
                   zip(detail.start_times, detail.ttfts, detail.gap_sums_s))
    expected = 30 / (last_end - min(detail.start_times))
    rate = stored["summary"]["request_throughput_req_s"]
    assert rate == pytest.approx(expected, rel=1e-4) and stored["client"]["request_throughput"] == rate
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"request throughput {rate:.2f} req/s -> {out}")
    del stored["summary"]["request_throughput_req_s"], stored["client"]["request_throughput"]
    out.write_text(json.dumps(stored))
    assert len(run_rows(load_runs(out.parent))) == 1


def test_a_replay_of_one_token_requests_has_no_itl_and_says_so(tmp_path, model_file, capsys):
    """Every request gets one output token, so no request has an inter-token gap: the replay still
    writes its file and its last line reads ITL n/a instead of failing on the missing number."""
    out = tmp_path / "sim" / "default_rate-20.json"
    argv = ["replay", "--strategy", "default", "--rate", "20", "--num-prompts", "10", "--input-len", "64",
            "--output-len", "1", "--range-ratio", "0", "--step-model", str(model_file), "--out", str(out)]
    assert ss.main(argv) == 0
    assert json.loads(out.read_text())["summary"]["itl_ms"]["p99"] is None
    assert "ITL P99 n/a" in capsys.readouterr().out


def test_a_screen_replay_without_arrays_is_reproduced_with_its_stored_attainment(tmp_path):
    """One committed screen file, replayed again from its own flags with the committed step model:
    the same summary, and the attainment the file stores under both SLO pairs, with no arrays."""
    import hashlib
    import shlex

    from harness.results import Run

    root = Path(__file__).resolve().parent.parent
    stored = read_json(root / "results/replay_screen_api-4/sjf_varlen-0.9_rate-40_run-2.json.xz")
    fit = root / stored["step_model"]["file"]
    assert hashlib.sha256(fit.read_bytes()).hexdigest() == stored["step_model"]["sha256"]
    argv = shlex.split(stored["meta"]["command"])[2:]  # python sched_sim.py | replay ...
    out = tmp_path / "again.json"
    argv[argv.index("--out") + 1], argv[argv.index("--step-model") + 1] = str(out), str(fit)
    assert ss.main([*argv, "--slo", "ttft:200 tpot:25", "--no-detail"]) == 0
    again = json.loads(out.read_text())
    assert again["client"]["detail_file"] is None and not list(tmp_path.glob("*.npz.xz"))
    assert "request_throughput_req_s" not in stored["summary"]  # written before the key was added
    assert again["summary"].pop("request_throughput_req_s") > 0
    assert "output_pace" not in stored["summary"]  # likewise
    assert 0 < again["summary"].pop("output_pace")["ratio"] <= 1.05
    slos = again["summary"].pop("slo_attainment"), stored["summary"].pop("slo_attainment")
    assert again["summary"] == stored["summary"]
    # The committed file's attainment came from its arrays (times kept to 50 us), the new one from
    # exact times: the same requests meet each SLO, the goodput's span differs by microseconds.
    for slo in ("ttft:500 tpot:50", "ttft:200 tpot:25"):
        new, old = slos[0][slo], slos[1][slo]
        assert Run.read(out).attainment(slo) == new
        # The stored file predates the tail keys (token attainment, longest decile): compare what it has.
        assert {"token_attainment", "longest_decile", "by_third"} <= new.keys()
        assert {k: new[k] for k in old if k != "goodput_req_s"} == {k: v for k, v in old.items() if k != "goodput_req_s"}
        assert new["goodput_req_s"] == pytest.approx(old["goodput_req_s"], rel=1e-4)


def test_replay_study_rebuilds_each_gpu_run_s_load_and_server(tmp_path):
    """A calibration's held-out check replays each GPU run with that run's own load: the arguments
    built from a committed run's config parse, and the lengths they draw are the run's own."""
    from harness.replay_study import replay_argv
    from harness.results import load_runs

    folder = Path(__file__).resolve().parent.parent / "results" / "task3_api-4_rate30_varlen"
    run = next(r for r in load_runs(folder) if r.config.scheduler == "prefill-first")
    args = ss.build_parser().parse_args(replay_argv(run.config, tmp_path / "fit.json", 40736, tmp_path / "out.json"))
    assert (args.strategy, args.rate, args.seed, args.max_num_batched_tokens) == ("prefill-first", "30", run.config.seed, 2048)
    assert (args.range_ratio, args.output_range_ratio, args.num_gpu_blocks) == (0.9, 0.0, 40736)
    inputs, outputs = ss.bench_lengths(args.num_prompts, args.input_len, args.output_len, args.range_ratio, args.seed,
                                       output_range_ratio=args.output_range_ratio)
    assert list(inputs) == list(run.detail.input_lens) and set(outputs) == {256}


def test_a_heavy_run_is_replayed_from_the_lengths_it_sent(tmp_path):
    """A custom load (the heavy-tailed draw) needs no tokenizer to replay: the run's own record
    gives its lengths in the order it sent them, and its burstiness goes with them; without them
    the arguments are refused, not built from a random draw."""
    from harness.replay_study import replay_argv, write_lengths
    from harness.results import load_runs

    folder = Path(__file__).resolve().parent.parent / "results" / "slo_api-4_heavy_steady_b"
    run = next(r for r in load_runs(folder) if r.config.scheduler == "sjf-ontime")
    with pytest.raises(ValueError, match="write_lengths"):
        replay_argv(run.config, tmp_path / "fit.json", 40846, tmp_path / "out.json")
    lengths = write_lengths(run, tmp_path / "lengths.jsonl")
    args = ss.build_parser().parse_args(replay_argv(run.config, tmp_path / "fit.json", 40846, tmp_path / "out.json", lengths))
    assert (args.burstiness, args.dataset_path, args.num_prompts) == (0.5, lengths, run.config.num_prompts)
    assert json.loads(args.additional_config)["wait_bound_s"] == 5
    inputs, outputs = ss.workload_lengths(args)
    assert list(inputs) == list(run.detail.input_lens) and list(outputs) == list(run.detail.output_lens)
    from harness.workloads import HEAVY
    drawn_in, drawn_out = HEAVY.lengths(run.config.num_prompts, run.config.seed)  # the study's draw, as written
    assert list(outputs) == drawn_out.tolist()
