"""JSON over HTTP with timeouts, retries and exponential backoff (urllib, standard library).

Retried: HTTP 408, 429 and 5xx, refused or dropped connections, timeouts, and a 200 whose body is
cut off or not JSON (a proxy's page). Not retried, as no retry can heal them: other 4xx (the server's
message is passed on), a 5xx of error type `non_finite_output` (the model gave NaN or +inf), a TLS
handshake with a server that speaks plain HTTP, and a JSON body that is not an object.
Attempt i (from 0) that fails waits `backoff * 2**i` seconds (at most MAX_WAIT_S, or the
server's Retry-After) before the next; after `retries` retries the last failure is raised. One request,
its retries and their waits included, takes at most `max_wait` seconds (DEFAULT_MAX_WAIT_S): a server that
never answers is given up on then, not after `retries + 1` whole timeouts; once a request has waited
NOTIFY_AFTER_S, each failed attempt is told to `notify` (the command prints it) as it happens. A response
body is read in chunks and refused past `max_response_bytes` (DEFAULT_MAX_RESPONSE_BYTES): a runaway or
hostile server cannot take the client's memory.
`failures` counts the failed attempts that were retried or given up on: a server that dropped or refused
connections may have been restarted with other weights, so the client checks its fingerprint again
whenever this count moved (see `client`).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

from .errors import EndpointError
from .wire import NON_FINITE_OUTPUT

MAX_WAIT_S = 30.0
DEFAULT_MAX_WAIT_S = 300.0  # the whole of one request: 616 s of silence was the old worst case at the defaults
DEFAULT_MAX_RESPONSE_BYTES = 256 * 2**20  # an echo of a 100k-token prompt with 20 top log-probs is ~60 MB
ERROR_BODY_BYTES = 64 * 1024  # what is read of an error answer for its message
READ_CHUNK = 1 << 20
NOTIFY_AFTER_S = 10.0  # failed attempts are told once a request has waited this long (quick retries stay quiet)
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

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        api_key: str | None,
        max_wait: float = DEFAULT_MAX_WAIT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        notify: Callable[[str], None] | None = None,
    ):
        if timeout <= 0 or retries < 0 or backoff < 0 or max_wait <= 0 or max_response_bytes < 1:
            raise EndpointError(
                "timeout and max_wait must be > 0, retries >= 0, backoff >= 0 and max_response_bytes >= 1"
            )
        self.url = base_url(url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.api_key = api_key
        self.max_wait = max_wait
        self.max_response_bytes = max_response_bytes
        self.notify = notify
        self.notify_after = NOTIFY_AFTER_S
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
        start = time.monotonic()
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            timeout = min(self.timeout, self.max_wait - (time.monotonic() - start))
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    raw = self._read(response, request.full_url)
                return _decode(raw, request.full_url)
            except urllib.error.HTTPError as err:
                detail, kind = _error_message(err)
                if err.code not in RETRY_STATUSES:
                    raise EndpointError(f"{request.full_url} refused the request (HTTP {err.code}): {detail}") from None
                if kind == NON_FINITE_OUTPUT:
                    raise EndpointError(f"{request.full_url} (HTTP {err.code}, not retried): {detail}") from None
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
                failure = f"timed out after {timeout:.3g} s" if isinstance(reason, TimeoutError) else str(reason)
            with self._failures_lock:
                self._failures += 1
            left = self.max_wait - (time.monotonic() - start)
            wait = min(wait, MAX_WAIT_S, left)
            if attempt == self.retries or left <= wait:  # no time left for another attempt
                break
            if self.notify is not None and time.monotonic() - start >= self.notify_after:
                self.notify(
                    f"{request.full_url}: attempt {attempt + 1} of {self.retries + 1} failed ({failure}); retrying in "
                    f"{wait:.3g} s ({time.monotonic() - start:.0f} of at most {self.max_wait:g} s spent on it)"
                )
            if self._stopped.wait(wait):
                break
        spent = time.monotonic() - start
        out_of_time = attempt < self.retries and not self._stopped.is_set()
        limit = f" (the most one request may take: --max-wait {self.max_wait:g})" if out_of_time else ""
        raise EndpointError(
            f"{request.full_url}: gave up after {attempt + 1} attempts in {spent:.0f} s{limit}; last: {failure}"
        )

    def _read(self, response, url: str) -> bytes:
        """The body, read in chunks; EndpointError (not retried: the same request gets the same answer) past
        `max_response_bytes`, announced or not."""
        limit = self.max_response_bytes
        too_big = (
            f"{url} sent a response larger than {limit / 2**20:.3g} MiB (--max-response-mb): refused, not read "
            "further; raise --max-response-mb if the server's answers are really this large"
        )
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise EndpointError(too_big)
        chunks, size = [], 0
        while chunk := response.read(min(READ_CHUNK, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise EndpointError(too_big)
        return b"".join(chunks)


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


def _error_message(err: urllib.error.HTTPError) -> tuple[str, str | None]:
    """The server's error message and type (OpenAI error object, else the raw body and None)."""
    try:
        raw = err.read(ERROR_BODY_BYTES)
    except OSError:
        return err.reason, None
    try:
        error = json.loads(raw)["error"]
        return str(error["message"]), error.get("type") if isinstance(error.get("type"), str) else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw[:200].decode(errors="replace") or str(err.reason), None


def _retry_after(err: urllib.error.HTTPError) -> float:
    value = err.headers.get("Retry-After") if err.headers else None
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
