"""A study as data: the plan of an interleaved study (``experiments/*.json``: ``StudyPlan`` with its
``ServerSpec``, ``LoadSpec`` and ``Arm`` s), the run order it makes, and the results folder's
``study.json`` (the plan, the order, the hosts). No vLLM here: the plan is read, checked and
dry-run anywhere; ``harness/study.py`` runs it.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from harness.lab_metrics import WARMUP_FRACTION
from harness.offline_model import resolve_model
from harness.provenance import gpu_info, machine_boot_id, write_json_atomic
from harness.run_config import cli_flags, rate_label
from harness.run_record import result_name
from harness.server import HarnessError, server_command
from harness.strategies import check_settings, resolve_strategy, runtime_class, strategy
from harness.study_file import STUDY_FILE

ROOT = Path(__file__).resolve().parent.parent
STUDY_SCHEMA = 1
MAX_RATE_SHARE = 1.5  # an arm's rate_share: past the capacity too, where an SLO sweep needs overload


# ---- The plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSpec:
    """The one server of a study: ``vllm serve`` flags as values, built into a command at start."""

    model: str  # a folder under the project (models/qwen3-0.6b) or a Hub id
    dummy_weights: bool
    max_num_batched_tokens: int  # sizes the model runner; the largest budget of the study
    max_num_seqs: int
    gpu_memory_utilization: float
    api_servers: int
    scheduler: str  # a registry name (my_scheduler.py --list) whose class records steps
    max_model_len: int | None = None  # None: the model's
    dtype: str | None = None  # None: the model's (a CPU server needs float32)
    enforce_eager: bool = False  # no CUDA graphs or compilation (a CPU server)
    step_log: bool = False  # the engine logs every step (logs/steps.csv): the replay simulator's calibration

    def model_path(self) -> str:
        local = ROOT / self.model
        return resolve_model(str(local) if local.is_dir() else self.model)

    def params(self) -> dict[str, Any]:
        """The ``vllm serve`` flags this spec sets, by name (what results call ``server_params``)."""
        params: dict[str, Any] = {"max_num_batched_tokens": self.max_num_batched_tokens,
                                  "max_num_seqs": self.max_num_seqs,
                                  "gpu_memory_utilization": self.gpu_memory_utilization}
        optional = {"max_model_len": self.max_model_len, "dtype": self.dtype,
                    "enforce_eager": self.enforce_eager or None}
        return params | {name: value for name, value in optional.items() if value is not None}

    def command(self, model: str, port: int) -> list[str]:
        return server_command(model, port, self.dummy_weights, self.scheduler_cls, self.api_servers, {},
                              cli_flags(self.params()))

    @property
    def scheduler_cls(self) -> str:
        return resolve_strategy(self.scheduler)


@dataclass(frozen=True)
class RateFrom:
    """A rate that depends on the machine: ``share`` x the capacity that another study measured in
    ``results_folder`` on the machine running this one (vLLM's policy at ``token_budget``, rate
    inf; ``results.capacity_tok_s``), in requests/s of the load's mean output length
    (``LoadSpec.mean_output_len``). That study measured the same dataset (its study file says so).
    Resolved when the study runs (``resolve_rate``), so a near-saturation rate comes from the same
    sitting."""

    results_folder: str
    token_budget: int
    share: float


@dataclass(frozen=True)
class LoadSpec:
    """``vllm bench serve``'s load and arrivals; ``rate`` None means all at once (inf).

    ``dataset`` "random" is vLLM's random dataset (``input_len``, ``output_len``, ``range_ratio``);
    "heavy" is the heavy-tailed load of ``harness/workloads.py`` (log-normal prompt and output
    lengths; no lengths here), drawn afresh for every run from the run's seed, so runs differ in
    their workload draw as well as their arrivals."""

    num_prompts: int
    rate: float | None
    input_len: int | None = None
    output_len: int | None = None
    dataset: str = "random"
    range_ratio: float = 0.0  # input lengths uniform in [1-R, 1+R] x input_len
    burstiness: float = 1.0  # 1: Poisson arrivals
    rate_from: RateFrom | None = None  # the rate, from a capacity measured on this machine
    # With rate_from: a run's prompts are raised (in hundreds) from num_prompts to give at least this
    # many seconds of arrivals at its resolved rate, since a faster machine gets a higher rate.
    min_arrival_s: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rate_from, dict):
            names = {f.name for f in fields(RateFrom)}
            if set(self.rate_from) != names:
                raise ValueError(f"load.rate_from: expected the keys {sorted(names)}, got {sorted(self.rate_from)}")
            object.__setattr__(self, "rate_from", RateFrom(**self.rate_from))

    @property
    def workload(self) -> str:
        """The load's name in results: Task 2's ``random-1024in-256out`` and its variants, or
        ``heavy`` (as the sweeps name it)."""
        name = "heavy" if self.dataset == "heavy" else f"random-{self.input_len}in-{self.output_len}out"
        if self.range_ratio:
            name += f"-range{self.range_ratio:g}"
        return name + (f"-burst{self.burstiness:g}" if self.burstiness != 1 else "")

    def check(self) -> None:
        lengths = self.input_len is not None and self.output_len is not None
        if self.dataset == "random" and not lengths:
            raise ValueError("load: the random dataset needs input_len and output_len")
        if self.dataset == "heavy" and (self.input_len is not None or self.output_len is not None or self.range_ratio):
            raise ValueError("load: the heavy dataset draws its own lengths; give no input_len, output_len or "
                             "range_ratio")
        if self.dataset not in ("random", "heavy"):
            raise ValueError(f"load.dataset {self.dataset!r}: random or heavy")
        if self.rate_from is not None and not 0 < self.rate_from.share <= 1:
            raise ValueError(f"load.rate_from: a share in (0, 1], got {self.rate_from.share!r}")
        if self.min_arrival_s is not None and (self.rate_from is None or self.min_arrival_s <= 0):
            raise ValueError("load.min_arrival_s: a positive number of seconds, with load.rate_from (at a "
                             "fixed rate, num_prompts says it)")

    def prompts_at(self, rate: float | None) -> int:
        """The prompts of a run at ``rate``: ``num_prompts``, raised in hundreds to ``min_arrival_s``
        of arrivals where that is set (each run its own: a sweep's slower rates need no more)."""
        if self.min_arrival_s is None or rate is None:
            return self.num_prompts
        return max(self.num_prompts, math.ceil(rate * self.min_arrival_s / 100) * 100)

    def mean_output_len(self) -> float:
        """A request's expected output tokens: ``output_len``, or the heavy load's distribution mean;
        what turns a capacity in tokens/s into requests/s of this load."""
        if self.dataset == "heavy":
            from harness.workloads import HEAVY  # numpy: only where a plan needs it

            return HEAVY.mean_output_len()
        assert self.output_len is not None  # check(): a random load has one
        return float(self.output_len)

    def params(self) -> dict[str, Any]:
        """The ``vllm bench serve`` flags that shape the load, by name (``bench_params``); a heavy
        load's file (``--dataset-path``) is the run's own draw (``heavy_draw``)."""
        if self.dataset == "heavy":
            params: dict[str, Any] = {"dataset_name": "custom", "custom_output_len": -1, "skip_chat_template": True,
                                      "disable_shuffle": True, "ignore_eos": True}
        else:
            params = {"dataset_name": "random", "random_input_len": self.input_len,
                      "random_output_len": self.output_len, "ignore_eos": True}
        if self.range_ratio:
            params["random_range_ratio"] = {"input": self.range_ratio, "output": 0.0}
        if self.burstiness != 1:
            params["burstiness"] = self.burstiness
        return params


@dataclass(frozen=True)
class Arm:
    """One configuration of the comparison: the scheduler's per-step token budget and, when the
    strategies are compared, the strategy (a registry name; None: the server's scheduler) and its
    settings (``strategy_settings``, e.g. ``{"wait_bound_s": 5}``; the others keep their defaults),
    and when rates are, the Poisson rate in req/s (None: the load's; a study mixing rate inf with
    others sets the load's rate to null and gives the others here), or ``rate_share``: this share
    of the capacity that ``load.rate_from`` names, resolved to ``rate`` when the study starts (a
    sweep of rates around a capacity measured in the same sitting; the study file keeps both)."""

    token_budget: int
    strategy: str | None = None
    rate: float | None = None
    strategy_settings: tuple[tuple[str, float], ...] = ()  # a plan's JSON object, kept hashable
    rate_share: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.strategy_settings, dict):
            object.__setattr__(self, "strategy_settings", tuple(sorted(self.strategy_settings.items())))

    @property
    def settings(self) -> dict[str, float]:
        return dict(self.strategy_settings)

    @property
    def tag(self) -> str:
        """Names the arm's files: strategy, settings, budget (``sjf-ontime-wait-bound-s5_mnbt-2048``)."""
        settings = "".join(f"-{key.replace('_', '-')}{value:g}" for key, value in self.strategy_settings)
        return "_".join(filter(None, [f"{self.strategy}{settings}" if self.strategy else "",
                                      f"mnbt-{self.token_budget}"]))

    def to_dict(self) -> dict[str, Any]:
        """The arm as plans and study files hold it (no strategy or settings key when not set)."""
        return {k: v for k, v in {**asdict(self), "strategy_settings": self.settings or None}.items() if v is not None}


@dataclass(frozen=True)
class PlannedRun:
    """Run ``index`` (1-based) of the study's order: its round, arm, repetition, seed, rate and
    prompts (``LoadSpec.prompts_at``: a run at a faster rate may need more of them)."""

    index: int
    round: int
    arm: Arm
    repeat: int
    seed: int
    rate: float | None  # req/s; None: all at once (inf)
    num_prompts: int

    @property
    def rate_label(self) -> str:
        return rate_label(self.rate)

    @property
    def file_name(self) -> str:
        return result_name(self.arm.tag, "", self.rate_label, self.repeat)


@dataclass(frozen=True)
class StudyPlan:
    """A study as data (``experiments/*.json``): read, checked, and turned into a run order."""

    name: str
    task: str
    question: str
    results_folder: str
    server: ServerSpec
    load: LoadSpec
    arms: tuple[Arm, ...]
    runs_per_arm: int
    seed: int
    warmup_fraction: float = WARMUP_FRACTION
    timeout_s: float | None = 30.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyPlan:
        """The plan in ``data``; a missing, unknown or bad entry fails with its name."""
        def part(kind: type, value: Any, where: str) -> Any:
            names = {f.name for f in fields(kind)}
            if not isinstance(value, dict) or set(value) - names:
                raise ValueError(f"{where}: expected an object with keys among {sorted(names)}, got {value!r}")
            try:
                return kind(**value)
            except TypeError as err:
                raise ValueError(f"{where}: {err}") from None

        arms = data.get("arms")
        if not isinstance(arms, list):
            raise ValueError(f"arms: expected a list of objects, got {arms!r}")
        plan = part(cls, {**data, "server": part(ServerSpec, data.get("server"), "server"),
                          "load": part(LoadSpec, data.get("load"), "load"),
                          "arms": tuple(part(Arm, a, f"arms[{i}]") for i, a in enumerate(arms))}, "plan")
        plan.check()
        return plan

    def to_dict(self) -> dict[str, Any]:
        """The plan as its JSON file holds it."""
        return json.loads(json.dumps({**asdict(self), "arms": [arm.to_dict() for arm in self.arms]}))

    @classmethod
    def read(cls, path: Path) -> StudyPlan:
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            raise HarnessError(f"study plan {path}: {err}") from err

    def check(self) -> None:
        if not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError("arms: expected at least one, each (token_budget, strategy, rate) once")
        for arm in self.arms:
            if not isinstance(arm.token_budget, int) or not 1 <= arm.token_budget <= self.server.max_num_batched_tokens:
                raise ValueError(f"token budget {arm.token_budget!r} is not an integer in [1, "
                                 f"{self.server.max_num_batched_tokens}] (server.max_num_batched_tokens)")
            if arm.strategy is not None:
                runtime_class(arm.strategy)  # a typo or a strategy without a class fails here
                check_settings(arm.strategy, arm.settings)  # a setting it does not read fails too
            elif arm.strategy_settings:
                raise ValueError(f"arm {arm.to_dict()}: strategy_settings need a strategy")
            if arm.rate is not None and not (isinstance(arm.rate, (int, float)) and arm.rate > 0):
                raise ValueError(f"arm rate {arm.rate!r}: a number > 0 (req/s), or no rate for the load's")
            if arm.rate_share is not None and self.load.rate_from is None:
                raise ValueError(f"arm rate_share {arm.rate_share!r}: a share of the capacity that load.rate_from "
                                 "names, and the plan has no load.rate_from")
            if arm.rate_share is not None and not 0 < arm.rate_share <= MAX_RATE_SHARE:
                raise ValueError(f"arm rate_share {arm.rate_share!r}: a share in (0, {MAX_RATE_SHARE:g}]")
        if not strategy(self.server.scheduler).class_name:
            raise ValueError(f"server.scheduler {self.server.scheduler!r} is vLLM's own class, which cannot "
                             "take a budget or strategy at run time; use kv-recorder (vLLM's policy with "
                             "step accounting)")
        if self.runs_per_arm < 1 or self.load.num_prompts < 1 or self.server.api_servers < 1:
            raise ValueError("runs_per_arm, load.num_prompts and server.api_servers must be at least 1")
        self.load.check()
        if self.load.rate is not None and not self.load.rate > 0:
            raise ValueError(f"load.rate {self.load.rate!r}: a number > 0, or null for all at once")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError("warmup_fraction must be in [0, 1)")

    def order(self) -> list[PlannedRun]:
        """Rounds of every arm once: an odd round is a shuffle (seeded by ``seed`` and the round),
        the round after it the same order reversed, so that in each pair of rounds every arm's mean
        position is the same and a linear drift over time weighs on every arm alike."""
        rounds: list[list[Arm]] = []
        for r in range(self.runs_per_arm):
            if r % 2:
                rounds.append(rounds[-1][::-1])
            else:
                arms = list(self.arms)
                random.Random(self.seed * 1000 + r).shuffle(arms)
                rounds.append(arms)
        if self.load.rate_from is not None and (self.load.rate is None or any(
                arm.rate_share is not None and arm.rate is None for arm in self.arms)):
            raise HarnessError("load.rate_from is not resolved yet (resolve_rate): the order's rates and file "
                               "names depend on it")
        runs, index = [], 0
        for r, arms in enumerate(rounds, 1):
            for arm in arms:
                index += 1
                rate = self.load.rate if arm.rate is None else arm.rate
                runs.append(PlannedRun(index, r, arm, r, self.seed + index, rate, self.load.prompts_at(rate)))
        return runs


def resolve_rate(plan: StudyPlan, results: Path) -> StudyPlan:
    """The plan with its load's rate taken from ``load.rate_from`` on this machine; the plan as it is
    without one, or once resolved (a study file holds the rate its runs used). Fails when the folder
    holds no capacity run from this machine: that study runs first, in the same sitting. With
    ``load.min_arrival_s``, each run's prompts grow to that many seconds at its rate (``order``). A
    study already begun keeps the rates and prompts its study file records."""
    source, load = plan.load.rate_from, plan.load
    if source is None or load.rate is not None:
        return plan
    held = results / plan.results_folder / STUDY_FILE
    if held.is_file():  # the study began: its runs keep the rates (and prompts) it resolved to, on any machine
        recorded_plan = json.loads(held.read_text()).get("plan", {})
        recorded = recorded_plan.get("load", {})
        if recorded.get("rate") is not None:
            held_rates = dict(enumerate(arm.get("rate") for arm in recorded_plan.get("arms", [])))
            arms = tuple(replace(arm, rate=held_rates.get(i)) if arm.rate_share is not None else arm
                         for i, arm in enumerate(plan.arms))  # a plan that differs is refused by open_study
            return replace(plan, load=replace(load, rate=float(recorded["rate"]),
                                              num_prompts=int(recorded.get("num_prompts", load.num_prompts))),
                           arms=arms)
    from harness.results import capacity_tok_s  # pandas: only where a plan needs it

    folder = results / source.results_folder
    capacity = capacity_tok_s(folder, source.token_budget, machine_boot_id(), kept_up_only=True)
    if capacity is None:
        raise HarnessError(f"load.rate_from: {folder} holds no capacity run from this machine (vLLM's policy, "
                           f"budget {source.token_budget}, rate inf, one client, its front end keeping up); run the "
                           "study that measures it first, on this machine")
    measured = source_dataset(folder)
    if measured not in (None, load.dataset):
        raise HarnessError(f"load.rate_from: {folder} measured the {measured} dataset, this study's load is "
                           f"{load.dataset}: a capacity in tokens/s holds for the load it was measured on")
    per_share = capacity / load.mean_output_len()  # req/s at share 1
    smallest = min([source.share] + [arm.rate_share for arm in plan.arms if arm.rate_share is not None])
    if round(smallest * per_share, 1) <= 0:
        raise HarnessError(f"load.rate_from: the capacity in {folder} ({capacity:.1f} tok/s) gives a rate that rounds "
                           "to 0 req/s at the plan's smallest share; look at that folder's runs before this study")
    rate = round(source.share * per_share, 1)
    arms = tuple(replace(arm, rate=round(arm.rate_share * per_share, 1)) if arm.rate_share is not None else arm
                 for arm in plan.arms)
    return replace(plan, load=replace(load, rate=rate), arms=arms)


def source_dataset(folder: Path) -> str | None:
    """The dataset of the load that the study in ``folder`` ran (its study file's plan); None for a
    folder that no study plan made (a sweep's), whose load is not recorded as a plan."""
    path = folder / STUDY_FILE
    plan = json.loads(path.read_text()).get("plan") if path.is_file() else None
    return plan["load"].get("dataset", "random") if plan else None


# ---- The results folder -------------------------------------------------------------------------
def study_record(plan: StudyPlan) -> dict[str, Any]:
    """``study.json``'s content: the plan, the run order (what was compared, on which load, in
    which order) and, filled by each call, the hosts that ran it."""
    return {"schema_version": STUDY_SCHEMA, "plan": plan.to_dict(),
            "order": [{"index": r.index, "round": r.round, "file": r.file_name, **r.arm.to_dict(),
                       "seed": r.seed} for r in plan.order()],
            "hosts": []}


def open_study(plan: StudyPlan, folder: Path) -> dict[str, Any]:
    """The folder's study file (new, or grown by more runs per arm); a folder holding another
    plan is refused, so runs of two studies never mix. More runs per arm extend the order
    (earlier rounds do not change), so a study can grow without losing its runs."""
    path = folder / STUDY_FILE
    fresh = study_record(plan)
    if not path.exists():
        return fresh
    held = json.loads(path.read_text())
    try:  # read through today's plan type, so a setting added since (with its default) is no difference
        held_plan = StudyPlan.from_dict(held.get("plan", {})).to_dict()
    except ValueError:
        held_plan = held.get("plan", {})
    same = ({**held_plan, "runs_per_arm": None} == {**fresh["plan"], "runs_per_arm": None}
            and held.get("order") == fresh["order"][:len(held.get("order", []))])
    if not same:
        raise HarnessError(f"{folder} holds another study ({path}: plan {held.get('plan', {}).get('name')!r} "
                           "differs from this one beyond its runs per arm); give another --results folder "
                           "or restore that plan")
    return {**fresh, "hosts": held.get("hosts", [])}


def note_host(record: dict[str, Any], folder: Path, calls_runs: list[str]) -> None:
    """Add this call (its machine and the runs it did) to the study file."""
    record["hosts"].append({"machine_boot_id": machine_boot_id(), "gpu": gpu_info(),
                            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": calls_runs})
    write_json_atomic(folder / STUDY_FILE, record, indent=1)


def class_in_force(plan: StudyPlan, arm: Arm) -> str:
    """The scheduler class a run of ``arm`` must run under (``my_scheduler.Class``)."""
    return runtime_class(arm.strategy) if arm.strategy is not None else plan.server.scheduler_cls
