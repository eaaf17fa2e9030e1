"""Serving metrics from ``vllm bench serve --save-detailed`` data, and their compact storage.

Shared by the harness (which writes each run's ``summary``) and ``plot_results.py`` (which reads
the per-request arrays back for CDFs), so both compute the same numbers the same way: every
metric reads one form, ``RequestDetail``, which ``compact_detail`` makes from the client's
per-request arrays (at run time from exact times) and which the per-request file stores
(``pack_detail``, format 4). It keeps per request the TTFT, start time, lengths and error, and of
its gaps only their count, sum and late ones; the kept requests' gaps pooled as a histogram; and
where the chunks of the requests near the summaries' window edges fall. Not the individual gaps
of the other requests (the files of earlier runs hold them in the git history): results/ must
stay under 30 MB, and those gaps were most of it. A question the form cannot answer (another
warm-up fraction, another window edge) raises ValueError.

Definitions (all latencies in milliseconds):

* warm-up: requests are ordered by start time and the first ``warmup_fraction`` (10%) dropped;
* TTFT: per request; a failed request counts as +inf, so it is never dropped from a percentile;
* ITL: every gap between two streamed chunks of every kept successful request, pooled. ITL is
  measured per streamed chunk, not per token: a front end that falls behind the engine merges a
  request's pending tokens into one chunk, and the client then records one gap for them;
* token-gap completeness: ITL entries / (output tokens - 1), pooled over the kept successful
  requests; 1.0 means one chunk per token. Below ``FRONTEND_LAG_THRESHOLD`` (0.99) the front end
  lagged: the run's latencies include queueing in the API server, not only the scheduler's work;
* TPOT: per request, (e2e - ttft) / (output tokens - 1), for requests with more than one token;
* e2e: ttft + the sum of the request's gaps; a successful request slower than ``timeout_s`` is a timeout (counted,
  kept in the percentiles);
* throughput: output tokens emitted inside the window [first kept start, last kept end], by any
  successful request (warm-up ones included), / the window's length. Numerator and denominator
  cover the same span: counting only the kept requests' tokens over a window in which the warm-up
  requests were also served read about 0.9x the true rate at rate inf. A chunk of a lagging front
  end counts as output_len / chunks tokens, so the total stays the request's output length;
* request throughput: as ``vllm bench serve``'s ``request_throughput``, every successful request,
  warm-up ones included, over the whole run (``request_throughput``). Files written before it was
  added have no ``request_throughput_req_s``;
* output pace: output tokens emitted per second over the kept arrival window against those the
  requests arriving in it asked for (``output_pace``): below 1 the queue grew, the run was overloaded.
"""

from __future__ import annotations

import io
import json
import lzma
import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.provenance import read_json, record_paths, write_bytes_atomic, write_json_atomic

DETAIL_KEYS = ("ttfts", "itls", "input_lens", "output_lens", "start_times", "errors")
# Share of requests, first by start time, left out of a summary as warm-up. One value for the GPU
# runs (serve_bench.py, a study's plan) and the replays (sched_sim.py), whose summaries are set
# side by side (rules.replay_validation): both leave out the same requests.
WARMUP_FRACTION = 0.1
PERCENTILES = (50, 90, 95, 99)
FRONTEND_LAG_THRESHOLD = 0.99  # token-gap completeness below this: the front end lagged
# A gap this short between two tokens of one request cannot come from the engine (one token per
# request per step, and no H200 step logged was under 2 ms): both tokens waited in the API server
# or the client and were read back to back. Completeness misses this lateness; this share shows it.
LATE_GAP_S = 1e-4
MIN_PACE_WINDOW_S = 1.0  # an arrival window shorter than this has no pace to keep (rate inf)


# --------------------------------------------------------------------------------------------
# The compact per-request form, and its storage
# --------------------------------------------------------------------------------------------
DETAIL_SUFFIX = ".requests.npz.xz"
# 1: ITLs and TTFTs as integer microseconds; 2: chunk arrival times quantized (below), TTFTs and
# start times as float64; 3: as 2, with TTFTs and start times as integer microseconds and every
# run's arrivals to 100 us, and the bound on each stored arrival's error recorded; 4: the compact
# form (``RequestDetail``): per request its gap count, gap sum and late gaps instead of its gaps,
# the kept requests' gaps pooled as a histogram, and the gaps of the requests at the window edges.
DETAIL_FORMAT = 4
# The step chunk arrival times are kept to: ITLs on the GPU are 4-60 ms, so no ITL moves by more
# than 0.1 ms (every summary percentile in a result file was computed at run time from exact times).
ITL_RESOLUTION_US = 100
# How close to a window edge a request's chunk times are kept: a request whose first-to-last chunk
# span comes within EDGE_MARGIN_S of an edge keeps where its chunks fall around it (``EdgeCut``), so
# float noise in a sum (an edge computed as start + span) cannot put a chunk on the wrong side.
EDGE_MARGIN_S = 1e-3


@dataclass(frozen=True)
class ItlPool:
    """Every ITL of the kept successful requests of a run, as a histogram: ``values_s`` sorted and
    unique (seconds), ``counts`` how often each occurred. Percentiles and CDFs of the pooled ITLs
    need only this; which requests are kept depends on ``warmup_fraction``, so it is kept with it."""

    values_s: np.ndarray
    counts: np.ndarray
    warmup_fraction: float

    def values_ms(self, warmup_fraction: float) -> np.ndarray:
        """Every pooled ITL in ms, in ascending order, of the requests kept with ``warmup_fraction``.
        Another warm-up drop than the pool was made with raises ValueError: the pool does not hold
        the gaps of the requests that drop would keep."""
        if warmup_fraction != self.warmup_fraction:
            raise ValueError(f"the ITLs were pooled over the requests kept with warmup_fraction "
                             f"{self.warmup_fraction}; asked for {warmup_fraction}, which needs gaps not stored")
        return np.repeat(self.values_s * 1e3, self.counts)


@dataclass(frozen=True)
class EdgeCut:
    """Where one request's streamed chunks fall around one window edge: ``before``, how many
    arrived earlier than ``EDGE_MARGIN_S`` before the edge, and ``offsets_s``, the times after the
    request's first chunk (seconds) of those within ``EDGE_MARGIN_S`` of it. Enough to count the
    request's chunks on either side of any edge within half the margin of this one."""

    before: int
    offsets_s: np.ndarray


@dataclass(frozen=True)
class RequestDetail:
    """A run's per-request data in the form every metric reads (``compact_detail`` makes it).

    Per request: ``ttfts``, ``start_times`` (seconds), ``input_lens``, ``output_lens``, ``errors``
    as ``vllm bench serve`` saves them, and instead of its gaps their count, their sum (seconds)
    and how many were under ``LATE_GAP_S``. The kept successful requests' gaps pooled
    (``itl_pool``); for the window edges that a summary counts tokens up to (``edges_s``), where
    the chunks of each request that comes near one fall around it (``edge_cuts``, by request and
    index in ``edges_s``). Why not every gap: they were 25 of the 30 MB that results/ may hold,
    and no metric needs them one by one.
    ``arrival_error_us``: the bound on a stored arrival time's error (None: exact, at run time).
    """

    ttfts: list[float]
    start_times: list[float]
    input_lens: list[int]
    output_lens: list[int]
    errors: list[str]
    gap_counts: list[int]
    gap_sums_s: list[float]
    late_gap_counts: list[int]
    itl_pool: ItlPool
    edges_s: tuple[float, ...]
    edge_cuts: dict[tuple[int, int], EdgeCut]
    arrival_error_us: float | None = None


def window_edges(start_times: list[float], kept: list[int], ends_s: dict[int, float]) -> tuple[float, ...]:
    """The times that the summaries count tokens up to: the first and last kept start
    (``output_pace``'s window) and the last kept successful end (``summarize``'s window ends there,
    by ``run_span_s``); ``ends_s``: each kept successful request's end."""
    if not kept:
        return ()
    starts = [start_times[i] for i in kept]
    return (min(starts), max(starts), *([max(ends_s.values())] if ends_s else []))


def compact_detail(raw: dict[str, Any], warmup_fraction: float, gap_unit_s: float = 1.0) -> RequestDetail:
    """The compact form of the per-request arrays ``vllm bench serve --save-detailed`` gives
    (``DETAIL_KEYS``; ``itls``: one row of gaps per request, in units of ``gap_unit_s``: seconds,
    or the ticks of a stored file). Every sum and comparison is made on the rows as given, so that
    a stored file read by an older reader and the compact form of it give the same numbers."""
    rows = [np.asarray(row) for row in raw["itls"]]
    ttfts, starts = [float(t) for t in raw["ttfts"]], [float(t) for t in raw["start_times"]]
    output_lens, errors = [int(n) for n in raw["output_lens"]], [e or "" for e in raw["errors"]]
    gap_sums = [float(row.sum()) * gap_unit_s for row in rows]
    success = [not errors[i] and output_lens[i] > 0 for i in range(len(rows))]
    kept = kept_indices(starts, warmup_fraction)
    pooled = [rows[i] for i in kept if success[i]]
    values, counts = np.unique(np.concatenate(pooled) if pooled else np.zeros(0), return_counts=True)
    ends = {i: starts[i] + ttfts[i] + gap_sums[i] for i in kept if success[i]}
    edges = window_edges(starts, kept, ends)
    edge_cuts = {}
    for i in range(len(rows)):
        first = starts[i] + ttfts[i]
        near = [k for k, edge in enumerate(edges)
                if success[i] and first - EDGE_MARGIN_S <= edge <= first + gap_sums[i] + EDGE_MARGIN_S]
        if near:  # the chunks' times after the first, summed in the rows' own units
            offsets = np.concatenate((np.zeros(1, dtype=rows[i].dtype), np.cumsum(rows[i]))) * gap_unit_s
            times = first + offsets
            for k in near:
                band = (times >= edges[k] - EDGE_MARGIN_S) & (times <= edges[k] + EDGE_MARGIN_S)
                edge_cuts[i, k] = EdgeCut(int(np.count_nonzero(times < edges[k] - EDGE_MARGIN_S)),
                                          offsets[band].astype(np.float64))
    return RequestDetail(
        ttfts=ttfts, start_times=starts, input_lens=[int(n) for n in raw["input_lens"]], output_lens=output_lens,
        errors=errors, gap_counts=[len(row) for row in rows], gap_sums_s=gap_sums,
        late_gap_counts=[int(np.count_nonzero(row * gap_unit_s < LATE_GAP_S)) for row in rows],
        itl_pool=ItlPool(values * gap_unit_s, counts.astype(np.int64), warmup_fraction),
        edges_s=edges, edge_cuts=edge_cuts)


def quantized_gap_ticks(gaps_s: list[float], step_us: int = ITL_RESOLUTION_US) -> np.ndarray:
    """One request's gaps as differences of its quantized arrival times, in ``step_us`` ticks.

    The arrival times after the first token (cumulative sums of the gaps) are rounded to the
    step, then differenced: a cumulative sum of the result lands within half a step of each true
    arrival time however long the request, where rounding each gap alone would drift.
    """
    arrivals = np.rint(np.cumsum(np.asarray(gaps_s, dtype=np.float64)) * (1e6 / step_us))
    return np.diff(arrivals, prepend=0.0).astype(np.int64)


def microseconds(values_s: list[float | None]) -> np.ndarray:
    """Seconds as whole microseconds (a missing value as 0): exact to 0.5 us, and a third of the
    float64's size once compressed."""
    return np.rint(np.array([v or 0.0 for v in values_s], dtype=np.float64) * 1e6).astype(np.int64)


def stored_raw(raw: dict[str, Any], gap_unit_s: float = 1.0) -> dict[str, Any]:
    """``raw`` as a format 3 file would give it back: gaps as ``ITL_RESOLUTION_US`` ticks
    (``quantized_gap_ticks``; rows already in such ticks as they are), TTFTs and start times
    to the microsecond. What a file keeps is derived from this, never from the exact times."""
    if round(gap_unit_s * 1e6, 9) == ITL_RESOLUTION_US:
        ticks = [np.asarray(row, dtype=np.int64) for row in raw["itls"]]
    else:
        ticks = [quantized_gap_ticks(np.asarray(row, dtype=np.float64) * gap_unit_s) for row in raw["itls"]]
    return {"ttfts": microseconds(raw["ttfts"]) / 1e6,
            "start_times": np.cumsum(np.diff(microseconds(raw["start_times"]), prepend=0)) / 1e6,
            "itls": ticks, "input_lens": raw["input_lens"], "output_lens": raw["output_lens"], "errors": raw["errors"]}


def pack_detail(raw: dict[str, Any], warmup_fraction: float, arrival_error_us: float | None = None,
                gap_unit_s: float = 1.0) -> bytes:
    """The compact form (``compact_detail``) of per-request arrays as an xz-compressed ``.npz``
    (format ``DETAIL_FORMAT``), made from the arrays as stored (``stored_raw``: chunk arrivals to
    ``ITL_RESOLUTION_US``, TTFTs and start times to the microsecond).

    Gap sums, pooled ITLs and the chunk times at the window edges as int ticks (int32: 2**31 of
    them are 59 hours), start times as differences from the previous request's (which
    compress to a third). ``arrival_error_us``: the bound on each stored arrival time's error,
    recorded in the file; half a step for exact input, more when ``raw`` was itself read from a
    coarser file (``repack_detail``). Why not exact times, nor every gap: the results folder must
    stay under 30 MB over well over a hundred runs, and every gap of every request was 9/10 of it.
    """
    step_s = ITL_RESOLUTION_US / 1e6
    stored = stored_raw(raw, gap_unit_s)
    compact = compact_detail(stored, warmup_fraction, step_s)
    cuts = sorted(compact.edge_cuts.items())

    def ticks(values_s: Any) -> np.ndarray:  # exact: every value is a whole number of ticks times step_s
        return np.rint(np.asarray(values_s, dtype=np.float64) / step_s).astype(np.int64)

    buffer = io.BytesIO()
    np.savez(
        buffer,
        format_version=np.int32(DETAIL_FORMAT),
        itl_resolution_us=np.int32(ITL_RESOLUTION_US),
        arrival_error_us=np.float64(ITL_RESOLUTION_US / 2 if arrival_error_us is None else arrival_error_us),
        warmup_fraction=np.float64(warmup_fraction),
        ttft_us=microseconds(raw["ttfts"]),
        start_step_us=np.diff(microseconds(raw["start_times"]), prepend=0),
        input_lens=np.array(compact.input_lens, dtype=np.int32),
        output_lens=np.array(compact.output_lens, dtype=np.int32),
        errors=np.array(compact.errors, dtype=np.str_),
        gap_counts=np.array(compact.gap_counts, dtype=np.int32),
        gap_sum_ticks=ticks(compact.gap_sums_s),
        late_gap_counts=np.array(compact.late_gap_counts, dtype=np.int32),
        itl_pool_ticks=ticks(compact.itl_pool.values_s).astype(np.int32),
        itl_pool_counts=compact.itl_pool.counts,
        edges_s=np.array(compact.edges_s, dtype=np.float64),
        cut_requests=np.array([i for (i, _), _ in cuts], dtype=np.int32),
        cut_edges=np.array([k for (_, k), _ in cuts], dtype=np.int8),
        cut_before=np.array([cut.before for _, cut in cuts], dtype=np.int32),
        cut_sizes=np.array([len(cut.offsets_s) for _, cut in cuts], dtype=np.int32),
        cut_ticks=ticks(np.concatenate([cut.offsets_s for _, cut in cuts]) if cuts else []).astype(np.int32),
    )
    return lzma.compress(buffer.getvalue(), preset=9)


def stored_arrays(packed: bytes) -> Any:
    """The ``.npz`` inside a per-request file, as numpy loads it."""
    return np.load(io.BytesIO(lzma.decompress(packed)))


def stored_format(data: Any) -> int:
    return int(data["format_version"]) if "format_version" in data else 1


def unpack_detail(packed: bytes, warmup_fraction: float | None = None) -> RequestDetail:
    """A per-request file as the compact form. Format 4 is that form already; formats 1-3 (every
    gap of every request) go through ``compact_detail``, which pools the ITLs of the requests kept
    with ``warmup_fraction`` (the run's ``config.warmup_fraction``) and needs it."""
    data = stored_arrays(packed)
    if stored_format(data) >= 4:
        return detail_from_format_4(data)
    if warmup_fraction is None:
        raise ValueError("a per-request file of format 1-3 needs the run's warmup_fraction to pool its ITLs")
    raw, gap_unit_s, error_us = raw_from_old_format(data)
    return replace(compact_detail(raw, warmup_fraction, gap_unit_s), arrival_error_us=error_us)


def detail_from_format_4(data: Any) -> RequestDetail:
    """The compact form as a format 4 file stores it; every quantity in seconds is its ticks times
    the step, as ``compact_detail`` computed it from the ticks when the file was written."""
    step_s = int(data["itl_resolution_us"]) / 1e6
    bounds = np.cumsum(np.concatenate(([0], data["cut_sizes"])))
    cut_ticks = data["cut_ticks"].astype(np.int64)
    return RequestDetail(
        ttfts=(data["ttft_us"] / 1e6).tolist(), start_times=(np.cumsum(data["start_step_us"]) / 1e6).tolist(),
        input_lens=data["input_lens"].tolist(), output_lens=data["output_lens"].tolist(),
        errors=data["errors"].tolist(), gap_counts=data["gap_counts"].tolist(),
        gap_sums_s=[float(t) * step_s for t in data["gap_sum_ticks"].tolist()],
        late_gap_counts=data["late_gap_counts"].tolist(),
        itl_pool=ItlPool(data["itl_pool_ticks"].astype(np.int64) * step_s, data["itl_pool_counts"].astype(np.int64),
                         float(data["warmup_fraction"])),
        edges_s=tuple(data["edges_s"].tolist()),
        edge_cuts={(i, k): EdgeCut(before, cut_ticks[bounds[n]:bounds[n + 1]] * step_s)
                   for n, (i, k, before) in enumerate(zip(data["cut_requests"].tolist(), data["cut_edges"].tolist(),
                                                          data["cut_before"].tolist()))},
        arrival_error_us=float(data["arrival_error_us"]))


def raw_from_old_format(data: Any) -> tuple[dict[str, Any], float, float]:
    """The arrays of a format 1-3 file as ``vllm bench serve`` saved them, gaps in the file's
    units; with the length of that unit (seconds) and the bound on an arrival's error (us)."""
    offsets = data["itl_offsets"]
    version = stored_format(data)
    if version == 1:
        gaps, unit_s, ttfts, starts, error_us = data["itl_us"], 1e-6, data["ttft_us"] / 1e6, data["start_times"], 0.5
    else:
        gaps, unit_s = data["itl_ticks"].astype(np.int64), int(data["itl_resolution_us"]) / 1e6
        if version == 2:
            ttfts, starts, error_us = data["ttfts"], data["start_times"], int(data["itl_resolution_us"]) / 2
        else:
            ttfts, error_us = data["ttft_us"] / 1e6, float(data["arrival_error_us"])
            starts = np.cumsum(data["start_step_us"]) / 1e6
    raw = {"ttfts": ttfts.tolist(), "start_times": starts.tolist(),
           "itls": [gaps[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)],
           "input_lens": data["input_lens"].tolist(), "output_lens": data["output_lens"].tolist(),
           "errors": data["errors"].tolist()}
    return raw, unit_s, error_us


def repack_detail(packed: bytes, warmup_fraction: float) -> bytes | None:
    """A stored file in the current format; None for one already in it. Arrival times already on
    a multiple of the current step keep their error bound; others (a 50 us file) are rounded
    again, and the bound grows by half a step (75 us for a 50 us file), which the new file records."""
    data = stored_arrays(packed)
    if stored_format(data) == DETAIL_FORMAT:
        return None
    raw, gap_unit_s, error_us = raw_from_old_format(data)
    old_step_us = int(data["itl_resolution_us"]) if "itl_resolution_us" in data else 1
    if old_step_us % ITL_RESOLUTION_US:
        error_us += ITL_RESOLUTION_US / 2
    return pack_detail(raw, warmup_fraction, error_us, gap_unit_s)


def repack_folder(folder: Path) -> tuple[int, int, int]:
    """Rewrite, in place and atomically, every per-request file that a result file under
    ``folder`` names into the current format, with the run's own warm-up fraction; files already
    in it are left alone. Prints each file's bytes before and after; returns (files rewritten,
    bytes before, bytes after) over the files rewritten."""
    done = before = after = 0
    folders = [folder, *sorted(sub for sub in folder.rglob("*") if sub.is_dir())]
    for record_path in (path for sub in folders for path in record_paths(sub)):
        record = read_json(record_path)
        name = (record.get("client") or {}).get("detail_file") if isinstance(record, dict) else None
        if not name:
            continue
        path = record_path.parent / name
        packed = path.read_bytes()
        new = repack_detail(packed, record["config"]["warmup_fraction"])
        if new is None:
            continue
        write_bytes_atomic(path, new)
        done, before, after = done + 1, before + len(packed), after + len(new)
        print(f"{path}: {len(packed):,} -> {len(new):,} bytes")
    print(f"{done} files rewritten: {before:,} -> {after:,} bytes")
    return done, before, after


def detail_path(result_path: Path) -> Path:
    """Where a result file's per-request arrays are: a binary file beside it, same stem. Kept
    out of the JSON because base64 would add a third to the largest part of the results."""
    return result_path.with_name(result_path.name.removesuffix(".xz").removesuffix(".json") + DETAIL_SUFFIX)


def write_run(result_path: Path, result: dict[str, Any], packed: bytes) -> None:
    """Write one run: its per-request arrays (``pack_detail``) first, then the result file that
    names them, so a result file (what a resumed sweep looks for) never exists without its arrays."""
    arrays = detail_path(result_path)
    write_bytes_atomic(arrays, packed)
    result["client"]["detail_file"] = arrays.name
    write_json_atomic(result_path, result)


def read_detail(result_path: Path, run: dict[str, Any] | None = None) -> RequestDetail:
    """A result file's per-request arrays, from the file beside it (``run``, the result already
    read, saves reading it again; its ``client`` block names the file, its ``config`` gives the
    warm-up fraction that a file of format 1-3 pools its ITLs with)."""
    run = run if run is not None else read_json(result_path)
    warmup_fraction = (run.get("config") or {}).get("warmup_fraction")
    return unpack_detail((result_path.parent / run["client"]["detail_file"]).read_bytes(), warmup_fraction)


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
def kept_indices(start_times: list[float], warmup_fraction: float) -> list[int]:
    """Request indices after dropping the first ``warmup_fraction`` by start time."""
    order = sorted(range(len(start_times)), key=lambda i: start_times[i])
    return order[int(math.floor(len(order) * warmup_fraction)):]


def percentiles(values: list[float]) -> dict[str, float | None]:
    """P50/P90/P95/P99 (linear interpolation, as numpy); inf stays inf; empty gives None."""
    if not values:
        return {f"p{p}": None for p in PERCENTILES}
    arr = np.array(values, dtype=np.float64)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        # numpy interpolates inf - inf = nan; the order statistic is then inf, as it should be.
        with np.errstate(invalid="ignore"):
            value = float(np.percentile(arr, p, method="linear"))
        out[f"p{p}"] = math.inf if math.isnan(value) else value
    return out


def is_success(detail: RequestDetail, i: int) -> bool:
    return not detail.errors[i] and detail.output_lens[i] > 0


def request_e2e_s(detail: RequestDetail, i: int) -> float:
    """End-to-end latency of a successful request: TTFT plus every inter-token gap."""
    return detail.ttfts[i] + detail.gap_sums_s[i]


def request_tpot_ms(detail: RequestDetail, i: int, e2e_s: float) -> float | None:
    """Mean gap after the first token; None for a one-token request, which has no gap."""
    n_out = detail.output_lens[i]
    return (e2e_s - detail.ttfts[i]) * 1e3 / (n_out - 1) if n_out > 1 else None


def run_span_s(detail: RequestDetail, kept: list[int], e2e_s: dict[int, float]) -> float:
    """First kept start to last successful end (``e2e_s`` holds the successful requests): the
    window that throughput and goodput are divided by."""
    if not e2e_s:
        return 0.0
    return (max(detail.start_times[i] + e for i, e in e2e_s.items())
            - min(detail.start_times[i] for i in kept))


def request_throughput(detail: RequestDetail) -> float | None:
    """Completed requests per second over the run, as ``vllm bench serve`` defines its
    ``request_throughput``: every successful request (no warm-up dropped) over the span from the
    first request's start to the last successful end. vLLM's duration starts when its client
    starts, before the first send (one inter-arrival gap earlier at a finite rate, about
    1/num_prompts of the run), which the arrays do not record: on the committed H200 runs this
    reads 0.01-0.41% above the client's own figure. None without a successful request."""
    starts = detail.start_times
    ends = [starts[i] + request_e2e_s(detail, i) for i in range(len(starts)) if is_success(detail, i)]
    span = max(ends) - min(starts) if ends else 0.0
    return len(ends) / span if span > 0 else None


def chunks_before(detail: RequestDetail, i: int, edge: float, inclusive: bool) -> int:
    """How many of request ``i``'s streamed chunks arrived before ``edge`` (at or before, with
    ``inclusive``). A request whose chunks all fall half a margin clear of the edge needs no
    chunk times; one nearer needs its ``EdgeCut`` at a kept edge within half a margin, and raises
    ValueError without one rather than give a wrong count."""
    near = EDGE_MARGIN_S / 2
    first = detail.start_times[i] + detail.ttfts[i]
    if first + detail.gap_sums_s[i] < edge - near:
        return detail.gap_counts[i] + 1
    if first > edge + near:
        return 0
    for k, kept_edge in enumerate(detail.edges_s):
        if abs(kept_edge - edge) <= near and (i, k) in detail.edge_cuts:
            cut = detail.edge_cuts[i, k]
            times = first + cut.offsets_s
            return cut.before + int(np.count_nonzero(times <= edge if inclusive else times < edge))
    raise ValueError(f"request {i}'s chunk times near {edge:.6f} s were not kept: only those within "
                     f"{EDGE_MARGIN_S * 1e3:g} ms of the summaries' window edges {detail.edges_s} are")


def tokens_in_window(detail: RequestDetail, start: float, end: float) -> float:
    """Output tokens that every successful request emitted inside [start, end]: each of its
    chunks stands for output_len / chunks tokens (1.0 when the front end kept up). Only the
    summaries' windows can be counted (``chunks_before``)."""
    total = 0.0
    for i in range(len(detail.start_times)):
        if not is_success(detail, i):
            continue
        weight = detail.output_lens[i] / (detail.gap_counts[i] + 1)
        inside = chunks_before(detail, i, end, inclusive=True) - chunks_before(detail, i, start, inclusive=False)
        total += weight * inside
    return total


def token_gap_completeness(detail: RequestDetail, indices: list[int]) -> dict[str, Any]:
    """How many inter-token gaps the client saw, against how many tokens it was sent.

    One streamed chunk per token gives ``output_len - 1`` ITL entries; fewer mean the API server
    merged tokens because it fell behind the engine (see the module docstring). Pooled over the
    successful requests in ``indices`` with more than one output token; ``lagged`` when below
    ``FRONTEND_LAG_THRESHOLD``; ``late_gap_share``, the share of gaps under ``LATE_GAP_S``, counts
    tokens that came in their own chunks but late. None values when no request had a gap to measure.
    """
    seen = expected = complete = requests = late = 0
    worst = math.inf
    for i in indices:
        n_out = detail.output_lens[i]
        if not is_success(detail, i) or n_out < 2:
            continue
        got = detail.gap_counts[i]
        late += detail.late_gap_counts[i]
        seen, expected, requests = seen + got, expected + n_out - 1, requests + 1
        complete += got >= n_out - 1
        worst = min(worst, got / (n_out - 1))
    if not expected:
        return {"completeness": None, "requests_complete_share": None,
                "min_request_completeness": None, "late_gap_share": None, "lagged": None,
                "threshold": FRONTEND_LAG_THRESHOLD}
    completeness = seen / expected
    return {"completeness": completeness, "requests_complete_share": complete / requests,
            "min_request_completeness": worst, "late_gap_share": late / seen if seen else 0.0,
            "lagged": completeness < FRONTEND_LAG_THRESHOLD,
            "threshold": FRONTEND_LAG_THRESHOLD}


BURST_JOIN_S = 0.02  # late chunks closer than this in time belong to one burst
BURST_MIN_LATE = 5  # a burst: at least this many late chunks, of one or several requests


def late_gap_bursts(raw: dict[str, Any], gap_unit_s: float = 1.0) -> dict[str, Any]:
    """When the late chunks (a gap under ``LATE_GAP_S``: read back to back) of a run arrived: in
    bursts that hit many streams at once, how often, and after how long a wait.

    Chunks that wait together somewhere upstream of the client arrive together: a stall of a
    process's event loop. Bursts at a fixed period point at something periodic; the harness's own
    ``/metrics`` poller is one (its ``interval_s`` and ``samples`` are in the run's ``engine``
    block). ``stall_ms_median``: the median, over bursts, of the longest gap that a burst's
    requests waited before their first late chunk. ``raw``: per-request arrays with every gap
    (``DETAIL_KEYS``), in units of ``gap_unit_s``, as at run time or in a file of format 1-3;
    a file of format 4 keeps no gaps to place."""
    late: list[tuple[float, float]] = []  # (arrival time of a late chunk, the wait before its run)
    for start, ttft, row in zip(raw["start_times"], raw["ttfts"], raw["itls"]):
        gaps = np.asarray(row, dtype=np.float64) * gap_unit_s
        times = start + ttft + np.cumsum(gaps)
        wait = 0.0
        for gap, at in zip(gaps.tolist(), times.tolist()):
            if gap < LATE_GAP_S:
                late.append((at, wait))
            else:
                wait = gap
    late.sort()
    bursts: list[list[tuple[float, float]]] = []
    for chunk in late:
        if bursts and chunk[0] - bursts[-1][-1][0] < BURST_JOIN_S:
            bursts[-1].append(chunk)
        else:
            bursts.append([chunk])
    big = [burst for burst in bursts if len(burst) >= BURST_MIN_LATE]
    starts = [burst[0][0] for burst in big]
    return {"late_chunks": len(late), "bursts": len(big),
            "share_in_bursts": sum(map(len, big)) / len(late) if late else None,
            "period_s_median": float(np.median(np.diff(starts))) if len(starts) > 1 else None,
            "stall_ms_median": float(np.median([max(w for _, w in burst) for burst in big])) * 1e3 if big else None}


def run_timing(detail: RequestDetail, begin: float, load: float | None, end: float) -> dict[str, Any]:
    """Where a run's wall time went (``begin``/``load``/``end``: one monotonic clock, when the
    client was started, began its load and was done): its set-up (dataset, tokenizer check, test
    prompt), the arrival window (first to last request sent), the drain (last request sent to last
    token) and the overhead (the wall time beyond the arrival window), in seconds."""
    starts = detail.start_times
    ends = [starts[i] + request_e2e_s(detail, i) for i in range(len(starts)) if is_success(detail, i)]
    window = max(starts) - min(starts) if starts else 0.0
    wall = end - begin
    return {"run_wall_s": round(wall, 2), "client_setup_s": None if load is None else round(load - begin, 2),
            "arrival_window_s": round(window, 2), "drain_s": round(max(ends) - max(starts), 2) if ends else None,
            "client_overhead_s": round(wall - window, 2)}


def summarize(detail: RequestDetail, warmup_fraction: float = WARMUP_FRACTION,
              timeout_s: float | None = None) -> dict[str, Any]:
    """The run's summary numbers from per-request data (see the module docstring)."""
    kept = kept_indices(detail.start_times, warmup_fraction)
    ok = [i for i in kept if is_success(detail, i)]
    ok_set = set(ok)
    ttft_ms = [detail.ttfts[i] * 1e3 if i in ok_set else math.inf for i in kept]
    itl_ms = detail.itl_pool.values_ms(warmup_fraction)
    e2e_s = {i: request_e2e_s(detail, i) for i in ok}
    tpot_ms = [tpot for i in ok if (tpot := request_tpot_ms(detail, i, e2e_s[i])) is not None]
    e2e_ms = [e2e_s[i] * 1e3 if i in e2e_s else math.inf for i in kept]
    timeouts = sum(1 for i in ok if timeout_s is not None and e2e_s[i] > timeout_s)
    output_tokens = sum(detail.output_lens[i] for i in ok)
    span = run_span_s(detail, kept, e2e_s)
    window_start = min((detail.start_times[i] for i in kept), default=0.0)
    window_tokens = tokens_in_window(detail, window_start, window_start + span) if span > 0 else 0.0
    failed = len(kept) - len(ok)
    return {
        "warmup_fraction": warmup_fraction,
        "num_requests": len(detail.start_times),
        "num_kept": len(kept),
        "num_failed": failed,
        "num_timeouts": timeouts,
        "timeout_s": timeout_s,
        "timeout_rate": (timeouts + failed) / len(kept) if kept else None,
        "ttft_ms": percentiles(ttft_ms),
        "itl_ms": percentiles(itl_ms.tolist()),
        "tpot_ms": percentiles(tpot_ms),
        "e2el_ms": percentiles(e2e_ms),
        "mean_ttft_ms": float(np.mean(ttft_ms)) if ttft_ms else None,
        "mean_itl_ms": float(np.mean(itl_ms)) if itl_ms.size else None,
        "output_tokens": output_tokens,
        "duration_s": span,
        "window_output_tokens": window_tokens,
        "output_throughput_tok_s": window_tokens / span if span > 0 else None,
        "request_throughput_req_s": request_throughput(detail),
        "output_pace": output_pace(detail, kept),
    }


def output_pace(detail: RequestDetail, kept: list[int]) -> dict[str, float] | None:
    """Did the engine keep pace with its load? Over the kept arrival window (first to last kept
    start), the output tokens emitted per second against those the requests arriving in it asked
    for; ``ratio`` near 1 in a run that kept up, below it where the queue grew. Unlike the completed
    request rate, it has no drain in it: a short run's last requests still decoding after the last
    arrival do not read as overload. None for a window under ``MIN_PACE_WINDOW_S``: at rate inf the
    requests go out within a moment, and there is no arrival pace to keep."""
    starts = [detail.start_times[i] for i in kept]
    first, last = (min(starts), max(starts)) if starts else (0.0, 0.0)
    if last - first < MIN_PACE_WINDOW_S:
        return None
    window = last - first
    emitted = tokens_in_window(detail, first, last) / window
    offered = sum(detail.output_lens[i] for i, t in enumerate(detail.start_times) if first <= t <= last) / window
    return {"emitted_tok_s": emitted, "offered_tok_s": offered, "ratio": emitted / offered if offered else math.nan}


def frontend_check(detail: RequestDetail, warmup_fraction: float,
                   server_cpu: list[dict[str, Any]] | None, client_cpu: list[float | None] | None,
                   api_server_count: int | None, late_bursts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Did the processes around the scheduler keep up in this run? (the ``frontend`` block)

    ``token_gaps``: ``token_gap_completeness`` over the kept requests; ``lagged`` repeats its
    verdict. ``server_cores_by_role``: the busiest process of each role (``api_server``,
    ``engine_core``, ...) in cores over the load window, and ``api_server_cores_total`` their sum
    for the API servers; ``client_cores``: each client process's. A Python process runs one
    thread at a time, so one near 1.0 core is saturated. ``late_gap_bursts``: when the late chunks
    arrived (``late_gap_bursts``, from every gap, so only at run time). None where a reading was not
    taken (the CPU readings of runs made before they existed).
    """
    gaps = token_gap_completeness(detail, kept_indices(detail.start_times, warmup_fraction))
    by_role: dict[str, float] = {}
    api_total = None
    for row in server_cpu or []:
        role = row.get("role")
        if role is None:
            continue
        by_role[role] = max(by_role.get(role, 0.0), row["cpu_cores"])
        if role == "api_server":
            api_total = round((api_total or 0.0) + row["cpu_cores"], 2)
    return {"token_gaps": gaps, "lagged": gaps["lagged"], "api_server_count": api_server_count,
            "client_processes": len(client_cpu) if client_cpu else None,
            "server_cores_by_role": by_role or None, "api_server_cores_total": api_total,
            "client_cores": client_cpu, "late_gap_bursts": late_bursts}


def parse_slo(spec: str | None, default: str = "ttft:500 tpot:50") -> dict[str, float]:
    """``"ttft:500 tpot:50"`` (the ``vllm bench serve --goodput`` syntax) -> {"ttft": 500, ...}."""
    slo: dict[str, float] = {}
    for part in (spec or default).split():
        name, _, value = part.partition(":")
        if name not in ("ttft", "tpot", "e2el") or not value:
            raise ValueError(f"bad SLO term {part!r}: expected ttft:MS, tpot:MS or e2el:MS")
        slo[name] = float(value)
    return slo


def slo_key(spec: str | None) -> str:
    """One spelling per SLO ("ttft:500 tpot:50"), the key of a stored attainment."""
    return " ".join(f"{name}:{value:g}" for name, value in parse_slo(spec).items())


def slo_attainment(detail: RequestDetail, slo: dict[str, float],
                   warmup_fraction: float = WARMUP_FRACTION) -> dict[str, Any]:
    """Share of kept requests that meet every term of ``slo`` (ms), and goodput in requests/s.

    Same warm-up drop and time span as ``summarize``. A failed request misses the SLO. TPOT is
    the request's mean gap after its first token; a one-token request has none and meets it.
    Goodput = requests meeting the SLO / the span from the first kept start to the last kept end.
    ``num_missed_by_term``: successful requests over each term's limit (one request can miss
    several), which says whether first tokens or the pace after them cost the SLO.

    Why the tail keys: a policy can raise attainment by making long prompts wait (SJF does), so
    ``longest_decile`` gives the kept requests whose prompts are at or above the 90th percentile of
    length: their attainment and TTFT P99 and maximum (ms, a failure as inf); ``token_attainment``
    weighs each request by its tokens (prompt + output), so a met short request counts less than
    a missed long one. ``by_third`` is the attainment of the kept requests that arrived in each
    third of the kept arrival window (by start time): a queue that has settled gives the middle and
    the last third the same share, one that still grows gives the last third less
    (``rules.steady_trend``).
    """
    kept = kept_indices(detail.start_times, warmup_fraction)
    e2e_s = {i: request_e2e_s(detail, i) for i in kept if is_success(detail, i)}
    met_slo: set[int] = set()
    missed = {name: 0 for name in slo}
    for i, e2e in e2e_s.items():
        tpot = request_tpot_ms(detail, i, e2e)
        met = {"ttft": detail.ttfts[i] * 1e3, "tpot": 0.0 if tpot is None else tpot, "e2el": e2e * 1e3}
        misses = [name for name, limit in slo.items() if met[name] > limit]
        for name in misses:
            missed[name] += 1
        if not misses:
            met_slo.add(i)
    good = len(met_slo)
    span = run_span_s(detail, kept, e2e_s)
    tokens = {i: detail.input_lens[i] + detail.output_lens[i] for i in kept}
    return {"slo_ms": dict(slo), "num_kept": len(kept), "num_good": good,
            "num_failed": len(kept) - len(e2e_s), "num_missed_by_term": missed,
            "attainment": good / len(kept) if kept else None,
            "goodput_req_s": good / span if span > 0 else None,
            "token_attainment": sum(tokens[i] for i in met_slo) / sum(tokens.values()) if kept else None,
            "longest_decile": longest_decile(detail, kept, e2e_s, met_slo),
            "by_third": attainment_by_third(detail.start_times, kept, met_slo)}


def attainment_by_third(start_times: list[float], kept: list[int], met_slo: set[int]) -> list[float | None]:
    """SLO attainment of the kept requests arriving in each third of the time from the first kept
    start to the last (None for a third that no request arrived in). Thirds of time, not of
    requests: under a burst, a third of the requests can arrive in a moment."""
    if not kept:
        return [None, None, None]
    first = min(start_times[i] for i in kept)
    width = (max(start_times[i] for i in kept) - first) / 3
    thirds: list[list[int]] = [[], [], []]
    for i in kept:
        thirds[min(int((start_times[i] - first) / width), 2) if width > 0 else 0].append(i)
    return [sum(i in met_slo for i in part) / len(part) if part else None for part in thirds]


def longest_decile(detail: RequestDetail, kept: list[int], e2e_s: dict[int, float],
                   met_slo: set[int]) -> dict[str, Any] | None:
    """The kept requests whose prompts are at least the 90th percentile of the kept prompts'
    lengths: how many, their SLO attainment, their TTFT P99 and maximum (ms; a failure as inf)."""
    if not kept:
        return None
    bar = float(np.percentile([detail.input_lens[i] for i in kept], 90))
    longest = [i for i in kept if detail.input_lens[i] >= bar]
    ttft = [detail.ttfts[i] * 1e3 if i in e2e_s else math.inf for i in longest]
    return {"min_prompt_tokens": int(math.ceil(bar)), "num": len(longest),
            "attainment": sum(i in met_slo for i in longest) / len(longest),
            "ttft_p99_ms": percentiles(ttft)["p99"], "ttft_max_ms": max(ttft)}


class PeriodicSampler:
    """Calls ``sample()`` every ``interval_s`` seconds in a daemon thread inside a ``with`` block,
    and once more on entry and on exit, so that even a short block is measured."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "PeriodicSampler":
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.lab_metrics repack FOLDER``: every per-request file under FOLDER in the
    current format (``repack_folder``). ``python -m harness.lab_metrics late-bursts RESULT.json ...``:
    when each run's late chunks arrived (``late_bursts_of_run``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.lab_metrics", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("repack", help="rewrite per-request files in the current format").add_argument(
        "folder", type=Path)
    bursts = commands.add_parser("late-bursts", help="when a run's late chunks arrived (late_gap_bursts), beside "
                                 "its /metrics poller's period; needs a per-request file of format 1-3")
    bursts.add_argument("results", type=Path, nargs="+", help="result files (.json)")
    args = parser.parse_args(argv)
    if args.command == "repack":
        repack_folder(args.folder)
        return 0
    for path in args.results:
        print(f"{path}: {json.dumps(late_bursts_of_run(path))}")
    return 0


def late_bursts_of_run(result_path: Path) -> dict[str, Any]:
    """``late_gap_bursts`` of a stored run, with its poller's period (wall time / samples). A run
    stored in format 4 keeps no gaps: ValueError says where they are."""
    run = read_json(result_path)
    data = stored_arrays((result_path.parent / run["client"]["detail_file"]).read_bytes())
    if stored_format(data) >= 4:
        raise ValueError(f"{result_path}: its per-request file (format {stored_format(data)}) keeps no gaps; the "
                         "runs stored before format 4 have them in the git history (git show COMMIT:PATH)")
    raw, gap_unit_s, _ = raw_from_old_format(data)
    poller = (run.get("engine") or {}).get("metrics") or {}
    wall = (run.get("timing") or {}).get("run_wall_s")
    period = wall / poller["samples"] if wall and poller.get("samples") else None
    return {**late_gap_bursts(raw, gap_unit_s), "poll_interval_s": poller.get("interval_s"),
            "poll_period_s": period}


if __name__ == "__main__":
    raise SystemExit(main())
