"""The serving harness's pieces that need no server: metrics, parsing, storage, fast failures."""

from __future__ import annotations

import io
import json
import lzma
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from harness import results as layer
from harness import host_monitor as hm
from harness import bench_client as bc
from harness import run_record as rr
from harness import rules
from harness import serve_bench as sb
from harness import server as srv
from harness import lab_metrics as lm
from harness.lab_metrics import (DETAIL_FORMAT, ITL_RESOLUTION_US, RequestDetail, compact_detail, detail_path,
                                 frontend_check, pack_detail, parse_slo, quantized_gap_ticks, repack_detail,
                                 read_detail, slo_attainment, summarize, token_gap_completeness, unpack_detail,
                                 write_run)


def _detail() -> dict:
    """Ten requests, 1 s apart; request 0 is warm-up; request 3 failed; request 7 is slow."""
    n = 10
    detail = {
        "start_times": [float(i) for i in range(n)],
        "ttfts": [0.1] * n,
        "itls": [[0.01, 0.02, 0.03] for _ in range(n)],
        "input_lens": [100] * n,
        "output_lens": [4] * n,
        "errors": [""] * n,
    }
    detail["ttfts"][3], detail["itls"][3], detail["output_lens"][3] = 0.0, [], 0
    detail["errors"][3] = "Internal Server Error"
    detail["ttfts"][7], detail["itls"][7] = 5.0, [0.01, 0.02, 4.0]
    detail["ttfts"][0] = 9.0  # warm-up outlier: dropped, must not show up anywhere
    return detail


def _compact(raw: dict, warmup_fraction: float = 0.1) -> RequestDetail:
    """The compact form that every metric reads, pooled with the metrics' default warm-up drop."""
    return compact_detail(raw, warmup_fraction)


def test_summary_drops_warmup_and_keeps_failures_and_timeouts():
    s = summarize(_compact(_detail()), warmup_fraction=0.1, timeout_s=2.0)
    assert (s["num_requests"], s["num_kept"], s["num_failed"], s["num_timeouts"]) == (10, 9, 1, 1)
    assert s["timeout_rate"] == pytest.approx(2 / 9)
    assert s["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert math.isinf(s["ttft_ms"]["p99"])  # the failed request is +inf, not dropped
    # ITLs: 7 successful normal requests x (10, 20, 30) ms + the slow one (10, 20, 4000) ms
    assert s["itl_ms"]["p50"] == pytest.approx(20.0)
    assert s["output_tokens"] == 8 * 4
    # last end: the slow request 7 at 7 + 5 + 4.03 s; first kept start: 1 s
    assert s["duration_s"] == pytest.approx(15.03)
    # Throughput counts every token emitted in that window: the warm-up request 0 streamed its
    # 4 tokens at 9.0-9.06 s, inside it, so they count too (the window served them).
    assert s["window_output_tokens"] == pytest.approx(36)
    assert s["output_throughput_tok_s"] == pytest.approx(36 / 15.03)
    assert s["tpot_ms"]["p50"] == pytest.approx(20.0)


def test_request_throughput_counts_every_completed_request_over_the_whole_run():
    """As vllm bench serve's request_throughput: the warm-up request 0 counts (no drop), the failed
    request 3 does not; the span runs from the first start (0 s, request 0's) to the last end
    (request 7's, 7 + 5 + 4.03 s). Not the summary's window, which starts at the first kept start."""
    s = summarize(_compact(_detail()), warmup_fraction=0.1, timeout_s=2.0)
    assert s["request_throughput_req_s"] == pytest.approx(9 / 16.03)
    nothing = _detail() | {"errors": ["failed"] * 10}
    assert summarize(_compact(nothing))["request_throughput_req_s"] is None


def _rate_inf_detail(n: int = 100, out: int = 50, step_s: float = 0.01) -> dict:
    """A saturated run: every request sent at once, served in waves of 10 that each take
    ``out`` steps; one streamed chunk per token."""
    detail = {"start_times": [1e-4 * i for i in range(n)], "input_lens": [10] * n,
              "output_lens": [out] * n, "errors": [""] * n, "ttfts": [], "itls": []}
    for i in range(n):
        wave = i // 10
        detail["ttfts"].append(wave * out * step_s + step_s)
        detail["itls"].append([step_s] * (out - 1))
    return detail


def test_throughput_at_rate_inf_matches_the_true_rate_after_the_warmup_drop():
    """All requests sent at once: the first 10% (by start time) are dropped from the latency
    numbers, but the window from the first kept start to the last end also served them. Counting
    only the kept requests' tokens read 0.9x the rate the server delivered; now it reads 1.0x."""
    detail = _rate_inf_detail()
    true_rate = sum(detail["output_lens"]) / (detail["ttfts"][-1] + sum(detail["itls"][-1]))
    s = summarize(_compact(detail), warmup_fraction=0.1)
    assert s["output_throughput_tok_s"] == pytest.approx(true_rate, rel=0.01)
    assert s["output_tokens"] / s["duration_s"] == pytest.approx(0.9 * true_rate, rel=0.01)  # the old bias


def test_token_gap_completeness_detects_merged_chunks():
    """A request whose 50 tokens arrived in 25 chunks has half its gaps: completeness 0.5 for it;
    the run's pooled value falls below 0.99 and the front end is marked as lagged."""
    detail = _rate_inf_detail()
    ok = token_gap_completeness(_compact(detail), list(range(100)))
    assert ok["completeness"] == 1.0 and ok["requests_complete_share"] == 1.0 and not ok["lagged"]
    for i in (20, 21):
        detail["itls"][i] = [0.02] * 24  # 25 chunks for 50 tokens
    lagged = token_gap_completeness(_compact(detail), list(range(100)))
    assert lagged["completeness"] == pytest.approx(1 - 2 * 25 / (100 * 49))
    assert lagged["min_request_completeness"] == pytest.approx(24 / 49)
    assert lagged["requests_complete_share"] == pytest.approx(0.98) and lagged["lagged"]

    # The merged chunks carry all their tokens: throughput does not change.
    assert summarize(_compact(detail))["output_throughput_tok_s"] == pytest.approx(
        summarize(_compact(_rate_inf_detail()))["output_throughput_tok_s"], rel=0.01)
    check = frontend_check(_compact(detail), 0.1, [{"pid": 5, "name": "VLLM::EngineCor", "cpu_cores": 1.0,
                                          "role": "engine_core"},
                                         {"pid": 4, "name": "python3", "cpu_cores": 0.97, "role": "api_server"}],
                           [0.4], 1)
    assert check["lagged"] and check["server_cores_by_role"] == {"engine_core": 1.0, "api_server": 0.97}
    assert check["client_processes"] == 1 and check["client_cores"] == [0.4]


def test_a_run_whose_tokens_each_came_in_one_chunk_is_logged_with_no_itl(capsys):
    """A front end frozen for the whole run sends each request's tokens in one chunk (seen in CI):
    the run has no inter-token gap, so no ITL; its progress line says n/a and that it lagged."""
    detail = _rate_inf_detail()
    detail["itls"] = [[] for _ in detail["itls"]]
    s = summarize(_compact(detail))
    assert s["itl_ms"]["p50"] is None and s["output_throughput_tok_s"] > 0
    front = frontend_check(_compact(detail), 0.1, None, None, None)
    assert front["token_gaps"]["completeness"] == 0.0 and front["lagged"]
    sb.log_run("api-2", {"summary": s, "frontend": front}, Path("run-2.json"))
    line = capsys.readouterr().out
    assert "ITL p50 n/a, p99 n/a" in line and "completeness 0.000 (front end lagged)" in line, line


def test_tokens_read_back_to_back_are_late_though_complete():
    """Tokens of one request read within 0.1 ms in separate chunks (no engine step is that short)
    keep completeness at 1.0 but show as the late-gap share, the lateness completeness misses."""
    detail = _rate_inf_detail()
    assert token_gap_completeness(_compact(detail), list(range(100)))["late_gap_share"] == 0.0
    for i in (30, 31):
        detail["itls"][i] = [0.04, 0.0] * 24 + [0.02]  # every other token waited one step
    late = token_gap_completeness(_compact(detail), list(range(100)))
    assert late["completeness"] == 1.0 and not late["lagged"]
    assert late["late_gap_share"] == pytest.approx(2 * 24 / (100 * 49))


def test_slo_attainment_counts_failures_and_slow_requests_as_misses():
    """Of the 9 kept requests, the failed one (3) and the slow one (7: TTFT 5 s) miss TTFT <= 500
    ms; the others have TTFT 100 ms and TPOT (10 + 20 + 30) / 3 = 20 ms."""
    result = slo_attainment(_compact(_detail()), parse_slo("ttft:500 tpot:50"))
    assert (result["num_kept"], result["num_good"]) == (9, 7)
    assert result["attainment"] == pytest.approx(7 / 9)
    assert result["goodput_req_s"] == pytest.approx(7 / 15.03)  # same span as the summary
    # request 7 misses both terms: TTFT 5 s, and TPOT (10 + 20 + 4000) / 3 ms
    assert result["num_failed"] == 1 and result["num_missed_by_term"] == {"ttft": 1, "tpot": 1}
    strict = slo_attainment(_compact(_detail()), parse_slo("ttft:500 tpot:15"))
    assert strict["num_good"] == 0  # every TPOT is 20 ms
    assert strict["num_missed_by_term"] == {"ttft": 1, "tpot": 8}  # the slow one misses both
    with pytest.raises(ValueError, match="bad SLO term"):
        parse_slo("itl:50")


def test_the_longest_tenth_and_token_weights_show_who_pays():
    """Requests 7 (slow) and 8 get long prompts (1000 tokens): the longest tenth of the 9 kept
    requests is those two (at or above the 90th percentile, 1000); one met the SLO, the slow one
    waited 5 s. By tokens, the met requests weigh 6 x 104 + 1004 of 9 x 104 (less 4, the failed
    request's empty output) + 2 x 900."""
    detail = _detail()
    detail["input_lens"][7] = detail["input_lens"][8] = 1000
    result = slo_attainment(_compact(detail), parse_slo("ttft:500 tpot:50"))
    decile = result["longest_decile"]
    assert (decile["min_prompt_tokens"], decile["num"], decile["attainment"]) == (1000, 2, 0.5)
    assert decile["ttft_max_ms"] == pytest.approx(5000.0)
    assert decile["ttft_p99_ms"] == pytest.approx(100 + 0.99 * 4900)
    assert result["token_attainment"] == pytest.approx((6 * 104 + 1004) / (9 * 104 - 4 + 2 * 900))


def test_attainment_by_third_splits_the_arrival_window_by_time_and_shows_a_growing_queue():
    """30 requests arriving one a second, the first 3 dropped as warm-up: the kept window runs
    from 3 s to 29 s, so its thirds end at 11.67 s and 20.33 s (9, 9 and 9 requests). Every request
    of the first third meets the SLO, 6 of 9 in the middle and 2 of 9 in the last: a queue still
    growing, which ``rules.steady_trend`` calls falling."""
    n = 30
    ttft = [0.1] * 12 + [0.1 if i % 3 else 2.0 for i in range(12, 21)] + [2.0 if i % 9 > 1 else 0.1 for i in range(21, 30)]
    detail = {"ttfts": ttft, "itls": [[0.02] * 3 for _ in range(n)], "input_lens": [100] * n,
              "output_lens": [4] * n, "start_times": [float(i) for i in range(n)], "errors": [""] * n}
    result = slo_attainment(_compact(detail), parse_slo("ttft:500 tpot:50"))
    assert result["by_third"] == pytest.approx([1.0, 6 / 9, 2 / 9])
    assert rules.steady_trend(result["by_third"]) == "falling"
    assert rules.third_change(result["by_third"]) == pytest.approx(-4 / 9)
    assert rules.steady_trend([0.2, 0.90, 0.94]) == "settled"  # within 5 points
    assert rules.steady_trend([0.9, 0.80, 0.90]) == "rising"
    assert rules.steady_trend(None) is None and rules.steady_trend([1.0, None, 1.0]) is None


def test_output_pace_tells_a_run_that_kept_up_from_one_whose_queue_grew():
    """One request a second for 40 s, each 11 tokens (a first token and 10 gaps). Served at once
    (0.1 s a token) the engine emits what arrives: pace 1. Served one request at a time at 0.2 s a
    token (2 s a request, half the arrival rate) it emits half of it: pace 0.5, overload. The
    completed request rate of the first run, drained after its last arrival, stays near 1 req/s."""
    n = 40

    def run(wait_s: Callable[[int], float], gap_s: float) -> dict:
        return {"start_times": [float(i) for i in range(n)], "ttfts": [wait_s(i) + gap_s for i in range(n)],
                "itls": [[gap_s] * 10 for _ in range(n)], "input_lens": [10] * n, "output_lens": [11] * n,
                "errors": [""] * n}

    kept = summarize(_compact(run(lambda i: 0.0, 0.1)))
    assert kept["output_pace"]["ratio"] == pytest.approx(1.0, abs=0.03)
    assert kept["output_pace"]["offered_tok_s"] == pytest.approx(11.0, rel=0.03)
    assert kept["request_throughput_req_s"] == pytest.approx(40 / 40.1)
    slow = summarize(_compact(run(lambda i: i * 1.2, 0.2)))  # request i waits for the i before it: 2.2 s each, 1.2 s after its start
    assert slow["output_pace"]["ratio"] == pytest.approx(11 / 2.2 / 11, abs=0.05)
    assert not rules.overloaded(kept["output_pace"]["ratio"]) and rules.overloaded(slow["output_pace"]["ratio"])
    assert not rules.overloaded(None) and not rules.overloaded(math.nan)
    at_once = summarize(_compact(_rate_inf_detail()))
    assert at_once["output_pace"] is None  # rate inf: no arrival window


def _summary_numbers(summary: dict) -> dict:
    """A summary's numbers as one flat dict, without its ITL mean, which numpy sums in the order
    it is given the gaps: the pooled form sorts them, so the mean can move in its last digit."""
    flat = {}
    for key, value in summary.items():
        for sub, number in (value.items() if isinstance(value, dict) else [("", value)]):
            if key != "mean_itl_ms" and isinstance(number, (int, float)):
                flat[f"{key}.{sub}"] = number
    return flat


def _rate_39_detail(n: int = 200, seed: int = 0) -> dict:
    """A run at 39 req/s whose requests overlap (each streams 40-80 chunks 10-30 ms apart, some
    merged or late): many are in flight at the first and last kept starts, the window edges."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(1 / 39, n)).tolist()
    itls = [rng.uniform(0.010, 0.030, int(rng.integers(40, 80))).tolist() for _ in range(n)]
    itls[5][3] = 0.0  # a late gap
    raw = {"start_times": starts, "ttfts": rng.uniform(0.02, 0.3, n).tolist(), "itls": itls,
           "input_lens": rng.integers(10, 900, n).tolist(), "output_lens": [len(row) + 1 for row in itls],
           "errors": [""] * n}
    raw["itls"][7], raw["output_lens"][7], raw["errors"][7] = [], 0, "boom"
    raw["output_lens"][9] += 4  # merged chunks: 4 tokens more than chunks
    return raw


def test_the_compact_form_gives_the_numbers_of_every_gap():
    """Per-request sums, counts and the pooled ITLs answer as every gap did: the token window of
    the throughput (its edges crossed by requests in flight) counted chunk by chunk gives the same
    tokens, and the ITL percentiles are those of every kept gap."""
    raw = _rate_39_detail()
    detail = _compact(raw)
    kept = lm.kept_indices(raw["start_times"], 0.1)
    ok = [i for i in kept if not raw["errors"][i]]
    assert detail.itl_pool.values_ms(0.1).tolist() == sorted(x * 1e3 for i in ok for x in raw["itls"][i])
    assert [detail.gap_sums_s[i] for i in ok] == [float(np.sum(raw["itls"][i])) for i in ok]
    assert detail.late_gap_counts[5] == 1 and sum(detail.late_gap_counts) == 1

    def chunk_count(start: float, end: float) -> float:  # every chunk of every successful request
        total = 0.0
        for i, gaps in enumerate(raw["itls"]):
            if raw["errors"][i]:
                continue
            times = raw["start_times"][i] + raw["ttfts"][i] + np.concatenate(([0.0], np.cumsum(gaps)))
            total += raw["output_lens"][i] / len(times) * int(np.count_nonzero((times >= start) & (times <= end)))
        return total

    first, last = min(raw["start_times"][i] for i in kept), max(raw["start_times"][i] for i in kept)
    straddling = [i for i in range(len(raw["itls"])) if not raw["errors"][i] and
                  raw["start_times"][i] + raw["ttfts"][i] < first < raw["start_times"][i] + raw["ttfts"][i] + sum(raw["itls"][i])]
    assert len(straddling) > 5  # the window's edge cuts through requests, which count in part
    assert lm.tokens_in_window(detail, first, last) == pytest.approx(chunk_count(first, last), abs=1e-9)
    summary = summarize(detail, 0.1, 30.0)
    assert summary["window_output_tokens"] == pytest.approx(
        chunk_count(first, first + summary["duration_s"]), abs=1e-9)
    every_gap = [x * 1e3 for i in ok for x in raw["itls"][i]]
    assert summary["itl_ms"] == lm.percentiles(every_gap)
    assert summary["mean_itl_ms"] == pytest.approx(np.mean(every_gap), rel=1e-12)
    assert summary["output_pace"]["emitted_tok_s"] == pytest.approx(chunk_count(first, last) / (last - first))


def test_a_window_or_warmup_the_compact_form_did_not_keep_is_refused():
    """Only the chunk times at the summaries' window edges are kept, and the ITLs pooled with one
    warm-up drop: another edge that cuts through requests, or another drop, raises ValueError."""
    detail = _compact(_rate_39_detail())
    middle = sorted(detail.start_times)[100]
    with pytest.raises(ValueError, match="chunk times near"):
        lm.tokens_in_window(detail, middle, middle + 1.0)
    with pytest.raises(ValueError, match="warmup_fraction 0.1; asked for 0.2"):
        summarize(detail, 0.2)
    everything_after = max(detail.start_times) + 100.0  # an edge no request comes near needs no chunk times
    assert lm.tokens_in_window(detail, 0.0, everything_after) == pytest.approx(
        sum(n for n, e in zip(detail.output_lens, detail.errors) if not e))


def _arrivals_error_s(got: list[float], want: list[float]) -> float:
    """Largest gap, over a request's chunks, between the arrival times two ITL lists give."""
    return float(np.abs(np.cumsum(got) - np.cumsum(want)).max()) if want else 0.0


def _ticks_s(raw: dict) -> list[list[float]]:
    """Each request's gaps as the file keeps them (arrivals to 100 us), in seconds."""
    return [(quantized_gap_ticks(row) * 1e-4).tolist() for row in raw["itls"]]


def test_packed_detail_round_trips_to_the_summaries_of_its_stored_precision():
    """raw -> pack -> unpack gives the summaries of the raw arrays at the file's precision (TTFTs
    and start times to the microsecond, chunk arrivals to 100 us), and those of the exact arrays
    to within that precision; lengths and errors exactly."""
    raw = _rate_39_detail()
    raw["itls"][5] = [0.0123456, 0.0000071, 0.0301119] + raw["itls"][5][3:]  # off the 100 us grid
    packed = pack_detail(raw, 0.1)
    stored = lm.stored_arrays(packed)
    assert int(stored["itl_resolution_us"]) == ITL_RESOLUTION_US == 100
    assert int(stored["format_version"]) == DETAIL_FORMAT == 4 and "itl_offsets" not in stored
    back = unpack_detail(packed)
    assert back.arrival_error_us == 50.0
    for key in ("input_lens", "output_lens", "errors"):
        assert getattr(back, key) == raw[key]
    assert back.ttfts == pytest.approx(raw["ttfts"], abs=0.5e-6)
    assert back.start_times == pytest.approx(raw["start_times"], abs=0.5e-6)
    assert back.gap_counts == [len(row) for row in raw["itls"]]
    assert back.gap_sums_s[5] == pytest.approx(0.0123 + 0.0001 + 0.0301 + sum(raw["itls"][5][3:]), abs=50e-6)
    quantized = raw | {"itls": _ticks_s(raw), "ttfts": back.ttfts, "start_times": back.start_times}
    assert _summary_numbers(summarize(back, 0.1, 30.0)) == pytest.approx(
        _summary_numbers(summarize(_compact(quantized), 0.1, 30.0)), rel=1e-12)
    exact, again = summarize(_compact(raw), 0.1, 30.0), summarize(back, 0.1, 30.0)
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2el_ms"):
        assert again[key] == pytest.approx(exact[key], abs=0.1)  # 100 us, in ms
    assert again["window_output_tokens"] == exact["window_output_tokens"]
    assert slo_attainment(back, parse_slo(None), 0.1)["num_good"] == slo_attainment(
        _compact(raw), parse_slo(None), 0.1)["num_good"]
    assert token_gap_completeness(back, list(range(200))) == token_gap_completeness(_compact(quantized), list(range(200)))


def _format_3(raw: dict) -> bytes:
    """A per-request file as format 3 wrote it: every gap of every request, as 100 us ticks."""
    ticks = [quantized_gap_ticks(row) for row in raw["itls"]]
    start_us = lm.microseconds(raw["start_times"])
    buffer = io.BytesIO()
    np.savez(buffer, format_version=np.int32(3), itl_resolution_us=np.int32(100), arrival_error_us=np.float64(50.0),
             ttft_us=lm.microseconds(raw["ttfts"]), itl_ticks=np.concatenate(ticks).astype(np.int32),
             itl_offsets=np.cumsum([0] + [len(row) for row in raw["itls"]]),
             input_lens=np.array(raw["input_lens"]), output_lens=np.array(raw["output_lens"]),
             start_step_us=np.diff(start_us, prepend=0), errors=np.array(raw["errors"]))
    return lzma.compress(buffer.getvalue())


def test_a_format_3_file_and_its_format_4_repack_give_the_same_numbers():
    """Every number, the ITL mean too, to the last digit: both are derived from the same 100 us
    ticks. The repack is smaller; a format 4 file is not repacked again."""
    raw = _rate_39_detail()
    old = _format_3(raw)
    new = repack_detail(old, 0.1)
    assert new is not None and len(new) < len(old) and repack_detail(new, 0.1) is None
    from_old, from_new = unpack_detail(old, 0.1), unpack_detail(new)
    assert summarize(from_old, 0.1, 30.0) == summarize(from_new, 0.1, 30.0)
    slo = parse_slo("ttft:200 tpot:20")
    assert slo_attainment(from_old, slo, 0.1) == slo_attainment(from_new, slo, 0.1)
    assert frontend_check(from_old, 0.1, None, None, 1) == frontend_check(from_new, 0.1, None, None, 1)
    assert from_new.arrival_error_us == 50.0
    with pytest.raises(ValueError, match="needs the run's warmup_fraction"):
        unpack_detail(old)


def test_a_50_us_file_repacks_with_its_error_bound_grown():
    """A format 2 file at 50 us, repacked: the bound becomes 75 us and the gap sums hold to it;
    a file already at 100 us keeps its 50 us bound."""
    detail = _detail()
    detail["itls"][5] = [0.0123456, 0.0000071, 0.0301119]
    old = _format_2(detail, step_us=50)
    back = unpack_detail(repack_detail(old, 0.1))
    assert back.arrival_error_us == 75.0
    for got, want in zip(back.gap_sums_s, detail["itls"]):
        assert abs(got - sum(want)) <= 75e-6 + 1e-12
    assert back.start_times == pytest.approx(detail["start_times"], abs=0.5e-6)
    assert unpack_detail(repack_detail(_format_2(detail, step_us=100), 0.1)).arrival_error_us == 50.0


def _format_2(detail: dict, step_us: int) -> bytes:
    """A per-request file as format 2 wrote it (float64 TTFTs and start times)."""
    ticks = [quantized_gap_ticks(row, step_us) for row in detail["itls"]]
    buffer = io.BytesIO()
    np.savez(buffer, format_version=np.int32(2), itl_resolution_us=np.int32(step_us),
             ttfts=np.array(detail["ttfts"], dtype=np.float64), itl_ticks=np.concatenate(ticks).astype(np.int32),
             itl_offsets=np.cumsum([0] + [len(row) for row in detail["itls"]]),
             input_lens=np.array(detail["input_lens"]), output_lens=np.array(detail["output_lens"]),
             start_times=np.array(detail["start_times"], dtype=np.float64), errors=np.array(detail["errors"]))
    return lzma.compress(buffer.getvalue())


def test_format_2_reads_as_its_arrays_compacted():
    detail = _detail()
    back = unpack_detail(_format_2(detail, step_us=100), 0.1)
    assert back.ttfts == detail["ttfts"] and back.start_times == detail["start_times"]
    assert token_gap_completeness(back, list(range(10))) == token_gap_completeness(_compact(detail), list(range(10)))
    assert summarize(back, 0.1, 2.0)["e2el_ms"] == pytest.approx(summarize(_compact(detail), 0.1, 2.0)["e2el_ms"])


def test_a_long_request_does_not_drift():
    """10,000 gaps off the grid: rounding each gap alone would drift by up to 10,000 x 50 us;
    rounding the arrival times keeps every one, the last included, within 50 us."""
    gaps = np.random.default_rng(0).uniform(0.001, 0.030, 10_000).tolist()
    back = quantized_gap_ticks(gaps) * 1e-4
    assert len(back) == 10_000
    assert _arrivals_error_s(back.tolist(), gaps) <= 50e-6 + 1e-9
    per_gap = np.round(np.array(gaps) * 1e4) / 1e4
    assert _arrivals_error_s(per_gap.tolist(), gaps) > 200e-6  # what the cumulative rounding avoids
    detail = {"ttfts": [0.5], "itls": [gaps], "input_lens": [8], "output_lens": [10_001],
              "start_times": [0.0], "errors": [""]}
    assert unpack_detail(pack_detail(detail, 0.0)).gap_sums_s[0] == pytest.approx(sum(gaps), abs=50e-6)


def test_format_1_arrays_still_read():
    """Runs written before format 2 (ITLs and TTFTs as integer microseconds) read as before."""
    buffer = io.BytesIO()
    np.savez(buffer, ttft_us=np.array([100_000, 0]), itl_us=np.array([10_000, 20_001], dtype=np.int32),
             itl_offsets=np.array([0, 2, 2]), input_lens=np.array([5, 5]), output_lens=np.array([3, 0]),
             start_times=np.array([0.0, 1.0]), errors=np.array(["", "boom"]))
    back = unpack_detail(lzma.compress(buffer.getvalue()), 0.0)
    assert back.arrival_error_us == 0.5
    assert back.ttfts == [0.1, 0.0] and back.gap_counts == [2, 0]
    assert back.gap_sums_s[0] == pytest.approx(0.030001, abs=1e-12)
    assert back.itl_pool.values_ms(0.0) == pytest.approx([10.0, 20.001])
    assert back.errors == ["", "boom"] and back.output_lens == [3, 0]


def test_a_run_is_written_with_its_arrays_beside_it(tmp_path):
    """write_run puts the arrays in ``<stem>.requests.npz.xz`` and names them in the result."""
    packed = pack_detail(_detail(), 0.1)
    path = tmp_path / "mnbt-64_rate-inf_run-1.json"
    write_run(path, {"client": {"completed": 9}, "config": {"warmup_fraction": 0.1}}, packed)
    assert json.loads(path.read_text())["client"] == {"completed": 9, "detail_file": detail_path(path).name}
    assert detail_path(path).name == "mnbt-64_rate-inf_run-1.requests.npz.xz"
    assert summarize(read_detail(path), 0.1) == summarize(unpack_detail(packed), 0.1)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_repack_rewrites_a_folder_in_place_with_each_runs_warmup(tmp_path, capsys):
    """Every file a result names, in format 4 with that run's warm-up drop; a second pass leaves
    them alone."""
    raw = _rate_39_detail()
    for name, warmup in (("a_run-1", 0.1), ("b_run-1", 0.2)):
        (tmp_path / "sub").mkdir(exist_ok=True)
        (tmp_path / "sub" / f"{name}.requests.npz.xz").write_bytes(_format_3(raw))
        (tmp_path / "sub" / f"{name}.json").write_text(json.dumps(
            {"client": {"detail_file": f"{name}.requests.npz.xz"}, "config": {"warmup_fraction": warmup}}))
    done, before, after = lm.repack_folder(tmp_path)
    assert done == 2 and after < before and "-> " in capsys.readouterr().out
    b = read_detail(tmp_path / "sub" / "b_run-1.json")
    assert b.itl_pool.warmup_fraction == 0.2
    assert summarize(b, 0.2, 30.0) == summarize(unpack_detail(_format_3(raw), 0.2), 0.2, 30.0)
    assert lm.repack_folder(tmp_path)[0] == 0


def _stalled_streams(stall_every_s: float | None, stall_s: float = 0.016, step_s: float = 0.0025) -> dict:
    """Six requests streaming a token every ``step_s`` for 3 s; every ``stall_every_s`` (the first
    0.1 s in) the chunks due in the next ``stall_s`` wait and then arrive back to back, 10 us apart,
    as when an event loop upstream of the client stops for that long."""
    raw = {"start_times": [], "ttfts": [], "itls": [], "input_lens": [], "output_lens": [], "errors": []}
    for r in range(6):
        start, ttft, times = 0.0004 * r, 0.02, []
        for k in range(1200):
            due = start + ttft + step_s * k
            if stall_every_s and 0.1 < (due % stall_every_s) < 0.1 + stall_s:
                due = due - due % stall_every_s + 0.1 + stall_s  # held to the stall's end
            times.append(max(due, times[-1] + 1e-5) if times else due)
        for key, value in (("start_times", start), ("ttfts", ttft), ("itls", np.diff(times).tolist()),
                           ("input_lens", 100), ("output_lens", 1200), ("errors", "")):
            raw[key].append(value)
    return raw


def test_late_chunks_in_bursts_show_a_periodic_stall_and_its_length():
    """A 16 ms stall every 0.28 s (11 in the 3 s): the late chunks come in one burst per stall, every
    0.28 s, after a wait of 16-18.5 ms (the stall plus at most one step); streams that never stall
    have none."""
    bursts = lm.late_gap_bursts(_stalled_streams(0.28))
    assert bursts["bursts"] == 11 and bursts["share_in_bursts"] == 1.0
    assert bursts["period_s_median"] == pytest.approx(0.28, abs=0.002)
    assert 16.0 <= bursts["stall_ms_median"] <= 18.5
    smooth = lm.late_gap_bursts(_stalled_streams(None))
    assert smooth == {"late_chunks": 0, "bursts": 0, "share_in_bursts": None, "period_s_median": None,
                      "stall_ms_median": None}


def test_late_bursts_of_a_stored_run_need_its_gaps(tmp_path):
    """A run stored in format 3 keeps every gap: its bursts, beside its poller's period (wall time
    over samples). Format 4 keeps none, and says where they are."""
    raw = _stalled_streams(0.28)
    record = {"client": {"detail_file": "r.requests.npz.xz"}, "config": {"warmup_fraction": 0.1},
              "engine": {"metrics": {"samples": 10, "interval_s": 0.25}}, "timing": {"run_wall_s": 2.8}}
    (tmp_path / "r.requests.npz.xz").write_bytes(_format_3(raw))
    (tmp_path / "r.json").write_text(json.dumps(record))
    stored = lm.late_bursts_of_run(tmp_path / "r.json")
    assert stored["bursts"] == 11 and stored["poll_period_s"] == pytest.approx(0.28)
    assert stored["period_s_median"] == pytest.approx(0.28, abs=0.002)
    (tmp_path / "r.requests.npz.xz").write_bytes(pack_detail(raw, 0.1))
    with pytest.raises(ValueError, match="keeps no gaps"):
        lm.late_bursts_of_run(tmp_path / "r.json")


def test_prometheus_text_is_parsed_with_labels():
    text = (
        '# HELP vllm:kv_cache_usage_perc KV-cache usage.\n'
        '# TYPE vllm:kv_cache_usage_perc gauge\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="models/x"} 0.25\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="72544"} 1.0\n'
        'vllm:num_preemptions_total{engine="0",model_name="m"} 3.0\n'
    )
    samples = srv.parse_metrics(text)
    assert samples[0] == ("vllm:kv_cache_usage_perc", {"engine": "0", "model_name": "models/x"}, 0.25)
    assert samples[1][1]["num_gpu_blocks"] == "72544"
    assert samples[2][2] == 3.0


def test_recorder_counters_are_diffed_per_run():
    before = {"steps": {"total": 10, "mixed": 2}, "tokens": {"prefill": 100}, "policy": {"fallback_steps": 1},
              "queues": {"preemptions": 1}}
    before["policy_settings"] = {"ttft_slo_ms": 500.0}
    after = {"steps": {"total": 25, "mixed": 2}, "tokens": {"prefill": 400}, "policy": {"fallback_steps": 4},
             "queues": {"preemptions": 5}, "policy_settings": {"ttft_slo_ms": 500.0}}
    assert rr.counters_delta(before, after) == {
        "steps": {"total": 15, "mixed": 0}, "tokens": {"prefill": 300},
        "policy": {"fallback_steps": 3}, "policy_settings": {"ttft_slo_ms": 500.0},
        "preemptions": 4}
    assert rr.counters_delta(None, None) is None


def _args(tmp_path, *extra: str):
    return sb.parse_args(["--task", "t", "--tag", "x", "--out-dir", str(tmp_path), "--model",
                          "models/tiny-qwen3", *extra])


def test_busy_port_is_refused_before_any_server_starts(tmp_path, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = sb.main(["--task", "t", "--tag", "x", "--out-dir", str(tmp_path), "--model",
                        "models/tiny-qwen3", "--port", str(port)])
    assert code == 1
    assert f"port {port} is busy" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists()


def test_unknown_scheduler_is_refused_before_any_server_starts(tmp_path, capsys):
    assert sb.main(["--task", "t", "--tag", "x", "--out-dir", str(tmp_path), "--model",
                    "models/tiny-qwen3", "--scheduler", "my_scheduler.Fastest"]) == 1
    assert "unknown scheduler 'my_scheduler.Fastest'" in capsys.readouterr().err


def test_bad_rates_are_rejected(capsys):
    with pytest.raises(SystemExit):
        sb.parse_args(["--task", "t", "--tag", "x", "--out-dir", "/tmp", "--model", "m", "--rates", "16,fast"])
    assert "not a positive number or inf" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sb.parse_args(["--task", "t", "--tag", "x", "--out-dir", "/tmp", "--model", "m", "--load", "a b|8|"])
    assert "expected a JSON object with name, rates and bench_params" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sb.parse_args(["--task", "t", "--tag", "x", "--out-dir", "/tmp", "--model", "m",
                       "--load", '{"name": "a b", "rates": [8]}'])
    assert "--load name 'a b': letters, digits" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sb.parse_args(["--task", "t", "--tag", "x", "--out-dir", "/tmp", "--model", "m", "--server-params", "[1]"])
    assert "is not a JSON object" in capsys.readouterr().err


def test_named_loads_share_a_server_and_name_their_files(tmp_path, capsys):
    args = _args(tmp_path, "--dry-run", "--bench-params", '{"num_prompts": 5}',
                 "--load", '{"name": "fixed", "rates": [8], "bench_params": {"random_input_len": 64}}',
                 "--load", '{"name": "varlen", "rates": [2, "inf"], '
                           '"bench_params": {"random_range_ratio": {"input": 0.9, "output": 0.0}}}')
    assert [(l.name, l.rates) for l in args.loads] == [("fixed", (8.0,)), ("varlen", (2.0, None))]
    assert sb.run_config(args) == 0
    out = capsys.readouterr().out
    assert out.count("would start") == 1
    assert "would run (x_fixed_rate-8_run-1.json)" in out and "x_varlen_rate-inf_run-1.json" in out
    assert "--num-prompts 5 --random-range-ratio '{\"input\": 0.9, \"output\": 0.0}'" in out


def test_existing_results_are_skipped_and_dry_run_prints_commands(tmp_path, capsys):
    (tmp_path / "x_rate-16_run-1.json").write_text("{}")
    args = _args(tmp_path, "--rates", "16,inf", "--runs", "1", "--dry-run", "--dummy-weights",
                 "--scheduler", "sjf", "--server-params", '{"max_num_seqs": 4}')
    assert sb.run_config(args) == 0
    out = capsys.readouterr().out
    assert "x_rate-16_run-1.json: exists, skipped" in out
    assert "--scheduler-cls my_scheduler.SJFScheduler" in out and "--load-format dummy" in out
    assert "would run (x_rate-inf_run-1.json)" in out and "--request-rate inf" in out
    assert "would run (x_rate-16_run-1.json)" not in out


def test_a_restarted_server_appends_to_its_log(tmp_path):
    """A resumed sweep starts the server again; the first start's log must survive."""

    log_path = tmp_path / "logs" / "x_server.log"
    for word in ("first", "second"):
        server = srv.Server(["echo", word], dict(os.environ), log_path, 0)
        server.start()
        server.process.wait()
    text = log_path.read_text()
    assert text.count("# ---- server started ") == 2
    assert text.index("first") < text.index("second")


def test_other_servers_are_counted_but_not_clients_or_our_own(tmp_path):
    """`vllm serve` in another process group counts; `vllm bench serve` (a client) and our own
    server's group do not."""

    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    baseline = hm.other_vllm_servers(None)
    server = subprocess.Popen([str(fake), "serve", "m"], start_new_session=True)
    client = subprocess.Popen([str(fake), "bench", "serve"], start_new_session=True)
    try:
        assert hm.other_vllm_servers(None) == baseline + 1
        assert hm.other_vllm_servers(server.pid) == baseline
    finally:
        for proc in (server, client):
            proc.kill()
            proc.wait()


def test_server_cpu_load_reads_a_busy_process_group():
    """A child spinning in its own process group shows up with its CPU time; the busiest first."""

    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"],
                            start_new_session=True)
    try:
        before, start = hm.group_cpu_seconds(spin.pid), time.monotonic()
        time.sleep(0.5)
        load = hm.server_cpu_load(before, hm.group_cpu_seconds(spin.pid), time.monotonic() - start)
    finally:
        spin.kill()
        spin.wait()
    assert [row["pid"] for row in load] == [spin.pid]
    assert 0 < load[0]["cpu_cores"] <= 1.1  # one Python thread: at most one core
    rows = hm.server_cpu_load({1: ("a", 1.0), 2: ("b", 0.0)}, {1: ("a", 2.0), 2: ("b", 4.0), 3: ("c", 0.5)}, 2.0)
    assert [(r["name"], r["cpu_cores"]) for r in rows] == [("b", 2.0), ("a", 0.5), ("c", 0.25)]


class _ScriptedGpu(hm.GpuUtilSampler):
    """A GPU sampler that reads a given function of time instead of NVML."""

    def __init__(self, busy: Callable[[], float]) -> None:
        super().__init__("0", interval_s=0.05)
        self.busy = busy

    def sample(self) -> None:
        self.samples.append((time.monotonic(), self.busy()))


def test_load_window_measures_the_server_only_while_the_client_sends(tmp_path):
    """A client that idles 1 s (its start-up), sends for 1 s, then wraps up for 1 s, against a
    server that spins only while load runs: over the load window the server uses about one core
    and the GPU reads busy; over the client's whole life both would read about a third."""

    t0 = time.monotonic()
    server = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(1.0)\nt = time.time()\n"
                               "while time.time() - t < 1.0: pass\ntime.sleep(2)"], start_new_session=True)
    # The client spins while it "sends" (its CPU is read too) and sleeps otherwise.
    client = [sys.executable, "-c", "import time, sys\ntime.sleep(0.95)\n"
              f"print({bc.MAIN_RUN_MARKER!r}, flush=True)\nt = time.time()\n"
              "while time.time() - t < 1.1: pass\n"
              f"print('=== ' + {bc.RESULT_MARKER!r} + ' ===', flush=True)\ntime.sleep(1.0)"]
    gpu = _ScriptedGpu(lambda: 80.0 if 1.0 <= time.monotonic() - t0 <= 2.0 else 0.0)
    try:
        with gpu:
            window = hm.LoadWindow(server.pid, gpu)
            bc.run_clients([bc.BenchClient(client, tmp_path / "client.log")], dict(os.environ), window)
            window.end()
    finally:
        server.kill()
        server.wait()
    assert 1.0 <= window.t_end - window.t_start <= 1.6
    busiest = window.server_cpu()[0]
    assert busiest["cpu_cores"] >= 0.4 and busiest["role"] == "api_server"  # the group leader
    assert window.client_cpu()[0] >= 0.4
    assert "Starting main benchmark run" in (tmp_path / "client.log").read_text()
    report = window.gpu_util()
    assert report["window"] == "load" and report["mean_pct"] >= 60
    unwindowed = gpu.report()  # what a client that never says "load starts" gets
    assert unwindowed["window"] == "client" and unwindowed["mean_pct"] <= 45


def test_gpu_sampler_without_a_gpu_records_nothing(monkeypatch):
    """Real NVML calls: on a host without an NVIDIA driver ``nvmlInit`` raises, and the sampler
    records nothing, through nvidia-ml-py's bindings and through the copy vLLM carries."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("an NVIDIA driver is present")
    for hide_nvidia_ml_py in (False, True):
        if hide_nvidia_ml_py:
            monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now fails
        with hm.GpuUtilSampler("0", interval_s=0.02) as gpu:
            time.sleep(0.1)
        assert gpu.nvml is not None and hasattr(gpu.nvml, "nvmlInit")
        assert gpu.handle is None and gpu.samples == [] and gpu.report() is None


def test_lockstep_starts_partners_together_and_never_waits_for_the_departed(tmp_path):
    """Two parties: the one that arrives first waits for the other; a run the other skipped
    (result already there) or any run after it left costs no wait; alone, a run starts after
    the timeout and says so."""

    a = bc.LockstepBarrier(tmp_path / "sync", 2, "a", timeout_s=30.0)
    b = bc.LockstepBarrier(tmp_path / "sync", 2, "b", timeout_s=30.0)
    seen = {}
    late = threading.Thread(target=lambda: (time.sleep(0.5), seen.update(b=b.wait("rate-8_run-1"))))
    late.start()
    seen["a"] = a.wait("rate-8_run-1")
    late.join()
    assert seen["a"]["all_met"] and seen["a"]["ready"] == ["a", "b"] and seen["a"]["waited_s"] >= 0.4
    assert seen["b"]["all_met"] and seen["b"]["waited_s"] < 0.4
    b.skip("rate-8_run-2")
    assert a.wait("rate-8_run-2")["all_met"]
    b.leave()
    after = a.wait("rate-16_run-1")
    assert not after["all_met"] and after["left_before"] == ["b"] and after["waited_s"] < 1
    alone = bc.LockstepBarrier(tmp_path / "other", 2, "c", timeout_s=0.3).wait("k")
    assert not alone["all_met"] and alone["waited_s"] >= 0.3


def test_sweeps_on_several_gpus_run_in_lockstep_waves(tmp_path):
    """Three budgets on two GPUs: a wave of two, then a wave of one; --no-lockstep turns it off."""

    command = ["bash", str(sb.ROOT / "task2.sh"), "--dry-run", "--values", "64 128 256", "--gpus", "0 1",
               "--model", "models/tiny-qwen3", "--dummy-weights", "--out-dir", str(tmp_path)]
    env = dict(os.environ, LAB3_PYTHON=sys.executable)
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    waves = re.findall(r"lockstep: \S+/(wave-\d+) \((\d) parties\)", out)
    assert sorted(waves) == [("wave-0", "2"), ("wave-0", "2"), ("wave-1", "1")]
    out = subprocess.run([*command, "--no-lockstep"], env=env, capture_output=True, text=True, check=True).stdout
    assert "lockstep:" not in out and out.count("would start") == 3


def test_task2_table_takes_the_median_over_runs():
    runs = pd.DataFrame([
        {"max_num_batched_tokens": 512, "rate": "16", "run": k, "TTFT P50 (ms)": v, "TTFT P99 (ms)": v,
         "ITL P50 (ms)": v, "ITL P99 (ms)": v, "Throughput (tok/s)": 10 * v}
        for k, v in ((1, 1.0), (2, 3.0), (3, 8.0))])
    table = layer.task2_table(runs)
    assert table.loc[0, "TTFT P50 (ms)"] == 3.0 and table.loc[0, "runs"] == 3
    assert table.loc[0, "Throughput (tok/s)"] == 30.0


def test_progress_lines_of_parallel_harnesses_stay_whole():
    """Harnesses on two GPUs share one console; each progress line must reach it in one piece,
    or a reader counting lines (e.g. "starting the server") sees two lines run together."""

    writer = ("import serve_bench as sb, sys\n"
              "for i in range(3000):\n"
              "    sb.log(f'{sys.argv[1]}: line {i} ' + 'x' * 60)\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.path.dirname(sb.__file__)}
    read_fd, write_fd = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", writer, name], stdout=write_fd, env=env)
             for name in ("gpu0", "gpu1")]
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        lines = pipe.read().splitlines()
    assert [p.wait() for p in procs] == [0, 0]
    pattern = re.compile(r"\[serve_bench\] gpu[01]: line \d+ x{60}")
    assert len(lines) == 6000 and all(pattern.fullmatch(line) for line in lines)


def test_a_load_split_over_clients_keeps_its_total_rate_prompts_and_distinct_seeds(tmp_path, capsys):
    """Two clients: each sends half the prompts at half the rate, with its own seed (the same
    seed would send the same prompts twice, and the copy would hit the prefix cache); the server
    gets --api-server-count; the config records both as numbers; files of split runs are named."""
    args = _args(tmp_path, "--dry-run", "--rates", "9,inf", "--runs", "1", "--num-prompts", "101",
                 "--seed", "42", "--clients", "1,2", "--api-servers", "4")
    assert args.clients == (1, 2) and args.api_servers == 4
    assert sb.run_config(args) == 0
    out = capsys.readouterr().out
    assert "--api-server-count 4" in out.split("would start:")[1].splitlines()[0]
    split = [line for line in out.splitlines() if "(x_rate-9_clients-2_run-1.json)" in line]
    assert len(split) == 2
    assert "--request-rate 4.5" in split[0] and "--num-prompts 51" in split[0] and "--seed 42" in split[0]
    assert "--request-rate 4.5" in split[1] and "--num-prompts 50" in split[1] and "--seed 43" in split[1]
    for k, line in enumerate(split):  # the split's clients start their load together (bench_gate.py)
        assert f"-m harness.bench_gate --gate '<tmp>/gate' --parties 2 --name {k} " in line
    alone = [line for line in out.splitlines() if "(x_rate-9_run-1.json)" in line]
    assert len(alone) == 1 and "--request-rate 9" in alone[0] and "--num-prompts 101" in alone[0]
    assert sum("(x_rate-inf_clients-2_run-1.json)" in line and "--request-rate inf" in line
               for line in out.splitlines()) == 2
    with pytest.raises(SystemExit):
        _args(tmp_path, "--clients", "2")  # a split needs the total to split
    assert "needs --num-prompts" in capsys.readouterr().err


def test_the_clients_of_a_split_load_pass_their_start_gate_together(tmp_path):
    """Two processes reach the barrier of bench_gate.py a second apart: the first waits for the
    second, and both pass within a small fraction of that second; what they saw is recorded."""
    from harness.bench_gate import POLL_S

    code = ("import json, sys, time; from pathlib import Path; from harness.bench_client import LockstepBarrier\n"
            "time.sleep(float(sys.argv[2]))\n"
            "r = LockstepBarrier(Path(sys.argv[1]), 2, sys.argv[3], 30, poll_s={poll}).wait('start')\n"
            "r['passed_unix_s'] = time.time()\n"
            "Path(sys.argv[1], sys.argv[3] + '.json').write_text(json.dumps(r))").format(poll=POLL_S)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), delay, name], cwd=sb.ROOT)
             for name, delay in (("0", "0"), ("1", "1.0"))]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    gate = bc.client_gate_record(tmp_path, 2)
    assert gate["passed"] == 2 and gate["all_met"] is True
    assert gate["waited_s"][0] >= 0.5 and gate["pass_spread_s"] < 0.25
    assert bc.client_gate_record(tmp_path, 1) is None  # one client: no gate


def test_a_client_that_fails_stops_the_other_clients_and_the_run(tmp_path):
    """One client of a split load exits with an error at once while the other would send for a
    minute: the run fails with the failed client's log, and the other is stopped, not waited for."""
    slow = [sys.executable, "-c", "import time; time.sleep(60); print('load sent'.upper(), flush=True)"]
    failing = [sys.executable, "-c", "import sys; print('error:', 'bad flag'.upper(), flush=True); sys.exit(2)"]
    clients = [bc.BenchClient(slow, tmp_path / "slow.log"), bc.BenchClient(failing, tmp_path / "failing.log")]
    window = hm.LoadWindow(os.getpgid(0), _ScriptedGpu(lambda: 0.0))
    with pytest.raises(srv.HarnessError, match=r"(?s)exit code 2.*error: BAD FLAG"):
        bc.run_clients(clients, dict(os.environ), window)
    assert clients[0].process is not None and clients[0].process.returncode < 0  # killed by a signal
    assert "LOAD SENT" not in (tmp_path / "slow.log").read_text()


def test_a_gated_client_that_fails_before_the_gate_lets_the_others_start(tmp_path):
    """A client behind bench_gate.py whose `vllm bench serve` fails in its set-up (here a flag it
    does not know) leaves the barrier: its partner passes at once, with the absence recorded,
    instead of waiting out the timeout."""
    gate = tmp_path / "gate"
    failed = subprocess.run([sys.executable, "-m", "harness.bench_gate", "--gate", str(gate), "--parties", "2",
                             "--name", "0", "--timeout-s", "600", "--", "--no-such-flag"],
                            cwd=sb.ROOT, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and "unrecognized arguments: --no-such-flag" in failed.stderr
    assert not (gate / "0.json").exists()  # it never reached the gate
    partner = bc.LockstepBarrier(gate, 2, "1", timeout_s=600).wait("start")
    assert partner["all_met"] is False and partner["left_before"] == ["0"]


def test_client_results_merge_into_one_run():
    a = {"ttfts": [0.1], "itls": [[0.01]], "input_lens": [5], "output_lens": [2], "start_times": [1.0],
         "errors": [""], "completed": 1, "failed": 0, "total_input_tokens": 5, "total_output_tokens": 2,
         "duration": 2.0, "output_throughput": 1.0}
    b = a | {"ttfts": [0.2], "start_times": [1.5], "duration": 4.0}
    merged = bc.merge_client_results([a, b])
    assert merged["start_times"] == [1.0, 1.5] and merged["ttfts"] == [0.1, 0.2]
    assert (merged["completed"], merged["total_output_tokens"], merged["duration"]) == (2, 4, 4.0)
    assert merged["processes"] == 2 and len(merged["per_process"]) == 2
    assert bc.merge_client_results([a]) is a


def test_a_dry_run_with_every_result_present_shows_what_force_would_redo(tmp_path, capsys):
    (tmp_path / "x_rate-16_run-1.json").write_text("{}")
    assert sb.run_config(_args(tmp_path, "--rates", "16", "--runs", "1", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "nothing to do; with --force it would redo" in out
    assert "would redo (x_rate-16_run-1.json)" in out and "--request-rate 16" in out


def test_process_roles_follow_vllm_process_titles():
    assert hm.process_role(-1, "VLLM::EngineCor", 7, 1) == "engine_core"
    assert hm.process_role(-1, "VLLM::APIServer", 7, 4) == "api_server"
    assert hm.process_role(7, "python3", 7, 1) == "api_server"  # one API server: the leader
    assert hm.process_role(7, "python3", 7, 4) == "launcher"  # several: the leader only waits
    assert hm.process_role(-1, "VLLM::Worker", 7, 1) == "worker"
    assert hm.process_role(-1, "python3", 7, 1) == "other"


def test_start_phases_read_this_start_from_a_log_that_holds_an_earlier_one():
    """vLLM's start-up lines, local time without a year; an appended log's earlier start is not
    read as this one's."""
    started = time.mktime((2026, 12, 4, 16, 25, 52, 0, 0, -1))

    def line(seconds: float, text: str) -> str:
        return f"(EngineCore pid=1) INFO {time.strftime('%m-%d %H:%M:%S', time.localtime(started + seconds))} [x.py:1] {text}"

    log = "\n".join([line(-3600, "Graph capturing finished in 5 secs, took 0.42 GiB"),
                     "# ---- server started ----", line(39, "Started 4 API server processes"),
                     line(69, "Model loading took 1.12 GiB and 2.2 seconds"),
                     line(124, "init engine (profile, create kv cache, warmup model) took 53.29 s"),
                     "(APIServer pid=2) INFO:     Application startup complete."])
    assert srv.start_phases(log, started) == {"api_processes_started": 39.0, "model_loaded": 69.0,
                                             "engine_ready": 124.0}


def test_run_timing_splits_a_run_into_set_up_arrivals_drain_and_overhead():
    """Three requests sent at 100, 101 and 103 s; the last ends 0.5 + 0.25 + 0.25 s after it was
    sent; the client ran from 90 to 105 s and began its load at 99 s."""
    from harness.lab_metrics import run_timing

    detail = {"start_times": [100.0, 101.0, 103.0], "ttfts": [0.2, 0.3, 0.5], "itls": [[0.1], [0.1], [0.25, 0.25]],
              "input_lens": [5, 5, 5],
              "output_lens": [2, 2, 3], "errors": ["", "", ""]}
    assert run_timing(_compact(detail), 90.0, 99.0, 105.0) == {"run_wall_s": 15.0, "client_setup_s": 9.0,
                                                     "arrival_window_s": 3.0, "drain_s": 1.0,
                                                     "client_overhead_s": 12.0}
    assert run_timing(_compact(detail), 90.0, None, 105.0)["client_setup_s"] is None
