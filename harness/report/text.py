"""Wording the report's sections share: factors and units as the report prints them, what a section
without results says, and the sentence that withholds a scheduler conclusion from lagged runs, so
that every section says these things the same way.
"""

from __future__ import annotations

import pandas as pd

from harness.document import Block, para
from harness.results import MIB, span_text


def factor(value: float) -> str:
    return f"{value:.2f}x"


def tok_s(value: float) -> str:
    return f"{value:.1f} tok/s"


def mib(num_bytes: float) -> str:
    return f"{num_bytes / MIB:.1f} MiB"


def no_results(what: str, where: str, command: str, needs: str = "") -> Block:
    """What a section without results says instead: where they would be and what makes them."""
    return para(f"No {what} results (`results/{where}` is missing or empty): run `{command}`."
                + (f" {needs} need them." if needs else ""), place="both")


def lag_sentence(rows: pd.DataFrame, what: str) -> str:
    """'No scheduler conclusion from ...: all 20 runs lagged (completeness 0.913-0.990).'"""
    lagged = rows[rows["lagged"]]
    share = f"all {len(rows)}" if len(lagged) == len(rows) else f"{len(lagged)} of {len(rows)}"
    return (f"No scheduler conclusion from {what}: the front end lagged in {share} runs "
            f"(completeness {span_text(lagged['completeness'])}), so their latencies include "
            "queueing in the API server (section 3).")


def unit_less(column: str) -> str:
    """'ITL P99 (ms)' -> 'ITL P99', 'Throughput (tok/s)' -> 'Throughput'."""
    return column.rsplit(" (", 1)[0]
