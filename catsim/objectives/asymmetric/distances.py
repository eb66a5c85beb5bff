"""Distances between the rollouts of a group (pluggable: the selection functions take a matrix)."""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np

from catsim.objectives import _validate as v


def kl_divergence(p, q, eps=1e-12):
    """KL(p‖q) = Σ p (log p − log q) over the last axis, with q floored at ε: [..., V] -> [...]."""
    p = jnp.asarray(p)
    q = jnp.maximum(jnp.asarray(q), eps)
    safe_p = jnp.where(p > 0, p, 1.0)
    return jnp.sum(jnp.where(p > 0, p * (jnp.log(safe_p) - jnp.log(q)), 0.0), axis=-1)


def mean_token_distribution(logits_TxV, mask_T=None):
    """A sequence's token distribution: the mean of softmax(logits_t) over valid positions. [V]."""
    v.check_rank("logits_TxV", logits_TxV, 2)
    probs = jax.nn.softmax(logits_TxV, axis=-1)
    if mask_T is None:
        return jnp.mean(probs, axis=0)
    mask = jnp.asarray(mask_T, dtype=probs.dtype)
    return jnp.sum(probs * mask[:, None], axis=0) / jnp.maximum(jnp.sum(mask), 1.0)


def pairwise_kl(dists_NxV, eps=1e-12):
    """M[i, j] = KL(d_i ‖ d_j) for N distributions: [N, V] -> [N, N]."""
    v.check_rank("dists_NxV", dists_NxV, 2)
    d = jnp.asarray(dists_NxV)
    return jax.vmap(lambda p: jax.vmap(lambda q: kl_divergence(p, q, eps))(d))(d)


def edit_distance(a_T, b_T, len_a=None, len_b=None):
    """Levenshtein distance between two int sequences (padded to any length; jittable). [].

    Args:
      a_T, b_T: [Ta], [Tb] token ids.
      len_a, len_b: valid lengths (default: the full arrays).
    """
    v.check_rank("a_T", a_T, 1)
    v.check_rank("b_T", b_T, 1)
    a, b = jnp.asarray(a_T), jnp.asarray(b_T)
    len_a = a.shape[0] if len_a is None else len_a
    len_b = b.shape[0] if len_b is None else len_b
    cols = jnp.arange(b.shape[0] + 1)

    def row(prev, ai_i):
        ai, i = ai_i
        cost = (b != ai).astype(prev.dtype)
        # candidates without the in-row insertion: deletion (prev[j] + 1), substitution
        c = jnp.concatenate(
            [i[None].astype(prev.dtype), jnp.minimum(prev[1:] + 1, prev[:-1] + cost)]
        )
        # insertion chain: new[j] = min_k≤j (c[k] + j − k)
        new = jax.lax.cummin(c - cols, axis=0) + cols
        return new, new

    first = cols.astype(jnp.int32)
    _, rows = jax.lax.scan(row, first, (a, jnp.arange(1, a.shape[0] + 1, dtype=jnp.int32)))
    table = jnp.concatenate([first[None], rows], axis=0)
    return table[len_a, len_b]


def pairwise_edit_distance(seqs_NxT, lengths_N=None):
    """M[i, j] = edit_distance(seq_i, seq_j): [N, T] (+ lengths [N]) -> [N, N] int."""
    v.check_rank("seqs_NxT", seqs_NxT, 2)
    s = jnp.asarray(seqs_NxT)
    lens = jnp.full((s.shape[0],), s.shape[1]) if lengths_N is None else jnp.asarray(lengths_N)
    one = jax.vmap(lambda x, lx: jax.vmap(lambda y, ly: edit_distance(x, y, lx, ly))(s, lens))
    return one(s, lens)


def _ast_labels(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ["<syntax-error>"]
    labels: list[str] = []

    def visit(node):  # pre-order: node type, plus identifiers/constants that change meaning
        label = type(node).__name__
        if isinstance(node, ast.Name):
            label += f":{node.id}"
        elif isinstance(node, ast.Constant):
            label += f":{node.value!r}"
        elif isinstance(node, ast.Attribute):
            label += f":{node.attr}"
        labels.append(label)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return labels


def python_ast_edit_distance(source_a: str, source_b: str) -> int:
    """Edit distance between the pre-order AST label sequences of two Python programs (host-side).

    A cheap, deterministic proxy for the article's "syntax-tree edit distance" (§5.2): formatting
    and comments do not count, changed operators/names/constants do. Unparsable code becomes the
    single label "<syntax-error>", so broken programs cluster together.
    """
    la, lb = _ast_labels(source_a), _ast_labels(source_b)
    vocab = {label: k for k, label in enumerate(sorted(set(la) | set(lb)))}
    a = np.array([vocab[x] for x in la], dtype=np.int32)
    b = np.array([vocab[x] for x in lb], dtype=np.int32)
    return _levenshtein_np(a, b)


def _levenshtein_np(a: np.ndarray, b: np.ndarray) -> int:
    prev = np.arange(len(b) + 1)
    for i, ai in enumerate(a, start=1):
        cur = np.empty_like(prev)
        cur[0] = i
        sub = prev[:-1] + (b != ai)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, sub[j - 1])
        prev = cur
    return int(prev[-1])


def pairwise_abs_difference(values_N):
    """M[i, j] = |x_i − x_j|: [N] -> [N, N]. E.g. x = log π(a) for the categorical simulator,
    where every draw shares one distribution and a KL between draws would be 0."""
    v.check_rank("values_N", values_N, 1)
    x = jnp.asarray(values_N)
    return jnp.abs(x[:, None] - x[None, :])
