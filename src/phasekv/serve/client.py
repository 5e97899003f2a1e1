"""`EndpointScorer`: the `Scorer` interface over an OpenAI-compatible `/v1/completions` server.

Two request kinds, each one prompt per request, `max_tokens` 1, `temperature` 0:

- "answer" (`score_answers`, exact and cheap): the prompt is context + answer with `echo` and
  `logprobs` 1, so the server returns each answer token's own log-prob and the top-1 token at its
  position. An answer is correct when every answer token is that top-1 (the full-vocabulary
  argmax). Works with any server that supports `echo` + `logprobs` (vLLM, SGLang, this package's).
- "next" (`logprobs`, the generic interface): one request per prefix asks for `logprobs` = the
  whole vocabulary at the next position and rebuilds the dense distribution; servers that cap
  top-logprobs (vLLM unless `--max-logprobs` is raised) refuse, and the error says so.

Prompts go as token ids; with `text_prompts=True` they go as text that is verified to
re-tokenise to exactly the same ids (else EndpointError), and the server's prompt token count is
checked. Token ids in answers are read from `token_id:<id>` keys (`return_tokens_as_token_ids`);
text keys are mapped back through the tokenizer only where the mapping is unique. Requests run
`concurrency` at a time; every answer is appended to the results cache at once (see `cache`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch

from ..scoring import AnswerScores, ScorerError
from .cache import ResultCache, request_key
from .errors import EndpointError
from .local import load_tokenizer, local_stride, text_prompt
from .transport import Transport
from .wire import API_KEY_VARIABLES, COMPLETIONS_PATH, MODELS_PATH, parse_token_key


def api_key_from_environment() -> str | None:
    """The first non-empty of $PHASEKV_API_KEY, $OPENAI_API_KEY, or None."""
    return next((os.environ[name] for name in API_KEY_VARIABLES if os.environ.get(name)), None)


class EndpointScorer:
    """Scores prompts through a completions server (see the module docstring).

    `tokenizer_dir` holds the served model's tokenizer (a phasekv checkpoint or an HF directory);
    its config.json, when present, gives the compression stride unless the server reports one.
    `cache` is a JSONL path (or a ResultCache; None keeps answers in memory only).
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
        cache: str | Path | ResultCache | None = None,
        text_prompts: bool = False,
        api_key: str | None = None,
    ):
        if concurrency < 1:
            raise ScorerError(f"concurrency must be >= 1, got {concurrency}")
        self.tokenizer = load_tokenizer(tokenizer_dir)
        key = api_key if api_key is not None else api_key_from_environment()
        self.transport = Transport(url, timeout=timeout, retries=retries, backoff=backoff, api_key=key)
        self.served_model = served_model
        self.tokenizer_dir = str(tokenizer_dir)
        self.concurrency = self.batch_size = concurrency
        self.cache = cache if isinstance(cache, ResultCache) else ResultCache(cache)
        self.text_prompts = text_prompts
        self.card = self._model_card()
        extension = self.card.get("phasekv") or {}
        self.vocab_size = int(extension.get("vocab_size") or len(self.tokenizer))
        if "compression_stride" in extension:
            self.compression_stride = extension["compression_stride"]
        else:
            self.compression_stride = local_stride(tokenizer_dir)
        self._text_ids: dict[str, int | None] | None = None

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

    def describe(self) -> dict:
        """JSON-ready record: endpoint, served model, tokenizer, prompt form, the server's model card."""
        return {
            "kind": "endpoint",
            "endpoint": self.transport.url,
            "served_model": self.served_model,
            "tokenizer": self.tokenizer_dir,
            "prompts": "text (round trip verified token-exactly)" if self.text_prompts else "token ids",
            "compression_stride": self.compression_stride,
            "vocab_size": self.vocab_size,
            "concurrency": self.concurrency,
            "timeout_s": self.transport.timeout,
            "retries": self.transport.retries,
            "cache": None if self.cache.path is None else str(self.cache.path),
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
        records = self._answered("answer", requests, self._send_answer, progress)
        logprob, correct, first = (
            np.zeros(len(records)),
            np.zeros(len(records), dtype=bool),
            np.zeros(len(records), dtype=np.int64),
        )
        for i, (record, answer) in enumerate(zip(records, answers, strict=True)):
            logprob[i] = torch.tensor(record["logprobs"], dtype=torch.float32).sum().double().item()
            correct[i] = record["top_ids"] == list(answer)
            first[i] = record["top_ids"][0]
        return AnswerScores(logprob=logprob, correct=correct, first_argmax=first)

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
        at a time, each answer cached as it arrives). On a failure the requests not yet started are
        cancelled, the answers of those in flight are still cached, and the first failure is raised."""
        keys = [request_key(self.served_model, kind, ids, detail) for ids, detail in requests]
        todo = {key: request for key, request in zip(keys, requests, strict=True) if self.cache.get(key) is None}
        if progress is not None and len(set(keys)) > len(todo):
            progress(len(set(keys)) - len(todo))  # answered from the cache
        errors: list[Exception] = []
        with ThreadPoolExecutor(self.concurrency) as pool:
            futures = {pool.submit(send, *request): key for key, request in todo.items()}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except CancelledError:
                    continue
                except Exception as err:
                    if not errors:
                        for other in futures:
                            other.cancel()
                    errors.append(err)
                    continue
                self.cache.put(futures[future], kind, result)
                if progress is not None:
                    progress(1)
        if errors:
            raise errors[0]
        return [self.cache.get(key) for key in keys]

    def _post(self, ids: list[int], *, echo: bool, logprobs: int) -> tuple[dict, dict]:
        """Send one prompt; the choice's `logprobs` object and the whole body, checked."""
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
            parts = (lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"malformed response body from {where}: no choices[0].logprobs with tokens") from None
        if not all(isinstance(part, list) and len(part) == len(parts[0]) for part in parts):
            raise EndpointError(f"malformed response body from {where}: logprobs lists of unequal lengths")
        counted = (response.get("usage") or {}).get("prompt_tokens")
        if counted is not None and counted != len(ids):
            raise EndpointError(
                f"{where} counted {counted} prompt tokens but {len(ids)} were meant: positions would shift"
            )
        return lp, response

    def _send_answer(self, ids: list[int], n_answer: int) -> dict:
        """One "answer" request: per answer token its log-prob, the top-1 id and log-prob there."""
        lp, _ = self._post(ids, echo=True, logprobs=1)
        if len(lp["tokens"]) < len(ids):
            raise EndpointError(f"{self.transport.url} did not echo the prompt (echo + logprobs are needed)")
        echoed = [parse_token_key(str(t)) for t in lp["tokens"][: len(ids)]]
        if not self.text_prompts and echoed != ids:
            raise EndpointError(f"{self.transport.url} echoed other tokens than the prompt's: positions would shift")
        record = {"logprobs": [], "top_ids": [], "top_logprobs": []}
        for p in range(len(ids) - n_answer, len(ids)):
            target, top = lp["token_logprobs"][p], lp["top_logprobs"][p]
            if not isinstance(target, int | float) or not isinstance(top, dict) or not top:
                raise EndpointError(f"malformed response body from {self.transport.url}: no log-probs at position {p}")
            top_id, top_lp = self._top1(top)
            if top_id is None:
                if float(target) < top_lp:
                    raise EndpointError(
                        f"the top-1 token {next(iter(top))!r} at position {p} names no unique token id; "
                        "use token-id prompts (return_tokens_as_token_ids)"
                    )
                top_id = ids[p]
            record["logprobs"].append(float(target))
            record["top_ids"].append(top_id)
            record["top_logprobs"].append(top_lp)
        return record

    def _send_next(self, ids: list[int], _detail: None) -> list[float]:
        """One "next" request: the whole distribution after `ids`, dense [V]."""
        lp, _ = self._post(ids, echo=False, logprobs=self.vocab_size)
        top = lp["top_logprobs"][0] if lp["top_logprobs"] else None
        if not isinstance(top, dict):
            raise EndpointError(f"malformed response body from {self.transport.url}: no top_logprobs")
        row = [float("-inf")] * self.vocab_size
        for key, value in top.items():
            token = parse_token_key(key)
            token = self._text_id(key) if token is None else token
            if token is None or not 0 <= token < self.vocab_size:
                raise EndpointError(f"{self.transport.url} returned a log-prob for {key!r}, which names no token id")
            row[token] = float(value)
        if len(top) < self.vocab_size:
            raise EndpointError(
                f"{self.transport.url} returned {len(top)} of {self.vocab_size} log-probs: the generic interface needs "
                "the whole vocabulary (vLLM: --max-logprobs); score answers with EndpointScorer.score_answers instead"
            )
        return row

    def _top1(self, top: dict) -> tuple[int | None, float]:
        """(token id, log-prob) of the most likely entry, ties to the lower id; id None if unknown."""
        entries = [
            (float(v), parse_token_key(k) if parse_token_key(k) is not None else self._text_id(k))
            for k, v in top.items()
        ]
        best = max(v for v, _ in entries)
        ids = [t for v, t in entries if v == best]
        return (None if None in ids else min(ids)), best

    def _text_id(self, text: str) -> int | None:
        """The token whose text is `text` when exactly one token's is, else None."""
        if self._text_ids is None:
            table: dict[str, int | None] = {}
            for token in range(len(self.tokenizer)):
                piece = self.tokenizer.decode([token])
                table[piece] = None if piece in table else token
            self._text_ids = table
        return self._text_ids.get(text)
