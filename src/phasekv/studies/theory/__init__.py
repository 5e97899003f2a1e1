"""The theory runs' results (computed by `phasekv.theory`): Theorem 1, Theorem 2 and sweeps; `result`,
`figure`."""
