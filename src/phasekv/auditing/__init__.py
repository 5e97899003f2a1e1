"""The audit's run: it composes the residue probes and the report, so it sits in a layer above both
(`phasekv.studies.audit` holds its options, typed result and figure, which the report reads)."""
