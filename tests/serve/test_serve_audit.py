"""Endpoint audits that cannot lie: the results cache never serves another model's answers and
survives torn writes, Ctrl-C keeps what was answered, servers that ignore `echo` (llama.cpp's) are
audited exactly, `phasekv serve` behaves like the servers it imitates, and an audit through a
faulty proxy, a SIGKILLed server and a SIGINTed client ends with the uninterrupted result."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from phasekv.cli import app
from phasekv.scoring import load_scorer
from phasekv.serve import EndpointError, EndpointScorer, make_server
from phasekv.serve.canary import canary_prompts
from phasekv.serve.server import CompletionHandler
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions
from serving_helpers import answer_lines, counting_handler, serving

# A small lookup: 3 mappings x 6 residues, about 50 distinct requests.
LOOKUP_ARGS = ["--records", "12", "--demos", "3", "--modulus", "6", "--mappings", "3", "--seed", "3",
               "--resamples", "50", "--quiet"]  # fmt: skip
LOOKUP = LookupOptions(n_records=12, n_demos=3, modulus=6, n_mappings=3, seed=3)
FAST_ARGS = ["--retries", "3", "--timeout", "10"]  # options main had too: the reproductions fail there for their cause
RESULT_FIELDS = ("n_prompts", "summary", "position_stats", "controls", "cell_accuracy")
# Python's Ctrl-C handler set explicitly: a shell that runs the tests in the background starts them with SIGINT
# ignored, which every child inherits (Python then installs no handler and the Ctrl-C tests would see no interrupt).
PYTHON_CLI = [
    sys.executable,
    "-c",
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from phasekv.cli import main; main()",
]


@pytest.fixture(scope="module")
def scorers(phasekv_dir, qwen_dir):
    return {"phasekv": (load_scorer(phasekv_dir), phasekv_dir), "qwen": (load_scorer(qwen_dir), qwen_dir)}


@pytest.fixture(scope="module")
def local_lookup(scorers):
    """The in-process lookup result of each model: what every audit through a server must equal."""
    return {kind: run_lookup(scorer, LOOKUP, n_resamples=50, progress=False) for kind, (scorer, _) in scorers.items()}


def audit(url: str, tokenizer, tmp_path, *extra: str, name: str = "w8s8", out: str = "out.json"):
    """`phasekv eval lookup --endpoint URL ...` in process: (exit code, output, result or None)."""
    path = tmp_path / out
    path.unlink(missing_ok=True)
    args = ["eval", "lookup", "--endpoint", url + "/v1", "--served-model", name, "--tokenizer", str(tokenizer),
            *LOOKUP_ARGS, *FAST_ARGS, *extra, "--out", str(path)]  # fmt: skip
    run = CliRunner().invoke(app, args)
    return run.exit_code, run.output, json.loads(path.read_text()) if path.is_file() else None


def assert_same_result(local: dict, remote: dict, logprob: bool = True) -> None:
    """The same 0/1 outcomes, statistics and (with `logprob`) mean answer log-prob: two untrained models
    can share every outcome (all wrong), never the log-probs."""
    for field in RESULT_FIELDS:
        assert remote[field] == local[field], field
    if logprob:
        assert remote["mean_answer_logprob"] == pytest.approx(local["mean_answer_logprob"], rel=1e-5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# 1. The answer cache can never serve another model's answers.


def test_default_cache_never_serves_another_models_answers(scorers, local_lookup, tmp_path, monkeypatch):
    """Model A then model B, both served as `w8s8` (on other ports), default cache: B's run is B's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (a, a_dir), (b, _) = scorers["phasekv"], scorers["qwen"]
    with serving(a, name="w8s8") as server:
        code, output, first = audit(server.url, a_dir, tmp_path)
    assert code == 0, output
    assert_same_result(local_lookup["phasekv"], first)
    with serving(b, name="w8s8") as server:
        code, output, second = audit(server.url, a_dir, tmp_path)  # the same tokenizer: only the server differs
    assert code == 0, output
    assert_same_result(local_lookup["qwen"], second)
    sent = second["model"]["answers"]["sent"]
    assert sent > 0 and second["model"]["answers"]["from_cache"] == 0
    assert f"answers: 0 from the results cache, {sent} sent" in output
    assert len(list((tmp_path / "xdg" / "phasekv" / "endpoints").glob("w8s8-*.jsonl"))) == 2


def test_a_cache_written_for_another_server_is_refused(scorers, local_lookup, tmp_path):
    """One explicit --cache, the same name and port, another model behind it: a clear refusal, never a mix."""
    (a, a_dir), (b, _) = scorers["phasekv"], scorers["qwen"]
    cache = tmp_path / "cache.jsonl"
    with serving(a, name="w8s8") as server:
        port = server.server_address[1]
        assert audit(server.url, a_dir, tmp_path, "--cache", str(cache))[0] == 0
        code, output, again = audit(server.url, a_dir, tmp_path, "--cache", str(cache))
    assert code == 0, output  # the same server: resumed from the cache
    assert_same_result(local_lookup["phasekv"], again)
    with serving(b, name="w8s8", port=port) as server:
        code, output, result = audit(server.url, a_dir, tmp_path, "--cache", str(cache))
        assert code == 2 and result is None
        assert "holds answers of another server or model (differs in: server_model)" in output
        assert "--cache NEW_FILE (or --no-cache)" in output
        code, output, fresh = audit(server.url, a_dir, tmp_path, "--no-cache")
    assert code == 0, output
    assert_same_result(local_lookup["qwen"], fresh)


class ConstantCardHandler(CompletionHandler):
    """A third-party-like server: its `/v1/models` card never changes, whatever weights answer."""

    def do_GET(self):  # noqa: N802
        card = {"id": self.server.served_model, "object": "model", "created": 0, "owned_by": "third-party"}
        self.send_json(200, {"object": "list", "data": [card]})


def _save_phasekv(directory: Path, seed: int) -> Path:
    """An untrained w8s4-1kv tiny phasekv checkpoint of `seed` saved into `directory` (weights replaced)."""
    from conftest import save_with_tokenizer, word_tokenizer
    from phasekv.model import PhaseKVModel, preset_config

    torch.manual_seed(seed)
    return save_with_tokenizer(PhaseKVModel(preset_config("w8s4-1kv", "tiny", vocab_size=len(word_tokenizer()))),
                               directory)  # fmt: skip


def test_weights_replaced_in_a_served_folder_are_never_answered_from_the_cache(tmp_path, monkeypatch):
    """Checkpoint A served as `m` and audited; other weights copied into the same folder, served again as
    `m` on the same port, audited with the default cache: the second result is the new weights', never A's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder, port = _save_phasekv(tmp_path / "ckpt", seed=0), free_port()
    a = load_scorer(folder)
    with serving(a, name="m", port=port) as server:
        code, output, first = audit(server.url, folder, tmp_path, name="m")
        card_a = server.models_body()["data"][0]["phasekv"]["weights_sha256"]
    assert code == 0, output
    _save_phasekv(folder, seed=1)  # retrained in place: the same path, config and parameter count
    b = load_scorer(folder)
    with serving(b, name="m", port=port) as server:
        assert server.models_body()["data"][0]["phasekv"]["weights_sha256"] != card_a
        code, output, second = audit(server.url, folder, tmp_path, name="m")
        assert code == 0, output
        assert second["model"]["answers"]["from_cache"] == 0 and second["model"]["answers"]["sent"] > 0
        assert_same_result(run_lookup(b, LOOKUP, n_resamples=50, progress=False), second)
        assert second["mean_answer_logprob"] != pytest.approx(first["mean_answer_logprob"], rel=1e-5)
        cache = tmp_path / "xdg" / "phasekv" / "endpoints" / f"m-{first['model']['fingerprint_id']}.jsonl"
        code, output, _ = audit(server.url, folder, tmp_path, "--cache", str(cache), name="m")
    assert code == 2 and "holds answers of another server or model" in output  # A's cache, named explicitly


def test_a_card_that_never_changes_cannot_hide_other_weights(scorers, local_lookup, tmp_path, monkeypatch):
    """A server whose card is constant (vLLM, llama.cpp say little that changes): the canaries refuse the cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (a, a_dir), (b, _) = scorers["phasekv"], scorers["qwen"]
    port = free_port()
    with serving(a, ConstantCardHandler, name="w8s8", port=port) as server:
        assert audit(server.url, a_dir, tmp_path)[0] == 0
        code, output, again = audit(server.url, a_dir, tmp_path)  # the same weights: resumed, nothing sent
    assert code == 0, output
    assert again["model"]["answers"]["sent"] == 0 and again["model"]["canaries"]["largest_difference_nats"] <= 1e-3
    assert_same_result(local_lookup["phasekv"], again)
    with serving(b, ConstantCardHandler, name="w8s8", port=port) as server:
        code, output, result = audit(server.url, a_dir, tmp_path)
        assert code == 2 and result is None
        assert "answers the canary prompts differently" in output and "--cache NEW_FILE (or --no-cache)" in output
        assert len(output.strip().splitlines()) == 1
        code, output, fresh = audit(server.url, a_dir, tmp_path, "--no-cache")
    assert code == 0, output  # B's answers (the card gives no stride here, so only the log-prob compares)
    assert fresh["mean_answer_logprob"] == pytest.approx(local_lookup["qwen"]["mean_answer_logprob"], rel=1e-5)


@pytest.mark.parametrize("card", ["weights hash", "constant"])
def test_a_server_restarted_with_other_weights_mid_audit_stops_it(tmp_path, card):
    """Issue 53: checkpoint A served as `m` dies after 20 answers (it drops every connection), the client
    retries, and B's weights (the same folder, name and port) come up instead. The audit stops with one line,
    its cache keeps none of B's answers, and a rerun with A served again resumes to A's own result. With a card
    that shows the weights' hash the card tells; behind one that never changes, the canaries."""
    folder = _save_phasekv(tmp_path / "ckpt", seed=0)
    a = load_scorer(folder)
    _save_phasekv(folder, seed=1)  # B: the same folder, config and tokenizer, other weights
    b = load_scorer(folder)
    port, cache, runs = free_port(), tmp_path / "cache.jsonl", {}
    dying = counting_handler(answer_limit=20)
    handler_a, handler_b = (dying, CompletionHandler) if card == "weights hash" else (
        type("DyingConstant", (dying,), {"do_GET": ConstantCardHandler.do_GET}), ConstantCardHandler)  # fmt: skip
    args = ("--cache", str(cache), "--retries", "8", "--backoff", "0.05", "--concurrency", "2")
    with serving(a, handler_a, name="m", port=port) as server:
        client = threading.Thread(target=lambda: runs.update(first=audit(server.url, folder, tmp_path, *args,
                                                                           name="m")))  # fmt: skip
        client.start()
        _wait_for(lambda: dying.started[0] >= 20, "20 answers", timeout=60)
    with serving(b, handler_b, name="m", port=port):  # the restart, while the client retries
        client.join(timeout=120)
    code, output, result = runs["first"]
    assert code == 2 and result is None, output
    assert "changed during the audit" in output and len(output.strip().splitlines()) == 1, output
    # the card or the canaries, whichever is asked first after the restart; only the canaries behind a constant card
    told = "model card differs in phasekv" in output and card == "weights hash"
    assert told or "canary prompts differently" in output
    kept = answer_lines(cache)  # A's accepted before the last check that passed (often none): none of B's
    assert len(kept) <= 20 and all(isinstance(line["check"], int) for line in kept)
    with serving(a, ConstantCardHandler if card == "constant" else CompletionHandler, name="m", port=port) as server:
        code, output, resumed = audit(server.url, folder, tmp_path, *args, name="m")
    assert code == 0, output
    assert resumed["model"]["answers"]["from_cache"] == len(kept)
    assert_same_result(run_lookup(a, LOOKUP, n_resamples=50, progress=False), resumed)


def test_weights_swapped_without_a_failed_request_are_caught_when_the_result_is_recorded(tmp_path):
    """Other weights answer from the 20th request on, with no dropped connection to tell of a restart: the
    check when the result is recorded catches it and drops every answer accepted since the previous check."""
    folder = _save_phasekv(tmp_path / "ckpt", seed=0)
    a = load_scorer(folder)
    b = load_scorer(_save_phasekv(tmp_path / "other", seed=1))
    posts, cache = itertools.count(), tmp_path / "cache.jsonl"

    class Swapping(ConstantCardHandler):
        def do_POST(self):  # noqa: N802
            if next(posts) == len(canary_prompts(a.tokenizer, self.server.vocab_size)) + 20:
                self.server.scorer = b
            super().do_POST()

    with serving(a, Swapping, name="m") as server:
        code, output, result = audit(server.url, folder, tmp_path, "--cache", str(cache), name="m")
    assert code == 2 and result is None, output
    assert "canary prompts differently" in output and len(output.strip().splitlines()) == 1, output
    assert answer_lines(cache) == []


def _other_tokenizer(directory: Path, tmp_path: Path) -> Path:
    """A copy of `directory`'s model whose tokenizer swaps the ids of two words (same vocabulary size)."""
    import shutil

    copy = Path(shutil.copytree(directory, tmp_path / "other-tokenizer"))
    spec = json.loads((copy / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    first, second = list(vocab)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    return copy


@pytest.mark.parametrize("field", ["served_model", "tokenizer", "top_k", "text_prompts"])
def test_every_field_of_the_fingerprint_invalidates_a_reused_cache(scorers, tmp_path, field):
    scorer, directory = scorers["qwen"]
    cache, port = tmp_path / "cache.jsonl", free_port()
    with serving(scorer, name="a", port=port) as server:
        EndpointScorer(server.url, "a", directory, cache=cache).score_answers([[5, 6, 7]], [[8]])
        assert EndpointScorer(server.url, "a", directory, cache=cache).canary_difference <= 1e-3  # the same: accepted
    changed = {"name": "a", "tokenizer": directory, "options": {}}
    if field == "served_model":
        changed["name"] = "b"
    elif field == "tokenizer":
        changed["tokenizer"] = _other_tokenizer(directory, tmp_path)
    elif field == "top_k":
        changed["options"] = {"top_k": 21}
    else:
        changed["options"] = {"text_prompts": True}
    differs = {"served_model": "served_model", "tokenizer": "tokenizer_sha256"}.get(field, "request_options")
    with serving(scorer, name=changed["name"], port=port) as server:
        with pytest.raises(EndpointError, match=f"differs in: [a-z_, ]*{differs}.*--cache NEW_FILE"):
            EndpointScorer(server.url, changed["name"], changed["tokenizer"], cache=cache, **changed["options"])


def test_canary_difference_counts_tokens_that_left_the_top_list():
    from phasekv.serve.canary import canary_difference

    stored = {"prompts": [[1, 2]], "top": [[[5, -1.0], [6, -2.0], [7, -3.0]]]}
    assert canary_difference(stored, stored) == 0.0
    close = {"prompts": [[1, 2]], "top": [[[5, -1.0004], [6, -2.0], [7, -3.0]]]}
    assert canary_difference(stored, close) == pytest.approx(4e-4)
    swapped_tail = {"prompts": [[1, 2]], "top": [[[5, -1.0], [6, -2.0], [8, -3.0]]]}  # a tie at the edge
    assert canary_difference(stored, swapped_tail) == 0.0
    moved = {"prompts": [[1, 2]], "top": [[[9, -0.5], [5, -1.0], [6, -2.0]]]}  # 9 entered above 7
    assert canary_difference(stored, moved) == pytest.approx(2.5)
    assert canary_difference(stored, {"prompts": [[1, 3]], "top": stored["top"]}) == float("inf")


# 2. The cache file survives a crash mid-write.


def test_torn_last_line_is_cut_on_every_resume(scorers, local_lookup, tmp_path):
    scorer, directory = scorers["phasekv"]
    cache = tmp_path / "cache.jsonl"
    with serving(scorer, name="w8s8") as server:
        assert audit(server.url, directory, tmp_path, "--cache", str(cache))[0] == 0
        lines = cache.read_text().splitlines(keepends=True)
        assert len(lines) >= 41
        cache.write_text("".join(lines[:40]) + lines[40][:70])  # a crash while writing line 41
        for _ in range(3):  # any number of crash/resume cycles
            code, output, result = audit(server.url, directory, tmp_path, "--cache", str(cache))
            assert code == 0, output
            assert_same_result(local_lookup["phasekv"], result)
            cache.write_text(cache.read_text() + lines[-1][:50])  # torn again
        assert "cut a torn last line (50 bytes" in output
        assert result["model"]["answers"]["sent"] == 0
        lines = cache.read_text().splitlines(keepends=True)
        cache.write_text("".join(lines[:5]) + "{garbage\n" + "".join(lines[5:]))
        code, output, _ = audit(server.url, directory, tmp_path, "--cache", str(cache))
    assert code == 2 and "line 6 is unreadable" in output and "--cache NEW_FILE" in output


# 3. Ctrl-C keeps what was answered.


def test_ctrl_c_caches_every_answer_and_says_how_to_resume(scorers, local_lookup, tmp_path):
    scorer, directory = scorers["phasekv"]
    cache = tmp_path / "cache.jsonl"
    slow = counting_handler(delay=0.05)
    with serving(scorer, slow, name="w8s8") as server:
        args = ["eval", "lookup", "--endpoint", server.url, "--served-model", "w8s8", "--tokenizer", str(directory),
                "--cache", str(cache), "--concurrency", "2", *LOOKUP_ARGS, *FAST_ARGS]  # fmt: skip
        client = subprocess.Popen([*PYTHON_CLI, *args], stderr=subprocess.PIPE, text=True, env=_src_env())
        _wait_for(lambda: len(slow.answered) >= 6, "6 answers", timeout=300)
        client.send_signal(signal.SIGINT)
        at_signal = len(slow.answered)
        _, stderr = client.communicate(timeout=60)
        assert client.returncode == 130, stderr
        answered = len(slow.answered)
        assert answered - at_signal <= 2  # pending work is cancelled at once: only the 2 in flight finish
        assert f"interrupted: {answered} answers cached" in stderr and "rerun the same command to resume" in stderr
        assert len(answer_lines(cache)) == answered  # every answer the server gave is kept
        code, output, result = audit(server.url, directory, tmp_path, "--cache", str(cache))
    assert code == 0, output
    assert result["model"]["answers"]["from_cache"] == answered
    assert len(slow.answered) == len({json.dumps(p) for p in slow.answered})  # nothing sent twice
    assert_same_result(local_lookup["phasekv"], result)


def _src_env() -> dict:
    """The environment of the CLI processes: this one's (so PYTHONPATH picks the same phasekv), one thread."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# 4. Audits of servers that do not echo the prompt.


class LlamaCppHandler(CompletionHandler):
    """Answers `/v1/models` and `/v1/completions` as llama.cpp's `llama-server` does: `echo` is ignored
    (only the generated token comes back) and log-probs come in the chat-style shape.

    The shapes follow llama.cpp's source (ggml-org/llama.cpp, tools/server/server-task.cpp):
    `server_task_result_cmpl_final::to_json_oaicompat` answers `/v1/completions` with
    `{"choices": [{"text", "index", "logprobs": {"content": [...]} | null, "finish_reason"}], "created",
    "model", "system_fingerprint", "object": "text_completion", "usage": {"completion_tokens",
    "prompt_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}, "id", "timings"}`, and
    `completion_token_output::probs_vector_to_json` writes each generated token as `{"id", "token",
    "bytes", "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}, ...]}` (the OpenAI
    `logprobs` field sets `n_probs`; tools/server/tests/unit/test_completion.py::test_n_probs checks
    these keys). Newer builds (`probs_vector_to_json_oaicompat_completions`) answer in OpenAI's legacy
    shape instead, `{"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}`
    with text keys and still no echo: `shape = "legacy"`. `/v1/models` lists
    `{"id", "object": "model", "created", "owned_by": "llamacpp", "meta": {...}}`.
    """

    shape = "content"

    def do_GET(self):  # noqa: N802
        meta = {"vocab_type": 2, "n_vocab": self.server.vocab_size, "n_ctx_train": 4096, "n_embd": 32}
        card = {"id": self.server.served_model, "object": "model", "created": int(time.time()),
                "owned_by": "llamacpp", "meta": meta}  # fmt: skip
        self.send_json(200, {"object": "list", "data": [card]})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tok = self.server.scorer.tokenizer
        ids = body["prompt"] if isinstance(body["prompt"], list) else tok(body["prompt"], add_special_tokens=False)
        with self.server.model_lock:
            row = self.server.scorer.next_token_logprobs([ids])[0]
        order = torch.argsort(row, descending=True, stable=True)[: body.get("logprobs") or 0].tolist()
        token = int(row.argmax())

        def entry(t: int) -> dict:
            piece = tok.decode([t])
            return {"id": t, "token": piece, "bytes": list(piece.encode()), "logprob": float(row[t])}

        if self.shape == "content":
            logprobs = {"content": [{**entry(token), "top_logprobs": [entry(t) for t in order]}]}
        else:
            top = {tok.decode([t]): float(row[t]) for t in order}
            logprobs = {"tokens": [tok.decode([token])], "token_logprobs": [float(row[token])],
                        "top_logprobs": [top], "text_offset": [0]}  # fmt: skip
        usage = {"completion_tokens": 1, "prompt_tokens": len(ids), "total_tokens": len(ids) + 1,
                 "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip
        self.send_json(200, {
            "choices": [{"text": tok.decode([token]), "index": 0, "logprobs": logprobs, "finish_reason": "length"}],
            "created": int(time.time()), "model": self.server.served_model, "system_fingerprint": "b6548-stub",
            "object": "text_completion", "usage": usage, "id": "chatcmpl-stub",
            "timings": {"prompt_n": len(ids), "predicted_n": 1},
        })  # fmt: skip


@pytest.mark.parametrize("shape", ["content", "legacy"])
def test_servers_that_ignore_echo_are_audited_exactly(scorers, local_lookup, tmp_path, shape):
    scorer, directory = scorers["phasekv"]
    handler = type("Handler", (LlamaCppHandler,), {"shape": shape})
    with serving(scorer, handler, name="w8s8") as server:
        code, output, result = audit(server.url, directory, tmp_path)  # as a user would first try it
        assert code == 0, output
        assert result["model"]["answer_requests"] == "one per answer token (no echo)"
        assert_same_result(local_lookup["phasekv"], result, logprob=False)  # correctness needs only top-1s
        assert result["model"]["logprobs_outside_top_k"] > 0  # an untrained model: answers outside the top 20
        code, output, whole = audit(server.url, directory, tmp_path, "--top-k", "841", "--no-cache")
        assert code == 0, output
        assert_same_result(local_lookup["phasekv"], whole)
        code, output, _ = audit(server.url, directory, tmp_path, "--echo", "--no-cache")
    assert code == 2 and "server ignored echo: 1 token returned for a" in output


def test_no_echo_scoring_equals_echo_scoring_on_a_server_that_echoes(scorers, tmp_path):
    scorer, directory = scorers["qwen"]
    contexts, answers = [[5, 6, 7], [8, 9, 10, 11]], [[12, 13], [14]]
    with serving(scorer) as server:
        echo = EndpointScorer(server.url, "tiny", directory, echo=True).score_answers(contexts, answers)
        steps = EndpointScorer(server.url, "tiny", directory, echo=False, top_k=841).score_answers(contexts, answers)
    assert steps.correct.tolist() == echo.correct.tolist()
    assert steps.first_argmax.tolist() == echo.first_argmax.tolist()
    assert steps.logprob == pytest.approx(echo.logprob, rel=1e-6)


# 5. `phasekv serve` behaves like the servers it imitates.


def _complete(url: str, **body) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_honours_stop_and_refuses_what_it_cannot_do(scorers):
    scorer, _ = scorers["qwen"]
    with serving(scorer) as server:
        status, free = _complete(server.url, prompt="the cat", max_tokens=6)
        assert status == 200 and len(free["choices"][0]["text"].split()) == 6
        status, body = _complete(server.url, prompt="the cat", max_tokens=6, stop=[" "])
        choice = body["choices"][0]
        assert status == 200 and choice["finish_reason"] == "stop" and " " not in choice["text"]
        assert choice["text"] == free["choices"][0]["text"].split(" ")[0]
        for field, value in (("logit_bias", {"5": 100}), ("suffix", "dog")):
            status, body = _complete(server.url, prompt="the cat", **{field: value})
            assert status == 400 and field in body["error"]["message"]
        assert _complete(server.url, prompt="the cat", max_tokens=256)[0] == 200  # lm-eval's generate_until default
        status, body = _complete(server.url, prompt="the cat", max_tokens=10**6)
        assert status == 400 and "--max-tokens" in body["error"]["message"]
    with serving(scorer, max_new_tokens=3) as server:  # phasekv serve --max-tokens 3
        status, body = _complete(server.url, prompt="the cat", max_tokens=4)
        assert status == 400 and "[0, 3]" in body["error"]["message"]


def test_text_offset_indexes_into_the_returned_text(scorers):
    scorer, _ = scorers["qwen"]
    tok = scorer.tokenizer
    with serving(scorer) as server:
        status, body = _complete(server.url, prompt="the cat - -", max_tokens=0, echo=True, logprobs=1)
        assert status == 200
        choice = body["choices"][0]
        assert choice["text"] == "the cat - -" and choice["logprobs"]["text_offset"] == [0, 4, 8, 10]
        _, body = _complete(server.url, prompt="dog . the", max_tokens=5, echo=True, logprobs=2)
    choice = body["choices"][0]
    for token, offset in zip(choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"], strict=True):
        assert choice["text"][offset:].startswith(token)
    assert len(choice["logprobs"]["tokens"]) == len(tok("dog . the")["input_ids"]) + 5


def test_errors_that_cannot_heal_are_not_retried_and_restarts_are_waited_for(scorers):
    scorer, directory = scorers["qwen"]
    with serving(scorer) as server:
        start = time.perf_counter()
        with pytest.raises(EndpointError, match="TLS failed.*use http://"):  # https:// to a plain-HTTP server
            EndpointScorer(server.url.replace("http", "https"), "tiny", directory, retries=4, backoff=1.0)
        assert time.perf_counter() - start < 1.0
    handler = counting_handler(failures=2, fail_with=408)
    with serving(scorer, handler) as server:
        EndpointScorer(server.url, "tiny", directory, backoff=0.01).score_answers([[3, 4]], [[5]])
    assert handler.failed[0] == 2 and len(handler.answered) == 1
    port = free_port()  # nothing listens yet: refused, retried until the server is up
    late: list = []

    def start_late() -> None:
        late.append(make_server(scorer, "tiny", port=port))
        late[0].serve_forever()

    starter = threading.Timer(0.3, start_late)
    starter.daemon = True
    starter.start()
    try:
        endpoint = EndpointScorer(f"http://127.0.0.1:{port}", "tiny", directory, retries=6, backoff=0.1)
        assert endpoint.score_answers([[3, 4]], [[5]]).correct.shape == (1,)
    finally:
        late[0].shutdown()
        late[0].server_close()


# The whole: a faulty proxy, a SIGKILLed server, a SIGINTed client.


class FaultyProxy(ThreadingHTTPServer):
    """Forwards to 127.0.0.1:`upstream`; of every 6 POSTs, one is dropped unanswered after the server
    answered it, one gets a 500 HTML page, one a 429, one a 200 with the JSON cut in half, and two pass.
    `delivered` lists the prompts whose answers reached the client intact."""

    daemon_threads = True

    def __init__(self, upstream: int):
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream = upstream
        self.count = 0
        self.delivered: list[str] = []
        self.lock = threading.Lock()


class ProxyHandler(BaseHTTPRequestHandler):
    server: FaultyProxy

    def do_GET(self):  # noqa: N802
        self._forward(None)

    def do_POST(self):  # noqa: N802
        self._forward(self.rfile.read(int(self.headers["Content-Length"])))

    def _forward(self, body: bytes | None) -> None:
        with self.server.lock:
            fault = "pass" if body is None else ("drop", "html", "429", "cut", "pass", "pass")[self.server.count % 6]
            self.server.count += body is not None
        if fault == "html":
            return self._send(500, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        if fault == "429":
            return self._send(429, b'{"error": {"message": "slow down"}}')
        try:
            upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=30)
            upstream.request(self.command, self.path, body, {"Content-Type": "application/json"})
            response = upstream.getresponse()
            status, data = response.status, response.read()
        except OSError:  # the server is down: the client sees a dropped connection
            self.close_connection = True
            return None
        if fault == "drop":
            self.close_connection = True
            return None
        if fault == "cut":
            return self._send(200, data[: len(data) // 2])
        if body is not None and status == 200:
            with self.server.lock:
                self.server.delivered.append(json.dumps(json.loads(body)["prompt"]))
        return self._send(status, data)

    def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _start_server(directory, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [*PYTHON_CLI, "serve", str(directory), "--port", str(port), "--served-model", "w8s8", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_src_env(),
    )  # fmt: skip


def _wait_until_up(port: int) -> None:
    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1):
                return True
        except OSError:
            return False

    _wait_for(up, f"phasekv serve on port {port}", timeout=300)


@pytest.mark.slow
def test_faults_interruptions_and_restarts_end_with_the_uninterrupted_result(scorers, local_lookup, tmp_path):
    """The endpoint the client sees (the proxy) loses its server to a SIGKILL mid-audit and gets a fresh
    server process (started beforehand, as process start-up is slow) after a pause."""
    _, directory = scorers["phasekv"]
    ports, cache, out = (free_port(), free_port()), tmp_path / "cache.jsonl", tmp_path / "out.json"
    servers = [_start_server(directory, port) for port in ports]
    proxy = FaultyProxy(ports[0])
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    args = ["eval", "lookup", "--endpoint", f"http://127.0.0.1:{proxy.server_address[1]}/v1", "--served-model",
            "w8s8", "--tokenizer", str(directory), "--cache", str(cache), "--concurrency", "2", "--retries", "12",
            "--backoff", "0.05", "--timeout", "30", *LOOKUP_ARGS, "--out", str(out)]  # fmt: skip
    try:
        for port in ports:
            _wait_until_up(port)
        client = subprocess.Popen([*PYTHON_CLI, *args], stderr=subprocess.PIPE, text=True, env=_src_env())
        _wait_for(lambda: len(proxy.delivered) >= 5, "5 answers", timeout=300)
        servers[0].kill()  # SIGKILL mid-audit: the client meets dropped and refused connections
        servers[0].wait()
        time.sleep(0.5)
        proxy.upstream = ports[1]  # the server is back
        _wait_for(lambda: len(proxy.delivered) >= 15, "15 answers")
        client.send_signal(signal.SIGINT)
        _, stderr = client.communicate(timeout=120)
        assert client.returncode == 130 and "interrupted:" in stderr, stderr
        assert not out.exists()
        resumed = subprocess.run([*PYTHON_CLI, *args], capture_output=True, text=True, env=_src_env(), timeout=300)
        assert resumed.returncode == 0, resumed.stderr
    finally:
        for server in servers:
            server.kill()
            server.wait()
        proxy.shutdown()
        proxy.server_close()
    assert_same_result(local_lookup["phasekv"], json.loads(out.read_text()))
    tokenizer = scorers["phasekv"][0].tokenizer
    canaries = {json.dumps(ids) for ids in canary_prompts(tokenizer, len(tokenizer))}  # asked anew by every run
    delivered = [prompt for prompt in proxy.delivered if prompt not in canaries]
    # an answer that arrives after Ctrl-C, once failures call for a check that can no longer be made, is not kept
    # (it is unchecked) and is asked again on resume: at most one per request in flight (--concurrency 2)
    assert len(delivered) - len(set(delivered)) <= 2
    keys = [line["key"] for line in answer_lines(cache)]
    assert len(keys) == len(set(keys)) == len(set(delivered))


# 6. The README's audit example runs as written, against the layout the quick profile writes.

README_AUDIT = """\
phasekv serve runs/quick/runs/w8s8-1kv-s42/checkpoints/final --port 8000 --served-model w8s8
phasekv eval lookup --endpoint http://127.0.0.1:8000/v1 --served-model w8s8 --tokenizer runs/quick/runs/w8s8-1kv-s42/checkpoints/final --out lookup.json
phasekv report lookup.json --out audit.html
"""  # noqa: E501 (the README's lines, verbatim)


def test_readme_audit_commands_run_against_the_quick_layout(tmp_path, monkeypatch):
    """A tiny stand-in for the quick profile's W8/S8 run (same directory, 2 steps) gets `checkpoints/final`
    from the trainer, and the README's three audit commands run on it as written."""
    from conftest import small_config
    from phasekv.reproduce.profiles import QUICK
    from phasekv.reproduce.runner import run_dir
    from phasekv.train import train

    serve_line, eval_line, report_line = (line.split() for line in README_AUDIT.splitlines())
    model = serve_line[2]
    (spec,) = (run for run in QUICK.runs if run.name == "w8s8-1kv-s42")
    assert model == f"{run_dir(Path('runs/quick'), spec)}/checkpoints/final"
    readme = Path(__file__).resolve().parents[2] / "README.md"
    if "checkpoints/final" in readme.read_text():  # the README shows these commands (pasted verbatim)
        assert all(line in readme.read_text() for line in README_AUDIT.splitlines())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    result = train(small_config(steps=2), run_dir(Path("runs/quick"), spec), progress=False)
    final = Path(model)
    assert final.is_symlink() and final.resolve() == result.checkpoint.resolve()
    port = str(free_port())
    server = subprocess.Popen([*PYTHON_CLI, *[port if arg == "8000" else arg for arg in serve_line[1:]]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_src_env())  # fmt: skip
    try:
        _wait_until_up(int(port))
        args = [arg.replace(":8000", f":{port}") for arg in eval_line[1:]]
        run = CliRunner().invoke(app, [*args, *LOOKUP_ARGS, *FAST_ARGS])  # small and quick: options appended
        assert run.exit_code == 0, run.output
    finally:
        server.kill()
        server.wait()
    run = CliRunner().invoke(app, report_line[1:])
    assert run.exit_code == 0, run.output
    assert Path("audit.html").is_file() and json.loads(Path("lookup.json").read_text())["model"]["kind"] == "endpoint"
