"""`EndpointScorer`: the `Scorer` interface over an OpenAI-compatible `/v1/completions` server.

Request kinds, one prompt per request, `max_tokens` 1, `temperature` 0:

- "answer" (`score_answers` on servers that echo, exact and cheap): the prompt is context + answer
  with `echo` and `logprobs` 1, so the server returns each answer token's own log-prob and the top-1
  token at its position. An answer is correct when every answer token is that top-1 (the
  full-vocabulary argmax). vLLM, SGLang and this package's server echo.
- "top" (`score_answers` on servers that ignore `echo`, such as llama.cpp's): one request per answer
  token, the prompt context + the answer tokens before it, no echo, `logprobs` = `top_k`: the top-1
  there decides correctness exactly; an answer token's log-prob is known when it is among the top k
  (else NaN, counted in `describe()`). Chosen automatically when a server is seen to ignore echo
  (the finding is cached), or with `echo=False`.
- "next" (`logprobs`, the generic interface): one request per prefix asks for `logprobs` = the
  whole vocabulary at the next position and rebuilds the dense distribution; servers that cap
  top-logprobs (vLLM unless `--max-logprobs` is raised) refuse, and the error says so.

Both response shapes are read: OpenAI's legacy `logprobs.{tokens, token_logprobs, top_logprobs}` and
the chat-style `logprobs.content[i].{id, token, logprob, top_logprobs[j].{id, token, logprob}}` that
llama.cpp's server returns on `/v1/completions`. Prompts go as token ids; with `text_prompts=True`
they go as text that is verified to re-tokenise to exactly the same ids (else EndpointError), and
the server's prompt token count is checked. Token ids in legacy answers are read from
`token_id:<id>` keys (`return_tokens_as_token_ids`); text keys are mapped back through the
tokenizer only where the mapping is unique. Requests run `concurrency` at a time; every answer is
appended to the results cache as it arrives (see `cache`), which is keyed on a fingerprint of what
answers (`fingerprint`) and on the server's answers to a few canary prompts, asked anew at the start
of every audit (see `canary`), so other weights behind an unchanged model card are not mistaken for
the ones that wrote the cache. A server can also be restarted with other weights during an audit:
after any failed attempt (a dropped or refused connection, a 5xx, a timeout: what a restart looks
like) the card and the canaries are checked again before any further answer is accepted, and once
more when the result is recorded (`describe`, if anything was sent since the last check); each cached
answer is tied to the check it was accepted after. A change raises `ModelChanged`, after dropping the
answers accepted since the last check that passed (the change may have come any time after it).
Ctrl-C cancels what has not started, keeps what arrived, and raises
`AuditInterrupted`. An answer holding a NaN or +inf log-prob raises `NonFiniteOutput` (the position, the served
model) as it arrives, before it is cached; of several failed requests the earliest is raised.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch

from ..scoring import AnswerScores, NonFiniteOutput, ScorerError
from .cache import ResultCache, fingerprint_id, request_key
from .canary import CANARY_TOP, DEFAULT_TOLERANCE, canary_difference, canary_prompts
from .errors import AuditInterrupted, EchoIgnored, EndpointError, ModelChanged
from .local import load_tokenizer, local_stride, text_prompt, tokenizer_hash
from .transport import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_WAIT_S, Transport
from .wire import API_KEY_VARIABLES, COMPLETIONS_PATH, MODELS_PATH, parse_token_key

# One position of a response: (token id or None, its log-prob or None, top entries [(id or None, log-prob)]).
Position = tuple[int | None, float | None, list[tuple[int | None, float]] | None]
VOLATILE_CARD_FIELDS = ("created",)  # model-card fields that change between identical servers (vLLM: time of asking)


def api_key_from_environment() -> str | None:
    """The first non-empty of $PHASEKV_API_KEY, $OPENAI_API_KEY, or None."""
    return next((os.environ[name] for name in API_KEY_VARIABLES if os.environ.get(name)), None)


class EndpointScorer:
    """Scores prompts through a completions server (see the module docstring).

    `tokenizer_dir` holds the served model's tokenizer (a phasekv checkpoint or an HF directory);
    its config.json, when present, gives the compression stride unless the server reports one.
    `cache` is a JSONL path, a ResultCache, a function (served model, fingerprint id) -> path, or
    None (answers kept in memory only). `echo`: None decides from the server, False never asks for it.
    `max_wait`, `max_response_bytes` and `notify` (told of each failed attempt) bound each request: see `transport`.
    """

    def __init__(
        self,
        url: str,
        served_model: str,
        tokenizer_dir: str | Path,
        *,
        concurrency: int = 4,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        cache: str | Path | ResultCache | Callable[[str, str], Path] | None = None,
        text_prompts: bool = False,
        api_key: str | None = None,
        echo: bool | None = None,
        top_k: int = 20,
        canary_tolerance: float = DEFAULT_TOLERANCE,
        max_wait: float = DEFAULT_MAX_WAIT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        notify: Callable[[str], None] | None = None,
    ):
        if concurrency < 1 or top_k < 1:
            raise ScorerError(f"concurrency and top_k must be >= 1, got {concurrency} and {top_k}")
        if not canary_tolerance >= 0:
            raise ScorerError(f"canary_tolerance must be >= 0 nats, got {canary_tolerance}")
        self.tokenizer = load_tokenizer(tokenizer_dir)
        key = api_key if api_key is not None else api_key_from_environment()
        self.transport = Transport(
            url, timeout=timeout, retries=retries, backoff=backoff, api_key=key, max_wait=max_wait,
            max_response_bytes=max_response_bytes, notify=notify,
        )  # fmt: skip
        self.served_model = served_model
        self.tokenizer_dir = str(tokenizer_dir)
        self.concurrency = self.batch_size = concurrency
        self.text_prompts = text_prompts
        self.top_k = top_k
        self.card = self._model_card()
        extension = self.card.get("phasekv") or {}
        self.vocab_size = int(extension.get("vocab_size") or len(self.tokenizer))
        if "compression_stride" in extension:
            self.compression_stride = extension["compression_stride"]
        else:
            self.compression_stride = local_stride(tokenizer_dir)
        self._text_ids: dict[str, int | None] | None = None
        self.fingerprint = self._fingerprint()
        if callable(cache):
            cache = cache(served_model, fingerprint_id(self.fingerprint))
        self.cache = cache if isinstance(cache, ResultCache) else ResultCache(cache)
        self.cache.check(self.fingerprint)  # a cache of another card or tokenizer is refused before sending
        self.canary_tolerance = canary_tolerance
        self.canaries = self._canaries()
        self.canary_difference = self.cache.claim(self.fingerprint, self.canaries, canary_tolerance)
        self.checks = 1  # checks of the fingerprint that passed in this session
        self._check_lock = threading.Lock()  # one check at a time; answers are accepted only between checks
        self._checked_failures = self.transport.failures  # the transport's failure count at the last check
        self._unchecked: set[str] = set()  # keys accepted since the last check: dropped if the next one fails
        self._changed: ModelChanged | None = None  # once the model changed, every later answer is refused
        self._sent: set[str] = set()  # keys of the requests this session sent
        self._from_cache: set[str] = set()  # keys of the requests this session found in the cache
        self.logprobs_outside_top_k = 0
        self._echo = echo
        self._counts_lock = threading.Lock()

    def _model_card(self) -> dict:
        body = self.transport.get(MODELS_PATH)
        cards = body.get("data")
        if not isinstance(cards, list) or not all(isinstance(c, dict) for c in cards):
            raise EndpointError(f"malformed response body from {self.transport.url}{MODELS_PATH}: no model list")
        for card in cards:
            if card.get("id") == self.served_model:
                return card
        served = [c.get("id") for c in cards]
        raise EndpointError(f"{self.transport.url} does not serve {self.served_model!r}; it serves {served}")

    def _fingerprint(self) -> dict:
        """What answers the requests: the results cache is only ever used for exactly this."""
        return {
            "endpoint": self.transport.url,
            "served_model": self.served_model,
            "server_model": {k: v for k, v in self.card.items() if k not in VOLATILE_CARD_FIELDS},
            "tokenizer_sha256": tokenizer_hash(self.tokenizer),
            "request_options": {"text_prompts": self.text_prompts, "top_k": self.top_k},
        }

    def _canaries(self) -> dict:
        """The server's top CANARY_TOP log-probs after each canary prompt, sent now (never from a cache)."""

        def sendable(ids: list[int]) -> bool:
            try:
                text_prompt(self.tokenizer, ids)
            except EndpointError:
                return False
            return True

        prompts = canary_prompts(self.tokenizer, self.vocab_size, sendable if self.text_prompts else None)
        return {"prompts": prompts, "top": [self._send_top(ids, CANARY_TOP) for ids in prompts]}

    @property
    def answers(self) -> dict[str, int]:
        """How many distinct requests of this session were answered from the cache and how many were sent."""
        return {"from_cache": len(self._from_cache), "sent": len(self._sent)}

    @property
    def notice(self) -> str | None:
        """What loading the results cache repaired, for the user (None: nothing)."""
        return self.cache.notice

    def describe(self) -> dict:
        """JSON-ready record: endpoint, served model, tokenizer, prompt form, the server's model card,
        how answers were asked for, and how many came from the cache and how many were sent. Called when
        a result is recorded, so the fingerprint is checked once more first (when anything was sent since
        the last check): a result is never recorded for a server that no longer answers as it did."""
        self._confirm(end=True)
        return {
            "kind": "endpoint",
            "endpoint": self.transport.url,
            "served_model": self.served_model,
            "tokenizer": self.tokenizer_dir,
            "prompts": "text (round trip verified token-exactly)" if self.text_prompts else "token ids",
            "answer_requests": {None: "not yet decided", True: "echo", False: "one per answer token (no echo)"}[
                self._echo
            ],
            "top_k": self.top_k,
            "logprobs_outside_top_k": self.logprobs_outside_top_k,
            "compression_stride": self.compression_stride,
            "vocab_size": self.vocab_size,
            "concurrency": self.concurrency,
            "timeout_s": self.transport.timeout,
            "retries": self.transport.retries,
            "max_wait_s": self.transport.max_wait,
            "cache": None if self.cache.path is None else str(self.cache.path),
            "fingerprint_id": fingerprint_id(self.fingerprint),
            "canaries": {
                "prompts": len(self.canaries["prompts"]),
                "largest_difference_nats": self.canary_difference,
                "tolerance_nats": self.canary_tolerance,
                "checks": self.checks,
            },
            "answers": self.answers,
            "server_model": self.card,
        }

    def score_answers(
        self,
        contexts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        progress: Callable[[int], None] | None = None,
    ) -> AnswerScores:
        """Teacher-forced scores of answers[i] after contexts[i], exactly as `scoring.score_answers`
        (summed log-prob in float32, every answer token the full-vocabulary top-1, first top-1).
        `progress(n)` is called once for the cached answers and after every answered request."""
        if len(contexts) != len(answers):
            raise ScorerError(f"{len(contexts)} contexts but {len(answers)} answers")
        if not all(answers):
            raise ScorerError("an answer is empty")
        requests = [([*c, *a], len(a)) for c, a in zip(contexts, answers, strict=True)]
        if self._echo is None:
            self._echo = self._server_echoes(requests[0])
        if self._echo:
            records = self._answered("answer", requests, self._send_answer, progress)
        else:
            records = self._answers_without_echo(requests)
            if progress is not None:  # one "top" request per answer token: counted when all are answered
                progress(len(set(map(repr, requests))))
        logprob, correct, first = (
            np.zeros(len(records)),
            np.zeros(len(records), dtype=bool),
            np.zeros(len(records), dtype=np.int64),
        )
        for i, (record, answer) in enumerate(zip(records, answers, strict=True)):
            values = [math.nan if v is None else v for v in record["logprobs"]]
            logprob[i] = torch.tensor(values, dtype=torch.float32).sum().double().item()
            correct[i] = record["top_ids"] == list(answer)
            first[i] = record["top_ids"][0]
        return AnswerScores(logprob=logprob, correct=correct, first_argmax=first)

    def prompt_token_logprobs(self, sequences: Sequence[Sequence[int]]) -> list[dict]:
        """Per sequence, the log-prob of each of its tokens after the first given the tokens before it, and
        the top-1 id at each of those positions: {"logprobs": [...], "top_ids": [...]} (len - 1 each). One
        echo request per sequence, or one "top" request per position where the server ignores echo (a
        log-prob outside the top k is None there, and the record adds "top": each position's top k
        {token id: log-prob})."""
        if not sequences or any(len(s) < 2 for s in sequences):
            raise ScorerError("every sequence needs at least two tokens")
        requests = [(list(s), len(s) - 1) for s in sequences]
        if self._echo is None:
            self._echo = self._server_echoes(requests[0])
        if self._echo:
            return self._answered("answer", requests, self._send_answer)
        return self._answers_without_echo(requests)

    def _server_echoes(self, request: tuple[list[int], int]) -> bool:
        """Whether the server honours `echo` (asked once per cache, with a real request whose answer is kept)."""
        key = request_key(self.served_model, "echoes", [], None)
        known = self.cache.get(key)
        if known is None:
            try:
                self._answered("answer", [request], self._send_answer)
                known = True
            except EchoIgnored:
                known = False
            self._accept(key, "echoes", known)
        return known

    def _answers_without_echo(self, requests: list[tuple[list[int], int]]) -> list[dict]:
        """The "answer" records from "top" requests: one per answer token, shared where prefixes repeat; each
        record keeps its positions' top lists ("top")."""
        prefixes = [(ids[: len(ids) - n + j], self.top_k) for ids, n in requests for j in range(n)]
        tops = iter(self._answered("top", prefixes, self._send_top))
        records = []
        for ids, n in requests:
            record = {"logprobs": [], "top_ids": [], "top": []}
            for gold in ids[len(ids) - n :]:
                top = {token: value for token, value in next(tops)}
                record["logprobs"].append(top.get(gold))
                record["top_ids"].append(_top1(list(top.items()))[0])
                record["top"].append(top)
                self.logprobs_outside_top_k += gold not in top
            records.append(record)
        return records

    def logprobs(
        self, sequences: Sequence[Sequence[int]], n_last: int = 1, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """Log-probs [N, n_last, V] at the last `n_last` positions of each sequence: one
        whole-vocabulary "next" request per prefix (`progress` counts requests)."""
        if n_last < 1:
            raise ScorerError(f"n_last must be >= 1, got {n_last}")
        if not sequences:
            raise ScorerError("no sequences to score")
        if any(len(s) < n_last for s in sequences):
            raise ScorerError(f"every sequence needs at least n_last = {n_last} tokens")
        prefixes = [(list(s[: len(s) - n_last + 1 + j]), None) for s in sequences for j in range(n_last)]
        rows = self._answered("next", prefixes, self._send_next, progress)
        return torch.tensor(rows, dtype=torch.float32).view(len(sequences), n_last, self.vocab_size)

    def next_token_logprobs(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-probs [N, V] of the token after each sequence."""
        return self.logprobs(sequences, 1)[:, 0]

    def _answered(
        self,
        kind: str,
        requests: list[tuple[list[int], object]],
        send: Callable,
        progress: Callable[[int], None] | None = None,
    ) -> list:
        """The result of every request, from the cache or sent (distinct requests once, `concurrency`
        at a time, each answer cached by its worker as it arrives). On a failure the requests not yet
        started are cancelled, those in flight finish (their answers cached), the first failure is
        raised; on Ctrl-C likewise, without further retries, as `AuditInterrupted`."""
        keys = [request_key(self.served_model, kind, ids, detail) for ids, detail in requests]
        todo = {key: request for key, request in zip(keys, requests, strict=True) if self.cache.get(key) is None}
        self._from_cache.update(key for key in keys if key not in todo and key not in self._sent)
        if progress is not None and len(set(keys)) > len(todo):
            progress(len(set(keys)) - len(todo))  # answered from the cache

        def answer(key: str, request: tuple) -> None:
            self._accept(key, kind, send(*request))
            with self._counts_lock:
                self._sent.add(key)

        pool = ThreadPoolExecutor(self.concurrency)
        futures = [pool.submit(answer, key, request) for key, request in todo.items()]
        try:
            for future in as_completed(futures):
                future.result()
                if progress is not None:
                    progress(1)
        except KeyboardInterrupt:
            self.transport.stop()  # no more retries: in-flight requests end with their current attempt
            pool.shutdown(wait=True, cancel_futures=True)
            raise AuditInterrupted(self._interrupted_message()) from None
        except Exception:
            pool.shutdown(wait=True, cancel_futures=True)
            if self._changed is not None:  # whatever else failed, the audit's answers are no longer one model's
                raise self._changed from None
            # the earliest request's failure, not the first to arrive: requests start in order, so every one before
            # it has finished, and where a prompt's positions are separate requests it is the first failing position
            raise next(f.exception() for f in futures if not f.cancelled() and f.exception() is not None) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return [self.cache.get(key) for key in keys]

    def _accept(self, key: str, kind: str, result: object) -> None:
        """Cache an answer, after checking the fingerprint again if any attempt failed since the last check."""
        with self._check_lock:
            self._confirm_locked(end=False)
            self.cache.put(key, kind, result)
            self._unchecked.add(key)

    def _confirm(self, *, end: bool) -> None:
        with self._check_lock:
            self._confirm_locked(end=end)

    def _confirm_locked(self, *, end: bool) -> None:
        """Check the card and the canaries again when an attempt failed since the last check began (a restart
        looks like that) or, with `end`, when answers were accepted since it. One check that starts after an
        answer arrived vouches for it, whatever fails meanwhile: failures during the check make the next
        answer wait for another one. Raises `ModelChanged` (see `_changed_to`)."""
        if self._changed is not None:
            raise self._changed
        seen = self.transport.failures
        if seen != self._checked_failures or (end and self._unchecked):
            self._check_now()
            self._checked_failures = seen

    def _check_now(self) -> None:
        """Ask for the card and the canaries now and compare them with the cache's; record the check or fail."""
        card = {k: v for k, v in self._model_card().items() if k not in VOLATILE_CARD_FIELDS}
        stored = self.fingerprint["server_model"]
        differ = sorted(k for k in card.keys() | stored.keys() if card.get(k) != stored.get(k))
        if differ:
            self._changed_to(f"its model card differs in {', '.join(differ)}")
        canaries = self._canaries()
        difference = canary_difference(self.cache.canaries, canaries)
        if not difference <= self.canary_tolerance:
            self._changed_to(
                f"it answers the canary prompts differently by {difference:.3g} nats "
                f"(tolerance {self.canary_tolerance:g})"
            )
        self.cache.passed(canaries, difference)
        self.canary_difference = max(self.canary_difference, difference)
        self.checks += 1
        self._unchecked.clear()

    def _changed_to(self, how: str) -> None:
        """Drop the answers accepted since the last check that passed, refuse every later one, raise."""
        dropped = len(self._unchecked)
        self.cache.discard(self._unchecked)
        with self._counts_lock:
            self._sent -= self._unchecked
        self._unchecked.clear()
        self._changed = ModelChanged(
            f"the model behind {self.transport.url} ({self.served_model}) changed during the audit: {how}; "
            f"stopped, nothing of the new model kept ({dropped} answers since the last of {self.checks} passed "
            "checks dropped, the earlier ones stay cached). Serve the audited model again and rerun the same "
            "command to resume, or audit the model served now with --cache NEW_FILE (or --no-cache)"
        )
        raise self._changed

    def _interrupted_message(self) -> str:
        if self.cache.path is None:
            return f"interrupted: {len(self._sent)} answers were kept in memory only (no cache file)"
        return (
            f"interrupted: {len(self._sent) + len(self._from_cache)} answers cached in {self.cache.path} "
            f"({len(self._sent)} new), "
            "rerun the same command to resume"
        )

    def _post(self, ids: list[int], *, echo: bool, logprobs: int) -> list[Position]:
        """Send one prompt; the positions of the choice's `logprobs` (either shape), checked."""
        body = {
            "model": self.served_model,
            "prompt": text_prompt(self.tokenizer, ids) if self.text_prompts else ids,
            "max_tokens": 1,
            "temperature": 0,
            "echo": echo,
            "logprobs": logprobs,
        }
        if not self.text_prompts:
            body["return_tokens_as_token_ids"] = True
        response = self.transport.post(COMPLETIONS_PATH, body)
        where = f"{self.transport.url}{COMPLETIONS_PATH}"
        try:
            lp = response["choices"][0]["logprobs"]
            positions = self._content_positions(lp["content"]) if "content" in lp else self._legacy_positions(lp)
        except (KeyError, IndexError, TypeError, ValueError):
            raise EndpointError(
                f"malformed response body from {where}: no choices[0].logprobs with tokens "
                "(OpenAI's tokens/token_logprobs/top_logprobs, or content[i].top_logprobs)"
            ) from None
        counted = (response.get("usage") or {}).get("prompt_tokens")
        if counted is not None and counted != len(ids):
            raise EndpointError(
                f"{where} counted {counted} prompt tokens but {len(ids)} were meant: positions would shift"
            )
        if not echo or len(positions) >= len(ids):  # else echo was ignored: the request is asked again without it
            self._require_finite(positions, len(ids), echo)
        return positions

    def _require_finite(self, positions: list[Position], length: int, echo: bool) -> None:
        """Raise `NonFiniteOutput` at the first position whose log-prob or top log-probs hold NaN or +inf: checked
        on arrival, so no such answer is ever cached or read. An echoed entry p is the model's prediction at
        position p - 1; the one generated entry without echo, at the prompt's last position."""
        for p, (_, value, top) in enumerate(positions):
            values = [value, *(v for _, v in top or [])]
            bad = [float(v) for v in values if isinstance(v, int | float) and not float(v) < math.inf]
            if bad:
                position = p - 1 if echo else length - 1 + p
                raise NonFiniteOutput(f"{self.served_model} at {self.transport.url}", bad[0], position, length)

    def _legacy_positions(self, lp: dict) -> list[Position]:
        """OpenAI's legacy shape: parallel lists of token names, log-probs and {name: log-prob} dicts."""
        parts = (lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])
        if not all(isinstance(part, list) and len(part) == len(parts[0]) for part in parts):
            raise EndpointError(f"malformed response body from {self.transport.url}: logprobs lists of unequal lengths")
        return [
            (
                self._token_id(str(name)),
                value,
                None if top is None else [(self._token_id(k), v) for k, v in top.items()],
            )
            for name, value, top in zip(*parts, strict=True)
        ]

    def _content_positions(self, content: list) -> list[Position]:
        """The chat-style shape (llama.cpp): [{id, token, logprob, top_logprobs: [{id, token, logprob}]}]."""

        def token(entry: dict) -> int | None:
            return entry["id"] if isinstance(entry.get("id"), int) else self._token_id(str(entry["token"]))

        return [
            (token(c), c["logprob"], [(token(t), t["logprob"]) for t in c.get("top_logprobs") or []]) for c in content
        ]

    def _send_answer(self, ids: list[int], n_answer: int) -> dict:
        """One "answer" request: per answer token its log-prob, the top-1 id and log-prob there."""
        positions = self._post(ids, echo=True, logprobs=1)
        if len(positions) < len(ids):
            raise EchoIgnored(
                f"server ignored echo: {len(positions)} token{'s' * (len(positions) != 1)} returned for a "
                f"{len(ids)}-token prompt (score without echo: --no-echo)"
            )
        if not self.text_prompts and [t for t, _, _ in positions[: len(ids)]] != ids:
            raise EndpointError(f"{self.transport.url} echoed other tokens than the prompt's: positions would shift")
        record = {"logprobs": [], "top_ids": [], "top_logprobs": []}
        for p in range(len(ids) - n_answer, len(ids)):
            _, target, top = positions[p]
            if not isinstance(target, int | float) or not top:
                raise EndpointError(f"malformed response body from {self.transport.url}: no log-probs at position {p}")
            top_id, top_lp = _top1(top)
            if top_id is None:
                if float(target) < top_lp:
                    raise EndpointError(
                        f"the top-1 token at position {p} names no unique token id; "
                        "use token-id prompts (return_tokens_as_token_ids)"
                    )
                top_id = ids[p]
            record["logprobs"].append(float(target))
            record["top_ids"].append(top_id)
            record["top_logprobs"].append(top_lp)
        return record

    def _send_top(self, ids: list[int], k: int) -> list[list]:
        """One "top" request: the k most likely next tokens after `ids`, [[id, log-prob], ...]."""
        positions = self._post(ids, echo=False, logprobs=k)
        top = positions[-1][2] if positions else None
        if not top:
            raise EndpointError(f"malformed response body from {self.transport.url}: no top log-probs")
        if any(token is None for token, _ in top):
            raise EndpointError(
                f"{self.transport.url} named a top token by a text that is no unique token: use token-id prompts"
            )
        return [[token, float(value)] for token, value in top]

    def _send_next(self, ids: list[int], _detail: None) -> list[float]:
        """One "next" request: the whole distribution after `ids`, dense [V]."""
        positions = self._post(ids, echo=False, logprobs=self.vocab_size)
        top = positions[0][2] if positions else None
        if not top:
            raise EndpointError(f"malformed response body from {self.transport.url}: no top_logprobs")
        row = [float("-inf")] * self.vocab_size
        for token, value in top:
            if token is None or not 0 <= token < self.vocab_size:
                raise EndpointError(f"{self.transport.url} returned a log-prob for a token that names no token id")
            row[token] = float(value)
        if len(top) < self.vocab_size:
            raise EndpointError(
                f"{self.transport.url} returned {len(top)} of {self.vocab_size} log-probs: the generic interface needs "
                "the whole vocabulary (vLLM: --max-logprobs); score answers with EndpointScorer.score_answers instead"
            )
        return row

    def _token_id(self, name: str) -> int | None:
        """The id a token name gives: `token_id:<id>`, else the token whose text is `name` when exactly one's is."""
        token = parse_token_key(name)
        if token is not None:
            return token
        if self._text_ids is None:
            table: dict[str, int | None] = {}
            for token in range(len(self.tokenizer)):
                piece = self.tokenizer.decode([token])
                table[piece] = None if piece in table else token
            self._text_ids = table
        return self._text_ids.get(name)


def _top1(top: list[tuple[int | None, float]]) -> tuple[int | None, float]:
    """(token id, log-prob) of the most likely entry, ties to the lower id; id None if unknown."""
    best = max(float(v) for _, v in top)
    ids = [t for t, v in top if float(v) == best]
    return (None if None in ids else min(ids)), best
