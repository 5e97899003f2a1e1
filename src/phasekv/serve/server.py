"""A small OpenAI-compatible completions server over any `Scorer` (standard library HTTP).

Routes: `GET /v1/models` (the served model; its `phasekv` field adds the vocabulary size, the
compression stride, a SHA-256 of the weights and the scorer's `describe()`), `POST /v1/completions` (see `completions`).
Errors are JSON `{"error": {"message", "type", "code"}}` with status 400 (bad request), 401
(wrong API key), 404 (unknown route or model) or 500. Bound to 127.0.0.1 unless told otherwise.
Requests are served on threads; the model runs one request at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from ..scoring import Scorer
from .completions import DEFAULT_MAX_NEW_TOKENS, complete, parse_request
from .errors import RequestError
from .wire import COMPLETIONS_PATH, MODELS_PATH

log = logging.getLogger(__name__)


class CompletionServer(ThreadingHTTPServer):
    """The HTTP server: holds the scorer, the served name, an optional API key, and a model lock."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler,
        scorer: Scorer,
        served_model: str,
        api_key: str | None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ):
        super().__init__(address, handler)
        self.max_new_tokens = max_new_tokens
        self.scorer = scorer
        self.served_model = served_model
        self.api_key = api_key
        self.model_lock = threading.Lock()
        self.vocab_size = int(scorer.next_token_logprobs([[0]]).shape[-1])
        self.created = int(time.time())
        model = getattr(scorer, "model", None)
        self.weights_sha256 = weights_sha256(model) if isinstance(model, torch.nn.Module) else None

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
        request = parse_request(body, self.served_model, self.scorer.tokenizer, self.vocab_size, self.max_new_tokens)
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


class CompletionHandler(BaseHTTPRequestHandler):
    """Routes requests to the `CompletionServer`; every answer is JSON."""

    server: CompletionServer

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
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise RequestError(400, f"the request body is not JSON ({err})") from None
            response = self.server.completion_body(body)
        except RequestError as err:
            self.send_error_json(err.status, str(err))
        except Exception as err:  # the model failed: answer 500 and keep serving
            log.exception("completion failed")
            self.send_error_json(500, f"internal error: {type(err).__name__}: {err}")
        else:
            self.send_json(200, response)

    def _authorised(self) -> bool:
        key = self.server.api_key
        given = self.headers.get("Authorization", "")
        if key is None or secrets.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return True
        self.send_error_json(401, "missing or wrong API key (Authorization: Bearer ...)")
        return False

    def send_json(self, status: int, body: dict) -> None:
        """Answer with `body` as JSON."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, message: str) -> None:
        """Answer with an OpenAI-style error object."""
        kind = "invalid_request_error" if status < 500 else "server_error"
        self.send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        log.debug("%s " + format, self.address_string(), *args)


def make_server(
    scorer: Scorer,
    served_model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    handler: type[CompletionHandler] = CompletionHandler,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> CompletionServer:
    """A bound server (port 0: a free port, see `.url`); call `serve_forever()` to run it.
    `max_new_tokens` caps a request's `max_tokens`."""
    return CompletionServer((host, port), handler, scorer, served_model, api_key, max_new_tokens)
