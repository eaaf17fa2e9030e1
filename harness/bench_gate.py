r"""``vllm bench serve`` that starts its load only once every client of its run is ready.

The clients of a split load (``serve_bench.py --clients N``) each load a tokenizer, sample their
prompts and send a test request before their load starts. On the H200 the first requests of two
clients began 2.3-6.6 s apart, so a split rate-inf load arrived as staggered bursts, not as one
load. Here each client, once set up, waits at a shared ``LockstepBarrier`` just before its
benchmark clock starts, and all begin together (polled every millisecond).

The hook is ``fetch_spec_decode_metrics``: in vLLM 0.26.0 ``benchmark()`` calls it right after
"Starting main benchmark run..." and before it starts its clock and sends the first request. A
vLLM without it fails here at start-up instead of running ungated.

    python -m harness.bench_gate --gate DIR --parties N --name K --timeout-s S -- <bench serve flags>

What the barrier saw, and when this client passed it, goes to ``DIR/<name>.json``. A client that
ends before the gate (an error in its set-up) leaves the barrier, so its partners start at once
rather than wait out the timeout; the harness then stops them and fails the run with its log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from harness.bench_client import GATE_MARKER, LockstepBarrier

POLL_S = 0.001  # the clients pass within about this much of each other


def install_gate(barrier: LockstepBarrier) -> None:
    """Make the first ``fetch_spec_decode_metrics`` call of ``vllm bench serve`` wait for every party."""
    from vllm.benchmarks import serve

    original = serve.fetch_spec_decode_metrics

    async def gated(*args: Any, **kwargs: Any) -> Any:
        serve.fetch_spec_decode_metrics = original  # only the call before the load waits
        record = barrier.wait("start")  # blocking is fine: set-up is over, nothing else is in flight
        record["passed_unix_s"] = time.time()
        print(GATE_MARKER, flush=True)  # the harness's load window opens here
        (barrier.folder / f"{barrier.tag}.json").write_text(json.dumps(record))
        return await original(*args, **kwargs)

    serve.fetch_spec_decode_metrics = gated


def main(argv: list[str]) -> int:
    cut = argv.index("--") if "--" in argv else len(argv)
    own, bench_flags = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gate", type=Path, required=True, help="folder the clients of one run share")
    parser.add_argument("--parties", type=int, required=True, help="how many clients start together")
    parser.add_argument("--name", required=True, help="this client's name in the folder")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="seconds to wait for the others, then start alone (recorded)")
    ns = parser.parse_args(own)
    barrier = LockstepBarrier(ns.gate, ns.parties, ns.name, ns.timeout_s, poll_s=POLL_S)
    try:
        install_gate(barrier)
        from vllm.entrypoints.cli.main import main as vllm_main

        sys.argv = [sys.argv[0], "bench", "serve", *bench_flags]  # `vllm bench` picks the platform from argv
        vllm_main()
    finally:
        barrier.leave()  # a client that fails before the gate does not hold the others at it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
