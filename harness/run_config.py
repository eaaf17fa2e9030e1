"""One run's configuration, the one type every harness writes into a result's ``config`` block
(``serve_bench.py``, a study, the replay of ``sched_sim.py``) and every reader reads back
(``RunConfig``); and the one place where settings become command-line flags (``cli_flags``), at
the last moment, so that no flag string is ever parsed back into values.

No vLLM here: the analysis reads results with it anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.lab_metrics import WARMUP_FRACTION

# Keys that results written before this type carried and that it no longer keeps: the flags as the
# strings a user typed (their values are in server_params and bench_params), the first client's
# command (bench_commands[0]) and notes derived from other keys (token_budget set at run time).
LEGACY_KEYS = frozenset({"server_args", "bench_args", "bench_command", "token_budget_set", "strategy_set"})


def cli_flags(params: Mapping[str, Any]) -> list[str]:
    """Settings as command-line flags: ``{"max_num_batched_tokens": 2048, "ignore_eos": True}`` ->
    ``["--max-num-batched-tokens", "2048", "--ignore-eos"]``. True is a bare flag, False and None no
    flag, an object or a list its JSON (``--random-range-ratio '{"input": 0.9}'``)."""
    flags: list[str] = []
    for name, value in params.items():
        flag = f"--{name.replace('_', '-')}"
        if value is True:
            flags.append(flag)
        elif value is not None and value is not False:
            flags += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return flags


def rate_label(rate: float | None) -> str:
    """How file names and tables name a rate: ``16``, ``39.5``, ``inf`` (None: all at once)."""
    return "inf" if rate is None else f"{rate:g}"


def parse_rate(text: str) -> float | None:
    """A rate as a user gives it (``16``, ``inf``): req/s > 0, or None for inf."""
    if text.strip().lower() in ("inf", "infinity"):
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate {text!r} is not a positive number or inf")
    return rate


def json_object(text: str) -> dict[str, Any]:
    """An argparse type for settings given as values: a JSON object (``--server-params``)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object")
    return value


@dataclass(frozen=True)
class RunConfig:
    """What one serving run (or its replay) was: task and names, the load and its rate, the server
    and client settings as values, the strategy and its settings, the SLO, and where the run sits
    in its study. Commands are kept as text for provenance (what ran) and never read back."""

    task: str  # task2, task3, slo, calibration, sim
    tag: str  # the configuration's name in file names (e.g. mnbt-2048, sjf_mnbt-2048)
    workload: str  # the load's name in tables (random-1024in-256out, fixed, varlen-0.9, heavy, ...)
    rate: float | None  # offered requests/s; None: all at once (inf)
    run: int  # the repetition, from 1
    scheduler: str  # the strategy's registry name (harness/strategies.py)
    server_params: dict[str, Any]  # vllm serve flags, by name, as values
    bench_params: dict[str, Any]  # vllm bench serve flags that shape the load, as values
    scheduler_cls: str | None = None  # the --scheduler-cls in force (None: vLLM's own)
    strategy_settings: dict[str, float] = field(default_factory=dict)  # every setting the strategy read
    api_server_count: int = 1
    client_processes: int = 1
    num_prompts: int | None = None  # None: the client's default
    seed: int | None = None
    warmup_fraction: float = WARMUP_FRACTION  # share of requests, first by start, left out of the summary
    timeout_s: float | None = None  # end-to-end latency above which a request is a timeout
    goodput: str | None = None  # the SLO given to vllm bench serve --goodput, in its notation ("ttft:500 tpot:50")
    token_budget: int | None = None  # set at run time on a study's server; None: the server's flag
    simulated: bool = False  # a replay on a virtual clock, not a GPU run
    study: dict[str, Any] | None = None  # name, index, round and client of a study's run
    server_command: str | None = None
    bench_commands: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    parallel_gpu_slots: str | None = None

    @property
    def rate_label(self) -> str:
        return rate_label(self.rate)

    @property
    def range_ratios(self) -> tuple[float, float]:
        """The random load's spread of (input, output) lengths, as ``--random-range-ratio`` gives it:
        one number for both (older runs) or one per side; (0, 0) for fixed lengths."""
        ratio = self.bench_params.get("random_range_ratio") or 0.0
        if isinstance(ratio, Mapping):
            return float(ratio.get("input", 0.0)), float(ratio.get("output", 0.0))
        return float(ratio), float(ratio)

    @property
    def custom_dataset(self) -> bool:
        """Whether the run sent a file of prompts (``--dataset-name custom``: the heavy-tailed draw)
        rather than a load ``vllm bench serve`` draws from its seed."""
        return self.bench_params.get("dataset_name") == "custom"

    @property
    def budget_flag(self) -> int | None:
        """The server's ``--max-num-batched-tokens``."""
        return self.server_params.get("max_num_batched_tokens")

    @property
    def budget_in_force(self) -> int | None:
        """The scheduler's per-step token budget in this run: set at run time, else the flag."""
        return self.token_budget or self.budget_flag

    @property
    def offered_tok_s(self) -> float | None:
        """Output tokens per second offered: rate x fixed output length (None at rate inf, or when
        the load does not fix the output length)."""
        output_len = self.bench_params.get("random_output_len")
        return None if self.rate is None or not output_len else self.rate * output_len

    @property
    def strategy_variant(self) -> str:
        """The strategy as tables tell it apart: its name, and the settings that differ from their
        defaults (``sjf-ontime (wait_bound_s 5)``), so that two arms of one strategy with other
        settings never share a row."""
        from harness.strategies import SETTING_DEFAULTS

        changed = [f"{key} {value:g}" for key, value in sorted(self.strategy_settings.items())
                   if SETTING_DEFAULTS.get(key) != value]
        return f"{self.scheduler} ({', '.join(changed)})" if changed else self.scheduler

    def to_record(self) -> dict[str, Any]:
        """The ``config`` block of a result file (JSON values; the rate a number, null for inf)."""
        return {**asdict(self), "bench_commands": list(self.bench_commands)}

    @classmethod
    def from_record(cls, block: Mapping[str, Any]) -> RunConfig:
        """A result's ``config`` block as this type: today's, and every earlier one (rates as
        labels, keys since dropped, keys added since). A key this type does not know fails,
        naming it: a writer that adds a setting adds it here."""
        names = {f.name for f in fields(cls)}
        unknown = set(block) - names - LEGACY_KEYS
        if unknown:
            raise ValueError(f"config block: unknown key(s) {sorted(unknown)}; RunConfig has {sorted(names)}")
        values = {k: v for k, v in block.items() if k in names}
        rate = values["rate"]
        values["rate"] = parse_rate(rate) if isinstance(rate, str) else rate
        values["bench_commands"] = tuple(values.get("bench_commands") or
                                         ([block["bench_command"]] if block.get("bench_command") else []))
        for key, empty in (("server_params", {}), ("bench_params", {}), ("strategy_settings", {}),
                           ("api_server_count", 1), ("client_processes", 1), ("simulated", False)):
            if values.get(key) is None:
                values[key] = empty
        return cls(**values)
