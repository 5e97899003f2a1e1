"""What the studies read from a model's internals: one view of phasekv and HF models (`models`: attention sites,
final logits, gate rows, indexer hits), gate metrics (`gate_metrics`, `hf_gates`) and their concentration
(`concentration`), the lightning indexer's top-k hits (`topk`), the analyses' lookup prompts (`probe_prompts`) and
design (`design`)."""
