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

from typing import Mapping, Sequence

from rag.eval.measures import Measure


def average_precision(ranking: Sequence[str], rel: Mapping[str, int]) -> float:
    """AP of one ranking (doc ids, best first) against its qrels (doc id -> grade)."""
    relevant = sum(1 for g in rel.values() if g > 0)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for i, d in enumerate(ranking, start=1):
        if rel.get(d, 0) > 0:
            found += 1
            total += found / i
    return total / relevant


MEASURES = (Measure("map", compute=average_precision,
                    source="trec_eval map (rag/eval/measures/average_precision.py)"),)
