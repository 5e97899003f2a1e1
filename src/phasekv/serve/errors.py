"""The errors of the serving layer."""

from ..scoring import ScorerError


class EndpointError(ScorerError):
    """A completions endpoint is unusable or answered something unusable; the message says why."""


class RequestError(ValueError):
    """A completions request the server refuses: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
