"""Serve a scorer over an OpenAI-compatible `/v1/completions` API, and score through one.

`server` runs a small completions server over any `Scorer` (token-id or text prompts, greedy
decoding, `echo` + `logprobs` prompt log-probs); `client.EndpointScorer` implements the `Scorer`
interface (and exact teacher-forced `score_answers`) over such a server, or over vLLM / SGLang,
with retries, a concurrency limit and an on-disk results cache so an interrupted audit resumes.
"""

from .cache import ResultCache
from .client import EndpointScorer
from .errors import EndpointError
from .server import CompletionServer, make_server

__all__ = ["CompletionServer", "EndpointError", "EndpointScorer", "ResultCache", "make_server"]
