"""Which stride the period check uses, which period the phase verdict tests (`default_period`: the one rule of
every command and of the Python API, with its reason in one line) and which period the flip pattern is fitted
with; each records where its value came from."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PAPER_FLIP_PERIOD = 4  # DeepSeek-V4's compression stride, the period of the paper's Figure 1


def resolve_stride(option: int | None, model_stride: int | None, modulus: int) -> tuple[int | None, str]:
    """(stride S for mean_r |A(r) - A(r+S)| and the fold, its source).

    Order: the option; else the model's compression stride if it is < modulus (else no period
    check: None); else modulus // 2 for models without compression (a flat-accuracy check).
    """
    if option is not None:
        if not 1 <= option < modulus:
            raise ValueError(f"stride (--stride) must satisfy 1 <= stride < modulus ({modulus}), got {option}")
        return option, "option"
    if model_stride is not None:
        if model_stride < modulus:
            return model_stride, "model config (compression stride)"
        return None, f"the model's compression stride {model_stride} is not below modulus {modulus}"
    return modulus // 2, "default modulus // 2 (the model has no compression stride)"


MODEL_GRID = "the model's compression stride"
PRESS_GRID = "the press's chunk grid"


@dataclass(frozen=True)
class Period:
    """The period the phase verdict tests (`value`), the period check's stride (None: no check across residues)
    and `reason`, the line every command prints ("period 8: the press's chunk grid")."""

    value: int
    stride: int | None
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def phase_period(stride: int | None, grid_stride: int | None, modulus: int) -> int:
    """The period the phase verdict tests: the period-check stride, else the compression grid's stride, else the
    modulus; a period below 2 has no phase, so it falls back to the modulus too."""
    period = stride or grid_stride or modulus
    return period if period >= 2 else modulus


def default_period(
    option: int | None, grid_stride: int | None, modulus: int, grid: str = MODEL_GRID, known: bool = True
) -> Period:
    """The period of a run from `--stride` (`option`), the compression grid's stride (`grid` names it: the
    model's or a press's) and the modulus, with its reason. `known`: whether the grid could be read at all (a
    served model's is known only once it answers)."""
    stride, _ = resolve_stride(option, grid_stride, modulus)
    period = phase_period(stride, grid_stride, modulus)
    if option is not None:
        reason = f"--stride {option}"
    elif grid_stride is not None:
        reason = grid if stride is not None else f"{grid} (not below the modulus {modulus}: no period check)"
    else:
        none = "the model has no compression grid" if known else "no compression grid known before the model answers"
        reason = f"{none}; half the modulus {modulus}"
    if period != (stride or grid_stride):
        reason += f" (a period below 2 has no phase: the modulus {modulus})"
    return Period(period, stride, f"period {period}: {reason}")


def resolve_period(option: int | None, model_stride: int | None) -> tuple[int, str]:
    """(period P of the flip pattern, its source): the option, else the model's compression
    stride, else 4 (the paper's DeepSeek-V4 stride)."""
    if option is not None:
        if option < 1:
            raise ValueError(f"period (--period) must be >= 1, got {option}")
        return option, "option"
    if model_stride is not None:
        return model_stride, "model config (compression stride)"
    return PAPER_FLIP_PERIOD, "default 4 (DeepSeek-V4's stride; the model has no compression stride)"
