"""The offline Qwen3 tokenizer and the Task 1 prompt set."""

from __future__ import annotations

import json
import random
import unicodedata

import pytest
from transformers import AutoTokenizer

from harness.offline_model import (FIRST_ADDED_ID, QWEN3_8B_DIR, QWEN3_ADDED_TOKENS, QWEN3_DIR, QWEN_PRETOKENIZE_REGEX,
                           build_tokenizer, ensure_tokenizer, kv_bytes_per_token, load_config,
                           non_embedding_parameters, qwen_bpe_file)
from prompts.make_prompts import make_prompts


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(ensure_tokenizer(QWEN3_DIR)))


def test_tokenizer_matches_known_qwen3_ids(tokenizer):
    assert tokenizer("Hello world!", add_special_tokens=False)["input_ids"] == [9707, 1879, 0]
    assert tokenizer("你好", add_special_tokens=False)["input_ids"] == [108386]
    assert len(tokenizer) == 151669
    assert tokenizer.convert_tokens_to_ids(list(QWEN3_ADDED_TOKENS)) == list(
        range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(QWEN3_ADDED_TOKENS)))
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 151645


def test_tokenizer_agrees_with_tiktoken_on_random_mixed_text(tokenizer):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    enc = tiktoken.Encoding("qwen3", pat_str=QWEN_PRETOKENIZE_REGEX,
                            mergeable_ranks=load_tiktoken_bpe(str(qwen_bpe_file())),
                            special_tokens={t: FIRST_ADDED_ID + i for i, t in enumerate(QWEN3_ADDED_TOKENS)})
    rng = random.Random(0)
    alphabet = list("abcXYZ019 \n\t.,;:!?'\"()-_/") + ["你", "好", "世界", "é", "ß", "한", "🙂", "  ", "'s", "\r\n"]
    for _ in range(300):
        text = unicodedata.normalize("NFC", "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))))
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == enc.encode(text), text


def test_build_tokenizer_writes_loadable_files(tmp_path):
    (tmp_path / "config.json").write_text((QWEN3_DIR / "config.json").read_text())
    build_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok("Hello world!", add_special_tokens=False)["input_ids"] == [9707, 1879, 0]


def test_prompt_generator_is_reproducible_and_exact(tokenizer):
    first = make_prompts(tokenizer, 6, 128, 512, seed=3)
    assert first == make_prompts(tokenizer, 6, 128, 512, seed=3)
    assert first != make_prompts(tokenizer, 6, 128, 512, seed=4)
    for prompt in first:
        assert 128 <= prompt["num_tokens"] <= 512
        assert len(tokenizer(prompt["text"], add_special_tokens=False)["input_ids"]) == prompt["num_tokens"]


def test_committed_prompt_set_is_what_the_generator_makes(tokenizer):
    committed = [json.loads(line) for line in (QWEN3_DIR.parent.parent / "prompts" / "task1.jsonl")
                 .read_text().splitlines()]
    assert len(committed) == 64
    assert committed == make_prompts(tokenizer, 64, 128, 512, seed=0)


@pytest.mark.parametrize(("model_dir", "published", "kv_bytes"), [
    (QWEN3_DIR, 0.44e9, 114_688),  # Qwen3-0.6B's card: 0.6B parameters, 0.44B non-embedding
    (QWEN3_8B_DIR, 6.95e9, 147_456),  # Qwen3-8B's card: 8.2B parameters, 6.95B non-embedding
])
def test_committed_configs_have_the_published_sizes(model_dir, published, kv_bytes):
    config = load_config(model_dir)
    assert non_embedding_parameters(config) == pytest.approx(published, rel=0.01)
    assert kv_bytes_per_token(config) == kv_bytes
    embeddings = config["vocab_size"] * config["hidden_size"] * (1 if config["tie_word_embeddings"] else 2)
    assert non_embedding_parameters(config) + embeddings == pytest.approx(
        0.6e9 if model_dir == QWEN3_DIR else 8.2e9, rel=0.02)
