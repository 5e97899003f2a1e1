"""The completions server and the endpoint scorer: probes through HTTP equal the in-process runs,
and the faults a real audit meets (server stopped, 5xx, malformed bodies, slowness, bad URLs,
missing tokenizers) end in a resumed run or a clear error."""

import json
import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from phasekv.scoring import ScorerError, load_scorer, score_answers
from phasekv.serve import EndpointError, EndpointScorer
from phasekv.serve.local import text_prompt
from phasekv.serve.transport import Transport
from phasekv.studies.probe.run import run_lookup, run_needle
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.needle import NeedleOptions
from serving_helpers import FAST, answer_lines, counting_handler, serving

LOOKUP = LookupOptions(n_records=12, n_demos=3, modulus=6, n_mappings=3, seed=3)
NEEDLE = NeedleOptions(context_length=64, n_records=4, n_haystacks=2, modulus=4, spread_blocks=1, seed=3)


@pytest.fixture(scope="module")
def scorers(phasekv_dir, qwen_dir):
    return {"phasekv": (load_scorer(phasekv_dir), phasekv_dir), "qwen": (load_scorer(qwen_dir), qwen_dir)}


def _same_results(local: dict, remote: dict) -> None:
    for field in ("n_prompts", "stride", "position_stats", "controls"):
        assert remote[field] == local[field], field
    assert remote["summary"] == local["summary"]  # accuracies, intervals, tests: all from the same 0/1 outcomes
    assert remote.get("cell_accuracy") == local.get("cell_accuracy")
    assert remote["mean_answer_logprob"] == pytest.approx(local["mean_answer_logprob"], rel=1e-5)
    assert remote["model"]["kind"] == "endpoint" and remote["model"]["served_model"] == "tiny"


@pytest.mark.parametrize("kind", ["phasekv", "qwen"])
def test_lookup_and_needle_through_http_equal_in_process(scorers, kind):
    scorer, directory = scorers[kind]
    with serving(scorer) as server:
        endpoint = EndpointScorer(server.url + "/v1", "tiny", directory, **FAST)
        assert endpoint.compression_stride == scorer.compression_stride
        local = run_lookup(scorer, LOOKUP, n_resamples=50, progress=False)
        _same_results(local, run_lookup(endpoint, LOOKUP, n_resamples=50, progress=False))
        local = run_needle(scorer, NEEDLE, progress=False)
        _same_results(local, run_needle(endpoint, NEEDLE, progress=False))


def test_score_answers_through_echo_equals_in_process(scorers):
    scorer, directory = scorers["qwen"]
    tok = scorer.tokenizer
    contexts = [tok(text, add_special_tokens=False)["input_ids"] for text in ("cat dog cat", "dog cat dog cat dog")]
    contexts += [contexts[0]]
    answers = [[5], [7, 9], [int(scorer.next_token_logprobs([contexts[0]])[0].argmax())]]
    local = score_answers(scorer, contexts, answers)
    with serving(scorer) as server:
        for text_prompts in (False, True):
            remote = EndpointScorer(server.url, "tiny", directory, text_prompts=text_prompts, **FAST)
            scores = remote.score_answers(contexts, answers)
            np.testing.assert_array_equal(scores.correct, local.correct)
            np.testing.assert_array_equal(scores.first_argmax, local.first_argmax)
            np.testing.assert_allclose(scores.logprob, local.logprob, rtol=1e-6)
    assert local.correct.tolist() == [False, False, True]


def test_interrupted_audit_resumes_from_the_cache_without_resending(scorers, tmp_path):
    scorer, directory = scorers["phasekv"]
    cache = tmp_path / "cache.jsonl"
    first = counting_handler(answer_limit=10)
    with serving(scorer, first) as server, pytest.raises(EndpointError, match="gave up"):
        endpoint = EndpointScorer(server.url, "tiny", directory, cache=cache, concurrency=2, **FAST)
        run_lookup(endpoint, LOOKUP, n_resamples=50, progress=False)
    assert len(first.answered) == 10 == len(answer_lines(cache))
    second = counting_handler()
    with serving(scorer, second, port=server.server_address[1]) as server:  # the same server, restarted
        endpoint = EndpointScorer(server.url, "tiny", directory, cache=cache, concurrency=2, **FAST)
        resumed = run_lookup(endpoint, LOOKUP, n_resamples=50, progress=False)
    sent_twice = {json.dumps(p) for p in first.answered} & {json.dumps(p) for p in second.answered}
    assert not sent_twice
    assert len(answer_lines(cache)) == len(first.answered) + len(second.answered)
    assert endpoint.answers == {"from_cache": 10, "sent": len(second.answered)}
    _same_results(run_lookup(scorer, LOOKUP, n_resamples=50, progress=False), resumed)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_errors_are_retried(scorers, status):
    scorer, directory = scorers["qwen"]
    handler = counting_handler(failures=2, fail_with=status)
    with serving(scorer, handler) as server:
        endpoint = EndpointScorer(server.url, "tiny", directory, **FAST)
        scores = endpoint.score_answers([[3, 4, 5]], [[6]])
    assert handler.failed[0] == 2 and len(handler.answered) == 1
    np.testing.assert_allclose(scores.logprob, score_answers(scorer, [[3, 4, 5]], [[6]]).logprob, rtol=1e-6)


def test_persistent_5xx_gives_up_with_the_servers_message(scorers):
    scorer, directory = scorers["qwen"]
    with serving(scorer, counting_handler(failures=99)) as server:
        endpoint = EndpointScorer(server.url, "tiny", directory, **FAST)
        with pytest.raises(EndpointError, match="gave up after 3 attempts.*HTTP 500: injected failure"):
            endpoint.score_answers([[3, 4]], [[5]])


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"<html>oops", "not JSON"), (b'{"choices": []}', "no choices"), (b"[1]", "expected a JSON object")],
)
def test_malformed_bodies_give_clear_errors(scorers, body, message):
    scorer, directory = scorers["qwen"]
    with serving(scorer) as good:  # the model list comes from a good server, the completion from a bad one
        endpoint = EndpointScorer(good.url, "tiny", directory, **FAST)
    with serving(scorer, counting_handler(body=body)) as bad:
        endpoint.transport.url = bad.url
        with pytest.raises(EndpointError, match=f"malformed response body.*{message}"):
            endpoint.score_answers([[3, 4]], [[5]])


def test_slow_server_times_out(scorers):
    scorer, directory = scorers["qwen"]
    with serving(scorer, counting_handler(delay=1.5)) as server:
        endpoint = EndpointScorer(server.url, "tiny", directory, timeout=0.2, retries=1, backoff=0.01)
        start = time.perf_counter()
        with pytest.raises(EndpointError, match=r"gave up after 2 attempts in \d+ s; last: timed out after 0.2 s"):
            endpoint.score_answers([[3, 4]], [[5]])
        assert time.perf_counter() - start < 1.2


def test_request_errors_pass_the_servers_message_without_retrying(scorers):
    scorer, directory = scorers["qwen"]
    with serving(scorer, api_key="sesame") as server:
        with pytest.raises(EndpointError, match="HTTP 401.*API key"):
            EndpointScorer(server.url, "tiny", directory, api_key="wrong", **FAST)
        endpoint = EndpointScorer(server.url, "tiny", directory, api_key="sesame", **FAST)
        with pytest.raises(EndpointError, match="HTTP 400.*token ids must lie in"):
            endpoint.score_answers([[3, 10**6]], [[5]])
        with pytest.raises(EndpointError, match="does not serve 'other'; it serves \\['tiny'\\]"):
            EndpointScorer(server.url, "other", directory, api_key="sesame", **FAST)


def test_generic_interface_refuses_a_capped_server(scorers, monkeypatch):
    scorer, directory = scorers["qwen"]
    with serving(scorer) as server:
        endpoint = EndpointScorer(server.url, "tiny", directory, **FAST)
        monkeypatch.setattr(endpoint, "vocab_size", endpoint.vocab_size - 1)  # the server then answers V - 1
        with pytest.raises(EndpointError, match="names no token id|returned .* of .* log-probs"):
            endpoint.logprobs([[3, 4]])


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "127.0.0.1:8000", "http://:80", "http://127.0.0.1:99999"])
def test_bad_urls_give_clear_errors(qwen_dir, url):
    with pytest.raises(EndpointError, match="bad endpoint URL"):
        EndpointScorer(url, "tiny", qwen_dir, **FAST)


def test_unreachable_server_gives_up_naming_the_url(qwen_dir):
    with pytest.raises(EndpointError, match=r"http://127.0.0.1:9/v1/models: gave up after 1 attempts"):
        EndpointScorer("http://127.0.0.1:9", "tiny", qwen_dir, timeout=2.0, retries=0)


def test_missing_tokenizers_give_clear_errors(tmp_path):
    with pytest.raises(ScorerError, match="does not exist"):
        EndpointScorer("http://127.0.0.1:9", "tiny", tmp_path / "nowhere")
    with pytest.raises(ScorerError, match="cannot load a tokenizer"):
        EndpointScorer("http://127.0.0.1:9", "tiny", tmp_path)


def test_text_round_trip_refuses_shifted_positions(scorers):
    tok = scorers["qwen"][0].tokenizer
    ids = tok("cat dog", add_special_tokens=False)["input_ids"]
    assert text_prompt(tok, ids) == tok.decode(ids)

    class Merging:  # "a" + "b" decode to "ab", which tokenises as one token (as BPE merges do)
        def decode(self, ids, **_):
            return "".join("ab"[i] for i in ids)

        def __call__(self, text, **_):
            return {"input_ids": [2] if text == "ab" else ["ab".index(c) for c in text]}

    with pytest.raises(EndpointError, match="round trip shifts tokens .2 ids -> 1 .* at position 0"):
        text_prompt(Merging(), [0, 1])


def test_eval_command_audits_an_endpoint_like_a_local_model(scorers, tmp_path):
    """`phasekv eval lookup --endpoint ...` writes the same results as `phasekv eval lookup MODEL`."""
    import json

    from typer.testing import CliRunner

    from phasekv.cli import app

    scorer, directory = scorers["phasekv"]
    options = ["--records", "12", "--demos", "3", "--modulus", "6", "--mappings", "3", "--seed", "3",
               "--resamples", "50", "--quiet"]  # fmt: skip
    runner = CliRunner()
    local = runner.invoke(app, ["eval", "lookup", str(directory), *options, "--out", str(tmp_path / "local.json")])
    assert local.exit_code == 0, local.output
    with serving(scorer) as server:
        remote = runner.invoke(app, ["eval", "lookup", "--endpoint", server.url + "/v1", "--served-model", "tiny",
                                     "--tokenizer", str(directory), "--cache", str(tmp_path / "cache.jsonl"),
                                     *options, "--out", str(tmp_path / "remote.json")])  # fmt: skip
    assert remote.exit_code == 0, remote.output
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("local", "remote"))
    assert a["summary"] == b["summary"] and a["position_stats"] == b["position_stats"]
    assert b["model"]["kind"] == "endpoint"


@contextmanager
def raw_server(answer):
    """A socket server on 127.0.0.1 that reads each request's first bytes, then calls `answer(connection)`."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop, connections = threading.Event(), []

    def run():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connections.append(connection)
            connection.recv(65536)
            threading.Thread(target=answer, args=(connection, stop), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in connections:
            connection.close()
        listener.close()


def test_a_server_that_never_answers_is_given_up_on_at_the_total_wait_with_each_attempt_told():
    """Issue 53: an endpoint that never answered took 616 s (5 timeouts of 120 s and the backoff) in silence."""
    told = []
    with raw_server(lambda connection, stop: stop.wait()) as url:
        transport = Transport(
            url, timeout=0.3, retries=50, backoff=0.01, api_key=None, max_wait=1.0, notify=told.append
        )
        transport.notify_after = 0.0  # the default tells only what has waited 10 s
        start = time.perf_counter()
        with pytest.raises(EndpointError, match=r"gave up after \d+ attempts in 1 s \(the most one request may take: "):
            transport.get("/v1/models")
        assert time.perf_counter() - start < 1.5
    assert told and all("failed (timed out after 0.3 s); retrying in" in line for line in told[:2])
    assert "attempt 1 of 51 failed" in told[0] and "of at most 1 s spent on it" in told[0]


@pytest.mark.parametrize("announced", [True, False])
def test_a_response_over_the_size_limit_is_refused_without_reading_it_all(announced):
    """Issue 53: the client read a body of any size (300 MB took 951 MB of memory)."""
    sent = []

    def flood(connection, stop):
        head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
        connection.sendall(head + (b"Content-Length: 1000000000\r\n" if announced else b"") + b"\r\n")
        try:
            while not stop.is_set() and sum(sent) < 10**9:
                sent.append(connection.send(b"[" * 65536))
        except OSError:  # the client closed the connection
            pass

    with raw_server(flood) as url:
        transport = Transport(url, timeout=5, retries=3, backoff=0.01, api_key=None, max_response_bytes=100_000)
        with pytest.raises(EndpointError, match=r"larger than 0.0954 MiB \(--max-response-mb\): refused"):
            transport.get("/v1/models")
    assert sum(sent) < 50 * 2**20  # the client stopped reading (what is sent is at most the socket buffers ahead)
    assert transport.failures == 0  # refused at once: the same request would get the same answer


def test_the_commands_state_the_clients_limits():
    from typer.testing import CliRunner

    from phasekv.cli import app
    from phasekv.cli.scoring import MAX_RESPONSE_MB, MAX_WAIT_S
    from phasekv.serve.transport import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_WAIT_S

    assert (MAX_WAIT_S, MAX_RESPONSE_MB * 2**20) == (DEFAULT_MAX_WAIT_S, DEFAULT_MAX_RESPONSE_BYTES)
    help_text = " ".join(CliRunner().invoke(app, ["eval", "lookup", "--help"], terminal_width=200).output.split())
    assert "--max-wait" in help_text and "300.0" in help_text and "--max-response-mb" in help_text
