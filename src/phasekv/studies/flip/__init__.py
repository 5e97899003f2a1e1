"""The flip probe: grow the filler before a fixed context one token at a time and find the period of the
model's answer (`run`; prompts in `phasekv.tasks.flip`); `result`, `figure`."""
