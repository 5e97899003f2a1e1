import pytest
import torch

torch.set_num_threads(1)


def randomize(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Give every parameter a random value (norm weights near 1), so tests are sensitive to every term."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * std
            p.copy_(1 + noise if "norm" in name else noise)
    return module


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(1234)
