"""The studies: each folder holds one probe or analysis, its result format (`result.py`), its figure and
report section (`figure.py`) and the code that runs it. `registry.STUDIES` lists them for the report.

Shared measuring tools stay in `phasekv.analysis` (the model view, probe prompts, gate metrics, concentration), the
probe engine for lookup and needle in `phasekv.studies.probe`, the idealised model in `phasekv.theory`.
"""
