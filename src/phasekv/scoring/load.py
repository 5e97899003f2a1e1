"""Pick the scorer for a model directory by reading its config.json."""

from __future__ import annotations

from pathlib import Path

from ..model.io import FORMAT, read_config_json
from .base import BatchedScorer, ScorerError
from .hf_scorer import HFScorer
from .phasekv_scorer import PhaseKVScorer
from .press import KVPressScorer
from .press_spec import native_press, parse_press


def load_scorer(path: str | Path, press: str | None = None, **options) -> BatchedScorer:
    """A `PhaseKVScorer` for a phasekv checkpoint ("format": "phasekv" in config.json), an
    `HFScorer` for a Hugging Face model directory (config.json with "model_type").

    `press` (a `press_spec` text: kvpress call, a registered press such as `pool:...`, or preset) compresses an HF
    model's KV cache: the scorer of a registered press that has its own (`NativePress.scorer`), else a
    `KVPressScorer` that builds the press.

    `options` go to the scorer (batch_size, threads, workers, device, dtype). Raises ScorerError for a
    missing directory, a missing or unreadable config.json, or a config of neither kind.
    """
    directory = Path(path)
    config_path, meta = read_config_json(
        directory, ScorerError, "model", "MODEL must be a phasekv checkpoint or an HF model directory"
    )
    if isinstance(meta, dict) and meta.get("format") == FORMAT:
        if press is not None:
            raise ScorerError("--press applies to HF models; a phasekv checkpoint has its own compression")
        return PhaseKVScorer.from_checkpoint(directory, **options)
    if isinstance(meta, dict) and "model_type" in meta:
        if press is None:
            return HFScorer.from_pretrained(directory, **options)
        spec = parse_press(press)
        native = native_press(spec)
        if native is not None and native.scorer is not None:
            return native.scorer(directory, spec, **options)
        return KVPressScorer.from_pretrained(directory, spec=spec, spec_text=press, **options)
    raise ScorerError(
        f'{config_path} is neither a phasekv config ("format": "{FORMAT}") nor an HF config (no "model_type")'
    )
