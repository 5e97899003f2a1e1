# %% [markdown]
# # phasekv in the first hour: probe a model from Python
#
# A percent-format script: run it whole (`.venv/bin/python examples/first_hour.py`) or cell by cell in an
# editor that reads `# %%` cells (VS Code, PyCharm, Jupytext). It probes one model with the lookup task,
# prints the phase verdict, shows the typed result the probe returns, then runs the flip probe the same way.
#
# The model: the folder in `PHASEKV_EXAMPLE_MODEL` (a phasekv checkpoint or a local Hugging Face causal LM);
# else the W8/S8 model of the quick reproduction (`bash scripts/reproduce.sh` trains it); else an untrained
# tiny W8/S8 model, which answers at chance: its verdict is "not judged: at chance", as it should be.
# `PHASEKV_EXAMPLE_SMALL=1` runs a design small enough for a test (seconds, and too small to judge much).

# %%
import os
from pathlib import Path

import torch

import phasekv
from phasekv.model import PhaseKVModel, preset_config
from phasekv.stats import format_verdict
from phasekv.tasks.tokenizer import build_word_tokenizer

QUICK_MODEL = Path("runs/quick/runs/w8s8-1kv-s42/checkpoints/final")


def example_model():
    """A model folder (given, or the quick reproduction's), else an untrained tiny W8/S8 model."""
    given = os.environ.get("PHASEKV_EXAMPLE_MODEL")
    if given:
        return Path(given)
    if QUICK_MODEL.is_dir():
        return QUICK_MODEL
    torch.manual_seed(0)
    return PhaseKVModel(preset_config("w8s8-1kv", "tiny", vocab_size=len(build_word_tokenizer())))


model = example_model()
print("model:", model if isinstance(model, Path) else "an untrained tiny w8s8-1kv (answers at chance)")

# %% [markdown]
# ## The probe
#
# The options are the fields of `phasekv.tasks.lookup.LookupOptions` (unknown ones are refused before anything
# loads). These are the quick reproduction's: 16 records, 32 mappings drawn from the pairs its training held out,
# target keys at every residue mod 24.

# %%
small = bool(os.environ.get("PHASEKV_EXAMPLE_SMALL"))
if small:
    options = dict(n_records=6, n_demos=1, modulus=8, n_mappings=2, spread_blocks=4)
    resamples = 20
else:
    options = dict(n_records=16, n_demos=8, n_mappings=32, held_out_seed=0)
    resamples = 2000

result = phasekv.probe(model, "lookup", n_resamples=resamples, **options)
print("verdict:", result.verdict)

# %% [markdown]
# ## The typed result
#
# `result` is a `ProbeResult` (`phasekv.studies.probe.result`): `result.summary` is the one-screen finding the
# CLI prints (also `print(result)`), `result.residue_summary` the accuracy by residue as fields, `phase_test` the
# verdict with its effect size, interval and minimum detectable effect, `figure()` the report's residue chart (a
# Vega-Lite spec: `altair.Chart.from_dict(result.figure())` shows it in a notebook) and `to_dict()` the JSON that
# `phasekv eval lookup --out` writes (`ProbeResult.load(path)` reads such a file back).

# %%
residues = result.residue_summary
print(f"{type(result).__name__}: {result.probe}, {result.n_prompts} prompts, modulus {residues.modulus}")
print("accuracy by residue (%):", " ".join(f"{100 * a:.0f}" for a in residues.accuracy))
print(f"mean {100 * residues.mean:.1f}%, gap {residues.gap_points:.1f} points, learned: {result.learned()}")
print(format_verdict(result.phase_test))

# %% [markdown]
# ## The other probes
#
# The same call runs the flip probe (`"flip"`, the fields of `FlipOptions`: grow the filler before a fixed context
# one token at a time and find the period of the answer) and the knockout map (`"knockout"`: each KV head, or
# with `mode="layers"` each layer of any HF model, knocked out), each returning its typed result with the same
# `summary`, `verdict`, `figure()` and `to_json()`.

# %%
flip_options = dict(n_lengths=8, families=("equals", "lorem"), n_permutations=50) if small else {}
flip = phasekv.probe(model, "flip", **flip_options)
print(flip.summary.splitlines()[-1])  # the period scan's finding
print("flip verdict:", flip.verdict)
