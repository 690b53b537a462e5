"""The BM25 channel: Okapi BM25 over the code-aware tokens, with two interchangeable backends.

* ``bm25s`` (default): sparse-matrix BM25, method ``robertson``
  (https://github.com/xhluca/bm25s).
* ``rank_bm25``: ``BM25Okapi`` from rank-bm25, the reference implementation
  (https://github.com/dorianbrown/rank_bm25).

Scoring follows Robertson et al., "Okapi at TREC-3" (1994):
``score(q, d) = sum_t idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))``
with ``idf(t) = max(0, ln((N - n_t + 0.5) / (n_t + 0.5)))``.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from rag.index.tokenize import tokenize


class BM25Scorer(Protocol):
    """Scores every chunk for one tokenized query; returns float array of shape (n_chunks,)."""

    def scores(self, query_tokens: list[str]) -> np.ndarray: ...


class Bm25sScorer:
    """bm25s backend (method ``robertson``).

    bm25s leaves the constant ``(k1 + 1)`` out of the term-frequency numerator; it is put back
    here so both backends report the same Okapi score (rank_bm25 keeps it), not just the same
    ranking.
    """

    def __init__(self, corpus_tokens: Sequence[list[str]], *, k1: float, b: float) -> None:
        import logging

        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every build at DEBUG
        self._n = len(corpus_tokens)
        self._model = bm25s.BM25(method="robertson", k1=k1, b=b)
        self._model.index([list(t) for t in corpus_tokens], show_progress=False)
        self._vocab = self._model.vocab_dict
        self._scale = k1 + 1.0

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every chunk, shape (n_chunks,), float32; tokens not in the vocabulary score 0."""
        known = [t for t in query_tokens if t in self._vocab]
        if not known:
            return np.zeros(self._n, dtype=np.float32)
        return np.asarray(self._model.get_scores(known), dtype=np.float32) * np.float32(self._scale)


class RankBM25Scorer:
    """rank-bm25 ``BM25Okapi`` backend (the reference).

    ``epsilon=0``: a term in more than half of the chunks has a negative Robertson IDF; both
    backends floor it at 0 (bm25s clamps the IDF's argument at 1; BM25Okapi's default would
    instead substitute 0.25 x the mean IDF, which ranks differently).
    """

    def __init__(self, corpus_tokens: Sequence[list[str]], *, k1: float, b: float) -> None:
        from rank_bm25 import BM25Okapi

        self._n = len(corpus_tokens)
        self._model = BM25Okapi([list(t) for t in corpus_tokens], k1=k1, b=b, epsilon=0.0)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every chunk, shape (n_chunks,), float64."""
        if not query_tokens:
            return np.zeros(self._n, dtype=np.float64)
        return np.asarray(self._model.get_scores(query_tokens), dtype=np.float64)


def build_bm25(texts: Sequence[str], *, backend: str = "bm25s", k1: float = 1.5,
               b: float = 0.75) -> "BM25Channel":
    """Tokenize ``texts`` (one per chunk) and build the channel.

    Raises:
        ValueError: unknown ``backend``.
    """
    corpus_tokens = [tokenize(t) for t in texts]
    if backend == "bm25s":
        scorer: BM25Scorer = Bm25sScorer(corpus_tokens, k1=k1, b=b)
    elif backend == "rank_bm25":
        scorer = RankBM25Scorer(corpus_tokens, k1=k1, b=b)
    else:
        raise ValueError(f"unknown bm25.backend {backend!r}; expected 'bm25s' or 'rank_bm25'")
    return BM25Channel(scorer, backend=backend, n_chunks=len(texts))


class BM25Channel:
    """Ranks chunks for a query by BM25; chunks with score 0 are not lexical hits."""

    def __init__(self, scorer: BM25Scorer, *, backend: str, n_chunks: int) -> None:
        self.scorer = scorer
        self.backend = backend
        self.n_chunks = n_chunks

    def score_all(self, query: str) -> np.ndarray:
        """BM25 score of every chunk for ``query``, shape (n_chunks,)."""
        return self.scorer.scores(tokenize(query))

    def search(self, query: str, depth: int) -> list[tuple[int, float]]:
        """Top ``depth`` (chunk index, score) pairs, best first, ties by chunk index.

        Only chunks with a positive score are returned: an all-zero score vector (no query
        token occurs in the corpus) means "no lexical hit" and gives an empty list, never an
        arbitrary order.
        """
        scores = self.scorer.scores(tokenize(query))
        return top_positive(scores, depth)


def top_positive(scores: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """Indices of the ``depth`` largest strictly positive scores, ordered by (-score, index)."""
    pos = np.flatnonzero(scores > 0)
    if pos.size == 0:
        return []
    order = np.lexsort((pos, -scores[pos].astype(np.float64)))
    chosen = pos[order[:depth]]
    return [(int(i), float(scores[i])) for i in chosen]
