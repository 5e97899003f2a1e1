"""llama.cpp as a conformance candidate: a GGUF run in process through llama-cpp-python's ctypes API, loaded
against the pinned build that scripts/build_llama_cpp.sh makes (not a pip install: the audit is of that build).

`LlamaCppRunner` has the local modes with llama.cpp's own means: `llama_decode` calls for chunks (its compressor
state carried between calls, as between ubatches), one sequence id per prompt in a batch, and, beyond them:
- `ubatch u` (u = 1 .. the largest compression ratio): each prompt alone in a context whose `n_ubatch` is u, its
  first o tokens decoded in one call and the rest in a second call that llama.cpp splits into ubatches of u,
  for every starting offset o = 0 .. u-1 (one row per prompt and offset);
- `fork` copies each prefix's sequence (`llama_memory_seq_cp`) into a second sequence id;
- `state`: the prefix (ending inside a window) decoded, each sequence's state saved (`llama_state_seq_get_data`),
  the prompt's rest decoded, the sequence removed, its state restored (`llama_state_seq_set_data`) and other
  tokens decoded from there;
- `truncate`: the prefix and a few other tokens decoded in one call, the sequence cut back to the prefix
  (`llama_memory_seq_rm`, which for DeepSeek-V4 is a rollback of at most `n_rs_seq` tokens, single-use: the
  context keeps that many snapshots of the compressor state) and the prompt's rest decoded.
llama.cpp batches sequences of different lengths without padding: "right-padded" is that batch (each prompt cut
to its own length, one sequence id each); "left-padded" is not defined.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import numpy as np
import torch

from .run import LocalRunner, ModeOutcome, Row
from .tiny_dsv4 import llama_cpp_root

GGML_TYPE_F32 = 0  # the cache in float32: llama.cpp's default F16 cache would round every key and value
STATE_MODES = ("state", "truncate")
TRUNCATED = 3  # `truncate`: tokens decoded past the prefix and then removed (within DeepSeek-V4's rollback)


def load_binding(root: Path | None = None):
    """llama-cpp-python's low-level API bound to the pinned build's libllama (which must exist)."""
    root = root or llama_cpp_root()
    lib = None if root is None else root / "build" / "bin"
    if lib is None or not any(lib.glob("libllama.*")):
        raise FileNotFoundError("llama.cpp is not built: run scripts/build_llama_cpp.sh first")
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib)  # read when the binding loads the library
    if str(root / "python") not in sys.path:
        sys.path.insert(0, str(root / "python"))
    import llama_cpp.llama_cpp as binding

    return binding


class _Sequences:
    """A llama.cpp context holding `n_seq` sequences (one stream each) and the next position of each."""

    def __init__(self, runner, n_seq: int, n_ubatch: int | None = None, n_rs_seq: int = 0):
        self.runner, self.ctx = runner, runner.context(n_seq, n_ubatch, n_rs_seq)
        self.pos = [0] * n_seq


class LlamaCppRunner(LocalRunner):
    kind = "llama.cpp"
    left_padding = (
        "not defined: llama.cpp batches sequences of different lengths without padding (see right-padded, "
        "one batch of prompts of different lengths, a sequence id each)"
    )

    def __init__(self, gguf_path: Path | str, threads: int = 1, root: Path | None = None, flash_attn: int = 0):
        self.lib = lib = load_binding(root)
        # flash attention off by default: on CPU (llama.cpp's default "auto" turns it on) it moves log-probs by
        # ~1e-3 with the batch's shape from position 0 (measured: decode vs one batch 8e-3, 5e-6 without it),
        # which would hide any phase error of the compressed cache under rounding; -1 auto, 0 off, 1 on
        self.path, self.threads, self.flash_attn = Path(gguf_path), threads, flash_attn
        self.name = f"llama.cpp {self.path.name}"
        self._quiet = lib.llama_log_callback(lambda level, text, data: None)  # kept: C holds the pointer
        lib.llama_log_set(self._quiet, None)
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            raise ValueError(f"llama.cpp could not load {self.path}")
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.ratios = tuple(sorted({r for r in self._meta_ints("deepseek4.attention.compress_ratios") if r}))
        self.stride = self.ratios[0] if self.ratios else None
        self.n_ctx_seq = 512
        self._contexts: dict[tuple[int, int | None], object] = {}

    def _meta_ints(self, key: str) -> list[int]:
        sys.path.insert(0, str(llama_cpp_root() / "gguf-py"))
        import gguf

        field = gguf.GGUFReader(self.path).fields.get(key)
        return [] if field is None else [int(v) for v in field.contents()]

    def context(self, n_seq: int, n_ubatch: int | None, n_rs_seq: int = 0):
        """A context for n_seq sequences (cleared), one per (n_seq, n_ubatch, n_rs_seq): making one per call would
        be slow. n_rs_seq: how many of the last decoded tokens a sequence can be cut back by (DeepSeek-V4's
        compressor state is recurrent: it keeps that many snapshots)."""
        lib, key = self.lib, (n_seq, n_ubatch, n_rs_seq)
        if key not in self._contexts:
            p = lib.llama_context_default_params()
            p.n_ctx = p.n_batch = n_seq * self.n_ctx_seq
            p.n_ubatch = n_ubatch or p.n_batch
            p.n_seq_max = n_seq
            p.n_rs_seq = n_rs_seq
            p.n_threads = p.n_threads_batch = self.threads
            p.type_k = p.type_v = GGML_TYPE_F32
            p.flash_attn_type = self.flash_attn
            p.kv_unified = False  # DeepSeek-V4: one compressed stream per sequence
            ctx = lib.llama_init_from_model(self.model, p)
            if not ctx:
                raise RuntimeError(f"llama.cpp could not make a context for {n_seq} sequences, n_ubatch {n_ubatch}")
            self._contexts[key] = ctx
        ctx = self._contexts[key]
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        return ctx

    def decode(self, seqs: _Sequences, parts: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """One `llama_decode` call holding each sequence's tokens in `parts` (sequence id -> tokens, each after its
        sequence's last position) -> their logits [len, V] per sequence."""
        lib = self.lib
        n = sum(len(t) for t in parts.values())
        batch = lib.llama_batch_init(n, 0, 1)
        try:
            i = 0
            for seq, tokens in parts.items():
                for token in tokens:
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, seqs.pos[seq], 1
                    batch.seq_id[i][0], batch.logits[i] = seq, True
                    seqs.pos[seq] += 1
                    i += 1
            batch.n_tokens = n
            status = lib.llama_decode(seqs.ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status} for {n} tokens")
            logits = np.ctypeslib.as_array(lib.llama_get_logits(seqs.ctx), shape=(n, self.vocab_size))
            out, i = {}, 0
            for seq, tokens in parts.items():
                out[seq] = torch.from_numpy(logits[i : i + len(tokens)].copy())
                i += len(tokens)
            return out
        finally:
            lib.llama_batch_free(batch)

    # ------------------------------------------------------------------------- LocalRunner's primitives

    def logits(self, ids):
        return self.step(ids, self.new_cache(len(ids)))

    def new_cache(self, n_seq: int = 1):
        return _Sequences(self, n_seq)

    def step(self, ids, cache):
        out = self.decode(cache, {b: row for b, row in enumerate(ids.tolist())})
        return torch.stack([out[b] for b in range(len(ids))])

    @torch.no_grad()
    def chunked(self, ids, bounds):
        cache = self.new_cache(len(ids))
        parts = [self.step(ids[:, a:b], cache) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        return self.readout(torch.cat(parts, dim=1))

    def padded(self, rows, side):
        seqs = _Sequences(self, len(rows))
        out = self.decode(seqs, dict(enumerate(rows)))
        width = max(map(len, rows))
        return [torch.nn.functional.pad(self.readout(out[b]), (0, 0, 0, width - len(r))) for b, r in enumerate(rows)]

    @torch.no_grad()
    def forked(self, ids, prefix, others):
        """The prefix decoded once per prompt, each sequence copied to a second id (`llama_memory_seq_cp`)."""
        n = len(ids)
        seqs = _Sequences(self, 2 * n)
        self.decode(seqs, {b: row for b, row in enumerate(ids[:, :prefix].tolist())})
        memory = self.lib.llama_get_memory(seqs.ctx)
        for b in range(n):
            self.lib.llama_memory_seq_cp(memory, b, n + b, -1, -1)
            seqs.pos[n + b] = prefix
        parts = {b: row for b, row in enumerate(ids[:, prefix:].tolist())}
        parts |= {n + b: row for b, row in enumerate(others.tolist())}
        out = self.decode(seqs, parts)
        own = torch.stack([self.readout(out[b]) for b in range(n)])
        return own, torch.stack([self.readout(out[n + b]) for b in range(n)])

    # -------------------------------------------------------------------------------- llama.cpp's modes

    def extra_modes(self, options) -> list[str]:
        sizes = options.ubatch_sizes or range(1, max(self.ratios or (self.stride or 4,)) + 1)
        return [*STATE_MODES, *(f"ubatch {u}" for u in sizes)]

    @torch.no_grad()
    def run_extra(self, mode: str, ids: torch.Tensor, prefix: int, others: torch.Tensor) -> ModeOutcome:
        seqs_ = ids.tolist()
        if mode.startswith("ubatch "):
            u = int(mode.split()[1])
            rows = []
            for s in seqs_:
                for o in range(u):
                    seqs = _Sequences(self, 1, n_ubatch=u)
                    parts = [self.decode(seqs, {0: s[:o]})[0]] if o else []
                    parts.append(self.decode(seqs, {0: s[o:]})[0])
                    rows.append(Row(s, 0, self.readout(torch.cat(parts))))
            return ModeOutcome(rows)
        n = len(ids)
        seqs = _Sequences(self, n, n_rs_seq=TRUNCATED if mode == "truncate" else 0)
        memory = self.lib.llama_get_memory(seqs.ctx)
        if mode == "truncate":
            self.decode(
                seqs,
                {b: s[:prefix] + o[:TRUNCATED] for b, (s, o) in enumerate(zip(seqs_, others.tolist(), strict=True))},
            )
            for b in range(n):
                if not self.lib.llama_memory_seq_rm(memory, b, prefix, -1):
                    return ModeOutcome(
                        undefined=f"llama_memory_seq_rm refused to cut a sequence back by {TRUNCATED} tokens "
                        f"(n_rs_seq {TRUNCATED})"
                    )
                seqs.pos[b] = prefix
            out = self.decode(seqs, {b: s[prefix:] for b, s in enumerate(seqs_)})
            return ModeOutcome([Row(s, prefix, self.readout(out[b])) for b, s in enumerate(seqs_)])
        if mode == "state":
            self.decode(seqs, {b: s[:prefix] for b, s in enumerate(seqs_)})
            saved = []
            for b in range(n):
                size = self.lib.llama_state_seq_get_size(seqs.ctx, b)
                buf = (ctypes.c_uint8 * size)()
                if self.lib.llama_state_seq_get_data(seqs.ctx, buf, size, b) != size:
                    raise RuntimeError(f"llama_state_seq_get_data wrote other than {size} bytes")
                saved.append(buf)
            own = self.decode(seqs, {b: s[prefix:] for b, s in enumerate(seqs_)})
            rows = [Row(s, prefix, self.readout(own[b])) for b, s in enumerate(seqs_)]
            for b, buf in enumerate(saved):
                self.lib.llama_memory_seq_rm(memory, b, -1, -1)  # a whole sequence: never refused
                if self.lib.llama_state_seq_set_data(seqs.ctx, buf, len(buf), b) != len(buf):
                    raise RuntimeError(f"llama_state_seq_set_data did not restore sequence {b}")
                seqs.pos[b] = prefix
            other = self.decode(seqs, {b: o for b, o in enumerate(others.tolist())})
            full = [s[:prefix] + o for s, o in zip(seqs_, others.tolist(), strict=True)]
            return ModeOutcome(rows + [Row(f, prefix, self.readout(other[b])) for b, f in enumerate(full)])
        raise ValueError(f"unknown mode {mode!r}")

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "gguf": str(self.path), "ratios": list(self.ratios)}
