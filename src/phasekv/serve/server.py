"""A small OpenAI-compatible completions server over any `Scorer` (standard library HTTP).

Routes: `GET /v1/models` (the served model; its `phasekv` field adds the vocabulary size, the
compression stride, a SHA-256 of the weights and the scorer's `describe()`), `POST /v1/completions` (see `completions`).
Errors are JSON `{"error": {"message", "type", "code"}}` with status 400 (bad request: malformed
Content-Length, a body that is not JSON or nested too deeply, a request past a `Limits` cap), 401
(wrong API key), 404 (unknown route or model), 405 (PUT, DELETE, PATCH, HEAD), 408 (a request not
read within the read timeout), 413 (a body past MAX_BODY_BYTES), 501 (other methods) or 500 (type
`non_finite_output` when the model gave NaN or +inf for the prompt: the same prompt gets the same answer, so a
phasekv client does not retry it). Bound to 127.0.0.1 unless told otherwise.

A worker never waits for a client to send: one thread (`RequestGatherer`) reads every accepted
connection without blocking until its whole request (headers and `Content-Length` body) has arrived,
and only then hands it to the bounded pool of `workers` threads; the model runs one request at a
time. So idle, slow or half-open connections hold no worker, however many there are. A connection
must deliver its whole request within `read_timeout` seconds of being accepted, else it is closed
(408 once part of a body has arrived). At most `backlog` connections are pending (being read or
waiting for a worker): past that, the one being read longest is closed, or, when all of them are
complete requests, the new connection gets a 503. One request per connection (HTTP/1.0). A request
whose client disconnects is abandoned between forward passes, and one whose compute passes
`Limits.max_request_seconds` is refused with a 400 naming the flag.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import secrets
import select
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from ..scoring import Scorer
from ..scoring.base import NonFiniteOutput
from .completions import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PROMPT_TOKENS, Limits, complete, parse_request
from .errors import ClientGone, RequestError
from .wire import COMPLETIONS_PATH, MODELS_PATH, NON_FINITE_OUTPUT

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 32
DEFAULT_BACKLOG = 256  # socketserver's default of 5 resets a crowd's connections
DEFAULT_READ_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024  # http.server refuses a longer line anyway; past this a request goes to be refused
BUSY_ANSWER = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
    b"Content-Length: 128\r\n\r\n"
) + json.dumps({"error": {"message": "too many pending requests (phasekv serve --backlog); retry shortly",
                          "type": "server_error", "code": 503}}).encode().ljust(128)  # fmt: skip


class CompletionServer(ThreadingHTTPServer):
    """The HTTP server: holds the scorer, the served name, an optional API key, the request limits,
    a model lock and the worker pool."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler,
        scorer: Scorer,
        served_model: str,
        api_key: str | None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        *,
        limits: Limits | None = None,
        workers: int = DEFAULT_WORKERS,
        backlog: int = DEFAULT_BACKLOG,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
    ):
        if workers < 1 or backlog < 1 or not read_timeout > 0:
            raise ValueError(f"workers and backlog must be >= 1 and read_timeout > 0, got {workers}, {backlog}, "
                             f"{read_timeout}")  # fmt: skip
        self.request_queue_size = backlog  # read by server_activate's listen()
        self.read_timeout = read_timeout
        self.workers = workers
        # made before binding: a failed bind calls server_close, which shuts them down
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="phasekv-serve")
        self._gatherer = RequestGatherer(self, backlog)
        self._gathered: dict[socket.socket, tuple[bytes, bool]] = {}  # what the gatherer read, for the handler
        try:
            super().__init__(address, handler)
        except OSError as err:
            raise OSError(err.errno, f"cannot listen on {address[0]}:{address[1]}: {err.strerror} (is another "
                          "server there? choose another --port, or --port 0 for any free one)") from None  # fmt: skip
        self.limits = limits or Limits(max_new_tokens=max_new_tokens, max_prompt_tokens=context_length(scorer))
        self.max_new_tokens = self.limits.max_new_tokens
        self.scorer = scorer
        self.served_model = served_model
        self.api_key = api_key
        self.model_lock = threading.Lock()
        self.vocab_size = int(scorer.next_token_logprobs([[0]]).shape[-1])
        self.created = int(time.time())
        model = getattr(scorer, "model", None)
        self.weights_sha256 = weights_sha256(model) if isinstance(model, torch.nn.Module) else None

    def process_request(self, request, client_address) -> None:
        """Have the gatherer read the connection's request (ThreadingMixIn would give it a thread)."""
        self._gatherer.add(request, client_address)

    def dispatch(self, request: socket.socket, client_address, data: bytes, timed_out: bool) -> None:
        """Serve a connection whose request the gatherer has read (`data`; `timed_out`: it did not end in time)."""
        self._gathered[request] = (data, timed_out)
        self._pool.submit(self._serve_gathered, request, client_address)

    def _serve_gathered(self, request, client_address) -> None:
        self._gatherer.started()
        self.process_request_thread(request, client_address)

    def take_gathered(self, request: socket.socket) -> tuple[bytes, bool]:
        """The bytes read for a connection and whether its read timed out (once, by its handler)."""
        return self._gathered.pop(request)

    def handle_error(self, request, client_address) -> None:
        """A connection that failed mid-answer (the client went away): logged, not printed."""
        log.debug("connection from %s failed", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        self._gatherer.close()
        self._pool.shutdown(wait=True, cancel_futures=True)  # each worker ends within its timeouts

    @property
    def url(self) -> str:
        """The base URL clients use (http://host:port)."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def models_body(self) -> dict:
        """The `/v1/models` response."""
        card = {
            "id": self.served_model,
            "object": "model",
            "created": self.created,
            "owned_by": "phasekv",
            "phasekv": {
                "vocab_size": self.vocab_size,
                "compression_stride": self.scorer.compression_stride,
                "weights_sha256": self.weights_sha256,
                "model": without_paths(self.scorer.describe()),
            },
        }
        return {"object": "list", "data": [card]}

    def completion_body(self, body: object, client_gone=lambda: False) -> dict:
        """The `/v1/completions` response for a decoded JSON body (RequestError if refused; ClientGone
        once `client_gone()` is true, checked between forward passes and before taking the model)."""
        request = parse_request(body, self.served_model, self.scorer.tokenizer, self.vocab_size, self.limits)
        with self.model_lock:
            return complete(self.scorer, self.served_model, request, self.limits.max_request_seconds, client_gone)


def without_paths(record: object) -> object:
    """`record` with every absolute path cut to its last part: a client learns the model's folder name,
    not where the server keeps it."""
    if isinstance(record, dict):
        return {key: without_paths(value) for key, value in record.items()}
    if isinstance(record, list):
        return [without_paths(value) for value in record]
    if isinstance(record, str) and os.path.isabs(record):
        return os.path.basename(record.rstrip("/\\")) or record
    return record


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of every tensor of the model's state dict (name, dtype, shape and bytes, in order): the
    card then changes whenever the weights do, even in a folder retrained in place."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class Pending:
    """A connection whose request is being read."""

    def __init__(self, sock: socket.socket, address, deadline: float):
        self.sock, self.address, self.deadline = sock, address, deadline
        self.data = bytearray()
        self.expected: int | None = None  # the request's length in bytes, once its headers have arrived

    def complete(self) -> bool:
        """Whether the whole request has arrived, or enough to refuse it: bytes that cannot start a request
        line (a TLS handshake), a request line without headers (HTTP/0.9), oversized headers, or a bad or
        oversized Content-Length."""
        if self.expected is not None:
            return len(self.data) >= self.expected
        data = bytes(self.data[: MAX_HEADER_BYTES + 4])  # the headers are parsed once, not the body at every chunk
        if not re.match(rb"[A-Za-z]{0,32}(?: |$)", data):
            return True
        line_end = data.find(b"\n")
        if line_end >= 0 and not re.search(rb" HTTP/\S+\r?$", data[:line_end]):
            return True
        headers_end = re.search(rb"\r?\n\r?\n", data)
        if headers_end is None:
            return len(data) > MAX_HEADER_BYTES
        lengths = re.findall(rb"(?im)^content-length:[ \t]*([^\r\n]*)", data[: headers_end.start()])
        if len(lengths) != 1 or not lengths[0].strip().isdigit():
            return True  # no body, or a Content-Length the handler refuses
        length = int(lengths[0].strip())
        if length > MAX_BODY_BYTES:
            return True
        self.expected = headers_end.end() + length
        return len(self.data) >= self.expected


class RequestGatherer:
    """One thread that reads every accepted connection without blocking (selectors) until its request is
    complete, then dispatches it to the server's workers; closes connections that pass the read timeout
    silent, and keeps at most `limit` connections pending (see the module docstring)."""

    def __init__(self, server: CompletionServer, limit: int):
        self.server, self.limit = server, limit
        self.selector = selectors.DefaultSelector()
        self.pending: dict[socket.socket, Pending] = {}  # in order of arrival (dicts keep it)
        self.waiting_for_worker = 0
        self.lock = threading.Lock()
        self.arrived: list[tuple[socket.socket, object]] = []
        self.wake_read, self.wake_write = socket.socketpair()
        self.wake_read.setblocking(False)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        self.closing = False
        self.thread = threading.Thread(target=self._run, name="phasekv-gatherer", daemon=True)
        self.thread.start()

    def add(self, sock: socket.socket, address) -> None:
        with self.lock:
            self.arrived.append((sock, address))
        self._wake()

    def started(self) -> None:
        """A worker took a dispatched request: it no longer counts as pending."""
        with self.lock:
            self.waiting_for_worker -= 1

    def close(self) -> None:
        self.closing = True
        self._wake()
        self.thread.join()

    def _wake(self) -> None:
        try:
            self.wake_write.send(b"x")
        except BlockingIOError:  # the wake-up byte already waiting does the job
            pass

    def _run(self) -> None:
        while not self.closing:
            now = time.monotonic()
            first = min((p.deadline for p in self.pending.values()), default=now + 1.0)
            for key, _ in self.selector.select(timeout=max(0.0, first - now)):
                if key.fileobj is self.wake_read:
                    self._drain_wake()
                else:
                    self._read(self.pending[key.fileobj])
            self._accept_arrived()
            self._expire(time.monotonic())
        for pending in list(self.pending.values()):
            self._drop(pending)
        self.selector.close()
        self.wake_read.close()
        self.wake_write.close()

    def _drain_wake(self) -> None:
        try:
            while self.wake_read.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _accept_arrived(self) -> None:
        with self.lock:
            arrived, self.arrived = self.arrived, []
        for sock, address in arrived:
            with self.lock:
                full = len(self.pending) + self.waiting_for_worker >= self.limit
            if full and self.pending:
                self._drop(next(iter(self.pending.values())))  # the one read longest: it had the most time
            elif full:
                self._refuse(sock)
                continue
            sock.setblocking(False)
            self.pending[sock] = Pending(sock, address, time.monotonic() + self.server.read_timeout)
            self.selector.register(sock, selectors.EVENT_READ)

    def _read(self, pending: Pending) -> None:
        try:
            chunk = pending.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away before its request ended
            self._drop(pending)
            return
        pending.data += chunk
        if pending.complete():
            self._dispatch(pending, timed_out=False)

    def _expire(self, now: float) -> None:
        for pending in [p for p in self.pending.values() if p.deadline <= now]:
            if pending.data:
                self._dispatch(pending, timed_out=True)  # its handler answers 408 where a body was cut short
            else:
                self._drop(pending)

    def _dispatch(self, pending: Pending, timed_out: bool) -> None:
        self._forget(pending)
        pending.sock.setblocking(True)
        with self.lock:
            self.waiting_for_worker += 1
        self.server.dispatch(pending.sock, pending.address, bytes(pending.data), timed_out)

    def _drop(self, pending: Pending) -> None:
        self._forget(pending)
        self.server.shutdown_request(pending.sock)

    def _forget(self, pending: Pending) -> None:
        self.selector.unregister(pending.sock)
        del self.pending[pending.sock]

    def _refuse(self, sock: socket.socket) -> None:
        """Answer 503 without waiting (a fresh socket's send buffer takes the short answer) and close."""
        sock.setblocking(False)
        try:
            sock.send(BUSY_ANSWER)
        except OSError:
            pass
        self.server.shutdown_request(sock)


class GatheredReader(io.RawIOBase):
    """The bytes the gatherer read for a request; past them, EOF, or TimeoutError when the read timed out."""

    def __init__(self, data: bytes, timed_out: bool):
        self.data, self.timed_out, self.offset = data, timed_out, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.offset >= len(self.data):
            if self.timed_out:
                raise TimeoutError("the request was not read within the read timeout")
            return 0
        n = min(len(buffer), len(self.data) - self.offset)
        buffer[:n] = self.data[self.offset : self.offset + n]
        self.offset += n
        return n


def client_gone(sock: socket.socket) -> bool:
    """Whether the client closed its connection (it sends nothing more after its request, so a readable
    socket that yields no bytes has been closed)."""
    try:
        if not select.select([sock], [], [], 0)[0]:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class CompletionHandler(BaseHTTPRequestHandler):
    """Routes requests to the `CompletionServer`; every answer, errors included, is JSON."""

    server: CompletionServer

    def setup(self) -> None:
        super().setup()
        unread = self.rfile
        self.rfile = io.BufferedReader(GatheredReader(*self.server.take_gathered(self.connection)))
        unread.close()  # nothing was read through it; an open one would keep the socket from closing

    def handle(self) -> None:
        """One request per connection: a kept-alive connection would hold its worker while idle."""
        self.handle_one_request()
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self._authorised():
            if self.path.rstrip("/") == MODELS_PATH:
                self.send_json(200, self.server.models_body())
            else:
                self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorised():
            return
        if self.path.rstrip("/") != COMPLETIONS_PATH:
            self.send_error_json(404, f"no route POST {self.path}")
            return
        try:
            body = self._json_body()
            response = self.server.completion_body(body, lambda: client_gone(self.connection))
        except ClientGone:
            log.debug("client %s left: its request was abandoned", self.client_address)
            return
        except RequestError as err:
            self.send_error_json(err.status, str(err))
        except NonFiniteOutput as err:
            self.send_error_json(500, str(err), kind=NON_FINITE_OUTPUT)
        except Exception as err:  # the model failed: answer 500 and keep serving
            log.exception("completion failed")
            self.send_error_json(500, f"internal error: {type(err).__name__}: {err}")
        else:
            self.send_json(200, response)

    def _json_body(self) -> object:
        """The request body, decoded; RequestError for a missing, malformed or oversized one."""
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            raise RequestError(411, "a POST needs a Content-Length header")
        if not re.fullmatch(r"[0-9]+", raw_length.strip()):
            self.close_connection = True  # the body's end is unknown: the connection cannot be reused
            raise RequestError(400, f"Content-Length must be a non-negative integer, got {raw_length!r}")
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(413, f"the request body of {length} bytes exceeds this server's {MAX_BODY_BYTES}")
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, f"the request was not read within {self.server.read_timeout:g} s") from None
        if len(data) < length:
            raise RequestError(400, f"the request body ended after {len(data)} of {length} bytes")
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RequestError(400, f"the request body is not JSON ({err})") from None
        except RecursionError:
            raise RequestError(400, "the request body is JSON nested too deeply") from None
        except ValueError as err:  # an integer past Python's digit limit for int()
            raise RequestError(400, f"the request body holds a number too large ({err})") from None

    def _method_not_allowed(self) -> None:
        self.send_error_json(405, f"method {self.command} is not allowed: this server answers GET and POST",
                             headers={"Allow": "GET, POST"})  # fmt: skip

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _method_not_allowed

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(405)
        self.send_header("Allow", "GET, POST")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a bad request line, headers too long, an unknown method) as JSON."""
        self.close_connection = True
        self.send_error_json(code, message or explain or self.responses.get(code, ("error",))[0])

    def _authorised(self) -> bool:
        key = self.server.api_key
        given = self.headers.get("Authorization", "")
        if key is None or secrets.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return True
        self.send_error_json(401, "missing or wrong API key (Authorization: Bearer ...)")
        return False

    def send_json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        """Answer with `body` as JSON."""
        data = json.dumps(body).encode()
        self.connection.settimeout(self.server.read_timeout)  # a read may have left the socket less time
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(
        self, status: int, message: str, headers: dict[str, str] | None = None, kind: str | None = None
    ) -> None:
        """Answer with an OpenAI-style error object (`kind` its type, by default from the status)."""
        kind = kind or ("invalid_request_error" if status < 500 else "server_error")
        self.send_json(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        log.debug("%s " + format, self.address_string(), *args)


def context_length(scorer: Scorer) -> int:
    """The longest prompt the served model declares (an HF config's max_position_embeddings), else
    DEFAULT_MAX_PROMPT_TOKENS."""
    config = getattr(getattr(scorer, "model", None), "config", None)
    declared = getattr(config, "max_position_embeddings", None)
    return int(declared) if isinstance(declared, int) and declared > 0 else DEFAULT_MAX_PROMPT_TOKENS


def make_server(
    scorer: Scorer,
    served_model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    handler: type[CompletionHandler] = CompletionHandler,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    limits: Limits | None = None,
    workers: int = DEFAULT_WORKERS,
    backlog: int = DEFAULT_BACKLOG,
    read_timeout: float = DEFAULT_READ_TIMEOUT_S,
) -> CompletionServer:
    """A bound server (port 0: a free port, see `.url`); call `serve_forever()` to run it.
    `max_new_tokens` caps a request's `max_tokens` unless `limits` (all of a request's caps) is given;
    by default a prompt may be as long as the model's context (`context_length`)."""
    return CompletionServer(
        (host, port), handler, scorer, served_model, api_key, max_new_tokens,
        limits=limits, workers=workers, backlog=backlog, read_timeout=read_timeout,
    )  # fmt: skip
