"""A heavy-tailed workload for ``vllm bench serve --dataset-name custom``.

vLLM's random dataset draws lengths uniformly around a mean; real traffic is skewed: most prompts
are short and a few are very long, and so are the answers. A long prompt at the head of the queue
delays every short one behind it, which is where ordering by length (SJF) can pay. This module
draws both lengths from log-normal distributions, clipped, writes them as a JSONL file of random
token prompts that ``vllm bench serve`` sends as they are (``--dataset-name custom
--custom-output-len -1 --skip-chat-template --disable-shuffle``), and gives the replay simulator
the same lengths (``read_lengths``).

    python -m harness.workloads --out heavy.jsonl --tokenizer models/qwen3-0.6b [--num-prompts 1000] [--seed 42]

Each line: ``{"prompt": TEXT, "output_tokens": N, "input_tokens": M}``; ``vllm bench serve``
ignores ``input_tokens`` and re-counts the prompt's tokens itself. The prompt is random token ids,
decoded and re-encoded by vLLM's own helper until it has exactly ``input_tokens`` tokens, so no two
prompts share a prefix (prefix caching has nothing to reuse, as with the random dataset).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FIRST_SPECIAL_ID = 151643  # Qwen3's added tokens start here: prompts draw only plain tokens
MEAN_DRAW = 200_000  # requests in the draw that stands for the distribution's mean


@dataclass(frozen=True)
class HeavyTail:
    """Log-normal lengths: the median and the log-space spread per side, and the clip bounds.
    The defaults keep a prompt plus its answer within 4,096 tokens (the simulator's model
    length) with a mean near the handout's load: about 750 prompt and 165 output tokens."""

    input_median: float = 512
    input_sigma: float = 1.0
    input_bounds: tuple[int, int] = (32, 3072)
    output_median: float = 128
    output_sigma: float = 0.8
    output_bounds: tuple[int, int] = (16, 1000)

    def lengths(self, num_prompts: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(prompt lengths, output lengths), inputs drawn first, from one generator seeded ``seed``."""
        rng = np.random.default_rng(seed)
        draw = lambda median, sigma, bounds: np.clip(  # noqa: E731
            np.rint(rng.lognormal(np.log(median), sigma, num_prompts)), *bounds).astype(int)
        inputs = draw(self.input_median, self.input_sigma, self.input_bounds)
        return inputs, draw(self.output_median, self.output_sigma, self.output_bounds)

    def mean_output_len(self) -> float:
        """The expected output length of one request (clipped and rounded as drawn), from one
        large fixed draw: what converts a capacity in tokens/s to requests/s for this load, as
        ``output_len`` does for the random dataset. Each run's own draw differs from it by a few
        percent."""
        return float(self.lengths(MEAN_DRAW, seed=0)[1].mean())


HEAVY = HeavyTail()


def dataset_path(folder: Path, num_prompts: int, seed: int) -> Path:
    """Where the draw lives in ``folder``: the name says what drew it, so a sweep reuses a file
    only for the same draw."""
    return folder / f"heavy_n-{num_prompts}_seed-{seed}.jsonl"


def write_dataset(out: Path, tokenizer_path: str, num_prompts: int, seed: int, spec: HeavyTail = HEAVY) -> Path:
    """Write the JSONL (atomically: a cut run leaves no half file that a re-run would trust)."""
    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets.datasets import gen_prompt_decode_to_target_len

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    inputs, outputs = spec.lengths(num_prompts, seed)
    rng = np.random.default_rng(seed + 1)  # the prompts' tokens: another stream than the lengths'
    vocab = min(tokenizer.vocab_size, FIRST_SPECIAL_ID)
    lines = []
    for n_in, n_out in zip(inputs, outputs):
        text, _, mismatch = gen_prompt_decode_to_target_len(
            tokenizer, rng.integers(0, vocab, size=int(n_in)).tolist(), int(n_in), rng=rng)
        lines.append(json.dumps({"prompt": text, "output_tokens": int(n_out), "input_tokens": int(n_in + mismatch)}))
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(".part")
    part.write_text("\n".join(lines) + "\n")
    part.replace(out)
    return out


def ensure_dataset(folder: Path, tokenizer_path: str, num_prompts: int, seed: int) -> Path:
    """The heavy-tailed dataset for this draw in ``folder``, written if it is not there yet."""
    path = dataset_path(folder, num_prompts, seed)
    return path if path.is_file() else write_dataset(path, tokenizer_path, num_prompts, seed)


def read_lengths(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths, output lengths) of a custom dataset file, in file order (what
    ``--disable-shuffle`` sends); each line needs ``input_tokens`` and ``output_tokens``."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    missing = [i for i, r in enumerate(rows) if not {"input_tokens", "output_tokens"} <= r.keys()]
    if not rows or missing:
        raise ValueError(f"{path}: every line needs input_tokens and output_tokens"
                         + (f" (line {missing[0] + 1} has not)" if missing else " (no lines)"))
    return (np.array([r["input_tokens"] for r in rows], dtype=int),
            np.array([r["output_tokens"] for r in rows], dtype=int))


def bench_params(path: Path) -> dict[str, Any]:
    """The ``vllm bench serve`` flags, as values, that send ``path`` as written: per-line output
    lengths, no chat template, file order."""
    return {"dataset_name": "custom", "dataset_path": str(path), "custom_output_len": -1,
            "skip_chat_template": True, "disable_shuffle": True}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    parser.add_argument("--tokenizer", required=True, help="a model folder or Hub id with the model's tokenizer")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    inputs, outputs = read_lengths(write_dataset(args.out, args.tokenizer, args.num_prompts, args.seed))
    print(f"wrote {args.out}: {len(inputs)} prompts; prompt tokens median {np.median(inputs):.0f}, mean "
          f"{inputs.mean():.0f}, max {inputs.max()}; output tokens median {np.median(outputs):.0f}, mean "
          f"{outputs.mean():.0f}, max {outputs.max()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
