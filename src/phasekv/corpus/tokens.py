"""Token files: one flat array of token ids per split, memory-mapped, plus a JSON header.

Layout of a token directory:

    tokens.json    {"format": "phasekv-tokens", "dtype": "uint16" | "uint32", "vocab_size": V,
                    "splits": {"train": {"file": "train.bin", "count": N}, "val": {...}}, ...}
    train.bin      N little-endian ids of `dtype`, documents concatenated (each ended by EOS if the
    val.bin        tokenizer has one)

`TokenWindowSource` draws random windows of T+1 tokens: window i of global batch b starts at a
position drawn from numpy's generator seeded with (seed, split, b, i), so it is deterministic and
resumable from b alone. Every token of a window is scored.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from phasekv.corpus.batch import SPLITS, Batch, split_index
from phasekv.files import write_atomic

HEADER = "tokens.json"
FORMAT = "phasekv-tokens"


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


def write_header(directory: Path, vocab_size: int, counts: dict[str, int], extra: dict) -> Path:
    """Write tokens.json for split files `{split}.bin` holding `counts[split]` tokens."""
    header = {
        "format": FORMAT,
        "dtype": token_dtype(vocab_size).name,
        "vocab_size": vocab_size,
        "splits": {s: {"file": f"{s}.bin", "count": int(n)} for s, n in counts.items()},
        **extra,
    }
    path = directory / HEADER
    write_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(header, indent=2) + "\n"))
    return path


def read_header(directory: str | Path) -> dict:
    """The header of a token directory, checked against the split files' sizes."""
    directory = Path(directory)
    path = directory / HEADER
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: create token files with `phasekv data tokenize`")
    header = json.loads(path.read_text())
    if header.get("format") != FORMAT:
        raise ValueError(f"{path} is not a phasekv token header (format {header.get('format')!r})")
    itemsize = np.dtype(header["dtype"]).itemsize
    for info in header["splits"].values():
        data = directory / info["file"]
        if not data.is_file() or data.stat().st_size != info["count"] * itemsize:
            raise ValueError(f"{data} should hold {info['count']} {header['dtype']} tokens; it is missing or truncated")
    return header


def open_split(directory: str | Path, split: str) -> np.memmap:
    """The read-only memory map [count] of one split."""
    header = read_header(directory)
    if split not in header["splits"]:
        raise ValueError(f"{directory} has no {split!r} split (it has {sorted(header['splits'])})")
    info = header["splits"][split]
    return np.memmap(Path(directory) / info["file"], dtype=np.dtype(header["dtype"]), mode="r", shape=(info["count"],))


class TokenWindowSource:
    """Random windows of `seq_len + 1` tokens from a token directory, as a `DataSource`."""

    def __init__(self, directory: str | Path, seq_len: int, seed: int = 0):
        self.directory = Path(directory)
        self.header = read_header(self.directory)
        self.vocab_size = int(self.header["vocab_size"])
        self.seq_len, self.seed = seq_len, seed
        self.splits = {s: open_split(self.directory, s) for s in SPLITS if s in self.header["splits"]}
        for split, data in self.splits.items():
            if len(data) < seq_len + 1:
                raise ValueError(f"the {split} split has {len(data)} tokens, fewer than one window of {seq_len + 1}")

    def starts(self, split: str, position: int, indices: range) -> np.ndarray:
        """Window start offsets for sequences `indices` of global batch `position`."""
        high = len(self.splits[split]) - self.seq_len
        key = split_index(split)
        return np.array([np.random.default_rng([self.seed, key, position, i]).integers(high) for i in indices])

    def batch(self, split: str, position: int, indices: range) -> Batch:
        if split not in self.splits:
            raise ValueError(f"{self.directory} has no {split!r} split")
        data = self.splits[split]
        rows = np.stack([data[s : s + self.seq_len + 1] for s in self.starts(split, position, indices)])
        return Batch.from_numpy(rows, np.ones(rows.shape, dtype=bool))

    def describe(self) -> dict:
        return {
            "kind": "tokens",
            "directory": str(self.directory),
            "seq_len": self.seq_len,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "counts": {s: len(d) for s, d in self.splits.items()},
        }
