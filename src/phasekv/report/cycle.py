"""Gate cycling (the paper's Figure 6): observed vs predicted accuracy by phase, scatter, R^2 grid."""

from __future__ import annotations

from pathlib import Path

from .common import model_name, num, nums
from .load import Inputs


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("cycle")
    if not results:
        return None
    models = []
    for r in results:
        d = r.data
        models.append(
            {
                "name": model_name(d, r.name),
                "file": r.path.as_posix(),
                "stride": d["stride"],
                "boundary": d["boundary_phase"],
                "base": nums(d["base"]["accuracy_by_phase"], 3, 100),
                "base_band": [nums(b, 3, 100) for b in d["base"]["band"]],
                "cycles": [
                    {
                        "delta": c["delta"],
                        "accuracy": nums(c["accuracy_by_phase"], 3, 100),
                        "band": [nums(b, 3, 100) for b in c["band"]],
                        "observed": nums(c["observed_change"], 3, 100),
                        "predicted": nums(c["predicted_change"], 3, 100),
                        "r2": num(c["r2"], 3),
                        "r2_interval": nums(c["r2_interval"], 3) if c.get("r2_interval") else None,
                    }
                    for c in d["cycles"]
                ],
            }
        )
    deltas = sorted({c["delta"] for m in models for c in m["cycles"]})
    return {"models": models, "deltas": deltas}


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    from .figures import plot_cycle

    return [
        plot_cycle(r.data, out_dir / f"cycle{'' if i == 0 else '_' + str(i)}.png")
        for i, r in enumerate(inputs.of("cycle"))
    ]
