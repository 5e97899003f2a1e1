"""The conformance run's options (the only place their defaults live) and its schema id; no torch, so the
command line reads its defaults from here without loading a model."""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = "phasekv.conformance/1"
# the verdict by `conforms`: None where the reference was not reproducible, so no mode was judged
VERDICTS = {True: "conforms", False: "does not conform", None: "not judged"}


@dataclass(frozen=True)
class ConformanceOptions:
    """Options of a conformance run. `period` None: the candidate's (else the reference's) compression
    stride S, 4 if neither has one. `chunk_sizes` None: S-1, S, S+1, `odd_chunk`, `large_chunk`. `modes`
    None: every mode the candidate has. `tolerance` bounds |delta log-prob| of every actual next token
    and the KL (reference || candidate) wherever both distributions are known."""

    length: int = 96
    prompts: int = 2
    seed: int = 0
    period: int | None = None
    tolerance: float = 1e-4
    chunk_sizes: tuple[int, ...] | None = None
    odd_chunk: int = 7
    large_chunk: int = 61
    pad_shortening: int = 5  # padded batches: prompt i is cut by i * pad_shortening + 3 tokens
    fork_at: float = 0.4  # fork: the shared prefix is this fraction of the prompt
    modes: tuple[str, ...] | None = None
    ubatch_sizes: tuple[int, ...] | None = None  # llama.cpp's `ubatch u` modes; None: 1 .. its largest ratio
    dtype: str = "float32"
