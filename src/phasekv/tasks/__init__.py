"""Prompt generators with exact token positions: lookup, needle and flip probes.

Modules: `words` (word lists), `tokenizer` (our word-level tokenizer), `vocab` (single-token ids
for any HF tokenizer), `placement` (moment-matched target positions), `layout` (padding slots),
`prompts` (prompt records, seeding), `heldout` (animal→name pairs kept out of training), `lookup`,
`needle`, `flip`.
"""
