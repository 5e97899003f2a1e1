"""The flip probe's result format (`phasekv eval flip`, `phasekv.probe(model, "flip")`): the fields the report
reads, checked on load; the table the command prints (`format_flip`, `FlipResult.summary`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from phasekv.results.base import Typed, TypedResult, model_label


class FlipPeriod(Typed):
    value: int


class FlipPattern(Typed):
    pooled: dict[str, Any]


class FlipResult(TypedResult):
    """`phasekv eval flip`: the answer chosen at each filler length, by family, and its period."""

    schema_id: str = Field(alias="schema", pattern=r"^phasekv\.eval/\d+$")
    probe: Literal["flip"]
    candidates: list[Any]
    families: dict[str, Any]
    period: FlipPeriod
    pattern: FlipPattern

    schema_prefix = "phasekv.eval/"
    probes: ClassVar[tuple[str, ...]] = ("flip",)

    @classmethod
    def recognises(cls, data: dict) -> bool:
        return super().recognises(data) and data.get("probe") in cls.probes

    @property
    def model_label(self) -> str:
        return model_label(self.extra("model") or {})

    @property
    def summary(self) -> str:
        """What `phasekv eval flip` prints: the run, then per family the candidate on top at every filler length
        and its pattern, the pooled pattern against chance and the period scan (`format_flip`)."""
        wall = self.extra("wall_time_s")
        heading = f"flip on {self.model_label}: candidates {[_text(c) for c in self.candidates]}"
        return heading + ("" if wall is None else f", wall time {wall:.1f} s") + "\n" + format_flip(self.to_dict())

    def __str__(self) -> str:
        return self.summary

    @property
    def verdict(self) -> str | None:
        """The period the rankings follow by the recorded period scan (`pattern.detect_period`: the best
        period whose permutation p is at most the scan's alpha): "period P detected" or "no period detected";
        None for a file without the scan."""
        scan = self.extra("period_scan")
        return None if scan is None else period_verdict(scan)

    def figure(self, name: str | None = None) -> dict:
        """The report's flip chart of this run (`studies.flip.figure.spec`): a Vega-Lite spec (a dict), shown in a
        notebook by `altair.Chart.from_dict(spec)`."""
        from phasekv.studies.flip import figure

        return figure.spec(figure.run_block(self.to_dict(), name or self.model_label))


def _text(candidate) -> str:
    return candidate["text"] if isinstance(candidate, dict) else str(candidate)


def period_verdict(scan: dict) -> str:
    """'period 4 detected' or 'no period detected' from a period scan (`detect_period`'s record)."""
    return "no period detected" if scan["detected"] is None else f"period {scan['detected']} detected"


def _probability(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else f"{p:.0e}"


def format_flip(result: dict) -> str:
    """Text table: per family the candidate on top at every length, P(first candidate), and the
    family's pattern; then the pooled pattern with its chance comparison, and the period scan's finding."""
    cands = [c["text"] for c in result["candidates"]]
    period = result["period"]["value"]
    first = next(iter(result["families"].values()))
    width = max(5, *(len(c) for c in cands))
    lines = [f"{'family':<8} {'L':>4} " + " ".join(f"{n:>{width}}" for n in first["lengths"])]
    for family, rec in result["families"].items():
        lines.append(f"{family:<8} {'top':>4} " + " ".join(f"{t:>{width}}" for t in rec["top"]))
        p_first = " ".join(f"{_probability(p[0]):>{width}}" for p in rec["probabilities"])
        lines.append(f"{'':<8} {'P(' + cands[0] + ')':>4} " + p_first)
        pat = rec["pattern"]
        lines.append(f"{'':<8} pattern: {pat['description']} ({pat['agree']} of {pat['total']} lengths agree)")
        own = [t for t, ok in zip(rec["model_top1"], rec["model_top1_is_candidate"], strict=True) if not ok]
        if own:
            common = max(set(own), key=own.count)
            lines.append(
                f"{'':<8} the model's own next token is no candidate at {len(own)} of {len(rec['top'])} lengths "
                f"(most often {common!r}): 'top' is only the likelier candidate there"
            )
    pooled, test = result["pattern"]["pooled"], result["pattern"]["test"]
    lines.append(
        f"period {period} ({result['period']['source']}): {pooled['description']}; "
        f"{pooled['agree']} of {pooled['total']} rankings follow it"
    )
    lines.append(
        f"chance: best constant pattern {test['constant_pattern_agree']} of {test['total']}; shuffled lengths "
        f"mean {test['permutation_mean_agree']:.1f}, permutation p = {test['permutation_p_value']:.4f}"
    )
    scan = result.get("period_scan")
    if scan is not None:
        periods = [row["period"] for row in scan["scan"]]
        scanned = f"periods {min(periods)} to {max(periods)}, permutation p <= {scan['alpha']:g}"
        lines.append(f"period scan ({scanned}): {period_verdict(scan)}")
    return "\n".join(lines)
