"""The presses study: phase audits of training-free KV-cache compression on a pretrained HF model (default:
SmolLM2-135M-Instruct as `phasekv models get smollm2-135m` writes it, `options.DEFAULT_MODEL`), run by
`phasekv reproduce --profile presses`.

One *cell* = one method x one probe: a result JSON under out/cells/, reused through the reproduction's one cache
(`phasekv.reproduce.presses`: the model directory's contents, the press, the probe's options, the version), so
an interrupted or extended run only computes what is missing. Each cell runs in its own process (`cell`, started
by `run`): kvpress needs transformers < 5.3, so cells whose press comes from kvpress run with the kvpress
environment's Python (`run.kvpress_python`: $PHASEKV_KVPRESS_PYTHON, this Python if it has kvpress, else
.venv-kvpress/bin/python from scripts/kvpress_venv.sh); the full-cache control and phasekv's pooling run with
this Python. The table (table.md, presses.json) and the figure (residues.png) are written from the cells
(`table`), and report.html shows every cell in `phasekv report`'s residue section. The profiles and their
methods are `options`'.
"""
