"""The scheduler overhead benchmark: CPU time of one ``schedule()`` call for each strategy of the
registry against vLLM's stock ``AsyncScheduler``, with given numbers of waiting and running
requests (the real scheduler, a fake model: ``harness/sched_engine.py``).

    python -m harness.sched_bench [--waiting 1000] [--running 256] [--repeats 200] [--max-num-seqs N]

Why a script that prints numbers: how much a strategy costs per step is a measurement, not a
pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.sched_engine import SimConfig, fake_model_output, make_request, make_scheduler, step  # noqa: E402

if TYPE_CHECKING:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler


def _loaded_scheduler(cls: type, waiting: int, running: int, max_num_seqs: int,
                      seed: int) -> AsyncScheduler:
    """A scheduler with ``running`` decoding requests and ``waiting`` queued ones."""
    import random

    rng = random.Random(seed)
    sched = make_scheduler(cls, SimConfig(max_num_seqs=max_num_seqs, num_blocks=400_000))
    for _ in range(running):
        sched.add_request(make_request(rng.randint(128, 1024), 2_000))
    while any(r.is_prefill_chunk for r in sched.running) or sched.waiting:
        step(sched)
    for _ in range(waiting):
        sched.add_request(make_request(rng.randint(128, 1024), 2_000))
    return sched


def bench(waiting: int, running: int, repeats: int,
          max_num_seqs: int | None = None) -> list[tuple[str, float, float]]:
    """Median and p90 microseconds per ``schedule()`` call (the fake model update is not timed).

    With ``max_num_seqs == running`` (the default) the seq cap is full: no waiting request can be
    admitted and every step decodes. With headroom, each step also admits prompts, which are
    refilled so the waiting queue keeps its size; running then grows by the admitted requests.
    """
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    import my_scheduler

    classes = [("vLLM AsyncScheduler", AsyncScheduler)] + [  # every class of the registry
        (cls.__name__, cls) for cls in my_scheduler.SCHEDULER_CLASSES.values()]
    rows = []
    for name, cls in classes:
        sched = _loaded_scheduler(cls, waiting, running, max_num_seqs or running, seed=0)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            output = sched.schedule()
            times.append(time.perf_counter() - start)
            sched.update_from_output(output, fake_model_output(sched, output))
            # Keep the queues at the stated sizes: refill what was admitted or finished.
            while len(sched.waiting) < waiting:
                sched.add_request(make_request(512, 2_000))
        times.sort()
        rows.append((name, statistics.median(times) * 1e6, times[int(0.9 * len(times))] * 1e6))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--max-num-seqs", type=int, default=None, help="seq cap (default: --running)")
    args = parser.parse_args(argv)
    rows = bench(args.waiting, args.running, args.repeats, args.max_num_seqs)
    print(f"schedule() CPU time, {args.waiting} waiting, {args.running} running at start, "
          f"max_num_seqs {args.max_num_seqs or args.running}, {args.repeats} calls each")
    print(f"{'scheduler':40s} {'median us':>10s} {'p90 us':>10s} {'vs stock':>9s}")
    base = rows[0][1]
    for name, med, p90 in rows:
        print(f"{name:40s} {med:10.0f} {p90:10.0f} {med / base:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
