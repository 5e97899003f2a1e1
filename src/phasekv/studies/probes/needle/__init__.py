"""The position-matched needle test as a residue probe (`phasekv eval needle`), declared for the registry
(`studies.probe.registry.declared`). The prompts are `tasks.needle`'s; the run is the residue probes' engine."""

from __future__ import annotations

from phasekv.studies.flags import Flag
from phasekv.studies.probe.registry import modulus_flag, placements_flag, protocol_flag, seed_flag, spread_flag
from phasekv.tasks.needle import NeedleOptions, needle_format, needle_prompts
from phasekv.tasks.templates import TEMPLATE_HELP

NAME = "needle"
SUMMARY = "Position-matched needle test, accuracy by target-key position mod M, bootstrap over haystacks."
OPTIONS = NeedleOptions
prompts = needle_prompts
FLAGS = dict(
    context_length=Flag("tokens per prompt, query included", min=8),
    n_records=Flag("key-value records per prompt", "--records", 1),
    key_tokens=Flag("tokens per key", min=1),
    value_tokens=Flag("tokens per value (all must be produced)", min=1),
    n_haystacks=Flag("haystacks, each placed at every residue", "--haystacks", 1),
    placements_per_haystack=placements_flag("haystack"),
    modulus=modulus_flag(),
    protocol=protocol_flag(),
    spread_blocks=spread_flag(),
    template=Flag(TEMPLATE_HELP),
    seed=seed_flag(),
)


def question(tokenizer, options: NeedleOptions) -> int:
    """The query (paper template: `; q_1 .. q_k`, 1 + key_tokens tokens): what a press keeps exact."""
    form = needle_format(tokenizer, options)
    return form.query.length(form.sizes)


def heading(result: dict, options: NeedleOptions, target) -> str:
    return (
        f"needle on {target}: {options.context_length} tokens, {options.n_records} records, "
        f"{options.protocol} padding, {result['n_prompts']} prompts"
    )


def audit_design(audit, template: str) -> NeedleOptions:
    """The audit's needle (`audit`: its `AuditOptions`): its length and records, with one-token keys and values."""
    return NeedleOptions(
        context_length=audit.needle_context_length,
        n_records=audit.needle_records,
        key_tokens=1,
        value_tokens=1,
        template=template,
    )


def audit_size(options: dict) -> str:
    return f"{options['n_records']} records, {options['context_length']} tokens"
