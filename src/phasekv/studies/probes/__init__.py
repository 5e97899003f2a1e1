"""The residue probes, one folder each (`lookup`, `needle`, ...): each declares its `PROBE` for the registry
(`studies.probe.registry`) beside what only it needs (options, prompts, templates). They share the engine in
`studies.probe` and never import each other."""
