"""Tables from the committed results: Task 1, the migrated serving files, and the front-end mark."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import plot_results
from harness import results as layer
from harness.lab_metrics import (compact_detail, detail_path, frontend_check, pack_detail, read_detail, summarize,
                                 write_run)
from harness.provenance import read_json, record_paths
from harness.study_file import Study, write_study

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
# Run files: not the step-model fit (steplogs/), not a study's description (study.json).
SERVING = sorted(p for folder in RESULTS.iterdir() if folder.name != "steplogs"
                 for p in record_paths(folder) if p.name != "study.json")
# Files with per-request arrays; the others are replays that store what their tables need (below).
WITH_ARRAYS = [p for p in SERVING if read_json(p)["client"].get("detail_file")]
# Keys summarize gained after the committed files were written: a recomputation has them, the
# files do not, and nothing that reads a file needs them.
ADDED_SUMMARY_KEYS = {"request_throughput_req_s", "output_pace", "output_pace.emitted_tok_s",
                      "output_pace.offered_tok_s", "output_pace.ratio"}


def _copy_run(source: Path, folder: Path) -> None:
    """A committed run into another results folder: its result file and its arrays."""
    for path in (source, detail_path(source)):
        shutil.copy(path, folder / path.name)


def test_task1_table_from_the_committed_h200_run():
    results = json.loads((RESULTS / "task1.json").read_text())
    table = layer.task1_table(results)
    assert list(table["method"]) == ["transformers serial", "transformers static batching (batch=64)",
                                     "vLLM offline"]
    methods = results["methods"]
    for row, key in zip(table.itertuples(), ("hf-serial", "hf-static", "vllm")):
        assert row[2] == round(methods[key]["total_s"], 2)
        assert row[4] == round(methods[key]["kv_peak_bytes"] / 2**20, 1)
    assert "padding 33% of KV slots" in table.iloc[1]["notes"]  # 13,302 of 40,768 slots
    speedup = methods["hf-serial"]["total_s"] / methods["vllm"]["total_s"]
    assert f"{speedup:.1f}x faster than serial" in table.iloc[2]["notes"]


def _flat(tree: dict, prefix: str = "") -> dict:
    """A nested summary as one level, ``ttft_ms.p50``-style keys."""
    out = {}
    for key, value in tree.items():
        out |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value}
    return out


def test_only_replays_go_without_their_arrays():
    """A GPU run's per-request arrays are its measurement: only simulated files may lack them, and
    those store the attainment under their own SLO (the screen's: under both of its pairs)."""
    for path in sorted(set(SERVING) - set(WITH_ARRAYS)):
        run = read_json(path)
        assert run["simulated"], path
        wanted = {"ttft:500 tpot:50", "ttft:200 tpot:25"} if "screen" in path.parent.name else {run["config"]["goodput"]}
        assert set(run["summary"]["slo_attainment"]) >= wanted, path
    for path in WITH_ARRAYS:
        assert detail_path(path).is_file(), path


@pytest.mark.parametrize("path", WITH_ARRAYS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_summaries_and_frontend_blocks_match_a_recomputation(path):
    """Every committed serving file's summary and front-end check are what the current
    lab_metrics computes from its own per-request arrays; at rate inf the throughput agrees with
    the client's own figure (all requests over the whole run) within 1% when one client sent
    the load (several clients start seconds apart, and their merged figure divides by the
    longest client's duration, not by the window the load really took). The request throughput,
    which the files predate, agrees with the client's own request_throughput (the same requests
    over the same run) within 0.5% wherever one client sent the load."""
    run = read_json(path)
    cfg = run["config"]
    detail = read_detail(path, run)
    # Equal up to the error the arrays record for each chunk arrival (50 us, 75 us where a 50 us
    # file was rounded again to 100 us): the harness summarised the unrounded times, so an ITL (a
    # difference of two arrivals) is known to twice that, a latency to once, and a chunk at the
    # window's edge may fall on its other side.
    step_ms = 2 * detail.arrival_error_us / 1e3
    again, stored = _flat(summarize(detail, cfg["warmup_fraction"], cfg["timeout_s"])), _flat(run["summary"])
    assert stored.keys() <= again.keys() and again.keys() - stored.keys() <= ADDED_SUMMARY_KEYS
    if not run.get("simulated") and (cfg.get("client_processes") or 1) == 1:
        assert again["request_throughput_req_s"] == pytest.approx(run["client"]["request_throughput"], rel=5e-3)
    for key, value in stored.items():
        tolerance = step_ms + 0.001 if "_ms" in key else 1e-3
        assert again[key] == (value if value is None else pytest.approx(value, rel=1e-4, abs=tolerance)), key
    front = run["frontend"]
    rows = (run.get("host") or {}).get("server_cpu")
    again = frontend_check(detail, cfg["warmup_fraction"], rows, None, cfg.get("api_server_count") or 1)
    # The late-gap share counts gaps under 0.1 ms; a run's harness counted them from exact times,
    # and the arrays keep arrivals to 50-75 us, so a gap that near the threshold may fall on its
    # other side: the stored share is the run's, the recomputation lands within 11% of it.
    late = again["token_gaps"].pop("late_gap_share"), front["token_gaps"]["late_gap_share"]
    assert late[0] == pytest.approx(late[1], rel=0.15, abs=2e-3)
    assert again["token_gaps"] == {k: v for k, v in front["token_gaps"].items() if k != "late_gap_share"}
    assert again["lagged"] == front["lagged"]
    if rows and run["schema_version"] < 3:  # migrated roles: one engine core, one API server
        assert [r["role"] for r in rows].count("engine_core") == 1
        assert [r["role"] for r in rows].count("api_server") == 1
        others = [r["cpu_cores"] for r in rows if "EngineCor" not in r["name"]]
        assert front["api_server_cores_total"] == max(others)
    if cfg["rate"] in ("inf", None) and (cfg.get("client_processes") or 1) == 1:
        client = run["client"]["output_throughput"]
        assert run["summary"]["output_throughput_tok_s"] == pytest.approx(client, rel=0.01)


def _merge_chunks(source: Path, pairs: int) -> tuple[dict, dict]:
    """The run as a lagging front end would have streamed it: every request's gaps (the file keeps
    their count and sum: here spread evenly over its time) with the first ``pairs`` pairs arriving
    as one chunk each (same tokens, same end time). Returns the result record and its raw arrays."""
    run = json.loads(source.read_text())
    detail = read_detail(source, run)
    raw = {"ttfts": detail.ttfts, "start_times": detail.start_times, "input_lens": detail.input_lens,
           "output_lens": detail.output_lens, "errors": detail.errors,
           "itls": [[total / count] * count if count else [] for total, count in zip(detail.gap_sums_s, detail.gap_counts)]}
    for gaps in raw["itls"]:
        merged = [gaps[2 * k] + gaps[2 * k + 1] for k in range(pairs)]
        gaps[:] = merged + gaps[2 * pairs:]
    cfg = run["config"]
    compact = compact_detail(raw, cfg["warmup_fraction"])
    return run | {"config": cfg | {"run": 2},
                  "summary": summarize(compact, cfg["warmup_fraction"], cfg["timeout_s"]),
                  "frontend": frontend_check(compact, cfg["warmup_fraction"], None, None, 1)}, raw


def test_a_lagged_run_is_marked_in_the_tables(tmp_path):
    """Two real runs of one point, one whose front end kept up (budget 8192, rate inf, run 1:
    completeness 0.990) and the same run with 10 token pairs of every request merged into one
    chunk each: the second is detected as lagged and the point's row says so."""
    folder = tmp_path / "task2"
    folder.mkdir()
    source = RESULTS / "task2" / "mnbt-8192_rate-inf_run-1.json"
    run = json.loads(source.read_text())
    assert run["frontend"]["lagged"] is False
    _copy_run(source, folder)
    lagging, merged = _merge_chunks(source, pairs=10)
    write_run(folder / "mnbt-8192_rate-inf_run-2.json", lagging, pack_detail(merged, lagging["config"]["warmup_fraction"]))
    write_study(folder, Study.from_runs(folder, "a lagged run"))

    res = layer.Results.load(tmp_path)
    rows = res.rows("task2")
    assert list(rows["lagged"]) == [False, True]
    expected = sum(len(g) for g in merged["itls"]) / sum(n - 1 for n in merged["output_lens"])
    assert rows.loc[1, "completeness"] == pytest.approx(expected, rel=0.01) and expected < 0.99
    assert rows.loc[0, "Throughput (tok/s)"] == pytest.approx(rows.loc[1, "Throughput (tok/s)"], rel=1e-3)
    table = layer.task2_table(rows)
    assert table.loc[0, "front end"] == "lagged in 1 of 2"
    assert table.loc[0, "completeness"] == f"{rows['completeness'].min():.3f}-{rows['completeness'].max():.3f}"
    assert plot_results.main(["--results", str(tmp_path)]) == 0
    assert "| lagged in 1 of 2" in (tmp_path / "tables.md").read_text()


def test_a_new_folder_of_runs_is_another_setting(tmp_path):
    """A folder ``task2_<name>`` (corrected runs) joins Task 2 as its own setting, named by its
    config's API-server and client counts; the committed folder stays apart."""
    for name in ("task2", "task2_lifted"):
        (tmp_path / name).mkdir()
    for source in sorted((RESULTS / "task2").glob("mnbt-2048_rate-*_run-1.json")):
        _copy_run(source, tmp_path / "task2")
        _copy_run(source, tmp_path / "task2_lifted")
        run = json.loads(source.read_text())
        run["config"] |= {"api_server_count": 4, "client_processes": 2}
        (tmp_path / "task2_lifted" / source.name).write_text(json.dumps(run))
    for name in ("task2", "task2_lifted"):
        write_study(tmp_path / name, Study.from_runs(tmp_path / name, "a new folder of runs"))
    res = layer.Results.load(tmp_path)
    assert res.folders("task2") == ["task2", "task2_lifted"]
    table = layer.task2_table(res.rows("task2"))
    assert sorted(set(table["setting"])) == ["task2: 1 API server, 1 client",
                                             "task2_lifted: 4 API servers, 2 clients"]
    assert len(table) == 4 and set(table["runs"]) == {1}
    assert plot_results.main(["--results", str(tmp_path)]) == 0
    assert (tmp_path / "task2_lifted_runs.csv.xz").is_file()
    assert "### task2_lifted: 4 API servers, 2 clients, rate inf" in (tmp_path / "tables.md").read_text()


def test_slo_attainment_matches_an_independent_computation():
    """Attainment (TTFT <= 500 ms and mean TPOT <= 50 ms; first 10% by start time dropped; a
    failed request misses) recomputed here from the raw arrays of the GPU's SLO sweep."""
    runs = layer.load_runs(RESULTS / "task3_api-4_heavy")
    rows = layer.run_rows(runs)
    for run, attainment in zip(runs, rows["attainment"]):
        detail = read_detail(run.path)
        order = np.argsort(detail.start_times, kind="stable")
        kept = order[int(len(order) * run.config.warmup_fraction):]
        good = sum(not detail.errors[i] and detail.ttfts[i] <= 0.5
                   and 1e3 * detail.gap_sums_s[i] / (detail.output_lens[i] - 1) <= 50 for i in kept)
        assert attainment == pytest.approx(good / len(kept))


# Runs a script as ``python SCRIPT ARGS...`` would, with every import of vllm or torch failing as
# on a machine without them; the names it refused are printed at exit (also an import that some
# code caught, which would have loaded them where they are installed).
WITHOUT_VLLM = """
import atexit, importlib.abc, os, runpy, sys
refused = []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch"):
            refused.append(name)
            raise ImportError(f"no module named {name!r} (this test runs without vLLM and torch)")
sys.meta_path.insert(0, Refuse())
atexit.register(lambda: print("refused imports:", sorted(set(refused)), file=sys.stderr))
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT` sets it
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_analysis_runs_without_vllm_and_torch(tmp_path):
    """plot_results.py, and the report it writes through harness/report/, only read result
    files: on a copy of the committed results, with vllm and torch impossible to import, it writes
    the tables, figures and REPORT.md, and never tried to import either (the strategy registry
    they label runs with is harness/strategies.py, not my_scheduler.py, which imports vLLM)."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    for written in ("REPORT.md", "tables.md", "figures"):
        shutil.rmtree(results / written) if written == "figures" else (results / written).unlink()
    done = subprocess.run([sys.executable, "-c", WITHOUT_VLLM, str(ROOT / "plot_results.py"),
                           "--results", str(results)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "refused imports: []" in done.stderr
    assert (results / "REPORT.md").read_text().startswith("#")
    assert (results / "tables.md").is_file() and list((results / "figures").glob("*.png"))
