"""One registry of the residue probes: a probe registered at run time is a command, an API probe and a result the
report reads, without another edit; every built-in probe is declared whole."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import phasekv
from phasekv.studies.probe import registry
from phasekv.studies.probe.result import ProbeResult
from phasekv.studies.registry import classify

NEEDLE = dict(context_length=96, n_records=6, n_haystacks=4, modulus=4, spread_blocks=1, seed=3)
REGISTER_TWIN = (
    "import dataclasses, sys; from phasekv.studies.probe import registry; "
    "registry.register(dataclasses.replace(registry.get('needle'), name='twin', summary='The needle, twice.')); "
    "from phasekv.cli import app; sys.argv[0] = 'phasekv'; app()"
)


@pytest.fixture
def twin(monkeypatch):
    """The needle registered again as "twin", for this test only."""
    monkeypatch.setattr(registry, "_REGISTERED", registry.probes())
    return registry.register(dataclasses.replace(registry.get("needle"), name="twin", summary="The needle, twice."))


def test_every_built_in_probe_is_declared_whole():
    for name, probe in registry.probes().items():
        assert probe.name == name and dataclasses.is_dataclass(probe.options)
        defaults = probe.options()
        assert set(probe.flags) <= probe.option_fields() and "seed" in probe.flags and "modulus" in probe.flags
        assert probe.units(dataclasses.asdict(defaults)) > 0 and 0 < probe.chance(defaults) < 1
    with pytest.raises(ValueError, match="unknown probe 'sideways'; the residue probes are lookup, needle"):
        registry.get("sideways")


def test_a_registered_probe_is_a_python_probe_and_a_result_the_report_reads(twin, phasekv_dir):
    result = phasekv.probe(phasekv_dir, "twin", n_resamples=50, **NEEDLE)
    assert isinstance(result, ProbeResult) and result.probe == "twin"
    assert classify(json.loads(result.to_json())) == "residues"
    needle = phasekv.probe(phasekv_dir, "needle", n_resamples=50, **NEEDLE)
    assert result.to_dict()["summary"] == needle.to_dict()["summary"]


def test_a_registered_probe_is_a_command(phasekv_dir, tmp_path):
    out = tmp_path / "twin.json"
    args = ["eval", "twin", str(phasekv_dir), "--context-length", "96", "--records", "6", "--haystacks", "4"]
    args += ["--modulus", "4", "--spread-blocks", "1", "--seed", "3", "--resamples", "50", "--quiet", "--out", str(out)]
    source = str(Path(phasekv.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [sys.executable, "-c", REGISTER_TWIN, "eval", "--help"], capture_output=True, text=True, env=env
    )
    assert "twin" in shown.stdout and "The needle, twice." in shown.stdout, shown.stderr
    ran = subprocess.run([sys.executable, "-c", REGISTER_TWIN, *args], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(out.read_text())["probe"] == "twin" and "re-measure: phasekv eval twin" in ran.stdout
