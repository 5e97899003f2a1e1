"""The errors of the serving layer."""

from ..scoring import ScorerError


class EndpointError(ScorerError):
    """A completions endpoint is unusable or answered something unusable; the message says why."""


class EchoIgnored(EndpointError):
    """The server answered an `echo` request without the prompt's tokens (llama.cpp's server and others)."""


class ModelChanged(EndpointError):
    """The server's fingerprint changed during an audit (a restart with other weights): the audit stops, and
    the answers accepted since the last check that passed are dropped from the results cache."""


class AuditInterrupted(KeyboardInterrupt):
    """Ctrl-C during an endpoint audit, after the answers that arrived were cached; the message says how many."""


class RequestError(ValueError):
    """A completions request the server refuses: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client of a request being computed closed its connection: the request is abandoned."""
