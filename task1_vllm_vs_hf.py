r"""Task 1: Hugging Face transformers (serial, static batching) vs vLLM offline, same prompts.

``python`` below is the project's interpreter: ``.venv/bin/python`` (built by ``run_tests.sh`` or
``run_lab.sh``), or on a GPU host without internet the ``python3`` that has vLLM after
``source /root/offline-gpu/install.sh activate`` (README, "A GPU host without internet"):

    python task1_vllm_vs_hf.py                                  # all three methods, real weights
    python task1_vllm_vs_hf.py --model models/qwen3-0.6b --dummy-weights   # offline host
    python task1_vllm_vs_hf.py --methods hf-serial,hf-static --device cpu --model models/tiny-qwen3 \
        --dummy-weights --num-prompts 4 --max-new-tokens 8 --out /tmp/t1.json

Methods:
* ``hf-serial``: ``generate`` one prompt at a time (greedy, 128 new tokens each).
* ``hf-static``: left-pad every prompt to the longest and run one ``generate`` for all of them.
  On CUDA OOM it looks for the largest batch that fits (halve, then bisect) and runs the prompts
  in batches of that size; the batch size used is reported, the run never crashes on OOM.
* ``vllm``: ``LLM(model, gpu_memory_utilization=0.9)`` and one ``generate`` of all prompts,
  with ``my_scheduler.KVPeakRecorder`` as ``scheduler_cls`` to read the real KV-cache peak. The
  first call after start-up (cold) is timed and reported; the reported run is a second call
  after the prefix cache was reset, so it pays no start-up cost and reuses no cached prompt.

With dummy (random) weights, EOS is suppressed so every prompt gets exactly ``--max-new-tokens``
tokens in every method (``min_new_tokens`` / ``ignore_eos``) and the methods do the same work;
the generated counts are checked and stored.

KV-cache peaks: the handout's formulas for transformers (serial: ``max_i(len_i + new) x B/token``;
static: ``B x L x B/token`` per batch, ``L`` the padded length plus the new tokens), and the
recorder's measured values for vLLM (``sum(num_computed_tokens)`` of running requests, and
allocated blocks x block size).

Results go to ``--out`` (default ``results/task1.json``), written after each method. A method
already in the file is skipped unless ``--force``; a file made with another configuration is
refused (use ``--force`` or another ``--out``). A model folder or prompts file that cannot be read
is a one-line error (exit status 2) before any method runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness.lab_metrics import PeriodicSampler  # noqa: E402
from harness.offline_model import DEFAULT_MODEL, kv_bytes_per_token, load_config, resolve_model  # noqa: E402
from harness.provenance import collect_meta, write_json_atomic  # noqa: E402

METHODS = ("hf-serial", "hf-static", "vllm")
DEFAULT_PROMPTS = ROOT / "prompts" / "task1.jsonl"
DEFAULT_OUT = ROOT / "results" / "task1.json"
MIB = 2**20


# --------------------------------------------------------------------------------------------
# Inputs and formulas
# --------------------------------------------------------------------------------------------
def load_prompts(path: Path, num: int) -> list[dict[str, Any]]:
    prompts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if num > len(prompts):
        raise ValueError(f"{path} holds {len(prompts)} prompts, {num} asked for")
    return prompts[:num]


def kv_peak_serial(input_lens: Sequence[int], new_tokens: int, bytes_per_token: int) -> int:
    """One request at a time, each allocated and freed: the longest one sets the peak."""
    return max(n + new_tokens for n in input_lens) * bytes_per_token


def static_batches(input_lens: Sequence[int], batch_size: int) -> list[list[int]]:
    return [list(input_lens[i:i + batch_size]) for i in range(0, len(input_lens), batch_size)]


def kv_peak_static(batches: Sequence[Sequence[int]], new_tokens: int, bytes_per_token: int) -> int:
    """Each batch holds B x L slots, L = longest prompt in it + new tokens (padding included)."""
    return max(len(b) * (max(b) + new_tokens) for b in batches) * bytes_per_token


def padding_stats(batches: Sequence[Sequence[int]], new_tokens: int) -> dict[str, float]:
    """KV slots held by static batching vs slots that real tokens need; ``padding_share`` is the
    padding's share of the held slots, (held - real) / held."""
    held = sum(len(b) * (max(b) + new_tokens) for b in batches)
    real = sum(n + new_tokens for b in batches for n in b)
    return {"held_token_slots": held, "real_tokens": real, "padding_slots": held - real,
            "padding_share": (held - real) / held}


def largest_fitting_batch(fits: Callable[[int], None], start: int) -> tuple[int, list[dict[str, Any]]]:
    """Largest batch size <= ``start`` for which ``fits(size)`` raises no CUDA OOM.

    Halves from ``start`` until a size fits, then bisects between that size and the smallest
    size known to fail. ``fits`` should try the worst case for that size (the longest prompts).
    Returns the size and the list of attempts. Raises if even a batch of one does not fit.
    """
    import torch

    attempts: list[dict[str, Any]] = []

    def try_size(size: int) -> bool:
        try:
            fits(size)
        except torch.cuda.OutOfMemoryError:
            attempts.append({"batch_size": size, "fits": False})
            release_cuda_memory()
            return False
        attempts.append({"batch_size": size, "fits": True})
        return True

    failed, size = start + 1, start
    while not try_size(size):
        failed = size
        if size == 1:
            raise RuntimeError("a batch of one prompt does not fit in GPU memory")
        size //= 2
    good = size
    while failed - good > 1:
        mid = (good + failed) // 2
        if try_size(mid):
            good = mid
        else:
            failed = mid
    return good, attempts


def release_cuda_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class DeviceMemorySampler(PeriodicSampler):
    """Peak of the whole GPU's used memory (all processes), sampled every 20 ms in a thread.

    vLLM's engine runs in a child process, so this parent's allocator cannot see its memory;
    the device-wide reading can. ``peak_mib`` is None on a machine without CUDA.
    """

    def __init__(self, interval_s: float = 0.02) -> None:
        super().__init__(interval_s)
        self.peak_bytes: int | None = None

    @staticmethod
    def used_bytes() -> int | None:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return total - free

    def sample(self) -> None:
        used = self.used_bytes()
        if used is not None:
            self.peak_bytes = max(self.peak_bytes or 0, used)

    @property
    def peak_mib(self) -> float | None:
        return None if self.peak_bytes is None else round(self.peak_bytes / MIB, 1)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------
def load_hf(model: str, dummy: bool, device: str, seed: int):
    """Model and left-padding tokenizer; dummy weights are random with the real shapes."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if dummy:
        config = AutoConfig.from_pretrained(model)
        with torch.device(device):
            hf_model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    else:
        hf_model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).to(device)
    hf_model.eval()
    return hf_model, tokenizer


def hf_generate(hf_model, tokenizer, texts: Sequence[str], max_new_tokens: int,
                fixed_len: bool) -> list[int]:
    """One padded ``generate`` over ``texts``; returns the new-token count of each row."""
    import torch
    from transformers import GenerationConfig

    device = hf_model.device
    enc = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    config = GenerationConfig(max_new_tokens=max_new_tokens,
                              min_new_tokens=max_new_tokens if fixed_len else None,
                              do_sample=False, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    with torch.inference_mode():
        out = hf_model.generate(**enc, generation_config=config)
    new = out[:, enc["input_ids"].shape[1]:].tolist()
    counts = []
    for row in new:
        eos_at = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else None
        counts.append(len(row) if eos_at is None else eos_at + 1)
    return counts


def hf_memory_fields(device: str, sampler: DeviceMemorySampler, baseline_mib: float | None) -> dict[str, Any]:
    import torch

    if not device.startswith("cuda"):
        return {"gpu_memory_peak_allocated_mib": None, "gpu_memory_peak_reserved_mib": None,
                "gpu_memory_device_peak_mib": None, "gpu_memory_device_baseline_mib": None}
    return {"gpu_memory_peak_allocated_mib": round(torch.cuda.max_memory_allocated() / MIB, 1),
            "gpu_memory_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / MIB, 1),
            "gpu_memory_device_peak_mib": sampler.peak_mib,
            "gpu_memory_device_baseline_mib": baseline_mib}


def reset_peak(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    release_cuda_memory()
    torch.cuda.reset_peak_memory_stats()
    used = DeviceMemorySampler.used_bytes()
    return None if used is None else round(used / MIB, 1)


def timed_generation(hf_model, tokenizer, texts: list[str], batch_size: int, args,
                     label: str) -> tuple[float, list[int], DeviceMemorySampler, float | None]:
    """Generate for ``texts`` in consecutive batches of ``batch_size``: wall time, new tokens per
    prompt, the memory sampler and the memory in use before. Serial generation is batch 1, so the
    two transformers methods time exactly the same loop."""
    baseline = reset_peak(args.device)
    counts: list[int] = []
    with DeviceMemorySampler() as sampler:
        synchronize(args.device)
        start = time.perf_counter()
        for i in range(0, len(texts), batch_size):
            counts += hf_generate(hf_model, tokenizer, texts[i:i + batch_size],
                                  args.max_new_tokens, args.fixed_output_len)
            done = min(i + batch_size, len(texts))
            if args.progress and (batch_size > 1 or done % 8 == 0):  # serial: every 8th prompt
                print(f"  {label}: {done}/{len(texts)} prompts, {time.perf_counter() - start:.1f} s", flush=True)
        synchronize(args.device)
        seconds = time.perf_counter() - start
    return seconds, counts, sampler, baseline


def run_hf_serial(hf_model, tokenizer, prompts, args, bytes_per_token: int) -> dict[str, Any]:
    texts = [p["text"] for p in prompts]
    hf_generate(hf_model, tokenizer, texts[:1], min(8, args.max_new_tokens), args.fixed_output_len)
    seconds, counts, sampler, baseline = timed_generation(hf_model, tokenizer, texts, 1, args, "hf-serial")
    lens = [p["num_tokens"] for p in prompts]
    return {
        "total_s": seconds, "batch_size": 1, "output_tokens": sum(counts),
        "output_tokens_per_s": sum(counts) / seconds, "new_tokens_per_prompt": counts,
        "kv_peak_bytes": kv_peak_serial(lens, args.max_new_tokens, bytes_per_token),
        "kv_peak_source": "formula: max_i(len_i + new) x bytes/token",
        **hf_memory_fields(args.device, sampler, baseline),
    }


def run_hf_static(hf_model, tokenizer, prompts, args, bytes_per_token: int) -> dict[str, Any]:
    texts = [p["text"] for p in prompts]
    lens = [p["num_tokens"] for p in prompts]
    hf_generate(hf_model, tokenizer, texts[:2], min(8, args.max_new_tokens), args.fixed_output_len)

    import torch

    requested = min(args.static_batch_size or len(texts), len(texts))
    attempts: list[dict[str, Any]] = []
    try:
        result = timed_generation(hf_model, tokenizer, texts, requested, args, "hf-static")
        batch_size = requested
        attempts.append({"batch_size": requested, "fits": True})
    except torch.cuda.OutOfMemoryError:
        release_cuda_memory()
        attempts.append({"batch_size": requested, "fits": False})
        longest = sorted(range(len(texts)), key=lambda i: -lens[i])

        def fits(size: int) -> None:
            hf_generate(hf_model, tokenizer, [texts[i] for i in longest[:size]],
                        args.max_new_tokens, args.fixed_output_len)

        batch_size, searched = largest_fitting_batch(fits, requested // 2)
        attempts += searched
        print(f"  hf-static: batch {requested} does not fit; largest that fits: {batch_size}", flush=True)
        result = timed_generation(hf_model, tokenizer, texts, batch_size, args, "hf-static")
    seconds, counts, sampler, baseline = result
    batches = static_batches(lens, batch_size)
    return {
        "total_s": seconds, "batch_size": batch_size, "requested_batch_size": requested,
        "oom_search": attempts, "output_tokens": sum(counts),
        "output_tokens_per_s": sum(counts) / seconds, "new_tokens_per_prompt": counts,
        "kv_peak_bytes": kv_peak_static(batches, args.max_new_tokens, bytes_per_token),
        "kv_peak_source": "formula: B x (longest prompt in batch + new) x bytes/token",
        "padding": padding_stats(batches, args.max_new_tokens),
        **hf_memory_fields(args.device, sampler, baseline),
    }


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------
def read_engine_stats(path: Path, timeout_s: float = 10.0) -> dict[str, Any]:
    """The recorder's JSON, written by the engine process when it ran out of requests."""
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine wrote no scheduler stats to {path}: was "
                               "my_scheduler.KVPeakRecorder loaded (PYTHONPATH)?")
        time.sleep(0.1)
    return json.loads(path.read_text())


def run_vllm(model: str, prompts, args) -> dict[str, Any]:
    """Offline ``LLM.generate`` of all prompts with the KV-peak recorder as scheduler."""
    from harness.step_recorder import STATS_ENV

    stats_path = Path(tempfile.mkdtemp(prefix="task1-vllm-")) / "scheduler_stats.json"
    os.environ[STATS_ENV] = str(stats_path)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from vllm import LLM, SamplingParams

    baseline = reset_peak(args.device)
    engine_kwargs: dict[str, Any] = {
        "model": model, "gpu_memory_utilization": args.gpu_memory_utilization, "dtype": "bfloat16",
        "seed": args.seed, "scheduler_cls": "my_scheduler.KVPeakRecorder",
        "load_format": "dummy" if args.dummy_weights else "auto",
    }
    with DeviceMemorySampler() as sampler:
        start = time.perf_counter()
        llm = LLM(**engine_kwargs)
        startup_s = time.perf_counter() - start
        sampling = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens,
                                  ignore_eos=args.fixed_output_len)
        texts = [p["text"] for p in prompts]
        start = time.perf_counter()
        llm.generate(texts, sampling, use_tqdm=False)
        cold_s = time.perf_counter() - start
        cold_stats = read_engine_stats(stats_path)
        llm.reset_prefix_cache()
        start = time.perf_counter()
        outputs = llm.generate(texts, sampling, use_tqdm=False)
        seconds = time.perf_counter() - start
    stats = read_engine_stats(stats_path)
    counts = [len(o.outputs[0].token_ids) for o in outputs]
    prompt_lens = [len(o.prompt_token_ids) for o in outputs]
    expected = [p["num_tokens"] for p in prompts]
    if prompt_lens != expected:
        raise RuntimeError(f"vLLM tokenized the prompts to other lengths than recorded: {prompt_lens[:5]}...")
    config = llm.llm_engine.vllm_config
    steps_warm = {k: stats["steps"][k] - cold_stats["steps"][k] for k in stats["steps"]}
    del llm
    release_cuda_memory()
    kv = stats["kv"]
    return {
        "total_s": seconds, "cold_first_call_s": cold_s, "startup_s": startup_s,
        "batch_size": len(prompts), "output_tokens": sum(counts),
        "output_tokens_per_s": sum(counts) / seconds, "new_tokens_per_prompt": counts,
        "kv_peak_bytes": kv["peak_computed_bytes"],
        "kv_peak_source": "measured: max over steps of sum(num_computed_tokens) of running requests",
        "kv_peak_allocated_bytes": kv["peak_allocated_bytes"],
        "kv_capacity_tokens": kv["capacity_tokens"],
        "kv_capacity_bytes": kv["capacity_tokens"] * kv["bytes_per_token"],
        "scheduler_stats": stats, "scheduler_steps_timed_run": steps_warm,
        "engine": {k: v for k, v in engine_kwargs.items() if k != "model"} | {
            "max_model_len": config.model_config.max_model_len,
            "max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
            "enable_prefix_caching": config.cache_config.enable_prefix_caching,
            "async_scheduling": config.scheduler_config.async_scheduling,
            "enforce_eager": config.model_config.enforce_eager,
        },
        "gpu_memory_device_peak_mib": sampler.peak_mib,
        "gpu_memory_device_baseline_mib": baseline,
        "gpu_memory_note": "device-wide used memory while the engine ran; vLLM reserves "
                           "gpu_memory_utilization x total up front for weights, activations and its KV pool",
    }


# --------------------------------------------------------------------------------------------
# Results file
# --------------------------------------------------------------------------------------------
def open_results(path: Path, config: dict[str, Any], force: bool) -> dict[str, Any]:
    """The existing file if it was made with the same config, else a fresh one."""
    if path.exists():
        existing = json.loads(path.read_text())
        if existing.get("config") == config:
            return existing
        if not force:
            raise SystemExit(f"error: {path} was made with another configuration "
                             f"({existing.get('config')}); pass --force to replace it or use --out")
    return {"config": config, "methods": {}}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="Hub id or local folder (models/qwen3-0.6b for offline hosts)")
    parser.add_argument("--dummy-weights", action="store_true",
                        help="random weights with the real shapes (vLLM load_format=dummy, HF from_config)")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--fixed-output-len", action=argparse.BooleanOptionalAction, default=None,
                        help="force exactly --max-new-tokens per prompt (default: on with --dummy-weights)")
    parser.add_argument("--static-batch-size", type=int, default=0,
                        help="first batch size tried by hf-static (default: all prompts)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto (transformers only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="re-run methods already in --out")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    if args.fixed_output_len is None:
        args.fixed_output_len = args.dummy_weights
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if "vllm" in args.methods and args.device != "cuda":
        parser.error("the vllm method needs a CUDA GPU")
    return args


def load_inputs(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]], int]:
    """The model (its tokenizer built if needed), the prompts and the KV bytes per token.

    Everything named on the command line is read here, before any method runs, so that a wrong
    path fails in a second rather than after a model load. Raises OSError (a missing or unreadable
    folder or file, an unknown Hub id) or ValueError (a config that is not JSON, too few prompts).
    """
    model = resolve_model(args.model)
    prompts = load_prompts(args.prompts, args.num_prompts)
    if Path(model).is_dir():
        try:
            config = load_config(model)
        except json.JSONDecodeError as err:  # its message alone does not say which file
            raise ValueError(f"{Path(model) / 'config.json'} is not valid JSON: {err}") from err
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model).to_dict()
    return model, prompts, kv_bytes_per_token(config)


def main(argv: list[str]) -> int:
    """Task 1 for callers and tests: an unusable input raises (see ``load_inputs``)."""
    args = parse_args(argv)
    return run_methods(argv, args, *load_inputs(args))


def cli(argv: list[str]) -> int:
    """The command line: an unusable input is one line on stderr and exit status 2, no traceback."""
    args = parse_args(argv)
    try:
        inputs = load_inputs(args)
    except (OSError, ValueError) as err:
        message = " ".join(str(err).split())  # transformers' messages span several lines
        print(f"{Path(__file__).name}: error: {message}", file=sys.stderr)
        return 2
    return run_methods(argv, args, *inputs)


def run_methods(argv: list[str], args: argparse.Namespace, model: str,
                prompts: list[dict[str, Any]], bytes_per_token: int) -> int:
    """Run each method not yet in ``--out``, writing the file after each one; print the table."""
    weights = "dummy (random, real shapes)" if args.dummy_weights else "real"
    config = {"model": args.model, "weights": weights, "dtype": "bfloat16",
              "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
              "fixed_output_len": args.fixed_output_len, "prompts_file": args.prompts.name,
              "seed": args.seed, "kv_bytes_per_token": bytes_per_token, "device": args.device}
    results = open_results(args.out, config, args.force)
    results["input_lens"] = [p["num_tokens"] for p in prompts]
    todo = [m for m in args.methods if args.force or m not in results["methods"]]
    for skipped in sorted(set(args.methods) - set(todo)):
        print(f"[task1] {skipped}: already in {args.out}, skipped (--force re-runs it)")
    hf = None
    for method in todo:
        print(f"[task1] {method}: {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
              f"{weights} weights on {args.device}", flush=True)
        meta = collect_meta(args.model, weights, [Path(__file__).name, *argv])
        if method.startswith("hf-"):
            if hf is None:
                hf = load_hf(model, args.dummy_weights, args.device, args.seed)
            runner = run_hf_serial if method == "hf-serial" else run_hf_static
            entry = runner(*hf, prompts, args, bytes_per_token)
        else:
            if hf is not None:
                hf = None
                release_cuda_memory()
            entry = run_vllm(model, prompts, args)
        if args.fixed_output_len and set(entry["new_tokens_per_prompt"]) != {args.max_new_tokens}:
            raise RuntimeError(f"{method} generated {sorted(set(entry['new_tokens_per_prompt']))} "
                               f"new tokens per prompt, not {args.max_new_tokens}")
        entry["meta"] = meta
        results["methods"][method] = entry
        results["meta"] = meta
        write_json_atomic(args.out, results, indent=1)
        print(f"[task1] {method}: {entry['total_s']:.2f} s, {entry['output_tokens_per_s']:.0f} tok/s, "
              f"KV peak {entry['kv_peak_bytes'] / MIB:.1f} MiB -> {args.out}", flush=True)
    from harness.results import task1_table

    print(task1_table(results).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
