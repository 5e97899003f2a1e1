"""The studies: each folder holds one probe or analysis, its result format (`result.py`), its figure and
report section (`figure.py`) and the code that runs it. `registry.STUDIES` lists them for the report.

What several studies read from a model is in `phasekv.internals` (the model view, the analyses' lookup prompts, gate
metrics, concentration), the results envelope and writer in `phasekv.results.record`, the idealised model in
`phasekv.theory`; the residue probes' engine and registry are `studies.probe`, each probe's own folder
`studies.probes.<name>`.
"""
