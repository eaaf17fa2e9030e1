"""The strategy registry, without vLLM: every strategy's short name, handout letter, label, the
class ``--scheduler-cls`` loads, the settings it reads, and the retired strategies' labels.

The sweeps, the harness, the tables and the report read names, letters and labels from here, so a
strategy is added or renamed in one place, and the analysis (``plot_results.py``) runs on a
machine without vLLM or torch. The scheduler classes themselves live in ``my_scheduler.py`` (they
derive from vLLM's scheduler), which binds each entry here to its class by ``class_name``
(``my_scheduler.SCHEDULER_CLASSES``) and re-exports these names.

    python -m harness.strategies --list           # as python my_scheduler.py --list
    python -m harness.strategies --resolve sjf    # my_scheduler.SJFScheduler
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

DEFAULT_TTFT_SLO_MS = 500.0
DEFAULT_TTFT_MARGIN_MS = 100.0
# Every strategy setting, by its key in ``vllm serve --additional-config`` (and the class attribute
# of the same name that overrides it, e.g. in a test), with its default. Passing them as vLLM's own
# config, not as environment variables, puts them in the recorded server command.
SETTING_DEFAULTS: dict[str, float] = {
    "aging_tokens_per_s": 0.0, "ttft_slo_ms": DEFAULT_TTFT_SLO_MS, "ttft_margin_ms": DEFAULT_TTFT_MARGIN_MS,
    "wait_bound_s": 0.0,  # Strategy F's bound on any request's wait (0: none)
}


@dataclass(frozen=True)
class Strategy:
    """One entry of the registry: every other file (harness, sweep, tables, report) reads names,
    letters and labels from here, so a strategy is added or renamed in one place."""

    name: str  # the short name sweeps and result files use
    letter: str  # the handout's letter ("" for vLLM's default and the Task 1 recorder)
    class_name: str  # its class in my_scheduler.py ("": vLLM's own scheduler)
    label: str  # how tables and figures name it
    settings: tuple[str, ...] = ()  # the --additional-config keys it reads

    @property
    def scheduler_cls(self) -> str:
        """The ``--scheduler-cls`` value (``""``: vLLM's default, no flag)."""
        return f"my_scheduler.{self.class_name}" if self.class_name else ""


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("default", "", "", "vLLM V1 default"),
    Strategy("prefill-first", "A", "StepExclusivePrefillFirstScheduler", "Strategy A: prefill-first"),
    Strategy("sjf", "B1", "SJFScheduler", "Strategy B1: SJF", ("aging_tokens_per_s",)),
    Strategy("sjf-ontime", "F", "OnTimeSJFScheduler", "Strategy F: SJF, late requests last",
             ("aging_tokens_per_s", "ttft_slo_ms", "ttft_margin_ms", "wait_bound_s")),
    Strategy("kv-recorder", "", "KVPeakRecorder", "vLLM V1 default with step accounting (Task 1)"),
)}
# Strategies retired with their code, by the name their committed results carry, with the label
# readers of results/ give them; no sweep or harness accepts them (``strategy`` refuses them). In
# the simulated SLO capacity screen (405 replays, results/replay_screen_api-4/, where their
# replays stay as the evidence) C and E reached at most 0.98x the default's SLO capacity on every
# load, E's replays were identical to A's, and D (1.02-1.12x) was beaten by F (1.10-1.22x) on
# every load.
RETIRED: dict[str, tuple[str, str]] = {  # name -> (letter, label)
    "stall-bounded": ("C", "Strategy C: stall-bounded prefill-first (retired)"),
    "deadline": ("D", "Strategy D: deadline-aware (retired)"),
    "paced": ("E", "Strategy E: TPOT-paced prefill-first (retired)"),
}


def check_setting(key: str, value: Any) -> float:
    """A strategy setting as a number >= 0; anything else fails loudly, naming the key, before
    the engine serves (a typo in a sweep must not run a study with the default silently)."""
    if key not in SETTING_DEFAULTS:
        raise ValueError(f"unknown strategy setting {key!r}; known: {', '.join(SETTING_DEFAULTS)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ValueError(f"strategy setting {key} must be a number >= 0, got {value!r}")
    return float(value)


def strategy(name: str) -> Strategy:
    """The registry entry of a short name or a ``my_scheduler.Class`` path.

    Raises ``ValueError`` naming the choices otherwise (a retired strategy's name too), so a typo
    fails here, before a server spends a minute starting.
    """
    for entry in STRATEGIES.values():
        if name in (entry.name, entry.scheduler_cls or entry.name):
            return entry
    retired = f" ({RETIRED[name][1]})" if name in RETIRED else ""
    raise ValueError(f"unknown scheduler {name!r}{retired}; choose one of: "
                     + ", ".join(list(STRATEGIES) + [e.scheduler_cls for e in STRATEGIES.values() if e.class_name]))


def resolve_strategy(name: str) -> str:
    """The ``--scheduler-cls`` value of a short name or class path (``""``: vLLM's default)."""
    return strategy(name).scheduler_cls


# vLLM's own policy has no class of ours; a server switching strategy at run time (a study's
# RuntimeControl) becomes the class that plans exactly as it does, with step accounting.
RUNTIME_STAND_IN = {"default": "kv-recorder"}


def runtime_class(name: str) -> str:
    """The class (``my_scheduler.Class``) a running server becomes when a study switches it to
    strategy ``name`` at run time: the strategy's own, or its stand-in for vLLM's policy."""
    entry = strategy(RUNTIME_STAND_IN.get(name, name))
    if not entry.class_name:
        raise ValueError(f"strategy {name!r} has no class a running server can switch to")
    return entry.scheduler_cls


def check_settings(name: str, settings: dict[str, Any]) -> dict[str, float]:
    """``settings`` for strategy ``name``, checked: every key is one the strategy reads and every
    value a number >= 0 (a setting it would ignore is a mistake in the sweep, not a no-op)."""
    entry = strategy(name)
    for key in settings:
        if key not in entry.settings:
            raise ValueError(f"strategy {entry.name!r} takes no setting {key!r}"
                             + (f" (it takes: {', '.join(entry.settings)})" if entry.settings else ""))
    return {key: check_setting(key, value) for key, value in settings.items()}


def main(argv: list[str]) -> int:
    """``--list`` prints the strategies; ``--resolve NAME`` prints the class path or fails."""
    if argv[:1] == ["--list"]:
        for entry in STRATEGIES.values():
            print(f"{entry.name}\t{entry.letter or '-'}\t{entry.scheduler_cls or '(vLLM default)'}"
                  f"\t{entry.label}\t{' '.join(entry.settings)}")
        return 0
    if len(argv) == 2 and argv[0] == "--resolve":
        try:
            print(resolve_strategy(argv[1]))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    print("usage: python my_scheduler.py --list | --resolve NAME", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
