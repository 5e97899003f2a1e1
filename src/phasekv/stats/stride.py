"""Which stride the period check uses, and which period the flip pattern is fitted with; both
record where the value came from."""

from __future__ import annotations

PAPER_FLIP_PERIOD = 4  # DeepSeek-V4's compression stride, the period of the paper's Figure 1


def resolve_stride(option: int | None, model_stride: int | None, modulus: int) -> tuple[int | None, str]:
    """(stride S for mean_r |A(r) - A(r+S)| and the fold, its source).

    Order: the option; else the model's compression stride if it is < modulus (else no period
    check: None); else modulus // 2 for models without compression (a flat-accuracy check).
    """
    if option is not None:
        if not 1 <= option < modulus:
            raise ValueError(f"--stride must satisfy 1 <= stride < modulus ({modulus}), got {option}")
        return option, "option"
    if model_stride is not None:
        if model_stride < modulus:
            return model_stride, "model config (compression stride)"
        return None, f"the model's compression stride {model_stride} is not below modulus {modulus}"
    return modulus // 2, "default modulus // 2 (the model has no compression stride)"


def resolve_period(option: int | None, model_stride: int | None) -> tuple[int, str]:
    """(period P of the flip pattern, its source): the option, else the model's compression
    stride, else 4 (the paper's DeepSeek-V4 stride)."""
    if option is not None:
        if option < 1:
            raise ValueError(f"--period must be >= 1, got {option}")
        return option, "option"
    if model_stride is not None:
        return model_stride, "model config (compression stride)"
    return PAPER_FLIP_PERIOD, "default 4 (DeepSeek-V4's stride; the model has no compression stride)"
