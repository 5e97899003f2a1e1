"""The scripts under examples/ run as they are (with a design small enough for the suite)."""

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_first_hour_probes_a_model_folder_and_shows_the_typed_result(phasekv_dir, monkeypatch, capsys):
    monkeypatch.setenv("PHASEKV_EXAMPLE_MODEL", str(phasekv_dir))
    monkeypatch.setenv("PHASEKV_EXAMPLE_SMALL", "1")
    namespace = runpy.run_path(str(EXAMPLES / "first_hour.py"), run_name="__main__")
    printed = capsys.readouterr().out
    result = namespace["result"]
    assert type(result).__name__ == "ProbeResult" and result.model["path"] == str(phasekv_dir)
    assert f"model: {phasekv_dir}\n" in printed
    assert "verdict: not judged: at chance\n" in printed  # an untrained model
    assert "ProbeResult: lookup, " in printed and " prompts, modulus 8\n" in printed
    assert "phase verdict at period 4: NOT JUDGED: AT CHANCE" in printed
    flip = namespace["flip"]
    assert type(flip).__name__ == "FlipResult" and flip.options["n_lengths"] == 8
    assert f"flip verdict: {flip.verdict}\n" in printed and flip.verdict.endswith("period detected")


def test_the_readme_says_how_to_run_phasekv_before_its_first_bare_command():
    readme = (EXAMPLES.parent / "README.md").read_text()
    told = min(readme.index("source .venv/bin/activate"), readme.index("`.venv/bin/phasekv ...`"))
    first_bare = min(readme.index("`phasekv "), readme.index("\nphasekv "))
    assert told < first_bare
    top = readme.split("\n## ")[1]  # the section of the top commands
    assert "examples/first_hour.py" in top and (EXAMPLES / "first_hour.py").is_file()
