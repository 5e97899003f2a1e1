"""`phasekv serve` under hostile or heavy use: one request cannot take its memory or time, a crowd is
answered in full, slow and half-open clients are cut at the read timeout, and every malformed request
gets a JSON error (all on 127.0.0.1, with bounded loops)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from phasekv.scoring import load_scorer
from phasekv.serve.completions import Limits
from phasekv.serve.server import DEFAULT_BACKLOG
from serving_helpers import serving


@pytest.fixture(scope="module")
def scorer(qwen_dir):
    return load_scorer(qwen_dir)


def post(url: str, body: dict, timeout: float = 60.0) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def raw(server, data: bytes, timeout: float = 10.0) -> tuple[int, dict]:
    """Send `data` as it is and read the whole answer: (status, JSON body)."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/"):  # an HTTP/0.9-style request line: the answer has no status line
        body = json.loads(answer)
        return body["error"]["code"], body
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def request_bytes(method: str, body: bytes, length: str | None = None) -> bytes:
    length = str(len(body)) if length is None else length
    return f"{method} /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode() + body


def test_one_request_cannot_take_the_servers_memory_or_time(scorer):
    with serving(scorer) as server:
        start = time.perf_counter()
        status, body = post(server.url, {"prompt": [5] * 20_000, "max_tokens": 0, "echo": True, "logprobs": 841})
        assert status == 400 and "--max-logprob-entries" in body["error"]["message"]
        assert "16820000" in body["error"]["message"]  # logprobs x tokens, named
        status, body = post(server.url, {"prompt": [5] * 200_000, "max_tokens": 1})
        assert status == 400 and "--max-prompt-tokens" in body["error"]["message"]
        assert "at most 32768" in body["error"]["message"]  # the model's context (max_position_embeddings)
        status, body = post(server.url, {"prompt": "cat " * 3_000_000, "max_tokens": 1})
        assert status == 400 and "--max-prompt-tokens" in body["error"]["message"]
        status, body = post(server.url, {"prompt": [[5, 6]] * 65, "max_tokens": 1})
        assert status == 400 and "--max-prompts" in body["error"]["message"]
        assert time.perf_counter() - start < 10  # refused before any scoring
        assert post(server.url, {"prompt": [5, 6, 7], "max_tokens": 0, "echo": True, "logprobs": 841})[0] == 200
    with serving(scorer, limits=Limits(max_prompt_tokens=10, max_logprob_entries=20)) as server:
        assert post(server.url, {"prompt": [5] * 10, "max_tokens": 1})[0] == 200
        status, body = post(server.url, {"prompt": [5] * 11, "max_tokens": 1})
        assert status == 400 and "at most 10" in body["error"]["message"]
        status, body = post(server.url, {"prompt": [5] * 10, "max_tokens": 1, "echo": True, "logprobs": 2})
        assert status == 400 and "limit is 20" in body["error"]["message"]


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (request_bytes("POST", b"{}", "abc"), 400, "Content-Length must be a non-negative integer"),
        (request_bytes("POST", b"{}", "-1"), 400, "Content-Length must be a non-negative integer"),
        (request_bytes("POST", b"[" * 100_000 + b"]" * 100_000), 400, "nested too deeply"),
        (request_bytes("POST", b"prompt=cat"), 400, "not JSON"),
        (request_bytes("POST", b"\xff\xfe"), 400, "not JSON"),
        (request_bytes("POST", b'{"prompt": [[[[[[5]]]]]]}'), 400, "each prompt must be"),
        (request_bytes("POST", b"{}", str(10**12)), 413, "exceeds"),
        (request_bytes("PUT", b"{}"), 405, "method PUT is not allowed"),
        (request_bytes("DELETE", b""), 405, "method DELETE is not allowed"),
        (request_bytes("BREW", b""), 501, "Unsupported method"),
        (b"GARBAGE\r\n\r\n", 400, "Bad request"),
        (b"GET /v1/models HTTP/1.1 extra\r\n\r\n", 400, "Bad request"),
    ],
)
def test_every_malformed_request_gets_a_json_error(scorer, data, status, message):
    with serving(scorer) as server:
        start = time.perf_counter()
        got, body = raw(server, data)
        assert got == status and message in body["error"]["message"] and body["error"]["code"] == status
        assert time.perf_counter() - start < 5  # answered at once, not after a timeout
        assert post(server.url, {"prompt": [5, 6], "max_tokens": 1})[0] == 200  # and the server still serves


def test_slow_and_half_open_clients_are_cut_at_the_read_timeout(scorer):
    """One worker: a client that never sends, one that trickles its headers, and one that sends half its
    body each hold it at most the read timeout; a request after them is then answered."""
    timeout = 0.5
    with serving(scorer, workers=1, read_timeout=timeout) as server:
        address = server.server_address[:2]
        half_open = socket.create_connection(address)  # sends nothing
        start = time.perf_counter()
        assert half_open.recv(1024) == b""  # closed by the server
        assert timeout * 0.8 < time.perf_counter() - start < timeout + 2
        half_open.close()
        cut: list = []

        def trickle() -> None:  # a byte every 0.1 s for 3 s: each read is quick, the request never ends
            with socket.create_connection(address, timeout=10) as slow:
                for byte in request_bytes("POST", b"{}" * 50)[:30]:
                    try:
                        slow.sendall(bytes([byte]))
                    except OSError:
                        break
                    time.sleep(0.1)
                try:
                    cut.append(slow.recv(1024) == b"")
                except OSError:
                    cut.append(True)

        slow = threading.Thread(target=trickle)
        slow.start()
        time.sleep(0.1)  # the slow client holds the only worker now
        start = time.perf_counter()
        assert post(server.url, {"prompt": [5, 6], "max_tokens": 1}, timeout=10)[0] == 200
        assert time.perf_counter() - start < timeout + 1.0  # not after the 3 s of trickling
        slow.join(timeout=20)
        assert cut == [True]
        start = time.perf_counter()
        status, body = raw(server, request_bytes("POST", b'{"prompt": [5, 6]', "100"))  # the body stops short
        assert status == 408 and "not read within 0.5 s" in body["error"]["message"]
        assert time.perf_counter() - start < timeout + 2
        start = time.perf_counter()
        status, _ = raw(server, request_bytes("POST", b"{}", "-1"))
        assert status == 400 and time.perf_counter() - start < 2
        assert post(server.url, {"prompt": [5, 6], "max_tokens": 1}, timeout=5)[0] == 200


def test_a_crowd_of_64_clients_is_answered_in_full_as_if_alone(scorer):
    n = 64
    bodies = [
        {"prompt": [5 + i % 7, 6 + i % 11, 7 + i], "max_tokens": 2, "echo": True, "logprobs": 3} for i in range(n)
    ]
    with serving(scorer) as server:
        assert server.request_queue_size == DEFAULT_BACKLOG >= n
        alone = [post(server.url, body) for body in bodies]
        answers: list = [None] * n
        errors: list = []
        barrier = threading.Barrier(n)

        def client(i: int) -> None:
            barrier.wait(timeout=30)
            try:
                answers[i] = post(server.url, bodies[i])
            except OSError as err:  # a reset or refused connection
                errors.append(repr(err))

        clients = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=120)
        workers = [t for t in threading.enumerate() if t.name.startswith("phasekv-serve")]
    assert not errors and all(answer is not None for answer in answers)
    assert len(workers) <= server.workers
    for (status, crowd), (status_alone, single) in zip(answers, alone, strict=True):
        assert status == status_alone == 200
        assert crowd["choices"] == single["choices"] and crowd["usage"] == single["usage"]


def idle_sockets(server, n: int) -> list[socket.socket]:
    """`n` connections that send nothing, made a millisecond apart: the server's accepting thread shares
    this process's GIL and would otherwise let a small listen backlog overflow (a dropped SYN costs 1 s)."""
    sockets = []
    for _ in range(n):
        sockets.append(socket.create_connection(server.server_address[:2], timeout=5))
        time.sleep(0.001)
    return sockets


def test_idle_connections_cannot_lock_the_server_out(scorer):
    """320 connections that send nothing hold no worker: a valid request beside them is answered at once."""
    with serving(scorer) as server:
        idle = idle_sockets(server, 320)
        try:
            start = time.perf_counter()
            status, _ = post(server.url, {"prompt": [5, 6], "max_tokens": 1}, timeout=10)
            assert status == 200 and time.perf_counter() - start < 1.0
        finally:
            for s in idle:
                s.close()


def test_pending_connections_are_bounded_by_the_backlog(scorer):
    """Past `backlog` connections still sending their request, the one waiting longest is closed, so idle
    sockets cannot pile up file descriptors; the newest requests are still answered."""
    with serving(scorer, backlog=16) as server:
        idle = idle_sockets(server, 100)
        try:
            status, _ = post(server.url, {"prompt": [5, 6], "max_tokens": 1}, timeout=10)
            assert status == 200
            closed = 0
            for s in idle:
                s.settimeout(2 if closed < 84 else 0.05)
                try:
                    closed += s.recv(1) == b""
                except TimeoutError:
                    pass
                except OSError:  # reset
                    closed += 1
            assert closed >= 84  # only the 16 newest are left open (the request above took one place too)
        finally:
            for s in idle:
                s.close()


def test_a_requests_compute_is_bounded_and_abandoned_when_its_client_leaves(scorer):
    with serving(scorer, limits=Limits(max_request_seconds=0.2)) as server:
        start = time.perf_counter()
        status, body = post(server.url, {"prompt": [5, 6], "max_tokens": 2048})
        assert status == 400 and "--max-request-seconds" in body["error"]["message"]
        assert "0.2 s" in body["error"]["message"] and time.perf_counter() - start < 3
    with serving(scorer) as server:
        with socket.create_connection(server.server_address[:2]) as leaving:
            leaving.sendall(request_bytes("POST", json.dumps({"prompt": [5, 6], "max_tokens": 2048}).encode()))
            time.sleep(0.5)  # the model is decoding its 2048 tokens
        start = time.perf_counter()
        assert post(server.url, {"prompt": [5, 6], "max_tokens": 1}, timeout=30)[0] == 200
        assert time.perf_counter() - start < 2  # the abandoned request gave the model back


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": [5, 6], "stop": ["x"] * 17}, "stop takes at most 16 strings"),
        ({"prompt": [5, 6], "stop": ["x" * 257]}, "of at most 256 characters"),
        ({"prompt": [5, 6], "echo": "false"}, "echo must be true or false, got 'false'"),
        ({"prompt": [5, 6], "return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids must be true or false"),
        ({"prompt": [5, 6], "stream": "no"}, "stream must be true or false"),
    ],
)
def test_request_fields_are_strictly_typed_and_bounded(scorer, body, message):
    with serving(scorer) as server:
        status, answer = post(server.url, body)
    assert status == 400 and message in answer["error"]["message"]


def test_a_huge_json_integer_is_a_400_and_the_card_shows_no_server_paths(scorer, qwen_dir):
    with serving(scorer) as server:
        status, body = raw(server, request_bytes("POST", b'{"prompt": [' + b"9" * 5000 + b"]}"))
        assert status == 400 and "number too large" in body["error"]["message"]
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
            card = response.read().decode()
    assert str(qwen_dir.resolve()) not in card and str(qwen_dir) not in card
    assert json.dumps(qwen_dir.name) in card  # the folder's name is still there


def test_serve_on_a_busy_port_says_so_in_one_line(qwen_dir):
    import typer
    from typer.testing import CliRunner

    from phasekv.cli.serve import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, [str(qwen_dir), "--port", str(port), "--threads", "1"])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.output
    assert "choose another --port" in result.output and "Traceback" not in result.output


def test_past_the_backlog_of_complete_requests_a_new_connection_gets_a_503_naming_it(scorer):
    """Every pending place taken by a complete request waiting for the one worker: the next connection is answered
    503 at once (naming --backlog, with Retry-After), and the waiting requests are still answered in full."""
    with serving(scorer, workers=1, backlog=2, limits=Limits(max_request_seconds=30)) as server:
        address = server.server_address[:2]
        busy = socket.create_connection(address)  # holds the one worker: a long decode
        busy.sendall(request_bytes("POST", json.dumps({"prompt": [5, 6], "max_tokens": 2048}).encode()))
        time.sleep(0.5)
        waiting = [socket.create_connection(address, timeout=30) for _ in range(2)]
        for s in waiting:
            s.sendall(request_bytes("POST", json.dumps({"prompt": [5, 6], "max_tokens": 1}).encode()))
        time.sleep(0.5)  # both read whole and handed to the pool: the backlog is full of complete requests
        start = time.perf_counter()
        status, body = raw(server, request_bytes("POST", b'{"prompt": [5, 6]}'), timeout=5)
        assert status == 503 and "--backlog" in body["error"]["message"] and time.perf_counter() - start < 2
        busy.close()  # the abandoned decode gives the worker back
        for s in waiting:
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            s.close()
            assert answer.startswith(b"HTTP/1.0 200"), answer[:200]


def test_a_model_that_outputs_nan_is_a_500_the_client_does_not_retry(tmp_path):
    """NaN from the model is no passing fault: the same prompt gets the same answer, so the server names it
    (type non_finite_output) and the client gives up at the first answer instead of retrying until --max-wait."""
    from conftest import tiny_qwen3, word_tokenizer
    from phasekv.scoring import HFScorer
    from phasekv.serve.errors import EndpointError
    from phasekv.serve.transport import Transport

    tokenizer = word_tokenizer()
    model = tiny_qwen3(len(tokenizer))
    calls = []
    with serving(HFScorer(model, tokenizer)) as server:
        with torch.no_grad():  # after the server started (its card and canaries were fine): a fault of some inputs
            model.lm_head.weight[3] = float("nan")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 1, "logprobs": 1}
        try:
            urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode()))
        except urllib.error.HTTPError as err:
            calls.append((err.code, json.loads(err.read())["error"]["type"]))
        transport = Transport(url, api_key=None, timeout=10.0, retries=4, backoff=1.0)
        started = time.monotonic()
        with pytest.raises(EndpointError, match=r"HTTP 500, not retried\): .*non-finite log-prob"):
            transport.post("/v1/completions", body)
    assert calls == [(500, "non_finite_output")]
    assert time.monotonic() - started < 1.0 and transport.failures == 0  # no backoff waited, no reconnect counted
