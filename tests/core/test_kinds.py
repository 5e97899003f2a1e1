"""A compressor kind is one config class, one compressor and its reference formulas, registered once: a kind
defined here (plain window means of a payload map) builds into a model, its parallel forward equals its
token-by-token decode and its float64 twin, and its config round-trips through JSON by its kind name."""

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import nn

from conftest import randomize
from phasekv.cache import KVCache
from phasekv.compress import Compressor, Entries, build_compressor, cut_windows
from phasekv.config import COMPRESSOR_KINDS, CompressionConfig, ConfigError, ModelConfig, register_kind
from phasekv.model import PhaseKVModel
from phasekv.model.reference import reference_twin


@dataclass(frozen=True)
class MeanCompression(CompressionConfig):
    kind: ClassVar[str] = "test-mean"
    gate: ClassVar[str] = "uniform"
    gate_norm: ClassVar[str] = "softmax"
    shared_kv: ClassVar[bool] = False


class MeanCompressor(Compressor):
    """Entry j = the mean over window j's written slots of C h (one C for every offset; keys and values each own)."""

    normalizes_entries = False

    def __init__(self, hidden_size, kv_heads, head_dim, cfg, offset=0, eps=1e-6):
        super().__init__(hidden_size, kv_heads, head_dim, cfg, offset, eps)
        self.payload = nn.Parameter(torch.empty(self.in_features, self.branches * kv_heads * head_dim))

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.payload, std=std)

    def forward(self, h, start=0, emit_from=0, head=None):
        x, first = self.features(h, start)
        win = cut_windows(x @ self.payload, self.geometry, first, emit_from)  # [B, n, W, br * kv * hd]
        weight = win.valid.to(x.dtype)[None, :, :, None]
        pooled = (win.x * weight).sum(2) / weight.sum(2)
        pooled = pooled.unflatten(-1, (self.branches, self.kv_heads, self.head_dim))
        return Entries(pooled[:, :, 0], pooled[:, :, -1], win.index)

    def reference_terms(self, x, slot, branch, head):
        column = branch * self.kv_heads + head
        return x.new_zeros(x.shape[0], 1), x @ self.payload[:, column * self.head_dim : (column + 1) * self.head_dim]


@pytest.fixture
def mean_kind():
    register_kind(MeanCompression, MeanCompressor)
    yield MeanCompression
    del COMPRESSOR_KINDS[MeanCompression.kind]


def test_a_kind_registered_once_runs_in_every_mode_and_matches_its_twin(mean_kind):
    cfg = ModelConfig(vocab_size=50, num_kv_heads=2, compression=mean_kind(8, 4, pad_first_window=True, local_window=6))
    assert isinstance(build_compressor(16, 1, 8, cfg.compression), MeanCompressor)
    model = randomize(PhaseKVModel(cfg), seed=2, std=0.1).double().eval()
    ids = torch.randint(0, 50, (2, 37), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        parallel = model(ids)
        cache = KVCache.for_model(model)
        decoded = torch.cat([model(ids[:, t : t + 1], cache) for t in range(ids.shape[1])], dim=1)
        torch.testing.assert_close(decoded, parallel, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(reference_twin(model)(ids), parallel, rtol=1e-10, atol=1e-10)
    data = cfg.to_dict()
    assert data["compression"]["kind"] == "test-mean" and ModelConfig.from_dict(data) == cfg


def test_a_kind_is_registered_once_and_an_unregistered_config_class_is_refused(mean_kind):
    with pytest.raises(ConfigError, match="already registered"):
        register_kind(MeanCompression, Compressor)

    @dataclass(frozen=True)
    class Unregistered(CompressionConfig):
        kind: ClassVar[str] = "test-unregistered"

    with pytest.raises(ConfigError, match="not a registered compressor kind"):
        Unregistered()
