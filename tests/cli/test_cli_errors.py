import pytest
import typer

from phasekv.cli.errors import one_line_errors


def test_expected_errors_end_with_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("PHASEKV_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as exit_info, one_line_errors("eval"):
        raise ValueError("--modulus must be at least 2")
    assert exit_info.value.exit_code == 2
    assert capsys.readouterr().err == "phasekv eval: error: --modulus must be at least 2\n"
    with pytest.raises(typer.Exit) as exit_info, one_line_errors("eval"):
        raise KeyboardInterrupt("interrupted: 12 answers kept in the cache")
    assert exit_info.value.exit_code == 130
    with pytest.raises(RuntimeError), one_line_errors("eval"):  # a bug is not bad input: its traceback shows
        raise RuntimeError("bug")


def test_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("PHASEKV_DEBUG", "1")
    with pytest.raises(ValueError), one_line_errors("eval"):
        raise ValueError("bad")
