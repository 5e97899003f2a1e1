"""The audit's options (the only place their defaults live), its schema id and the budget syntax; no torch, so
the command line reads its defaults from here without loading a model."""

from __future__ import annotations

import re
from dataclasses import dataclass

from phasekv.tasks.templates import LOOKUP_TEMPLATES

SCHEMA = "phasekv.audit/1"
SCREENED_PROBE = "lookup"  # the probe whose templates the screen compares; the audit always runs it first
DEFAULT_BUDGET_S = 600.0
_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds of '90s', '10m', '1.5h' or a plain number of seconds; ValueError for anything else."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|m|min|h)?\s*", str(text))
        if found is None:
            raise ValueError(f"budget (--budget) {text!r}: give a duration such as 90s, 10m or 1h")
        seconds = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds <= 0:
        raise ValueError(f"budget (--budget) must be positive, got {text!r}")
    return seconds


@dataclass(frozen=True)
class AuditOptions:
    """Options of an audit.

    The goal: `budget_s` (wall seconds for the whole audit, model loading included: the largest design it pays
    for) or `mde_points` alone (the smallest design whose planned minimum detectable effect is at most this many
    points, however long it takes); neither: a budget of `DEFAULT_BUDGET_S`; both: the smallest design within the
    budget that reaches `mde_points`. The bound (`max_mde`: `mde_points`, else `stats.verdict.MAX_MDE_POINTS`)
    is also the verdict's: a null from a run whose MDE is above it reads inconclusive. When no design within
    the budget plans an MDE within the bound, the audit stops before scoring unless `anyway`. The screen scores
    `screen_prompts` lookup prompts per template in `templates` (in this order, until it has taken a fifth of
    the budget), drawn from the calibration split (mappings the run never draws). The lookup design is
    `n_records` records,
    `n_demos` demonstrations, `modulus` residues (None: twice the model's compression stride, else 8),
    `spread_blocks` and `protocol`, with the number of mappings chosen from `mappings`. After it, `probes` (residue
    probes of `studies.probe.registry`, each sized by what the budget leaves) or, when None, the needle (`needle`
    None: when the budget leaves time for it; never in MDE mode unless True). The needle has
    `needle_context_length` tokens, `needle_records` one-token keys and values, and its haystacks chosen from
    `haystacks` (as have the other probes whose content is a haystack)."""

    budget_s: float | None = None
    mde_points: float | None = None
    templates: tuple[str, ...] = ("natural", "sentence", "paper")
    screen_prompts: int = 12
    n_records: int = 16
    n_demos: int = 4
    modulus: int | None = None
    spread_blocks: int = 6
    protocol: str = "prefix"
    mappings: tuple[int, ...] = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
    needle: bool | None = None
    probes: tuple[str, ...] | None = None
    needle_context_length: int = 256
    needle_records: int = 8
    haystacks: tuple[int, ...] = (2, 4, 8, 16, 32)
    stride: int | None = None
    seed: int = 0
    n_resamples: int = 2000
    anyway: bool = False

    def __post_init__(self) -> None:
        if self.budget_s is not None and self.budget_s <= 0:
            raise ValueError(f"the budget must be positive, got {self.budget_s} s")
        if self.mde_points is not None and not 0 < self.mde_points <= 100:
            raise ValueError(f"mde (--mde) is in accuracy points, in (0, 100]; got {self.mde_points}")
        unknown = [t for t in self.templates if t not in LOOKUP_TEMPLATES]
        if not self.templates or unknown:
            raise ValueError(f"templates must be some of {sorted(LOOKUP_TEMPLATES)}, got {list(self.templates)}")
        if self.screen_prompts < 1:
            raise ValueError(f"screen_prompts must be >= 1, got {self.screen_prompts}")
        if self.probes is not None:
            from phasekv.studies.probe.registry import names  # here: reading the registry loads the generators

            unknown = [p for p in self.probes if p not in names()]
            if unknown or not self.probes:
                raise ValueError(f"probes must be some of {', '.join(names())}, got {list(self.probes)}")
            if self.needle is not None:
                raise ValueError(
                    "give the probes to run (probes, --probes) or whether to run the needle "
                    "(needle, --needle/--no-needle), not both"
                )
        for name in ("mappings", "haystacks"):
            values = getattr(self, name)
            if not values or list(values) != sorted(set(values)) or values[0] < 2:
                raise ValueError(f"{name} must be increasing counts of at least 2, got {list(values)}")

    def later_probes(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """(the probes run after the screened one, in order; {a probe not run: why})."""
        if self.probes is not None:
            return tuple(dict.fromkeys(p for p in self.probes if p != SCREENED_PROBE)), {}
        if self.needle if self.needle is not None else self.goal == "budget":
            return ("needle",), {}
        return (), {"needle": "not asked for (--needle runs it)"}

    @property
    def goal(self) -> str:
        """'budget' or 'mde': what sizes the design (an MDE alone; with a budget it is the target within it)."""
        return "mde" if self.mde_points is not None and self.budget_s is None else "budget"

    @property
    def max_mde(self) -> float:
        """The largest MDE (points) that backs a null, and that a design must plan to be scored unless `anyway`."""
        from phasekv.stats.verdict import MAX_MDE_POINTS  # here, not at the top: the command line loads no numpy

        return MAX_MDE_POINTS if self.mde_points is None else self.mde_points

    @property
    def budget(self) -> float | None:
        """The wall-time budget in seconds: None when an MDE is the goal, else the one given or the default."""
        if self.goal == "mde":
            return None
        return DEFAULT_BUDGET_S if self.budget_s is None else self.budget_s
