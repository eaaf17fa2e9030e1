"""Make the Task 1 prompt set: N prompts whose lengths are uniform in [MIN, MAX] Qwen3 tokens.

No dataset can be downloaded on the lab's offline hosts, so the text is synthetic but shaped like
a chat request: an instruction naming a task and a topic, followed by notes built from a fixed
English word list. Everything is drawn from ``random.Random(seed)``; the text is cut at the target
token count and re-checked, so each prompt tokenizes to exactly its recorded length under the
Qwen3 tokenizer (``models/qwen3-0.6b``).

    python prompts/make_prompts.py                      # writes prompts/task1.jsonl (64, 128..512, seed 0)
    python prompts/make_prompts.py --num 8 --out x.jsonl

Each line: {"id", "num_tokens", "text"}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.offline_model import QWEN3_DIR, ensure_tokenizer  # noqa: E402

TASKS = ("Summarize", "Explain", "Critique", "Rewrite in plain language", "List the key risks in",
         "Write a short reply to", "Translate the main points of", "Find the open questions in")
TOPICS = ("a database migration", "a hiking trip", "a quarterly budget", "a robotics class",
          "a museum visit", "a GPU cluster outage", "a cooking workshop", "a city council meeting",
          "a chemistry experiment", "a product launch", "a chess tournament", "a solar farm")
WORDS = (
    "the system team plan data model river light garden market window signal paper energy city "
    "student result memory network budget schedule request answer question morning evening report "
    "quickly carefully often rarely almost never always slowly clearly simple complex green heavy "
    "small large early late open closed bright quiet strong fragile measure compare build repair "
    "write read decide share travel collect improve reduce increase explain follow notice return "
    "because although while after before during between across under over within without about "
    "kernel cache token batch latency throughput queue worker server client policy metric figure"
).split()


def make_text(rng: random.Random, min_words: int) -> str:
    """An instruction line and enough note sentences to exceed ``min_words`` words."""
    lines = [f"{rng.choice(TASKS)} the following notes about {rng.choice(TOPICS)}.", "Notes:"]
    words = 0
    while words < min_words:
        n = rng.randint(6, 18)
        sentence = " ".join(rng.choice(WORDS) for _ in range(n))
        lines.append(f"- {sentence[0].upper()}{sentence[1:]}.")
        words += n
    return "\n".join(lines)


def make_prompts(tokenizer, num: int, min_tokens: int, max_tokens: int, seed: int) -> list[dict]:
    """``num`` prompts; prompt i has exactly ``lengths[i]`` tokens, lengths ~ U[min, max]."""
    rng = random.Random(seed)
    prompts = []
    for i in range(num):
        target = rng.randint(min_tokens, max_tokens)
        ids = tokenizer(make_text(rng, target), add_special_tokens=False)["input_ids"]
        cut = target
        for _ in range(50):  # decoding a cut can re-tokenize differently at the edge; trim until exact
            text = tokenizer.decode(ids[:cut])
            got = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if got == target:
                break
            cut += target - got
        else:
            raise RuntimeError(f"could not cut prompt {i} to exactly {target} tokens")
        prompts.append({"id": i, "num_tokens": target, "text": text})
    return prompts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num", type=int, default=64)
    parser.add_argument("--min-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=str(QWEN3_DIR))
    parser.add_argument("--out", default=str(HERE / "task1.jsonl"))
    args = parser.parse_args(argv)
    if not 0 < args.min_tokens <= args.max_tokens:
        parser.error("need 0 < --min-tokens <= --max-tokens")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tokenizer(Path(args.tokenizer))))
    prompts = make_prompts(tokenizer, args.num, args.min_tokens, args.max_tokens, args.seed)
    with open(args.out, "w") as handle:
        for prompt in prompts:
            handle.write(json.dumps(prompt, ensure_ascii=False) + "\n")
    lengths = [p["num_tokens"] for p in prompts]
    print(f"wrote {len(prompts)} prompts to {args.out}: tokens min {min(lengths)}, "
          f"max {max(lengths)}, mean {sum(lengths) / len(lengths):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
