"""The theory runs' result formats (`phasekv theory theorem1|theorem2|sweep`)."""

from __future__ import annotations

from typing import Any

from phasekv.results.base import Count, Numbers, Typed, TypedResult


def rows_text(rows: list[dict], keys: list[str]) -> str:
    """A right-aligned table of `keys` (floats to 4 significant digits)."""

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["  ".join(f"{key:>10}" for key in keys)]
    lines += ["  ".join(f"{cell(row[key]):>10}" for key in keys) for row in rows]
    return "\n".join(lines)


class TheoryParams(Typed):
    chunk_size: Count
    n_heads: Count


class GateTraining(Typed):
    step: list[int]
    key_static: list[Numbers]
    key_per_window: list[Numbers]


class GateTrainingFinal(Typed):
    selected_positions: list[int | None]


class Theorem2Result(TypedResult):
    """`phasekv theory theorem2`: gates trained in the idealised model, their concentration over steps."""

    recognising_keys = frozenset({"params", "trajectory", "final"})

    params: TheoryParams
    trajectory: GateTraining
    final: GateTrainingFinal

    @property
    def summary(self) -> str:
        """What `phasekv theory theorem2` prints: each head's selected key and value positions and how concentrated
        its gates ended, then the loss, accuracy by position and coverage."""
        final = self.to_dict()["final"]
        heads = [
            {
                "head": head,
                "key_pos": final["selected_positions"][head],
                "value_pos": final["value_peak_positions"][head],
                "key_static": final["key_static"][head],
                "key_window": final["key_per_window"][head],
                "val_static": final["value_static"][head],
                "val_window": final["value_per_window"][head],
                "concentr": final["head_concentrated"][head],
            }
            for head in range(self.params.n_heads)
        ]
        by_position = ", ".join(f"{value:.2f}" for value in final["accuracy_by_position"])
        return (
            rows_text(heads, list(heads[0])) + f"\nloss {final['loss']:.4f}  accuracy by position [{by_position}]  "
            f"collisions {final['collisions']}  uncovered positions {final['uncovered_positions']}"
        )

    def __str__(self) -> str:
        return self.summary


class Theorem1Summary(Typed):
    n_starts: Count
    best_loss: float


class Theorem1Result(TypedResult):
    """`phasekv theory theorem1`: free query-independent rules from random starts."""

    recognising_keys = frozenset({"params", "starts", "summary"})

    params: TheoryParams
    summary: Theorem1Summary

    @property
    def text(self) -> str:
        """What `phasekv theory theorem1` prints: how many starts end one-hot (values one after keys), the best
        loss, and the one-hot assignments compared when there are any. (`summary` is the result's own field.)"""
        data = self.to_dict()
        summary = data["summary"]
        best = min(data["starts"], key=lambda start: start["loss"])
        line = (
            f"{summary['n_one_hot_value_after_key']}/{summary['n_starts']} starts end one-hot with values one "
            f"after keys, {summary['n_of_those_distinct']} of them on distinct positions; "
            f"best loss {summary['best_loss']:.5f} (smallest largest weight: key "
            f"{best['min_key_weight']:.3f}, value {best['min_value_weight']:.3f})"
        )
        if "assignments" not in data:
            return line
        return line + "\n" + rows_text(data["assignments"]["assignments"], ["positions", "distinct", "loss"])

    def __str__(self) -> str:
        return self.text


class SweepResult(TypedResult):
    """`phasekv theory sweep`: a grid of Theorem 2 runs and its table."""

    recognising_keys = frozenset({"base", "grid", "seeds", "runs", "table"})

    grid: dict[str, Any]
    table: list[dict[str, Any]]

    @property
    def summary(self) -> str:
        """What `phasekv theory sweep` prints: one row per grid point (its settings, then what its seeds reached)."""
        settings = list(self.grid)
        return rows_text(self.table, settings + [key for key in self.table[0] if key not in settings])

    def __str__(self) -> str:
        return self.summary
