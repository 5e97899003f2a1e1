"""Serve a scorer over an OpenAI-compatible `/v1/completions` API, and score through one.

`server` runs a small completions server over any `Scorer` (token-id or text prompts, greedy
decoding, `stop`, `echo` + `logprobs` prompt log-probs); `client.EndpointScorer` implements the
`Scorer` interface (and exact teacher-forced `score_answers`) over such a server, over vLLM / SGLang
(with `echo`), or over servers that ignore `echo` such as llama.cpp's (one request per answer
token), with retries, a concurrency limit and an on-disk results cache, fingerprinted by what
answers, so an interrupted audit resumes and never reads another model's answers.
"""

from .cache import ResultCache
from .client import EndpointScorer
from .errors import EndpointError
from .server import CompletionServer, make_server

__all__ = ["CompletionServer", "EndpointError", "EndpointScorer", "ResultCache", "make_server"]
