"""Simulated screens: strategies replayed over grids of loads and rates, a plan for GPU runs (which
strategy, which settings, which load, which rates), not a result.

    python experiments/screen.py [--grid slo|wait-bound] [--jobs 2] [--dry-run]

Every point is replayed by ``harness/sched_sim.py replay`` with the committed H200 step model. Each
file stores its attainment under both SLO pairs and no per-request arrays (``--no-detail``), and a
replay whose file exists is skipped, so a grid can grow.

- ``slo`` (``results/replay_screen_api-4/``, read by the report's section 6, "Simulated screen"):
  1000 requests a replay, RUNS replays a point that differ only in the step-time residuals
  (``--residual-seed``); the workload (seed 42) is the same. The grid once listed Strategies C
  (stall-bounded), D (deadline) and E (paced) too; they were retired (``my_scheduler.RETIRED`` says
  why), but their replays stay in the folder as the evidence, and the report still labels them.
- ``wait-bound`` (``results/replay_wait_bound_api-4/``): Strategy F with a bound on any request's
  wait (``wait_bound_s``) against F without one and the default, in steady state: 3600 requests a
  replay (60 s of arrivals at 60 req/s) of the bursty heavy-tailed load, and each run its own
  arrival seed and workload draw. It picks the bound the GPU study ``experiments/slo_heavy_steady.json``
  measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness import workloads  # noqa: E402
from harness.provenance import COMPRESSED_RECORD_SUFFIX  # noqa: E402

STEP_MODEL = Path("results/steplogs/qwen3-0.6b_api-4.fit.json")  # paths relative to the root, as files record them
SLOS = ("ttft:500 tpot:50", "ttft:200 tpot:25")  # the lab's pair, and a tight one that binds
RUNS = 3
FIRST = ("default", "prefill-first", "sjf")  # the first grid's strategies still registered: default, A, B1
VARLEN = ("--range-ratio", "0.9", "--output-range-ratio", "0")
BURSTY = ("--burstiness", "0.5")


@dataclass(frozen=True)
class Load:
    """A workload of a grid: its name in the tables, replay flags, rates and strategies, and the
    strategies' settings (``--additional-config``; none: their defaults)."""

    name: str
    rates: tuple[int, ...]
    strategies: tuple[str, ...]
    flags: tuple[str, ...] = ()
    heavy: bool = False  # lengths from harness/workloads.py's file
    settings: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Grid:
    """A screen: where its replays go, their loads, requests per replay, and whether each run draws
    its own arrivals and workload (``seed_per_run``, seeds ``seed + run``) or all share seed 42."""

    folder: Path
    loads: tuple[Load, ...]
    num_prompts: int = 1000
    seed_per_run: bool = False
    seed: int = 42


GRIDS = {
    "slo": Grid(Path("results/replay_screen_api-4"), (
        Load("fixed", (30, 34, 37, 40, 43), FIRST),
        Load("varlen-0.9", (34, 40), FIRST, VARLEN),
        Load("varlen-0.9", (44, 48), ("default", "sjf"), VARLEN),  # above 40: SJF met the SLO there
        Load("heavy", (48, 52, 56, 60, 64, 68), FIRST, heavy=True),
        Load("heavy-burst0.5", (48, 52, 56, 60, 64, 68), FIRST, BURSTY, heavy=True),
        Load("heavy", (72, 76, 80), ("default", "sjf"), heavy=True),  # SJF met the lab's pair at 68
        Load("heavy-burst0.5", (72, 76, 80), ("default", "sjf"), BURSTY, heavy=True),
        # Strategy F (SJF, late requests last), added after the grid above
        Load("fixed", (30, 34, 37, 40, 43), ("sjf-ontime",)),
        Load("varlen-0.9", (34, 40, 44, 48), ("sjf-ontime",), VARLEN),
        Load("heavy", (48, 52, 56, 60, 64, 68, 72, 76, 80), ("sjf-ontime",), heavy=True),
        Load("heavy-burst0.5", (48, 52, 56, 60, 64, 68, 72, 76, 80), ("sjf-ontime",), BURSTY, heavy=True),
    )),
    "wait-bound": Grid(Path("results/replay_wait_bound_api-4"), (
        Load("heavy-burst0.5", (48, 54, 60), ("default", "sjf-ontime"), BURSTY, heavy=True),
        *(Load("heavy-burst0.5", (48, 54, 60), ("sjf-ontime",), BURSTY, heavy=True, settings=(("wait_bound_s", w),))
          for w in (2.0, 5.0, 10.0)),
    ), num_prompts=3600, seed_per_run=True, seed=6000),
}


def settings_tag(settings: tuple[tuple[str, float], ...]) -> str:
    return "".join(f"-{key.replace('_', '-')}{value:g}" for key, value in settings)


def replays(grid: Grid) -> list[tuple[Path, list[str], int]]:
    """(result file, replay argv, workload seed) of every point and run of the grid."""
    out = []
    for load in grid.loads:
        for strategy in load.strategies:
            for rate in load.rates:
                for run in range(1, RUNS + 1):
                    seed = grid.seed + run if grid.seed_per_run else grid.seed
                    dataset = workloads.dataset_path(grid.folder / "datasets", grid.num_prompts, seed)
                    path = grid.folder / f"{strategy}{settings_tag(load.settings)}_{load.name}_rate-{rate}_run-{run}{COMPRESSED_RECORD_SUFFIX}"
                    flags = [*load.flags, *(["--dataset-path", str(dataset)] if load.heavy else []),
                             *(["--seed", str(seed), "--num-prompts", str(grid.num_prompts)] if grid.seed_per_run else []),
                             *(["--additional-config", json.dumps(dict(load.settings))] if load.settings else [])]
                    out.append((path, ["replay", "--strategy", strategy, "--workload", load.name, "--rate", str(rate),
                                       *flags, "--residual-seed", str(run), "--run", str(run), "--goodput", SLOS[0],
                                       "--slo", SLOS[1], "--step-model", str(STEP_MODEL), "--out", str(path),
                                       "--no-detail"], seed))
    return out


def replay(argv: list[str]) -> int:
    from harness import sched_sim

    return sched_sim.main(argv)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="slo")
    parser.add_argument("--jobs", type=int, default=1, help="replays at once (one process each)")
    parser.add_argument("--dry-run", action="store_true", help="list the replays still to run")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    grid = GRIDS[args.grid]
    todo = [(path, cmd, seed) for path, cmd, seed in replays(grid) if not path.exists()]
    print(f"[screen] {len(todo)} replays to run in {grid.folder}")
    if args.dry_run:
        for path, cmd, _ in todo:
            print(f"[screen] would run: python harness/sched_sim.py {shlex.join(cmd)}")
        return 0
    seeds = sorted({seed for _, cmd, seed in todo if "--dataset-path" in cmd})
    if seeds:
        from harness.offline_model import resolve_model

        for seed in seeds:
            workloads.ensure_dataset(grid.folder / "datasets", resolve_model("models/qwen3-0.6b"), grid.num_prompts, seed)
    failed = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for i, ((path, _, _), rc) in enumerate(zip(todo, pool.map(replay, [cmd for _, cmd, _ in todo])), 1):
            failed += rc != 0
            print(f"[screen] {i}/{len(todo)} {path.name}{'' if rc == 0 else f' FAILED (exit {rc})'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
