"""The passkey retrieval probe (`phasekv eval passkey`): a number of a few digits hidden in filler text and asked
back at the end, its position phase-controlled like the needle's; declared for the registry
(`studies.probe.registry.declared`). `options` (its options and templates), `haystack` (the prompts); the run,
the statistics and the result are the residue probes' (`studies.probe`)."""

from __future__ import annotations

from phasekv.studies.flags import Flag
from phasekv.studies.probe.registry import chance_level, modulus_flag, placements_flag, seed_flag, spread_flag

from .haystack import passkey_format, passkey_prompts
from .options import TEMPLATES, PasskeyOptions

NAME = "passkey"
SUMMARY = "Passkey retrieval: a number hidden in filler, accuracy by its position mod M, bootstrap over haystacks."
OPTIONS = PasskeyOptions
FLAGS = dict(
    n_haystacks=Flag("haystacks, each hiding one passkey and placed at every residue", "--haystacks", 1),
    digits=Flag("digits of each passkey (all must be produced)", min=1),
    context_length=Flag("tokens per prompt, question included", min=16),
    placements_per_haystack=placements_flag("haystack"),
    modulus=modulus_flag(),
    spread_blocks=spread_flag(),
    template=Flag(
        f"text of the prompts: {' or '.join(TEMPLATES)} (default: the first whose words the tokenizer knows)"
    ),
    seed=seed_flag(),
)
BOOTSTRAP_UNIT = "haystack (each hides one passkey, placed at every residue)"
prompts = passkey_prompts


def question(tokenizer, options: PasskeyOptions) -> int:
    """The question at the end ("What is the pass key? The pass key is"): what a press keeps exact."""
    return len(passkey_format(tokenizer, options).question)


def chance(options: PasskeyOptions) -> float:
    """Guessing a key of `digits` digits, the first not 0."""
    return chance_level(9 * 10 ** (options.digits - 1))


def heading(result: dict, options: PasskeyOptions, target) -> str:
    agg = result["aggregation"]
    return (
        f"passkey on {target}: {options.context_length} tokens, {options.digits}-digit keys, "
        f"{result['options']['template']} template, {result['n_prompts']} prompts = {agg['n_haystacks']} haystacks x "
        f"{options.modulus} residues x {agg['placements_per_haystack']} placements"
    )


def audit_design(audit, template: str) -> PasskeyOptions:
    """The audit's passkey, as long as its needle (`audit`: its `AuditOptions`); the screened lookup template is
    not the passkey's: it picks its own."""
    return PasskeyOptions(context_length=audit.needle_context_length)


def audit_size(options: dict) -> str:
    return f"{options['digits']}-digit keys, {options['context_length']} tokens"
