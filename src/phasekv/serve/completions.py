"""Answer one `/v1/completions` request with a scorer: the server's logic, free of HTTP.

Supported request fields: `model` (must be the served name when given), `prompt` (a string, a
list of token ids, or a list of either), `max_tokens` (default 16, at most the server's cap,
DEFAULT_MAX_NEW_TOKENS unless told; greedy decoding), `stop` (a string or list of strings: the
generated text ends before the first one, finish_reason "stop"), `echo` (prepend the prompt, with
its log-probs when `logprobs` is set), `logprobs` k (top-k per token, up to the whole vocabulary),
`temperature` (absent or 0: decoding is greedy), `n` / `best_of` (1), `stream` (false) and
`return_tokens_as_token_ids` (see `wire`). `logit_bias` and `suffix` are refused (HTTP 400 naming
the field) rather than ignored. `Limits` bound what one request may cost: a prompt's length, the
number of prompts, the log-prob entries (`logprobs` x tokens with top lists) of the response, the
`stop` strings, and the seconds of compute (checked before every forward pass); past any of them the
request is refused with HTTP 400 naming the limit and its flag. Boolean fields must be JSON booleans. Text prompts
are tokenised without special tokens. Every echoed prompt token after the first carries its log-prob
given the tokens before it; every generated token is the full-vocabulary argmax. Top-k lists are
ordered by log-prob with ties broken by the lower token id (= torch's argmax). `text_offset[i]` is
where token i's text starts in the returned text.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import torch

from ..scoring import Scorer
from .errors import ClientGone, RequestError
from .wire import token_key

DEFAULT_MAX_NEW_TOKENS = 2048
DEFAULT_MAX_PROMPT_TOKENS = 8192  # for models that declare no context length (phasekv's RoPE models)
DEFAULT_MAX_PROMPTS = 64
# ~25 bytes of JSON each: a response of at most ~50 MB, while a whole-vocabulary row of a 150k-token model passes
DEFAULT_MAX_LOGPROB_ENTRIES = 2_000_000
# the client's default timeout (`EndpointClient`): computing longer answers nobody
DEFAULT_MAX_REQUEST_SECONDS = 120.0
# every stop string is searched for after every generated token
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
UNSUPPORTED_FIELDS = ("logit_bias", "suffix")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (each refused past its cap with a 400 naming the flag that sets it)."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    max_prompts: int = DEFAULT_MAX_PROMPTS
    max_logprob_entries: int = DEFAULT_MAX_LOGPROB_ENTRIES
    max_request_seconds: float = DEFAULT_MAX_REQUEST_SECONDS

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "max_prompt_tokens", "max_prompts", "max_logprob_entries"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.max_request_seconds > 0:
            raise ValueError(f"max_request_seconds must be > 0, got {self.max_request_seconds}")


@dataclass(frozen=True)
class CompletionRequest:
    """A validated request: token-id prompts and decoding options."""

    prompts: list[list[int]]
    max_tokens: int
    stop: tuple[str, ...]
    echo: bool
    logprobs: int | None
    token_ids: bool


def parse_request(
    body: object, served_model: str, tokenizer, vocab_size: int, limits: Limits | int = DEFAULT_MAX_NEW_TOKENS
) -> CompletionRequest:
    """Validate a decoded JSON body against `limits` (an int: the max_tokens cap alone); raises
    RequestError (400, or 404 for another model)."""
    limits = limits if isinstance(limits, Limits) else Limits(max_new_tokens=limits)
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model:
        raise RequestError(404, f"model {model!r} is not served here (this server serves {served_model!r})")
    if _bool_field(body, "stream"):
        raise RequestError(400, "stream is not supported")
    for field in UNSUPPORTED_FIELDS:
        if body.get(field):
            raise RequestError(400, f"{field} is not supported by this server (send the request without it)")
    for field in ("n", "best_of"):
        if body.get(field, 1) != 1:
            raise RequestError(400, f"{field} must be 1")
    if body.get("temperature") not in (None, 0, 0.0):
        raise RequestError(400, "only greedy decoding is served: temperature must be 0 or absent")
    max_tokens = _int_field(body, "max_tokens", 16, 0, limits.max_new_tokens, "; the cap is phasekv serve --max-tokens")
    logprobs = None if body.get("logprobs") is None else _int_field(body, "logprobs", 0, 0, vocab_size)
    echo = _bool_field(body, "echo")
    listed = _prompt_list(body.get("prompt"))
    if len(listed) > limits.max_prompts:
        raise RequestError(
            400, f"{len(listed)} prompts in one request; this server takes at most {limits.max_prompts} "
            "(phasekv serve --max-prompts)"
        )  # fmt: skip
    prompts = [_prompt_ids(p, tokenizer, vocab_size, limits.max_prompt_tokens) for p in listed]
    if logprobs:
        # every generated token and (with echo) every prompt token carries a top list of `logprobs` entries
        entries = logprobs * sum((len(ids) if echo else 0) + max_tokens for ids in prompts)
        if entries > limits.max_logprob_entries:
            raise RequestError(
                400, f"logprobs x tokens = {entries} log-prob entries in the response; this server's limit is "
                f"{limits.max_logprob_entries} (phasekv serve --max-logprob-entries): ask for fewer logprobs, "
                "fewer tokens or no echo"
            )  # fmt: skip
    return CompletionRequest(
        prompts=prompts,
        max_tokens=max_tokens,
        stop=_stop_strings(body.get("stop")),
        echo=echo,
        logprobs=logprobs,
        token_ids=_bool_field(body, "return_tokens_as_token_ids"),
    )


def _int_field(body: dict, name: str, default: int, low: int, high: int, hint: str = "") -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(400, f"{name} must be an integer in [{low}, {high}], got {value!r}{hint}")
    return value


def _bool_field(body: dict, name: str) -> bool:
    """A JSON boolean (absent: false); a string such as "false" is refused rather than read as true."""
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise RequestError(400, f"{name} must be true or false, got {value!r}")
    return value


def _stop_strings(stop: object) -> tuple[str, ...]:
    """`stop`: absent, a string, or a list of at most MAX_STOP_STRINGS strings -> a tuple of non-empty strings."""
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, "stop must be a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise RequestError(
            400, f"stop takes at most {MAX_STOP_STRINGS} strings of at most {MAX_STOP_CHARS} characters each, got "
            f"{len(stops)} of up to {max(map(len, stops))}"
        )  # fmt: skip
    return tuple(stops)


def _prompt_list(prompt: object) -> list:
    """One prompt (str or list of ids) or a list of prompts -> a list of prompts."""
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        return prompt
    raise RequestError(400, "prompt must be a non-empty string, list of token ids, or list of those")


def _prompt_ids(prompt: object, tokenizer, vocab_size: int, max_tokens: int) -> list[int]:
    if isinstance(prompt, str):
        if len(prompt) > 64 * max_tokens:  # no token is that long: refused before tokenising it
            raise RequestError(400, _too_long(f"{len(prompt)} characters", max_tokens))
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = prompt
    else:
        raise RequestError(400, "each prompt must be a string or a list of integer token ids")
    if not ids:
        raise RequestError(400, "a prompt is empty")
    if len(ids) > max_tokens:
        raise RequestError(400, _too_long(f"{len(ids)} tokens", max_tokens))
    if not all(0 <= t < vocab_size for t in ids):
        raise RequestError(400, f"token ids must lie in [0, {vocab_size})")
    return list(ids)


def _too_long(size: str, max_tokens: int) -> str:
    return f"a prompt of {size} is too long: this server takes at most {max_tokens} (phasekv serve --max-prompt-tokens)"


class Budget:
    """What a request may still spend: checked before every forward pass, it raises RequestError (400)
    once `seconds` of compute have passed and ClientGone once `client_gone()` says the client left."""

    def __init__(self, seconds: float, client_gone=lambda: False):
        self.seconds, self.client_gone = seconds, client_gone
        self.deadline = time.monotonic() + seconds

    def check(self) -> None:
        if self.client_gone():
            raise ClientGone
        if time.monotonic() > self.deadline:
            raise RequestError(
                400, f"the request took more than {self.seconds:g} s of compute (phasekv serve --max-request-seconds): "
                "ask for fewer prompts or tokens"
            )  # fmt: skip


def complete(
    scorer: Scorer,
    served_model: str,
    request: CompletionRequest,
    max_seconds: float = DEFAULT_MAX_REQUEST_SECONDS,
    client_gone=lambda: False,
) -> dict:
    """The completions response body (OpenAI legacy format) for a validated request; see `Budget` for
    `max_seconds` and `client_gone`."""
    budget = Budget(max_seconds, client_gone)
    choices = [_choice(scorer, request, ids, index, budget) for index, ids in enumerate(request.prompts)]
    prompt_tokens = sum(len(ids) for ids in request.prompts)
    completion_tokens = len(request.prompts) * request.max_tokens
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served_model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _choice(scorer: Scorer, request: CompletionRequest, ids: list[int], index: int, budget: Budget) -> dict:
    """Greedy continuation of one prompt (ended by `stop`), with the (echoed) tokens' log-probs."""
    entries: list[tuple[int, float | None, torch.Tensor | None]] = []  # (token, log-prob, distribution)
    rows = None
    if request.echo and request.logprobs is not None:
        budget.check()
        rows = scorer.logprobs([ids], len(ids))[0]  # rows[p] predicts token p + 1
        entries += [(ids[0], None, None)] + [
            (ids[p], float(rows[p - 1, ids[p]]), rows[p - 1]) for p in range(1, len(ids))
        ]
    elif request.echo:
        entries += [(t, None, None) for t in ids]
    n_echoed, sequence, stopped = len(entries), list(ids), False
    tok = scorer.tokenizer
    for step in range(request.max_tokens):
        if step > 0 or rows is None:
            budget.check()
        row = rows[-1] if step == 0 and rows is not None else scorer.next_token_logprobs([sequence])[0]
        token = int(row.argmax())
        entries.append((token, float(row[token]), row))
        sequence.append(token)
        generated = tok.decode(sequence[len(ids) :])
        if any(s in generated for s in request.stop):
            stopped = True
            break
    text, offsets = _text_and_offsets([t for t, _, _ in entries], tok)
    if stopped:  # the text ends before the first stop string; tokens that start after that end are dropped
        start = offsets[n_echoed]
        cut = start + min(i for i in (text[start:].find(s) for s in request.stop) if i >= 0)
        text = text[:cut]
        kept = n_echoed + sum(1 for offset in offsets[n_echoed:] if offset < cut)
        entries, offsets = entries[:kept], offsets[:kept]
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": "stop" if stopped else "length"}
    if request.logprobs is not None:
        choice["logprobs"] = _logprobs_object(entries, offsets, request, tok)
    return choice


def _text_and_offsets(tokens: list[int], tok) -> tuple[str, list[int]]:
    """The decoded text of `tokens` and where each token's own text starts in it (the token's piece
    searched from where the previous one ended; a piece that does not occur as such, e.g. a part of a
    multi-byte character, starts there)."""
    text = tok.decode(tokens) if tokens else ""
    offsets, cursor = [], 0
    for token in tokens:
        piece = tok.decode([token])
        found = text.find(piece, cursor) if piece else -1
        start = found if found >= 0 else cursor
        offsets.append(start)
        cursor = start + len(piece) if found >= 0 else cursor
    return text, offsets


def _logprobs_object(entries: list, offsets: list[int], request: CompletionRequest, tok) -> dict:
    """OpenAI's `logprobs` object: tokens, token_logprobs, top_logprobs, text_offset."""

    def name(token: int) -> str:
        return token_key(token) if request.token_ids else tok.decode([token])

    return {
        "tokens": [name(t) for t, _, _ in entries],
        "token_logprobs": [lp for _, lp, _ in entries],
        "top_logprobs": [None if row is None else _top(row, request.logprobs, name) for _, _, row in entries],
        "text_offset": offsets,
    }


def _top(row: torch.Tensor, k: int, name) -> dict[str, float]:
    """The k most likely tokens, by log-prob then by lower id; a text piece shared by two tokens
    keeps the likelier one."""
    order = torch.argsort(row, descending=True, stable=True)[:k]
    top: dict[str, float] = {}
    for token in order.tolist():
        top.setdefault(name(token), float(row[token]))
    return top
