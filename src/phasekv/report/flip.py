"""The flip probe (the paper's Figure 1): candidate probabilities by filler length, the top strip."""

from __future__ import annotations

from pathlib import Path

from .common import num, nums, plt, save_figure
from .load import Inputs


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("flip")
    if not results:
        return None
    runs = []
    for r in results:
        d = r.data
        cands = [c["text"] if isinstance(c, dict) else str(c) for c in d["candidates"]]
        families = {}
        for fam, rec in d["families"].items():
            families[fam] = {
                "lengths": rec["lengths"],
                "probabilities": [nums(p, 6) for p in rec["probabilities"]],
                "top": rec["top"],
                "pattern": (rec.get("pattern") or {}).get("description", ""),
                "agree": (rec.get("pattern") or {}).get("agree"),
                "total": (rec.get("pattern") or {}).get("total"),
            }
        pooled, test = d["pattern"]["pooled"], d["pattern"].get("test") or {}
        runs.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "candidates": cands,
                "period": d["period"]["value"],
                "period_source": d["period"].get("source", ""),
                "families": families,
                "pooled": pooled.get("description", ""),
                "agree": pooled.get("agree"),
                "total": pooled.get("total"),
                "p_value": num(test.get("permutation_p_value"), 4),
            }
        )
    return {"runs": runs}


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    run = data["runs"][0]
    fams = list(run["families"].items())
    fig, axes = plt.subplots(len(fams), 1, figsize=(7, 2.2 * len(fams)), squeeze=False)
    for ax, (fam, rec) in zip(axes[:, 0], fams, strict=True):
        for c, cand in enumerate(run["candidates"]):
            ax.plot(rec["lengths"], [p[c] for p in rec["probabilities"]], marker="o", ms=3, label=cand)
        lo = rec["lengths"][0]
        for x in rec["lengths"]:
            if (x - lo) % run["period"] == 0 and x != lo:
                ax.axvline(x - 0.5, color="0.5", ls="--", lw=0.7)
        ax.set_title(f"{run['name']} · {fam}: {rec['pattern']}", fontsize=8)
        ax.set_ylabel("probability")
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("filler length L (tokens)")
    fig.tight_layout()
    return [save_figure(fig, out_dir / "flip.png")]
