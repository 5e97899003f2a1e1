"""Prompt generators with exact token positions: lookup and needle probes (the flip probe's are its study's,
`phasekv.studies.flip.prompts`).

Modules: `words` (word lists), `tokenizer` (our word-level tokenizer), `vocab` (single-token ids
for any HF tokenizer), `placement` (moment-matched target positions), `layout` (padding slots),
`prompts` (prompt records, seeding), `heldout` (animal→name pairs kept out of training), `lookup`,
`needle`.
"""
