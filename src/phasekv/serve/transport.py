"""JSON over HTTP with timeouts, retries and exponential backoff (urllib, standard library).

Retried: HTTP 408, 429 and 5xx, refused or dropped connections, timeouts, and a 200 whose body is
cut off or not JSON (a proxy's page). Not retried, as no retry can heal them: other 4xx (the server's
message is passed on), a TLS handshake with a server that speaks plain HTTP, and a JSON body that is
not an object.
Attempt i (from 0) that fails waits `backoff * 2**i` seconds (at most MAX_WAIT_S, or the
server's Retry-After) before the next; after `retries` retries the last failure is raised.
`failures` counts the failed attempts that were retried or given up on: a server that dropped or refused
connections may have been restarted with other weights, so the client checks its fingerprint again
whenever this count moved (see `client`).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .errors import EndpointError

MAX_WAIT_S = 30.0
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))


def base_url(url: str) -> str:
    """`http[s]://host[:port][/prefix]` without a trailing `/` or `/v1`; EndpointError if it is not one."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"bad endpoint URL {url!r}: expected http://host:port (optionally ending in /v1)")
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError as err:
        raise EndpointError(f"bad endpoint URL {url!r}: {err}") from None
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


class Transport:
    """Sends JSON requests to one server."""

    def __init__(self, url: str, *, timeout: float, retries: int, backoff: float, api_key: str | None):
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise EndpointError("timeout must be > 0, retries >= 0 and backoff >= 0")
        self.url = base_url(url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.api_key = api_key
        self._stopped = threading.Event()
        self._failures = 0
        self._failures_lock = threading.Lock()

    @property
    def failures(self) -> int:
        """Failed attempts so far (of every thread) that could mean the server was restarted."""
        return self._failures

    def stop(self) -> None:
        """Make no more attempts (Ctrl-C): a request in flight ends with its current attempt."""
        self._stopped.set()

    def get(self, path: str) -> dict:
        """GET `path`, decoded JSON object."""
        return self._send(urllib.request.Request(self.url + path, headers=self._headers(), method="GET"))

    def post(self, path: str, body: dict) -> dict:
        """POST `body` as JSON to `path`, decoded JSON object."""
        data = json.dumps(body).encode()
        headers = self._headers() | {"Content-Type": "application/json"}
        return self._send(urllib.request.Request(self.url + path, data=data, headers=headers, method="POST"))

    def _headers(self) -> dict[str, str]:
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def _send(self, request: urllib.request.Request) -> dict:
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                return _decode(raw, request.full_url)
            except urllib.error.HTTPError as err:
                detail = _error_message(err)
                if err.code not in RETRY_STATUSES:
                    raise EndpointError(f"{request.full_url} refused the request (HTTP {err.code}): {detail}") from None
                failure = f"HTTP {err.code}: {detail}"
                wait = max(wait, _retry_after(err))
            except NotJSON as err:
                failure = str(err)
            except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
                reason = getattr(err, "reason", err)
                if isinstance(reason, ssl.SSLError):
                    raise EndpointError(
                        f"{request.full_url}: TLS failed ({reason}); if the server speaks plain HTTP, use http://"
                    ) from None
                failure = f"timed out after {self.timeout} s" if isinstance(reason, TimeoutError) else str(reason)
            with self._failures_lock:
                self._failures += 1
            if attempt < self.retries and self._stopped.wait(min(wait, MAX_WAIT_S)):
                break
        raise EndpointError(f"{request.full_url}: gave up after {attempt + 1} attempts; last: {failure}")


class NotJSON(EndpointError):
    """A 200 whose body is not JSON: cut off or a proxy's page, worth another attempt."""


def _decode(raw: bytes, url: str) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise NotJSON(f"malformed response body from {url} (not JSON): {raw[:200]!r}") from None
    if not isinstance(body, dict):
        raise EndpointError(f"malformed response body from {url}: expected a JSON object, got {raw[:200]!r}")
    return body


def _error_message(err: urllib.error.HTTPError) -> str:
    """The server's error message (OpenAI error object, else the raw body)."""
    try:
        raw = err.read()
    except OSError:
        return err.reason
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode(errors="replace") or str(err.reason)


def _retry_after(err: urllib.error.HTTPError) -> float:
    value = err.headers.get("Retry-After") if err.headers else None
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
