"""Does a ranking follow a period-P pattern? Fit, per residue of the filler length mod P, the
candidate that is on top most often, and count the lengths that agree ("60 of 64 rankings follow
this pattern").

The majority per residue class is the best pattern: no other assignment of candidates to
residues agrees with more lengths. With several families, one pattern can be fitted per family
or one shared by all (pooled). A best-fitting pattern agrees with many lengths even for random
rankings, so `pattern_test` compares the pooled agreement with rankings shuffled over lengths
within each family, and reports the best constant pattern (one candidate always on top).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class PhasePattern:
    """`favoured[p]` is the candidate index on top for lengths L with L mod P = p (None where no
    length falls in that class); `agree` of `total` rankings follow it."""

    period: int
    favoured: list[int | None]
    agree: int
    total: int

    def describe(self, candidates: list[str]) -> str:
        """E.g. "8 when L mod 4 in {2, 3}; 32 when L mod 4 in {0, 1}", or "8 at every length
        (constant: no phase pattern)" when one candidate is favoured in every residue class."""
        present = {f for f in self.favoured if f is not None}
        if len(present) == 1:
            return f"{candidates[present.pop()]} at every length (constant: no phase pattern)"
        parts = []
        for c, text in enumerate(candidates):
            residues = [p for p, f in enumerate(self.favoured) if f == c]
            if residues:
                parts.append(f"{text} when L mod {self.period} in {{{', '.join(map(str, residues))}}}")
        return "; ".join(parts)

    def to_dict(self, candidates: list[str]) -> dict:
        """JSON record with the favoured candidate texts and a readable description."""
        return {
            **asdict(self),
            "favoured_text": [None if f is None else candidates[f] for f in self.favoured],
            "description": self.describe(candidates),
        }


def _agreement(winners: np.ndarray, classes: np.ndarray, period: int, n_candidates: int) -> np.ndarray:
    """counts[..., p, c]: how many rankings in residue class p have candidate c on top.

    `winners`: [..., F, L] candidate indices; `classes`: [L] residue of each length."""
    onehot = winners[..., None] == np.arange(n_candidates)  # [..., F, L, C]
    per_length = onehot.sum(axis=-3)  # [..., L, C]
    member = classes[:, None] == np.arange(period)  # [L, P]
    return np.einsum("...lc,lp->...pc", per_length, member)


def best_pattern(winners, lengths, period: int, n_candidates: int) -> PhasePattern:
    """The best-fitting period-`period` pattern for `winners` [F, L] (or [L]: one family) of
    candidate indices at filler `lengths` [L]; ties go to the lower candidate index."""
    w = np.atleast_2d(np.asarray(winners))
    classes = np.asarray(lengths) % period
    counts = _agreement(w, classes, period, n_candidates)  # [P, C]
    present = counts.sum(axis=1) > 0
    favoured = [int(c) if ok else None for c, ok in zip(counts.argmax(axis=1), present, strict=True)]
    return PhasePattern(period=period, favoured=favoured, agree=int(counts.max(axis=1).sum()), total=int(w.size))


def pattern_test(winners, lengths, period: int, n_candidates: int, n_permutations: int, seed: int) -> dict:
    """Pooled pattern agreement against chance: winners [F, L] are shuffled over lengths within
    each family; p = (1 + #{shuffled agreement >= observed}) / (1 + n_permutations). Also the
    agreement of the best constant pattern."""
    w = np.atleast_2d(np.asarray(winners))
    classes = np.asarray(lengths) % period
    observed = best_pattern(w, lengths, period, n_candidates).agree
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.broadcast_to(w, (n_permutations, *w.shape)).copy(), axis=-1)
    agree = _agreement(shuffled, classes, period, n_candidates).max(axis=-1).sum(axis=-1)
    constant = int(np.bincount(w.ravel(), minlength=n_candidates).max())
    return {
        "observed_agree": observed,
        "total": int(w.size),
        "constant_pattern_agree": constant,
        "permutation_p_value": float((1 + np.count_nonzero(agree >= observed)) / (1 + n_permutations)),
        "permutation_mean_agree": float(agree.mean()),
        "n_permutations": n_permutations,
        "seed": seed,
    }


def detect_period(
    winners, lengths, periods, n_candidates: int, n_permutations: int, seed: int, alpha: float = 0.01
) -> dict:
    """Which period the rankings follow: `pattern_test` at every candidate period, then among the
    periods with p <= alpha the one with the largest excess agreement (observed - chance) / (total -
    chance), where chance is the shuffled mean; ties go to the shortest period (a multiple of the
    true period fits as well but never better). `detected` is None when no period reaches alpha."""
    scan = []
    for period in periods:
        test = pattern_test(winners, lengths, period, n_candidates, n_permutations, seed)
        chance = test["permutation_mean_agree"]
        room = test["total"] - chance
        excess = 0.0 if room <= 0 else (test["observed_agree"] - chance) / room
        scan.append({"period": int(period), "p_value": test["permutation_p_value"], "excess": round(excess, 6)})
    significant = [row for row in scan if row["p_value"] <= alpha]
    best = max(significant, key=lambda row: (row["excess"], -row["period"]), default=None)
    return {"alpha": alpha, "scan": scan, "detected": None if best is None else best["period"]}
