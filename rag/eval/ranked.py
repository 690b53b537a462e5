"""Every query's ranking at once: the flat arrays the ranking metrics are computed on.

:func:`rank_all` sorts each query's run exactly as :func:`rag.eval.metrics.rank` does (by
descending score; equal scores by doc id, or with ``ties="pessimistic"`` by ascending grade
first) and lays the result out as one entry per (query, retrieved doc), grouped by query and
best first, beside each query's judged grades. A metric over a whole run is then a handful of
numpy operations (:meth:`Rankings.per_query_sum`, :meth:`Rankings.first_rank`), which is what
makes every metric for 10,000 queries cost no more than trec_eval (``python -m rag.bench
--sections eval``).

The arithmetic is that of the per-query definitions, term by term and in rank order (sums
accumulate sequentially with ``np.bincount``, discounts are ``math.log2`` values), so every
value is bit-identical to summing the same terms one query at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import repeat
from typing import Mapping

import numpy as np

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

#: ``eval.ties``: how docs with equal scores are ordered before scoring.
TIES = ("doc_id", "pessimistic")


def check_ties(ties: str) -> None:
    """Raises ValueError naming ``eval.ties`` when ``ties`` is not one of :data:`TIES`."""
    if ties not in TIES:
        raise ValueError(f"eval.ties must be one of {list(TIES)}, got {ties!r}")


@dataclass(frozen=True)
class Rankings:
    """The rankings of ``n`` queries (in qrels order), flattened.

    Per retrieved entry (length E, grouped by query, best first):
        query: int64 query index (0..n-1), non-decreasing.
        rank: int64 1-based rank within its query.
        gain: float64 grade of the doc if it is relevant (grade > 0), else 0.
        relevant: bool, grade > 0.

    Per judged relevant doc (length J, grouped by query, highest grade first): the ideal
    ranking, ``ideal_query``, ``ideal_rank`` (1-based) and ``ideal_gain``.

    Per query (length n): ``n_relevant`` (int64, docs judged with grade > 0).
    """

    n: int
    query: np.ndarray
    rank: np.ndarray
    gain: np.ndarray
    relevant: np.ndarray
    ideal_query: np.ndarray
    ideal_rank: np.ndarray
    ideal_gain: np.ndarray
    n_relevant: np.ndarray

    def per_query_sum(self, values: np.ndarray, where: np.ndarray | None = None, *,
                      ideal: bool = False) -> np.ndarray:
        """float64 (n,): the sum of ``values`` over each query's entries (those ``where`` is
        true), added in rank order; 0.0 for a query with none. ``ideal``: over the ideal
        ranking's entries instead of the retrieved ones."""
        q = self.ideal_query if ideal else self.query
        if where is not None:
            q, values = q[where], values[where]
        return np.bincount(q, weights=values, minlength=self.n).astype(np.float64, copy=False)

    def first_rank(self, where: np.ndarray) -> np.ndarray:
        """int64 (n,): each query's smallest ``rank`` among the entries ``where`` is true, 0
        when there is none."""
        out = np.zeros(self.n, dtype=np.int64)
        q, r = self.query[where], self.rank[where]
        if q.size:  # entries are in (query, rank) order: a query's first entry is its best
            first = np.r_[True, q[1:] != q[:-1]]
            out[q[first]] = r[first]
        return out

    def discount(self, ideal: bool = False) -> np.ndarray:
        """float64: log2(rank + 1) of each entry (``math.log2``, as the per-query formula)."""
        r = self.ideal_rank if ideal else self.rank
        top = int(r.max()) if r.size else 0
        table = np.array([math.log2(i + 1) for i in range(top + 1)], dtype=np.float64)
        return table[r]


def _order_within_groups(query: np.ndarray, neg_score: np.ndarray, middle: np.ndarray | None,
                         docs: list[str]) -> np.ndarray:
    """The permutation sorting entries by (query, -score[, middle], doc id)."""
    keys = (neg_score, query) if middle is None else (middle, neg_score, query)
    order = np.lexsort(keys)
    q, s = query[order], neg_score[order]
    same = (q[1:] == q[:-1]) & (s[1:] == s[:-1])
    if not same.any():  # every score distinct within its query: doc ids never decide
        return order
    # doc ids decide only inside groups of equal (query, score): rank those ids, the rest 0
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    idx = order[tied]
    names = [docs[i] for i in idx.tolist()]
    code = np.zeros(len(query), dtype=np.int64)
    code[idx[sorted(range(len(names)), key=names.__getitem__)]] = np.arange(1, len(names) + 1)
    keys = (code, *keys)
    return np.lexsort(keys)


def rank_all(run: Run, qrels: Qrels, *, ties: str = "doc_id") -> tuple[list[str], Rankings]:
    """(query ids in qrels order, their :class:`Rankings`); a query missing from ``run`` has
    no entries (it scores 0 on every metric, trec_eval ``-c``); run queries not in ``qrels``
    are ignored.

    Raises:
        ValueError: unknown ``ties``.
    """
    check_ties(ties)
    qids = list(qrels)
    n = len(qids)
    docs: list[str] = []
    scores: list[float] = []
    grades: list[int] = []
    lens = np.zeros(n, dtype=np.int64)
    judged: list[int] = []
    jlens = np.zeros(n, dtype=np.int64)
    for i, q in enumerate(qids):
        rel = qrels[q]
        s = run.get(q)
        if s:
            docs.extend(s)
            scores.extend(s.values())
            grades.extend(map(rel.get, s, repeat(0)))
            lens[i] = len(s)
        judged.extend(rel.values())
        jlens[i] = len(rel)
    query = np.repeat(np.arange(n, dtype=np.int64), lens)
    grade = np.array(grades, dtype=np.int64)
    neg_score = -np.array(scores, dtype=np.float64)
    middle = np.maximum(grade, 0) if ties == "pessimistic" else None
    order = _order_within_groups(query, neg_score, middle, docs)
    grade = grade[order]
    starts = np.repeat(np.cumsum(lens) - lens, lens)
    rank = np.arange(len(order), dtype=np.int64) - starts + 1
    relevant = grade > 0
    jq = np.repeat(np.arange(n, dtype=np.int64), jlens)
    jg = np.array(judged, dtype=np.int64)
    pos = jg > 0
    jq, jg = jq[pos], jg[pos]
    iorder = np.lexsort((-jg, jq))
    jq, jg = jq[iorder], jg[iorder]
    n_relevant = np.bincount(jq, minlength=n).astype(np.int64)
    jstarts = np.repeat(np.cumsum(n_relevant) - n_relevant, n_relevant)
    return qids, Rankings(
        n=n, query=query, rank=rank, gain=np.where(relevant, grade, 0).astype(np.float64),
        relevant=relevant, ideal_query=jq,
        ideal_rank=np.arange(len(jq), dtype=np.int64) - jstarts + 1,
        ideal_gain=jg.astype(np.float64), n_relevant=n_relevant)
