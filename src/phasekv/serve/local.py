"""What the client reads locally: the model's tokenizer, its compression stride, and the text
round trip for servers that take only text prompts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from ..model.io import CONFIG_FILE, FORMAT, read_config
from ..scoring import ScorerError
from ..tasks.tokenizer import build_word_tokenizer, load_word_tokenizer
from .errors import EndpointError


def load_tokenizer(directory: str | Path):
    """The tokenizer a local scorer of `directory` would use: a phasekv checkpoint's
    tokenizer.json (else the built-in word tokenizer), or an HF directory's fast tokenizer."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ScorerError(f"tokenizer directory {directory} does not exist")
    if _is_phasekv(directory):
        has_file = (directory / "tokenizer.json").is_file()
        return load_word_tokenizer(directory) if has_file else build_word_tokenizer()
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ScorerError(f"cannot load a tokenizer from {directory}: {err}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ScorerError(f"the tokenizer in {directory} is not a fast tokenizer (tokenizer.json is needed)")
    return tokenizer


def local_stride(directory: str | Path) -> int | None:
    """The compression stride recorded in `directory`'s config.json, or None."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        return None
    if _is_phasekv(Path(directory)):
        compression = read_config(directory)[0].compression
        return None if compression is None else compression.stride
    from transformers import AutoConfig

    from ..scoring import hf_compression_stride

    try:
        return hf_compression_stride(AutoConfig.from_pretrained(directory, local_files_only=True))
    except (OSError, ValueError):
        return None


def _is_phasekv(directory: Path) -> bool:
    path = directory / CONFIG_FILE
    try:
        meta = json.loads(path.read_text()) if path.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def text_prompt(tokenizer, ids: Sequence[int]) -> str:
    """The text of `ids`, verified to re-tokenise (without special tokens) to exactly `ids`;
    EndpointError where a text-only server would see shifted positions."""
    text = tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)
    back = tokenizer(text, add_special_tokens=False)["input_ids"]
    if list(back) != list(ids):
        first = next((i for i, (a, b) in enumerate(zip(back, ids, strict=False)) if a != b), min(len(back), len(ids)))
        raise EndpointError(
            f"the text round trip shifts tokens ({len(ids)} ids -> {len(back)} after re-tokenising, first difference "
            f"at position {first}): this prompt cannot be sent as text without moving positions; use a server that "
            "accepts token-id prompts"
        )
    return text


def tokenizer_hash(tokenizer) -> str:
    """SHA-256 (16 hex digits) of the tokenizer's full definition (its tokenizer.json), so a cache
    written with one tokenizer is never read with another."""

    text = tokenizer.backend_tokenizer.to_str()
    return hashlib.sha256(text.encode()).hexdigest()[:16]
