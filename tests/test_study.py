"""Study plans (``harness/study.py``): reading and checking a plan, its run order, and the study
file that keeps two studies apart. The runs themselves: ``tests/test_e2e_study.py``."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness import study
from harness.server import HarnessError

ROOT = Path(__file__).resolve().parent.parent
TASK2 = json.loads((ROOT / "experiments" / "task2_rate16.json").read_text())


def plan(**changes) -> study.StudyPlan:
    data = copy.deepcopy(TASK2)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        (data[section] if name else data).update({name: value} if name else {section: value})
    return study.StudyPlan.from_dict(data)


def test_every_committed_plan_reads_as_written():
    for path in sorted((ROOT / "experiments").glob("*.json")):
        data, read = json.loads(path.read_text()), study.StudyPlan.read(path).to_dict()
        as_written = lambda got, given: {k: as_written(got[k], v) if isinstance(v, dict) else got[k]  # noqa: E731
                                         for k, v in given.items()}  # what the file sets; defaults aside
        assert as_written(read, data) == data


@pytest.mark.parametrize("changes, words", [
    ({"server__max_num_batched_tokens": 4096}, "is not an integer in [1, 4096]"),
    ({"server__scheduler": "default"}, "cannot take a budget or strategy at run time"),
    ({"server__scheduler": "no-such"}, "unknown scheduler"),
    ({"arms": [{"token_budget": 512}, {"token_budget": 512}]}, "each (token_budget, strategy) once"),
    ({"arms": [{"budget": 512}]}, "arms[0]: expected an object with keys among ['strategy', 'token_budget']"),
    ({"arms": [{"token_budget": 512, "strategy": "fastest"}]}, "unknown scheduler 'fastest'"),
    ({"load__rate": 0}, "load.rate 0"),
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
    assert [study.class_in_force(three, arm) for arm in three.arms] == [
        "my_scheduler.KVPeakRecorder", "my_scheduler.StepExclusivePrefillFirstScheduler", "my_scheduler.SJFScheduler"]
    assert study.class_in_force(plan(), plan().arms[0]) == "my_scheduler.KVPeakRecorder"  # the server's
    # The study file holds each run's arm as the plan gives it: no strategy key for a budget-only arm.
    assert study.study_record(three)["order"][0].keys() == {"index", "round", "file", "token_budget", "strategy", "seed"}
    assert "strategy" not in study.study_record(plan())["order"][0]
    assert "strategy" not in study.StudyPlan.from_dict(plan().to_dict()).to_dict()["arms"][0]


def test_a_results_folder_keeps_its_study_and_grows_only_by_runs(tmp_path):
    folder = tmp_path / "task2"
    folder.mkdir()
    record = study.open_study(plan(), folder)
    (folder / study.STUDY_FILE).write_text(json.dumps(record))
    assert len(study.open_study(plan(runs_per_arm=4), folder)["order"]) == 20
    with pytest.raises(HarnessError, match="holds another study"):
        study.open_study(plan(seed=99), folder)
