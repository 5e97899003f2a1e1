"""Tokenize text files with a local Hugging Face tokenizer into token files (`tokens` format).

Each file is one document: its lines are tokenized in batches (no special tokens), EOS is appended
when the tokenizer has one, and the last `val_fraction` of the document's tokens go to the
validation split, the rest to training. A file's tokens are held in memory while it is split.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from phasekv.corpus.tokens import token_dtype, write_header


def _document_ids(path: Path, tokenizer, batch_lines: int, bar: tqdm) -> np.ndarray:
    """All token ids of one text file (int64 [n])."""
    chunks: list[np.ndarray] = []

    def flush(lines: list[str]) -> None:
        for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]:
            chunks.append(np.asarray(ids, dtype=np.int64))
        bar.update(sum(len(line.encode("utf-8")) for line in lines))

    lines: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            lines.append(line)
            if len(lines) == batch_lines:
                flush(lines)
                lines = []
    if lines:
        flush(lines)
    if tokenizer.eos_token_id is not None:
        chunks.append(np.array([tokenizer.eos_token_id], dtype=np.int64))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def tokenize_files(
    files: Sequence[str | Path],
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    val_fraction: float = 0.05,
    batch_lines: int = 1024,
    progress: bool = True,
) -> Path:
    """Write train.bin, val.bin and tokens.json into `out_dir`; returns the header path."""
    from transformers import AutoTokenizer

    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    paths = [Path(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        raise FileNotFoundError(f"no such text files: {missing}" if missing else "no input files given")
    if not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"tokenizer directory {tokenizer_dir} does not exist")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    vocab_size = len(tokenizer)
    dtype = token_dtype(vocab_size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"train": 0, "val": 0}
    temps = {split: out / f".{split}.bin.tmp" for split in counts}
    handles = {split: temps[split].open("wb") for split in counts}
    try:
        with tqdm(total=sum(p.stat().st_size for p in paths), unit="B", unit_scale=True, disable=not progress) as bar:
            for path in paths:
                bar.set_description(path.name)
                ids = _document_ids(path, tokenizer, batch_lines, bar)
                if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                    raise ValueError(f"{path}: token ids outside [0, {vocab_size}) from the tokenizer")
                n_val = int(len(ids) * val_fraction)
                for split, part in (("train", ids[: len(ids) - n_val]), ("val", ids[len(ids) - n_val :])):
                    handles[split].write(part.astype(dtype).tobytes())
                    counts[split] += len(part)
        if val_fraction > 0 and counts["val"] == 0:
            raise ValueError(f"no validation tokens: {counts['train']} tokens in all; raise --val-fraction or add text")
    except BaseException:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
        raise
    finally:
        for handle in handles.values():
            handle.close()
    for split, temp in temps.items():
        os.replace(temp, out / f"{split}.bin")
    extra = {"tokenizer": str(tokenizer_dir), "eos_id": tokenizer.eos_token_id, "files": [str(p) for p in paths]}
    return write_header(out, vocab_size, counts, extra)
