"""The flip probe: grow the filler before a fixed context one token at a time and find the period of the
model's answer. `options`, `prompts` (the filler families and the prompts), `run`, `pattern` (the period-P pattern
a ranking follows, against chance), `result`, `figure`."""
