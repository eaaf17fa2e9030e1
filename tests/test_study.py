"""Study plans (``harness/study.py``): reading and checking a plan, its run order, and the study
file that keeps two studies apart. The runs themselves: ``tests/test_e2e_study.py``."""

from __future__ import annotations

import copy
import math
import statistics
import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness import study, study_plan
from harness.server import HarnessError

ROOT = Path(__file__).resolve().parent.parent
TASK2 = json.loads((ROOT / "experiments" / "task2_rate16.json").read_text())


def plan(**changes) -> study_plan.StudyPlan:
    data = copy.deepcopy(TASK2)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        (data[section] if name else data).update({name: value} if name else {section: value})
    return study_plan.StudyPlan.from_dict(data)


def test_every_committed_plan_reads_as_written():
    for path in sorted((ROOT / "experiments").glob("*.json")):
        data, read = json.loads(path.read_text()), study_plan.StudyPlan.read(path).to_dict()
        as_written = lambda got, given: {k: as_written(got[k], v) if isinstance(v, dict) else got[k]  # noqa: E731
                                         for k, v in given.items()}  # what the file sets; defaults aside
        assert as_written(read, data) == data


@pytest.mark.parametrize("changes, words", [
    ({"server__max_num_batched_tokens": 4096}, "is not an integer in [1, 4096]"),
    ({"server__scheduler": "default"}, "cannot take a budget or strategy at run time"),
    ({"server__scheduler": "no-such"}, "unknown scheduler"),
    ({"arms": [{"token_budget": 512}, {"token_budget": 512}]}, "each (token_budget, strategy, rate) once"),
    ({"arms": [{"budget": 512}]}, "arms[0]: expected an object with keys among ['rate', 'rate_share', 'strategy', "
                                  "'strategy_settings', 'token_budget']"),
    ({"arms": [{"token_budget": 512, "rate_share": 0.9}]}, "the plan has no load.rate_from"),
    ({"arms": [{"token_budget": 512, "strategy": "sjf", "strategy_settings": {"wait_bound_s": 5}}]},
     "strategy 'sjf' takes no setting 'wait_bound_s'"),
    ({"arms": [{"token_budget": 512, "strategy_settings": {"aging_tokens_per_s": 5}}]}, "strategy_settings need a strategy"),
    ({"arms": [{"token_budget": 512, "rate": 0}]}, "arm rate 0: a number > 0"),
    ({"arms": [{"token_budget": 512, "strategy": "fastest"}]}, "unknown scheduler 'fastest'"),
    ({"load__rate": 0}, "load.rate 0"),
    ({"load__rate_from": {"results_folder": "task2_api-4_inf", "token_budget": 2048}}, "load.rate_from: expected the keys"),
    ({"load__rate_from": {"results_folder": "task2_api-4_inf", "token_budget": 2048, "share": 1.5}},
     "a share in (0, 1]"),
    ({"speed": 1}, "plan: "),
])
def test_a_bad_plan_fails_before_a_server_starts_and_says_where(changes, words):
    with pytest.raises(ValueError) as err:
        plan(**changes)
    assert words in str(err.value)


def test_the_order_alternates_rounds_and_gives_every_run_its_own_seed():
    runs = plan().order()
    rounds = [[r.arm.token_budget for r in runs if r.round == k] for k in (1, 2, 3)]
    assert rounds[1] == rounds[0][::-1] and sorted(rounds[2]) == sorted(rounds[0]) == [512, 1024, 2048, 4096, 8192]
    assert [r.seed for r in runs] == list(range(1601, 1616))
    assert len({r.file_name for r in runs}) == 15 and runs[0].file_name.endswith("_rate-16_run-1.json")
    # More runs per arm extend the order: the first rounds stay as they were.
    assert [(r.arm, r.seed) for r in plan(runs_per_arm=4).order()[:15]] == [(r.arm, r.seed) for r in runs]


def test_strategy_arms_name_their_runs_and_the_class_each_must_run_under():
    arms = [{"token_budget": 2048, "strategy": name} for name in ("default", "prefill-first", "sjf")]
    three = plan(arms=arms, server__max_num_batched_tokens=2048)
    runs = three.order()
    assert {r.file_name.split("_rate-")[0] for r in runs} == {
        "default_mnbt-2048", "prefill-first_mnbt-2048", "sjf_mnbt-2048"}
    assert [study_plan.class_in_force(three, arm) for arm in three.arms] == [
        "my_scheduler.KVPeakRecorder", "my_scheduler.StepExclusivePrefillFirstScheduler", "my_scheduler.SJFScheduler"]
    assert study_plan.class_in_force(plan(), plan().arms[0]) == "my_scheduler.KVPeakRecorder"  # the server's
    # The study file holds each run's arm as the plan gives it: no strategy key for a budget-only arm.
    assert study_plan.study_record(three)["order"][0].keys() == {"index", "round", "file", "token_budget", "strategy", "seed"}
    assert "strategy" not in study_plan.study_record(plan())["order"][0]
    assert "strategy" not in study_plan.StudyPlan.from_dict(plan().to_dict()).to_dict()["arms"][0]


def test_arms_of_one_strategy_with_other_settings_are_apart_in_names_files_and_checks():
    """F with and without a wait bound: two arms, two file names, the settings in the study file
    and in what the engine must report having applied."""
    arms = [{"token_budget": 2048, "strategy": "sjf-ontime"},
            {"token_budget": 2048, "strategy": "sjf-ontime", "strategy_settings": {"wait_bound_s": 5}}]
    two = plan(arms=arms, server__max_num_batched_tokens=2048)
    assert [arm.tag for arm in two.arms] == ["sjf-ontime_mnbt-2048", "sjf-ontime-wait-bound-s5_mnbt-2048"]
    assert study_plan.StudyPlan.from_dict(two.to_dict()) == two
    assert two.to_dict()["arms"] == arms
    record = study_plan.study_record(two)
    assert sorted(e.get("strategy_settings", {}).get("wait_bound_s", 0) for e in record["order"]) == [0] * 3 + [5] * 3
    bounded = next(r for r in two.order() if r.arm.settings)
    stats = {"budget": {"control_seq": study.control_seq(two, bounded), "token_budget": 2048},
             "scheduler_class": "my_scheduler.OnTimeSJFScheduler",
             "policy_settings": {"aging_tokens_per_s": 0.0, "ttft_slo_ms": 500.0, "ttft_margin_ms": 100.0,
                                 "wait_bound_s": 0.0}}
    with pytest.raises(HarnessError, match="did not apply"):  # the engine kept F without a bound
        study.check_applied(two, bounded, stats)
    study.check_applied(two, bounded, {**stats, "policy_settings": {**stats["policy_settings"], "wait_bound_s": 5.0}})


def test_rate_arms_run_at_their_own_rate_and_the_load_s_otherwise():
    two = plan(arms=[{"token_budget": 2048}, {"token_budget": 2048, "rate": 30}], load__rate=None)
    runs = two.order()
    assert {r.file_name for r in runs if r.round == 1} == {"mnbt-2048_rate-inf_run-1.json",
                                                          "mnbt-2048_rate-30_run-1.json"}
    at_30 = next(r for r in runs if r.rate == 30)
    prompts = two.load.num_prompts
    assert study.expected_run_s(two, at_30) == pytest.approx(
        prompts / 30 + study.EXPECTED_OVERHEAD_S + prompts * study.EXPECTED_OVERHEAD_S_PER_PROMPT)
    assert study.expected_run_s(two, next(r for r in runs if r.rate is None)) == pytest.approx(
        prompts * study.RATE_INF_RUN_S_PER_PROMPT)
    argv = study.bench_argv(two, at_30, "m", "http://x")
    assert argv[argv.index("--request-rate") + 1] == "30"
    assert "rate" not in study_plan.study_record(plan())["order"][0]  # the load's rate: not repeated per run


def test_a_heavy_load_sends_each_run_its_own_draw_with_flags_vllm_bench_accepts(tmp_path):
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    heavy = plan(load={"num_prompts": 50, "rate": 40, "dataset": "heavy", "burstiness": 0.5},
                 arms=[{"token_budget": 2048, "strategy": "default"}, {"token_budget": 2048, "strategy": "sjf-ontime"}],
                 server__max_num_batched_tokens=2048)
    assert heavy.load.workload == "heavy-burst0.5"
    first, second = heavy.order()[:2]
    paths = [study.heavy_draw(heavy, run, tmp_path, "unused", write=False) for run in (first, second)]
    assert paths[0] != paths[1] and paths[0].parent == tmp_path / "datasets"  # a draw per run, by its seed
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(study.bench_argv(heavy, first, "m", "http://x", paths[0]))
    assert (args.dataset_name, args.dataset_path, args.custom_output_len) == ("custom", str(paths[0]), -1)
    assert args.skip_chat_template and args.disable_shuffle and args.ignore_eos and args.burstiness == 0.5
    assert args.seed == first.seed and args.request_rate == 40
    with pytest.raises(HarnessError, match="needs the run's dataset file"):
        study.bench_argv(heavy, first, "m", "http://x")
    for load, words in ((dict(num_prompts=5, rate=1, dataset="heavy", input_len=9), "draws its own lengths"),
                        (dict(num_prompts=5, rate=1), "needs input_len and output_len"),
                        (dict(num_prompts=5, rate=1, dataset="sharegpt"), "random or heavy")):
        with pytest.raises(ValueError, match=words):
            plan(load=load)


def test_committed_studies_still_open_under_todays_plan_type():
    """A setting added to the plan since a study ran (with its default) does not make its folder
    'another study': a cut study resumes."""
    opened = 0
    for path in sorted((ROOT / "experiments").glob("*.json")):
        plan_ = study_plan.StudyPlan.read(path)
        if (ROOT / "results" / plan_.results_folder / study_plan.STUDY_FILE).exists():
            plan_ = study_plan.resolve_rate(plan_, ROOT / "results")  # a begun study: the rate it recorded
            study_plan.open_study(plan_, ROOT / "results" / plan_.results_folder)
            opened += 1
    assert opened >= 3


def test_a_results_folder_keeps_its_study_and_grows_only_by_runs(tmp_path):
    folder = tmp_path / "task2"
    folder.mkdir()
    record = study_plan.open_study(plan(), folder)
    (folder / study_plan.STUDY_FILE).write_text(json.dumps(record))
    assert len(study_plan.open_study(plan(runs_per_arm=4), folder)["order"]) == 20
    with pytest.raises(HarnessError, match="holds another study"):
        study_plan.open_study(plan(seed=99), folder)


def test_a_near_saturation_rate_comes_from_the_capacity_measured_on_this_machine(tmp_path):
    """``load.rate_from``: 0.9 x the median rate-inf output throughput of vLLM's policy at budget
    2048 with one client, over 256 output tokens, from the capacity runs of this machine only, and
    of those only the runs whose front end kept up (a lagging client reads the engine's throughput
    low). The committed runs came from another machine, so they are refused until they are this one's."""
    from harness.provenance import machine_boot_id

    near = plan(load__rate=None, load__rate_from={"results_folder": "cap", "token_budget": 2048, "share": 0.9})
    with pytest.raises(HarnessError, match="not resolved yet"):
        near.order()
    (tmp_path / "cap").mkdir()
    with pytest.raises(HarnessError, match="holds no capacity run from this machine"):
        study_plan.resolve_rate(near, tmp_path)
    tputs = []
    for path in sorted((ROOT / "results" / "task2_api-4").glob("mnbt-2048_rate-inf_run-*.json")):
        run = json.loads(path.read_text())
        (tmp_path / "cap" / path.name).write_text(json.dumps(run))
        if run["config"].get("client_processes", 1) == 1 and not run["frontend"]["lagged"]:
            tputs.append(run["summary"]["output_throughput_tok_s"])
    assert 1 <= len(tputs) < len(list((tmp_path / "cap").glob("*.json")))  # a lagged run is left out
    with pytest.raises(HarnessError, match="from this machine"):
        study_plan.resolve_rate(near, tmp_path)
    for path in (tmp_path / "cap").glob("*.json"):
        run = json.loads(path.read_text())
        run["meta"]["machine_boot_id"] = machine_boot_id()
        path.write_text(json.dumps(run))
    resolved = study_plan.resolve_rate(near, tmp_path)
    want = round(0.9 * statistics.median(tputs) / 256, 1)
    assert resolved.load.rate == want and resolved.load.rate_from == near.load.rate_from
    assert {r.rate for r in resolved.order()} == {want} and f"rate-{want:g}_" in resolved.order()[0].file_name
    assert study_plan.resolve_rate(resolved, tmp_path) is resolved  # a study file's plan keeps its rate
    again = study_plan.StudyPlan.from_dict(resolved.to_dict())  # as study.json holds it
    assert again == resolved
    long_enough = replace(near, load=replace(near.load, min_arrival_s=60.0))
    grown = study_plan.resolve_rate(long_enough, tmp_path)
    prompts = {r.num_prompts for r in grown.order()}
    assert grown.load.rate == want and prompts == {math.ceil(want * 60 / 100) * 100}
    assert min(prompts) / grown.load.rate >= 60 > near.load.num_prompts / want
    folder = tmp_path / long_enough.results_folder
    folder.mkdir()
    (folder / study_plan.STUDY_FILE).write_text(json.dumps(study_plan.study_record(grown)))
    assert study_plan.resolve_rate(long_enough, tmp_path) == grown  # a begun study keeps its prompts too
    with pytest.raises(ValueError, match="min_arrival_s"):
        plan(load__min_arrival_s=60.0)  # no rate_from


def test_the_heavy_draws_of_a_call_are_written_beside_it_each_run_waiting_for_its_own(tmp_path):
    """``HeavyDraws``: the draws of the runs a call may reach (``runs_within`` its --until-s) are
    written by worker processes, the same files ``heavy_draw`` names and a run would write itself;
    a draw that cannot be written fails its run, not silently."""
    from harness import workloads

    heavy = plan(load={"num_prompts": 20, "rate": 10, "dataset": "heavy"}, runs_per_arm=1)
    runs = heavy.order()
    per_run = study.expected_run_s(heavy, runs[0])
    reach = study.runs_within(heavy, runs, 2.5 * per_run)
    assert reach == runs[:2] and study.runs_within(heavy, runs, None) == runs
    model = str(ROOT / "models" / "tiny-qwen3")
    draws = study.HeavyDraws(heavy, reach, tmp_path, model)
    try:
        for run in reach:
            draws.wait(run)
            path = study.heavy_draw(heavy, run, tmp_path, model, write=False)
            inputs, outputs = workloads.read_lengths(path)
            want_in, want_out = workloads.HEAVY.lengths(20, run.seed)
            assert list(outputs) == list(want_out) and len(inputs) == len(want_in) == 20
        assert not (tmp_path / "datasets" / study.heavy_draw(heavy, runs[2], tmp_path, model, write=False).name).exists()
        draws.wait(runs[2])  # not drawn here: its run writes it itself
    finally:
        draws.close()
    broken = study.HeavyDraws(heavy, runs[:1], tmp_path / "other", str(tmp_path / "no-model"))
    try:
        with pytest.raises(Exception):
            broken.wait(runs[0])
    finally:
        broken.close()
    assert study.HeavyDraws(plan(), plan().order(), tmp_path, model).pool is None  # a random load: nothing to draw


def test_a_heavy_load_takes_its_rate_from_a_capacity_measured_on_the_same_dataset(tmp_path):
    """On the heavy-tailed load a capacity in tokens/s becomes requests/s through the load's mean
    output length (its distribution's, not one draw's), and only from a study of that dataset: the
    same tokens/s on another load would be another rate. An arm's ``rate_share`` puts it at its own
    share of that capacity (an SLO sweep's rates, past the capacity too), and each run gets the
    prompts that give it its minimum of arrivals at its own rate."""
    from harness.provenance import machine_boot_id
    from harness.workloads import HEAVY

    heavy = json.loads((ROOT / "experiments" / "slo_heavy_steady.json").read_text())
    heavy["load"]["rate_from"] = {"results_folder": "cap", "token_budget": 2048, "share": 0.8}
    heavy["load"]["min_arrival_s"] = 60
    heavy["arms"] = [{"token_budget": 2048, "strategy": "default"},  # the load's rate
                     {"token_budget": 2048, "strategy": "sjf-ontime"},
                     {"token_budget": 2048, "strategy": "sjf-ontime", "rate_share": 1.1}]  # past the capacity
    steady = study_plan.StudyPlan.from_dict(heavy)
    capacity = json.loads((ROOT / "experiments" / "capacity_8b_heavy.json").read_text())
    source = tmp_path / "cap"
    source.mkdir()
    tputs = []
    for path in sorted((ROOT / "results" / "task2_api-4").glob("mnbt-2048_rate-inf_run-*.json")):
        run = json.loads(path.read_text())
        run["meta"]["machine_boot_id"] = machine_boot_id()
        (source / path.name).write_text(json.dumps(run))
        if run["config"].get("client_processes", 1) == 1 and not run["frontend"]["lagged"]:
            tputs.append(run["summary"]["output_throughput_tok_s"])
    for dataset, fails in (("random", True), ("heavy", False)):
        capacity["load"] = {"num_prompts": 1000, "rate": None, "dataset": dataset} | (
            {"input_len": 1024, "output_len": 256} if dataset == "random" else {})
        record = study_plan.study_record(study_plan.StudyPlan.from_dict(capacity))
        (source / study_plan.STUDY_FILE).write_text(json.dumps(record))
        if fails:
            with pytest.raises(HarnessError, match="measured the random dataset, this study's load is heavy"):
                study_plan.resolve_rate(steady, tmp_path)
    resolved = study_plan.resolve_rate(steady, tmp_path)
    mean_out = HEAVY.mean_output_len()
    assert 160 < mean_out < 190  # the docstring's "about 165" output tokens, clipped and rounded
    per_share = statistics.median(tputs) / mean_out
    want, past = round(0.8 * per_share, 1), round(1.1 * per_share, 1)
    assert resolved.load.rate == want and resolved.arms[-1].rate == past and resolved.arms[-1].rate_share == 1.1
    assert {(r.rate, r.num_prompts) for r in resolved.order()} == {  # each run its own 60 s, at least 600
        (rate, max(600, math.ceil(rate * 60 / 100) * 100)) for rate in (want, past)}
    assert sorted({(r.arm.strategy, r.rate) for r in resolved.order()}) == [
        ("default", want), ("sjf-ontime", want), ("sjf-ontime", past)]
    slow = replace(steady, load=replace(steady.load, rate_from=replace(steady.load.rate_from, share=1e-4)))
    with pytest.raises(HarnessError, match="rounds to 0 req/s"):
        study_plan.resolve_rate(slow, tmp_path)
    # A begun study keeps the rates its study file holds, the arms' too, on any machine.
    folder = tmp_path / steady.results_folder
    folder.mkdir()
    (folder / study_plan.STUDY_FILE).write_text(json.dumps(study_plan.study_record(resolved)))
    for path in source.glob("*_run-*.json"):
        path.unlink()
    assert study_plan.resolve_rate(steady, tmp_path) == resolved
    assert study_plan.StudyPlan.from_dict(resolved.to_dict()) == resolved  # as study.json holds it


def test_a_dry_run_of_an_unresolved_rate_says_what_it_waits_for(tmp_path, capfd):
    plan_path = ROOT / "experiments" / "task2_near_saturation_high.json"
    assert study.main(["run", str(plan_path), "--results", str(tmp_path), "--dry-run"]) == 0
    out = capfd.readouterr().out
    assert "holds no capacity run from this machine" in out and "mnbt-8192" in out
    assert study.main(["run", str(plan_path), "--results", str(tmp_path)]) == 1
    assert not (tmp_path / study_plan.StudyPlan.read(plan_path).results_folder).exists()
