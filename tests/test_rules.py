"""The report's decision rules on small frames whose answer is known by hand (``harness/rules.py``)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import rules
from harness.results import BUDGET, BUSIEST_API, THROUGHPUT


def test_separated_needs_three_runs_a_side_and_no_overlap():
    low, high = pd.Series([1.0, 2.0, 3.0]), pd.Series([4.0, 5.0, 6.0])
    assert rules.separated(low, high) and rules.separated(high, low)
    assert not rules.separated(low, pd.Series([3.0, 5.0, 6.0]))  # 3.0 on both sides: they touch
    assert not rules.separated(low[:2], high)  # two runs: a gap this size happens by chance
    assert not rules.separated(pd.Series([1.0, 2.0, float("nan")]), high)  # a missing value is no run


def _budgets(throughput: dict[int, float], itl_p99: dict[int, float] | None = None,
             ttft_p99: dict[int, float] | None = None) -> pd.DataFrame:
    return pd.DataFrame({BUDGET: list(throughput), THROUGHPUT: list(throughput.values()),
                         "ITL P99 (ms)": list((itl_p99 or dict.fromkeys(throughput, 10.0)).values()),
                         "TTFT P99 (ms)": list((ttft_p99 or dict.fromkeys(throughput, 100.0)).values())})


def test_saturation_budget_is_the_smallest_within_five_percent_of_the_best():
    med = _budgets({512: 800.0, 1024: 950.0, 2048: 1000.0, 4096: 990.0})
    assert rules.saturation_budget(med) == (1024, 1000.0)  # 950 is 5% below 1000: saturated
    assert rules.saturation_budget(_budgets({512: 800.0, 1024: 940.0, 2048: 1000.0}))[0] == 2048


def test_chat_budget_takes_the_lowest_ttft_among_budgets_whose_itl_is_near_the_best():
    med = _budgets({512: 1.0, 1024: 1.0, 2048: 1.0},
                   itl_p99={512: 10.0, 1024: 10.9, 2048: 30.0}, ttft_p99={512: 900.0, 1024: 400.0, 2048: 50.0})
    assert rules.chat_budget(med) == 1024  # 2048 has the lowest TTFT, but its ITL is 3x the best


def test_rate_inf_throughput_measures_the_engine_only_where_no_api_server_is_saturated():
    runs = pd.DataFrame({BUDGET: [1024] * 3 + [2048] * 3, THROUGHPUT: [1, 2, 3, 4, 5, 6],
                         BUSIEST_API: [0.5] * 6})
    assert sorted(rules.capacity_runs(runs)) == [1024, 2048]
    assert rules.capacity_runs(runs.assign(**{BUSIEST_API: [0.5] * 5 + [0.95]})) is None  # a full core
    assert rules.capacity_runs(runs.iloc[1:]) is None  # 1024 has two runs


@pytest.mark.parametrize("attained, expected", [
    ([1.0, 0.95, 0.85, 0.5], 45.0),  # 0.95 at 40, 0.85 at 50: 0.9 crossed halfway
    ([1.0, 0.95, 0.92, 0.91], 60.0),  # met at the grid's top rate: the top rate, a lower bound
    ([0.8, 0.7, 0.6, 0.5], math.nan),  # met nowhere
    ([1.0, 0.8, 0.95, 0.85], 35.0),  # the first fall below 0.9 counts, not the rise again at 50
])
def test_slo_capacity_interpolates_the_first_crossing(attained, expected):
    got = rules.slo_capacity(pd.Series([30.0, 40.0, 50.0, 60.0]), pd.Series(attained))
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_ratio_of_a_zero_latency_is_infinite_not_an_error():
    assert rules.ratio(3.0, 0.0) == math.inf and rules.ratio(3.0, 2.0) == 1.5


def test_spread_is_the_highest_run_over_the_lowest():
    """Runs of 91, 201 and 657 ms 'differ by up to' 657 / 91 = 7.2x (622%), not (657 - 91) / 201
    = 282% (the range over the median, which read as the factor understates it)."""
    runs = pd.DataFrame({"strategy": ["a"] * 3 + ["b"] * 3, "TTFT P50 (ms)": [91.0, 201.0, 657.0, 10.0, 11.0, 12.0]})
    factor, where = rules.spread_factor(runs, "TTFT P50 (ms)", "strategy")
    assert factor == pytest.approx(657 / 91) and where == "a"
    assert rules.spread_pct(runs, "TTFT P50 (ms)", "strategy") == pytest.approx((657 / 91 - 1) * 100)
    assert rules.spread_factor(runs.assign(**{"TTFT P50 (ms)": [0.0, 1.0, 2.0, 1, 1, 1]}),
                               "TTFT P50 (ms)", "strategy")[0] == math.inf  # a zero lowest: no crash


def test_below_pairs_and_the_theory_verdict_on_runs_known_by_hand():
    """Budget 512's three runs lie under every run of 1024 and 2048; 1024 and 2048 overlap; a
    budget with two runs separates from nothing."""
    part = pd.DataFrame({"budget": [512] * 3 + [1024] * 3 + [2048] * 3 + [4096] * 2,
                         "itl": [11, 12, 13, 20, 26, 30, 25, 27, 29, 1, 2]})
    pairs = rules.below_pairs(part, "itl", "budget")
    assert sorted(pairs) == [(512, 1024), (512, 2048)]
    assert rules.trend_verdict(pairs, rises=True) == "holds"
    assert rules.trend_verdict(pairs, rises=False) == "contradicted"
    assert rules.trend_verdict(pairs + [(2048, 1024)], rises=True) == "mixed"
    assert rules.trend_verdict([], rises=True) == "no pair separates"


def test_round_ratios_pair_the_runs_of_one_round_only():
    own = pd.DataFrame({"round": [1, 2, 3], "x": [10.0, 30.0, 50.0]})
    base = pd.DataFrame({"round": [1, 3, None], "x": [20.0, 25.0, 99.0]})
    assert rules.round_ratios(own, base, "x").to_dict() == {1: 0.5, 3: 2.0}
    assert rules.round_ratios(own.assign(round=None), base, "x").empty  # runs outside a study
