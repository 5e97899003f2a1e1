import sys

import pytest
from typer.testing import CliRunner

from phasekv.cli import app, main
from phasekv.model import PRESETS

runner = CliRunner()


def test_models_lists_every_preset_with_parameter_counts():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for name in PRESETS:
        assert name in result.output
    assert "596,049,920" in result.output  # full-8kv at paper size = Qwen3-0.6B


def test_demo_shows_entries_and_cache():
    result = runner.invoke(app, ["demo", "--length", "20", "--new-tokens", "3"])
    assert result.exit_code == 0, result.output
    assert "visible from" in result.output and "entries per layer [2, 2]" in result.output


def test_bad_preset_is_one_clear_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["phasekv", "demo", "--preset", "w9s9"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "phasekv: error: unknown preset 'w9s9'" in err and "Traceback" not in err
