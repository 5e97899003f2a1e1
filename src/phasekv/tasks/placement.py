r"""Target positions whose mean and variance are exactly the same in every residue group.

Problem. Choose, for every residue r in 0..M-1, a multiset T_r of n integer positions, all
congruent to r mod M, such that mean(T_r) and var(T_r) do not depend on r.

Why n must be a multiple of M^2 (M >= 3). Write t = r + M k. Equal sums across groups give
n r ≡ 0 (mod M) for r = 1, so n = M m. Then sum(k) = A - m r (A := sum(k) of group 0), and equal
sums of squares give sum(k^2) = Q_0 + g(r) with g(r) = (m r^2 - 2 A r) / M. Since
sum(k^2) ≡ sum(k) (mod 2), h(r) = g(r) + m r must have one parity for all r, so its first
differences h(r+1) - h(r) are even; their difference (the second difference of g) is 2m/M, so
2m/M is even, i.e. M | m and M^2 | n. Smaller designs cannot be exact.

Construction with n = M^2 (minimal). Let mu = 1/2 if M is even and 0 if M is odd, and let e_r
be the unique integer ≡ r (mod M) in [mu - (M-1)/2, mu + (M-1)/2]; write j = e_r - mu + (M-1)/2
(so j runs over 0..M-1, once per residue). T_r holds

    e_r - M   with multiplicity  c_- = j (j + 1) / 2,
    e_r       with multiplicity  c_0 = M^2 - c_- - c_+,
    e_r + M   with multiplicity  c_+ = (M - 1 - j)(M - j) / 2.

Proof. With d = e_r - mu, c_- = ((d + M/2)^2 - 1/4)/2 and c_+ = ((d - M/2)^2 - 1/4)/2 (products
of consecutive integers over 2, hence integers >= 0), and c_0 = M^2 - d^2 - (M^2 - 1)/4 >= 0
because |d| <= (M-1)/2. Sum of deviations from mu: M^2 d + M (c_+ - c_-) = M^2 d - M (d M) = 0,
so mean(T_r) = mu. Sum of squared deviations: M^2 d^2 + 2 M d (c_+ - c_-) + M^2 (c_- + c_+)
= M^2 (c_- + c_+ - d^2) = M^2 (M^2 - 1) / 4, so var(T_r) = (M^2 - 1)/4 for every r.  QED

Spreading. Crossing T_r with a common multiset of block shifts {0, M, ..., (B-1) M} (every
pair once, n = B M^2) keeps the residues, adds M (B-1)/2 to every mean and M^2 (B^2 - 1)/12 to
every variance: over a full cross product the cross term of the variance vanishes exactly.

The design gives offsets relative to an integer origin; a generator picks the origin, so
residue r of the design is the class of absolute positions ≡ (origin + e_r) mod M.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from phasekv.memory import check_fits


@dataclass(frozen=True)
class PositionDesign:
    """Moment-matched target offsets: `offsets[c]` are the n offsets of offset class c.

    Class c holds offsets ≡ c + `low` (mod M); all classes share `mean` and `variance` exactly.
    """

    modulus: int
    spread_blocks: int
    offsets: tuple[np.ndarray, ...]
    mean: Fraction
    variance: Fraction

    @property
    def size(self) -> int:
        """Number of offsets per residue group (B M^2)."""
        return len(self.offsets[0])

    @property
    def span(self) -> int:
        """max offset - min offset over all classes."""
        return int(max(o.max() for o in self.offsets) - min(o.min() for o in self.offsets))

    @property
    def low(self) -> int:
        """Smallest offset over all classes."""
        return int(min(o.min() for o in self.offsets))

    def by_residue(self, origin: int) -> dict[int, np.ndarray]:
        """Absolute positions origin + offset, keyed by their residue mod M."""
        out = {}
        for offs in self.offsets:
            positions = origin + offs
            out[int(positions[0] % self.modulus)] = positions
        return out


def moment_matched_design(modulus: int, spread_blocks: int = 1) -> PositionDesign:
    """The minimal exact design of the module docstring, crossed with `spread_blocks` block shifts."""
    if modulus < 1:
        raise ValueError(f"modulus must be >= 1, got {modulus}")
    if spread_blocks < 1:
        raise ValueError(f"spread_blocks must be >= 1, got {spread_blocks}")
    m = modulus
    # m classes of m^2 x spread_blocks offsets, each built twice over (repeat, then the block shifts)
    check_fits(
        16 * m**3 * spread_blocks, f"the position design of modulus {m} x {spread_blocks} spread blocks",
        "lower --modulus (or --spread-blocks)",
    )  # fmt: skip
    lowest = -((m - 1) // 2)  # e runs over lowest .. lowest + m - 1
    blocks = m * np.arange(spread_blocks)
    classes = []
    for j in range(m):
        e = lowest + j
        c_minus, c_plus = j * (j + 1) // 2, (m - 1 - j) * (m - j) // 2
        base = np.repeat([e - m, e, e + m], [c_minus, m * m - c_minus - c_plus, c_plus])
        classes.append((base[:, None] + blocks[None, :]).ravel())
    mu = Fraction(1, 2) if m % 2 == 0 else Fraction(0)
    design = PositionDesign(
        modulus=m,
        spread_blocks=spread_blocks,
        offsets=tuple(classes),
        mean=mu + Fraction(m * (spread_blocks - 1), 2),
        variance=Fraction(m * m - 1, 4) + Fraction(m * m * (spread_blocks**2 - 1), 12),
    )
    for offs in classes:  # the proof, checked in exact integer arithmetic
        if exact_moments(offs) != (design.mean, design.variance):
            raise AssertionError("moment-matched design broke its invariant")
    return design


def exact_moments(positions: Iterable[int]) -> tuple[Fraction, Fraction]:
    """(mean, population variance) of integer positions, as exact fractions."""
    values = [int(p) for p in positions]
    n = len(values)
    if n == 0:
        raise ValueError("no positions")
    s1, s2 = sum(values), sum(v * v for v in values)
    mean = Fraction(s1, n)
    return mean, Fraction(s2, n) - mean * mean


def position_stats(targets_by_residue: Mapping[int, Iterable[int]], query_position: int) -> list[dict]:
    """Per-residue JSON rows: residue, count, mean and variance of t_K, and the query position."""
    rows = []
    for residue in sorted(targets_by_residue):
        values = list(targets_by_residue[residue])
        mean, var = exact_moments(values)
        rows.append(
            {
                "residue": residue,
                "count": len(values),
                "mean_target_position": float(mean),
                "var_target_position": float(var),
                "query_position": query_position,
            }
        )
    return rows


def assign(design_positions: np.ndarray, n_units: int, per_unit: int, rng: np.random.Generator) -> np.ndarray:
    """Deal the positions of one residue group to `n_units` units x `per_unit` placements.

    Every design position is used equally often ((n_units * per_unit) / size times), in a
    random order, so the group's multiset of positions is the design repeated and keeps its
    exact moments. Returns an int array of shape (n_units, per_unit).
    """
    size = len(design_positions)
    total = n_units * per_unit
    if total % size:
        raise ValueError(
            f"{n_units} units x {per_unit} placements = {total} prompts per residue group, which is "
            f"not a multiple of the design size {size} (exact equal moments need groups of "
            f"a multiple of modulus^2 x spread_blocks prompts)"
        )
    dealt = np.tile(design_positions, total // size)
    return rng.permutation(dealt).reshape(n_units, per_unit)


def placements_needed(n_units: int, design_size: int) -> int:
    """The fewest placements per unit that make n_units x placements a multiple of design_size."""
    return design_size // int(np.gcd(n_units, design_size))
