"""A small OpenAI-compatible completions server over any `Scorer` (standard library HTTP).

Routes: `GET /v1/models` (the served model; its `phasekv` field adds the vocabulary size, the
compression stride, a SHA-256 of the weights and the scorer's `describe()`), `POST /v1/completions` (see `completions`).
Errors are JSON `{"error": {"message", "type", "code"}}` with status 400 (bad request: malformed
Content-Length, a body that is not JSON or nested too deeply, a request past a `Limits` cap), 401
(wrong API key), 404 (unknown route or model), 405 (PUT, DELETE, PATCH, HEAD), 408 (a request not
read within the read timeout), 413 (a body past MAX_BODY_BYTES), 501 (other methods) or 500. Bound
to 127.0.0.1 unless told otherwise.

Connections wait in a listen backlog of `backlog` and are served by a bounded pool of `workers`
threads; the model runs one request at a time. Each connection must deliver its whole request
within `read_timeout` seconds of a worker taking it (every socket read is given only the time left),
so a slow or half-open client holds a worker at most that long; writes time out likewise.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from ..scoring import Scorer
from .completions import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PROMPT_TOKENS, Limits, complete, parse_request
from .errors import RequestError
from .wire import COMPLETIONS_PATH, MODELS_PATH

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 32
DEFAULT_BACKLOG = 256  # socketserver's default of 5 resets a crowd's connections
DEFAULT_READ_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 64 * 1024 * 1024


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
        super().__init__(address, handler)
        self.limits = limits or Limits(max_new_tokens=max_new_tokens, max_prompt_tokens=context_length(scorer))
        self.max_new_tokens = self.limits.max_new_tokens
        self.read_timeout = read_timeout
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="phasekv-serve")
        self.scorer = scorer
        self.served_model = served_model
        self.api_key = api_key
        self.model_lock = threading.Lock()
        self.vocab_size = int(scorer.next_token_logprobs([[0]]).shape[-1])
        self.created = int(time.time())
        model = getattr(scorer, "model", None)
        self.weights_sha256 = weights_sha256(model) if isinstance(model, torch.nn.Module) else None

    def process_request(self, request, client_address) -> None:
        """Serve the connection on the bounded pool (ThreadingMixIn would start a thread per connection)."""
        self._pool.submit(self.process_request_thread, request, client_address)

    def handle_error(self, request, client_address) -> None:
        """A connection that failed mid-answer (the client went away): logged, not printed."""
        log.debug("connection from %s failed", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
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
                "model": self.scorer.describe(),
            },
        }
        return {"object": "list", "data": [card]}

    def completion_body(self, body: object) -> dict:
        """The `/v1/completions` response for a decoded JSON body (RequestError if refused)."""
        request = parse_request(body, self.served_model, self.scorer.tokenizer, self.vocab_size, self.limits)
        with self.model_lock:
            return complete(self.scorer, self.served_model, request)


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of every tensor of the model's state dict (name, dtype, shape and bytes, in order): the
    card then changes whenever the weights do, even in a folder retrained in place."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class DeadlineReader(io.RawIOBase):
    """Reads a socket, giving every read only the time left until `deadline` (time.monotonic), so a
    client that trickles bytes cannot stretch a request past it."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not read within the read timeout")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class CompletionHandler(BaseHTTPRequestHandler):
    """Routes requests to the `CompletionServer`; every answer, errors included, is JSON."""

    server: CompletionServer

    def setup(self) -> None:
        super().setup()
        unread, timeout = self.rfile, self.server.read_timeout
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, time.monotonic() + timeout))
        unread.close()  # nothing was read through it; an open one would keep the socket from closing

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
            response = self.server.completion_body(body)
        except RequestError as err:
            self.send_error_json(err.status, str(err))
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

    def send_error_json(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        """Answer with an OpenAI-style error object."""
        kind = "invalid_request_error" if status < 500 else "server_error"
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
