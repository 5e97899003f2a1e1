"""The flip probe's options, the one place their defaults live (`phasekv eval flip` and `phasekv.probe(model,
"flip")` read them); torch-free, so a command's options can read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTEXT = (
    "def act_quant_kernel(N, block=128):\n"
    "    for i, j in T.Parallel(blk_m, group_size):\n"
    "        s_local[i] = T.max(amax_local[i], 1e-4) / fp8_max\n"
    "        y_local[i, j] = T.Cast(FP"
)


@dataclass(frozen=True)
class FlipOptions:
    """Options of a flip run: filler lengths are min_length .. min_length + n_lengths - 1 tokens;
    `families` None means every filler family; `period` None resolves by `resolve_period`;
    `template` joins filler and context (`prompts.FLIP_TEMPLATES`)."""

    context: str = DEFAULT_CONTEXT
    candidates: tuple[str, ...] = ("8", "32")
    min_length: int = 16
    n_lengths: int = 16
    families: tuple[str, ...] | None = None
    period: int | None = None
    n_permutations: int = 2000
    seed: int = 0
    template: str = "paper"
