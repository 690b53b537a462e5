"""MAP: mean average precision, trec_eval's ``map``.

AP of one query = (sum over the relevant docs retrieved of precision at their rank) / (number
of relevant docs judged), relevant = grade > 0; 0 when nothing is relevant. The row's ``map`` is
its mean over the positive queries. Source: trec_eval ``map`` (m_map.c,
https://github.com/usnistgov/trec_eval); Manning, Raghavan & Schütze, *Introduction to
Information Retrieval* (2008), §8.4.

This file is the whole of the metric: the registry (rag/eval/measures/__init__.py) finds its
``MEASURES`` and the evaluator computes it on every query's ranking.
"""

from __future__ import annotations

import numpy as np

from rag.eval.measures import Measure
from rag.eval.ranked import Rankings


def average_precision(r: Rankings) -> np.ndarray:
    """AP of every query of ``r``: float64 (n,). The precision at each relevant doc's rank is
    (relevant docs at or above it) / rank, added in rank order, divided by the query's
    relevant count (0.0 when it has none)."""
    out = np.zeros(r.n, dtype=np.float64)
    if not r.query.size:
        return out
    hits = np.cumsum(r.relevant, dtype=np.int64)
    # the relevant docs of earlier queries (the count before each query's first entry),
    # subtracted so that the count restarts at every query
    before = np.concatenate(([0], hits[:-1]))
    starts = np.r_[True, r.query[1:] != r.query[:-1]]
    found = hits - np.maximum.accumulate(np.where(starts, before, 0))
    total = r.per_query_sum(found / r.rank, r.relevant)
    ok = r.n_relevant > 0
    out[ok] = total[ok] / r.n_relevant[ok]
    return out


MEASURES = (Measure("map", compute=average_precision,
                    source="trec_eval map (rag/eval/measures/average_precision.py)"),)
