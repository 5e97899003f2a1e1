"""The design comparison of the mitigations profile (computed by `phasekv.reproduce.designs`); `result`,
`figure`."""
