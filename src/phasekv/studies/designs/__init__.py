"""The design comparison of the mitigations profile: computed by `run` (wired into the reproduction by
`phasekv.reproduce.compare_designs`); `result`, `figure`."""
