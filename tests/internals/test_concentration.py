import math

import pytest
import torch

from phasekv.internals.concentration import (
    effective_numbers,
    effective_phases,
    per_window_effective_number,
    pool_phases,
    static_effective_number,
)

WIDTH = 4


def test_one_hot_in_every_window_gives_one():
    alpha = torch.zeros(6, WIDTH)
    alpha[:, 2] = 1.0
    assert static_effective_number(alpha).item() == pytest.approx(1.0)
    assert per_window_effective_number(alpha).item() == pytest.approx(1.0)


def test_uniform_gives_width():
    alpha = torch.full((6, WIDTH), 1 / WIDTH)
    assert static_effective_number(alpha).item() == pytest.approx(WIDTH)
    assert per_window_effective_number(alpha).item() == pytest.approx(WIDTH)


def test_one_hot_on_a_different_offset_per_window_is_static_width_per_window_one():
    alpha = torch.eye(WIDTH)
    numbers = effective_numbers(alpha)
    assert numbers.static.item() == pytest.approx(WIDTH)
    assert numbers.per_window.item() == pytest.approx(1.0)


def test_half_split_windows_have_known_values():
    alpha = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
    assert static_effective_number(alpha).item() == pytest.approx(4.0)
    assert per_window_effective_number(alpha).item() == pytest.approx(2.0)
    skewed = torch.tensor([[0.9, 0.1, 0.0, 0.0]])
    entropy = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert static_effective_number(skewed).item() == pytest.approx(math.exp(entropy))


def test_window_dims_keep_the_other_axes():
    uniform = torch.full((5, WIDTH), 1 / WIDTH)
    one_hot = torch.zeros(5, WIDTH)
    one_hot[:, 0] = 1.0
    alpha = torch.stack([uniform, one_hot]).unsqueeze(0).expand(3, -1, -1, -1)  # [batch, heads, windows, W]
    static = static_effective_number(alpha, dim=-1, window_dims=(0, 2))
    per_window = per_window_effective_number(alpha, dim=-1, window_dims=(0, 2))
    torch.testing.assert_close(static, torch.tensor([4.0, 1.0]))
    torch.testing.assert_close(per_window, torch.tensor([4.0, 1.0]))
    moved = alpha.movedim(-1, 0)  # offsets first
    torch.testing.assert_close(static_effective_number(moved, dim=0, window_dims=(1, 3)), static)


def test_offset_dim_cannot_be_a_window_dim():
    with pytest.raises(ValueError):
        static_effective_number(torch.eye(WIDTH), dim=-1, window_dims=(1,))


def test_effective_phases_pool_offsets_of_the_same_phase():
    stride, width = 4, 8
    alpha = torch.zeros(10, width)
    alpha[::2, 1] = 1.0  # phase 1 in the first half of the window ...
    alpha[1::2, 5] = 1.0  # ... and in the second half
    assert static_effective_number(alpha).item() == pytest.approx(2.0)
    phases = effective_phases(alpha, stride)
    assert phases.static.item() == pytest.approx(1.0)
    assert phases.per_window.item() == pytest.approx(1.0)
    pooled = pool_phases(torch.full((3, width), 1 / width), stride)
    torch.testing.assert_close(pooled, torch.full((3, stride), 1 / stride))
