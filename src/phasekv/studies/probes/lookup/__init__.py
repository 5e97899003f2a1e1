"""The animal-to-name lookup as a residue probe (`phasekv eval lookup`), declared for the registry
(`studies.probe.registry.declared`). The prompts are `tasks.lookup`'s; the run is the residue probes' engine."""

from __future__ import annotations

from phasekv.studies.flags import Flag
from phasekv.studies.probe.registry import modulus_flag, placements_flag, protocol_flag, seed_flag, spread_flag
from phasekv.tasks.lookup import LookupOptions, lookup_format, lookup_prompts
from phasekv.tasks.templates import TEMPLATE_HELP

NAME = "lookup"
SUMMARY = "Animal-to-name lookup, accuracy by target-key position mod M, bootstrap over mappings."
OPTIONS = LookupOptions
BOOTSTRAP_UNIT = "mapping (resampled rows = one mapping's cells at every residue)"
prompts = lookup_prompts
FLAGS = dict(
    n_records=Flag("key-name records per prompt", "--records", 1),
    n_demos=Flag("demonstrations before the target", "--demos", 0),
    n_mappings=Flag("key-name mappings (the bootstrap unit)", "--mappings", 2),
    placements_per_mapping=placements_flag("mapping"),
    modulus=modulus_flag(),
    protocol=protocol_flag(),
    padding=Flag("pad tokens per prompt (default: design span + records/4, or what the design needs)", min=0),
    spread_blocks=spread_flag(),
    seed=seed_flag(),
    held_out_seed=Flag(
        "draw every animal-name pair from the pairs training held out with this seed (default: any pairs)"
    ),
    held_out_modulus=Flag("1/this of the pairs are held out (match the training run)", min=2),
    template=Flag(TEMPLATE_HELP),
)


def question(tokenizer, options: LookupOptions) -> int:
    """The demonstrations and the query (paper template: `; a n` x n_demos then `; a_k`, 3 n_demos + 2 tokens;
    other templates: their demonstration and query phrases, as compiled): what a press keeps exact."""
    form = lookup_format(tokenizer, options)
    return options.n_demos * form.demo.length(form.sizes) + form.query.length(form.sizes)


def heading(result: dict, options: LookupOptions, target) -> str:
    agg = result["aggregation"]
    pairs = (
        "any pairs"
        if options.held_out_seed is None
        else f"held-out pairs (seed {options.held_out_seed}, 1/{options.held_out_modulus})"
    )
    return (
        f"lookup on {target}: {options.protocol} padding, {pairs}, {result['n_prompts']} prompts = "
        f"{agg['n_mappings']} mappings x {options.modulus} residues x {agg['placements_per_mapping']} placements\n"
        "bootstrap unit: mapping (cells = means over placements); intervals: percentile per residue and "
        "mean, basic for worst/best/gap/period"
    )


def audit_design(audit, template: str) -> LookupOptions:
    """The audit's lookup (`audit`: its `AuditOptions`): its records, demonstrations and padding protocol."""
    return LookupOptions(n_records=audit.n_records, n_demos=audit.n_demos, protocol=audit.protocol, template=template)


def audit_size(options: dict) -> str:
    return f"{options['n_records']} records"
