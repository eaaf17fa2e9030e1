"""The study file: ``results/<folder>/study.json``, what a results folder holds, as one typed record
(``Study``) that the loader (``harness/results.py``) and the report read instead of the folder's name.

Two layouts, one type. A study run by ``harness/study.py`` writes its plan, run order and hosts
(``{"schema_version", "plan", "order", "hosts"}``); its record is derived from the plan. Every other
folder (a sweep of ``harness/sweep.py``, a replay of ``harness/sched_sim.py``) holds the record itself
(``{"schema_version", "study": {...}}``), derived from its run files' ``config`` and ``meta`` blocks
(``from_runs``), with the question and the roles written by whoever made the folder.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from harness.provenance import read_json, record_paths
from harness.run_config import RunConfig

STUDY_FILE = "study.json"
SCHEMA_VERSION = 1
MIGRATION = ".venv/bin/python -m harness.migrate_studies"
KINDS = ("study", "sweep", "replay")
TASKS = ("task2", "task3", "slo", "replay", "calibration")  # the report's groups; a replay's is "replay"; a
# calibration's runs (the simulator's step log) belong to no task's tables
ROLES = {  # what the report reads a folder as, beyond its task
    "handout-setting": "the handout's own runs with its flags (one API server): its tables",
    "frontend-study": "one setting of the front-end study: API servers and client processes at budget 2048",
    "frontend-gated": "one client process against a split load started together: does the client limit?",
    "replay-validation": "replays of the loads of the GPU folders in replays_of, set against their runs",
    "budget-replays": "replays of the budget sweep in replays_of, at budgets the step model was not fitted to",
    "screen": "the simulated SLO screen: a plan for GPU runs, not a result",
    "wait-bound-screen": "the simulated screen of Strategy F's wait bound in steady state: a plan for GPU runs, not a result",
}


class StudyFileError(ValueError):
    """A results folder without a study file, or with one that does not read."""


def _rate_order(rate: str) -> float:
    return float("inf") if rate == "inf" else float(rate)


PLAN_ONLY = ("planned_runs", "capacity_from", "capacity_rate")  # what only a study plan's record holds


@dataclass(frozen=True)
class Study:
    """What one results folder holds: how it was made (``kind``), the report group it belongs to
    (``task``), what it compared (``question``), how it was served, its grid as the run files give
    it, the roles the report reads it in (``ROLES``), the GPU folders a replay replays, and the
    machines (boot ids) that ran it."""

    kind: str
    task: str
    question: str
    api_servers: int | None  # None: simulated
    client_processes: tuple[int, ...]
    strategies: tuple[str, ...]
    budgets: tuple[int, ...]
    workloads: tuple[str, ...]
    rates: tuple[str, ...]
    runs_per_point: tuple[int, ...]  # every count of runs a point has
    roles: tuple[str, ...] = ()
    replays_of: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    planned_runs: int | None = None  # a study plan's runs, done or not (None: a sweep's or replays')
    capacity_from: str | None = None  # the folder whose rate-inf throughput set a plan's rates (load.rate_from)
    capacity_rate: float | None = None  # that throughput in req/s (share 1), as the plan resolved it

    def __post_init__(self) -> None:
        bad = ([f"kind {self.kind!r} not in {KINDS}"] * (self.kind not in KINDS)
               + [f"task {self.task!r} not in {TASKS}"] * (self.task not in TASKS)
               + [f"role {r!r} not in {sorted(ROLES)}" for r in self.roles if r not in ROLES])
        if bad:
            raise StudyFileError("; ".join(bad))

    def to_dict(self) -> dict[str, Any]:
        """As a study file holds it; a sweep's or replays' (no plan) writes none of ``PLAN_ONLY``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()
                if not (k in PLAN_ONLY and v is None)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Study:
        names = {f.name for f in fields(cls)}
        if set(data) - names:
            raise StudyFileError(f"unknown keys {sorted(set(data) - names)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    @classmethod
    def from_plan(cls, record: dict[str, Any]) -> Study:
        """The record of a study file written by ``harness/study.py`` (plan, order, hosts)."""
        from harness.study_plan import StudyPlan  # no vLLM; lazy, as study_plan.py imports this module

        plan = StudyPlan.from_dict(record["plan"])
        runs = Counter((run["strategy"] if "strategy" in run else None, run["token_budget"])
                       for run in record.get("order", []))
        return cls("study", plan.task, plan.question, plan.server.api_servers, (1,),
                   tuple(dict.fromkeys(arm.strategy or plan.server.scheduler for arm in plan.arms)),
                   tuple(sorted({arm.token_budget for arm in plan.arms})), (plan.load.workload,),
                   tuple(dict.fromkeys(run.rate_label for run in plan.order())), tuple(sorted(set(runs.values()))),
                   hosts=tuple(dict.fromkeys(h["machine_boot_id"] for h in record.get("hosts", [])
                                             if h.get("machine_boot_id"))),
                   planned_runs=len(plan.order()),
                   capacity_from=plan.load.rate_from.results_folder if plan.load.rate_from else None,
                   capacity_rate=(round(plan.load.rate / plan.load.rate_from.share, 1)
                                  if plan.load.rate_from and plan.load.rate is not None else None))

    @classmethod
    def from_runs(cls, folder: Path, question: str, roles: tuple[str, ...] = (),
                  replays_of: tuple[str, ...] = ()) -> Study:
        """The record of a folder of runs (a sweep's or replays'), its grid and hosts read from the
        run files' ``config`` and ``meta``; the question and roles are given."""
        blocks = [read_json(p) for p in record_paths(folder) if p.name != STUDY_FILE]
        runs = [(RunConfig.from_record(b["config"]), b.get("meta") or {}) for b in blocks if "config" in b and "summary" in b]
        if not runs:
            raise StudyFileError(f"{folder}: no run files")
        simulated = {cfg.simulated for cfg, _ in runs}
        tasks = {cfg.task for cfg, _ in runs}
        servers = {cfg.api_server_count for cfg, _ in runs}
        if len(simulated) > 1 or (simulated == {False} and (len(tasks) > 1 or len(servers) > 1)):
            raise StudyFileError(f"{folder}: runs of several kinds, tasks or API-server counts "
                                 f"({sorted(map(str, tasks))}, {sorted(servers)}): one folder per setting")
        replay = simulated == {True}

        points = Counter((cfg.scheduler, cfg.workload, cfg.rate_label, cfg.budget_in_force, cfg.client_processes)
                         for cfg, _ in runs)
        return cls("replay" if replay else "sweep", "replay" if replay else tasks.pop(), question,
                   None if replay else servers.pop(),
                   () if replay else tuple(sorted({cfg.client_processes for cfg, _ in runs})),
                   tuple(sorted({cfg.scheduler for cfg, _ in runs})), tuple(sorted({c.budget_in_force for c, _ in runs})),
                   tuple(sorted({cfg.workload for cfg, _ in runs})),
                   tuple(sorted({cfg.rate_label for cfg, _ in runs}, key=_rate_order)),
                   tuple(sorted(set(points.values()))), tuple(roles), tuple(replays_of),
                   tuple(dict.fromkeys(m["machine_boot_id"] for _, m in runs if m.get("machine_boot_id"))))


def read_study(folder: Path) -> Study:
    """The folder's study file as a ``Study``; a folder without one fails, naming the folder and
    the migration that writes one."""
    path = folder / STUDY_FILE
    if not path.is_file():
        raise StudyFileError(f"{folder} holds runs but no {STUDY_FILE}: every results folder says what it holds "
                             f"there. For a folder made before study files, run `{MIGRATION}`; for a new "
                             "one, write it with harness.study_file.write_study (sweep.py and study.py do)")
    try:
        data = json.loads(path.read_text())
        return Study.from_plan(data) if "plan" in data else Study.from_dict(data["study"])
    except (KeyError, TypeError, ValueError) as err:
        raise StudyFileError(f"{path}: {err}") from err


def write_study(folder: Path, study: Study) -> Path:
    """Write a sweep's or replay's study file once; a folder that has one keeps it."""
    path = folder / STUDY_FILE
    if path.exists():
        raise StudyFileError(f"{path} exists: a study file is written once")
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "study": study.to_dict()}, indent=1) + "\n")
    return path
