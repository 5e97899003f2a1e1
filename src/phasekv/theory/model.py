"""The idealized compressed-attention model and its population cross-entropy.

Head ``h`` compresses chunk ``l`` of a context into

    k_{h,l} = sum_r p^K_{h,l}(r) x_{l,r},     v_{h,l} = sum_r p^V_{h,l}(r) x_{l,r},

with coefficient vectors ``p^K, p^V`` (distributions over the ``S`` positions) chosen before the
query. The query embedding ``q`` attends over chunks, ``a_{h,l} = softmax_l(gamma q·k_{h,l})``;
the head outputs are summed, ``o = sum_h sum_l a_{h,l} v_{h,l}``, and unembedded against all
``N`` embeddings, ``logits_n = beta x_n·o``. The loss is the cross-entropy of the successor token.

Coefficients are tensors ``[B, m, L, S]`` (one set per context; ``B = 1`` broadcasts one set to
every context). :func:`induction_logits` is the general path for any embeddings;
:func:`equiangular_loss` is the closed form at ``eps = 0``, where the loss does not depend on the
token identities, so it is the exact population loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from phasekv.theory.task import query_positions


def induction_logits(
    embeddings: torch.Tensor,
    contexts: torch.Tensor,
    p_key: torch.Tensor,
    p_value: torch.Tensor,
    gamma: float,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits over the vocabulary for every query of every context.

    Computed from the Gram matrix ``x_n·x_n'``: ``q·k_{h,l} = sum_r p^K_{h,l}(r) q·x_{l,r}`` and
    ``x_n·o = sum_{l,r} (sum_h a_{h,l} p^V_{h,l}(r)) x_{l,r}·x_n``.

    Args:
        embeddings: ``[N, d]``.
        contexts: token ids ``[B, L, S]`` (see :mod:`phasekv.theory.task`).
        p_key, p_value: coefficients ``[B or 1, m, L, S]``, distributions over the last axis.
        gamma: attention scale.
        beta: unembedding scale.

    Returns:
        ``(logits [B, Q, N], targets [B, Q])`` with queries ordered as in :func:`query_positions`.
    """
    n_chunks, chunk_size = contexts.shape[1:]
    chunks, positions = query_positions(n_chunks, chunk_size)
    gram = (embeddings @ embeddings.T).to(p_key.dtype)  # [N, N]: only inner products matter
    context_gram = gram[contexts]  # [B, L, S, N]: x_{l,r}·x_n
    query_tokens = contexts[:, chunks, positions]  # [B, Q]
    query_gram = gram[query_tokens[:, :, None, None], contexts[:, None]]  # q·x_{l,r}, [B, Q, L, S]
    key_scores = torch.einsum("bqls,bmls->bqml", query_gram, p_key)  # q·k_{h,l}, [B, Q, m, L]
    attention = torch.softmax(gamma * key_scores, dim=-1)
    slot_weights = torch.einsum("bqml,bmls->bqls", attention, p_value)  # weight of x_{l,r} in o
    logits = beta * torch.einsum("bqls,blsn->bqn", slot_weights, context_gram)
    return logits, contexts[:, chunks, positions + 1]


def query_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over all queries (a scalar) of :func:`induction_logits`'s ``(logits, targets)``.

    With ``contexts`` from :func:`~phasekv.theory.task.all_contexts` this is the exact population
    loss; with :func:`~phasekv.theory.task.sample_contexts` a Monte Carlo estimate of it.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def accuracy_by_position(logits: torch.Tensor, targets: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Top-1 accuracy per query position ``r = 0..S-2`` (``[S-1]``), from ``[B, Q, N]`` logits."""
    correct = (logits.argmax(dim=-1) == targets).to(torch.float64)
    return correct.reshape(len(correct), -1, chunk_size - 1).mean(dim=(0, 1))


def equiangular_loss(
    p_key: torch.Tensor, p_value: torch.Tensor, gamma: float, beta: float, n_tokens: int
) -> torch.Tensor:
    """Exact population loss at ``eps = 0`` from the coefficients alone.

    With ``x·x' = kappa + 1{x = x'}`` the query meets ``kappa + p^K_{h,l}(r)`` in its own chunk and
    ``kappa`` elsewhere, and token ``(l, r)`` of the context gets logit
    ``beta (kappa m + sum_h a_{h,l} p^V_{h,l}(r))``, the ``N - L S`` absent tokens
    ``beta kappa m``. The shared ``kappa`` cancels in both softmaxes, so ``kappa`` and the token
    identities drop out.

    Args:
        p_key, p_value: ``[..., m, L, S]`` (leading axes are independent problems).
        gamma, beta: scales.
        n_tokens: vocabulary size ``N``.

    Returns:
        ``[...]`` mean cross-entropy over the ``L (S - 1)`` equally likely queries.
    """
    n_chunks, chunk_size = p_key.shape[-2:]
    chunks, positions = query_positions(n_chunks, chunk_size)
    own_chunk = F.one_hot(chunks, n_chunks).to(p_key.dtype)  # [Q, L]
    key_weight = p_key[..., chunks, positions]  # [..., m, Q]
    attention = torch.softmax(gamma * key_weight.unsqueeze(-1) * own_chunk, dim=-1)  # [..., m, Q, L]
    evidence = torch.einsum("...mql,...mls->...qls", attention, p_value)
    evidence = beta * evidence.flatten(-2)  # [..., Q, L S]
    target = evidence[..., torch.arange(len(chunks)), chunks * chunk_size + positions + 1]
    n_absent = n_tokens - n_chunks * chunk_size
    normaliser = torch.logsumexp(evidence, dim=-1)
    if n_absent > 0:
        normaliser = torch.logaddexp(normaliser, torch.tensor(math.log(n_absent), dtype=evidence.dtype))
    return (normaliser - target).mean(dim=-1)
