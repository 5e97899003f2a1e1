"""The residue probes (lookup and needle, run by `phasekv.evaluate`): accuracy by target position modulo a
multiple of the stride; `result` (`ProbeResult`), `figure` (by residue) and `positions` (by position)."""
