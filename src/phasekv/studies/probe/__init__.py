"""The residue probes' engine: accuracy by target position modulo a multiple of the stride, for every probe the
registry lists (`registry`; the probes' own folders are `studies.probes.<name>`). `run` (`run_probe`, `run_lookup`,
`run_needle`) on the engine in `units` (cells, summary, verdict), `scored` (scoring the prompts, position
controls), `plan` (what a run will score, its progress) and `grid_shift`; `result` (`ProbeResult`), `figure` (by
residue) and `positions` (by position)."""
