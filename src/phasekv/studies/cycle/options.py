"""Gate cycling's options, the one place their defaults live (`phasekv cycle` and the reproduction's cycle stage
read them), and the syntax of its deltas; torch-free, so a command's options can read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CycleOptions:
    """What a cycling run varies besides its prompts: the gate shifts `deltas` (0 is always measured as the
    base) and the bootstrap's resamples over mappings."""

    deltas: tuple[int, ...] = (-3, -2, -1, 0, 1, 2, 3)
    n_resamples: int = 2000


def parse_deltas(text: str) -> list[int]:
    """'-3..3' -> [-3, ..., 3]; '1,2,-1' -> [1, 2, -1]; pieces combine: '-3..-1,1..3'. Distinct, in order."""
    deltas: list[int] = []
    for piece in (p.strip() for p in text.split(",")):
        try:
            if ".." in piece:
                low, high = (int(v) for v in piece.split(".."))
                if low > high:
                    raise ValueError
                deltas += range(low, high + 1)
            else:
                deltas.append(int(piece))
        except ValueError:
            raise ValueError(f"cannot read deltas {text!r}: use integers, lists (1,2,-1) or ranges (-3..3)") from None
    return list(dict.fromkeys(deltas))


def format_deltas(deltas: tuple[int, ...]) -> str:
    """The text `parse_deltas` reads back as `deltas`: runs of consecutive deltas as ranges, (-3, ..., 3) -> '-3..3'."""
    runs: list[list[int]] = []
    for delta in deltas:
        if runs and delta == runs[-1][-1] + 1:
            runs[-1].append(delta)
        else:
            runs.append([delta])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs)
