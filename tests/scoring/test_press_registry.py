"""phasekv's own presses are registered once, by their modules: the spec reader, the scorer loader, the kvpress
requirement and the command line's help all read that registry, and the presets keep their names and texts."""

import subprocess
import sys

import pytest

from phasekv.scoring.press_pool import PoolSpec
from phasekv.scoring.press_spec import (
    GRID_FIELDS,
    NATIVE_PRESSES,
    PRESETS,
    NativePress,
    grid_shift_refusal,
    needs_kvpress,
    parse_press,
    press_help,
    press_stride,
    register_press,
)

# the presets' texts as they were written before phasekv's own presses registered themselves
PRESET_TEXTS = {
    "chunkkv8": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)",
    "chunkkv8-staggered": "StaggeredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, stagger=1)",
    "chunkkv8-dithered": "DitheredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, seed=0)",
    "pool-w8s8": "pool:w=8,s=8,local=16",
    "pool-w8s4": "pool:w=8,s=4,local=16",
}


def test_the_presets_keep_their_names_and_texts():
    assert {name: PRESETS[name] for name in PRESET_TEXTS} == PRESET_TEXTS
    assert parse_press("pool-w8s4") == PoolSpec(8, 4, 16)
    assert press_stride(parse_press("pool-w8s8")) == (8, "pool stride s")
    assert press_stride(parse_press("chunkkv8-staggered")) == (8, "StaggeredChunkKVPress.chunk_length")


def test_each_native_press_declares_what_the_readers_use():
    assert set(NATIVE_PRESSES) == {"pool", "StaggeredChunkKVPress", "DitheredChunkKVPress"}
    assert GRID_FIELDS["StaggeredChunkKVPress"] == GRID_FIELDS["DitheredChunkKVPress"] == "chunk_length"
    assert not needs_kvpress(parse_press("pool-w8s8"))
    assert needs_kvpress(parse_press("chunkkv8-dithered")) and needs_kvpress(parse_press("snapkv"))
    assert "per prompt" in grid_shift_refusal(parse_press("chunkkv8-dithered"))
    assert grid_shift_refusal(parse_press("chunkkv8-staggered")) is None
    assert all(name in press_help() for name in PRESETS)


def test_a_press_or_preset_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register_press(NativePress("pool", {}, needs_kvpress=False, summary=""))
    with pytest.raises(ValueError, match="already registered"):
        register_press(NativePress("OtherPress", {"chunkkv8": "x"}, needs_kvpress=False, summary=""))
    assert "OtherPress" not in NATIVE_PRESSES


def test_the_press_help_lists_the_registered_presets_without_torch():
    script = (
        "import sys, phasekv.cli.scoring as s; help = s.SCORING['press'][1].help; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules)); print(help)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    loaded, help_text = out.split("\n", 1)
    assert loaded == "[]"
    assert all(name in help_text for name in PRESETS) and "pool:w=8,s=8,local=16" in help_text
