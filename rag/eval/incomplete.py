"""Metrics robust to unjudged units, beside ``judged_at_k``: a system that retrieves code no
one judged is not scored as if that code were wrong.

For one positive query, each ranked unit (:func:`rag.eval.evaluate.collapse_units`, in the
order the ranking metrics rank them) is *relevant* (its grade), *judged not relevant* (it
hits a ``not_relevant`` label, or it is the rest of a file whose relevant label the labeller
narrowed to a symbol or lines) or *unjudged*.

* **bpref** (Buckley & Voorhees, "Retrieval evaluation with incomplete information", SIGIR
  2004; trec_eval ``bpref``, m_bpref.c): with R judged relevant units and N judged
  non-relevant ones, ``bpref = (1/R) * sum over the retrieved relevant units r of
  (1 - min(n_r, R) / min(R, N))``, n_r the judged non-relevant units ranked above r; each
  relevant unit adds 1 when N is 0. Unjudged units are ignored. N counts the query's
  ``not_relevant`` labels plus the retrieved rest-of-file units of narrowed paths (judged by
  the narrowing, as ``rag golden pool`` counts them).
* **condensed lists** (Sakai, "Alternatives to bpref", SIGIR 2007): the ranking with its
  unjudged units removed, scored as usual: ``condensed_ndcg_at_10`` (nDCG@10 over the
  condensed list, the ideal over the judged grades, as rag/eval/metrics.py) and
  ``condensed_mrr``.
"""

from __future__ import annotations

import math
from typing import Sequence

#: the per-query metric names this module adds (beside ``judged_at_<k>``)
CONDENSED_NDCG_K = 10
METRICS = ("bpref", f"condensed_ndcg_at_{CONDENSED_NDCG_K}", "condensed_mrr")


def bpref(judgements: Sequence[int | None], n_relevant: int, n_nonrelevant: int) -> float:
    """bpref of one ranking (module docstring).

    Args:
        judgements: per ranked unit, best first: its grade (> 0: relevant), 0 (judged not
            relevant) or None (unjudged).
        n_relevant: R, the query's judged relevant units (retrieved or not).
        n_nonrelevant: N, its judged non-relevant units.

    Returns:
        A value in [0, 1]; 0.0 when R is 0.
    """
    if n_relevant <= 0:
        return 0.0
    total, nonrel_above = 0.0, 0
    for j in judgements:  # trec_eval m_bpref.c, line for line
        if j is None:
            continue
        if j > 0:
            total += 1.0 - min(nonrel_above, n_relevant) / min(n_relevant, n_nonrelevant) \
                if nonrel_above > 0 else 1.0
        else:
            nonrel_above += 1
    return total / n_relevant


def condensed(judgements: Sequence[int | None]) -> list[int]:
    """The judged units' grades in rank order (0 for judged not relevant)."""
    return [j for j in judgements if j is not None]


def ndcg(grades: Sequence[int], ideal: Sequence[int], k: int) -> float:
    """nDCG@k of graded ranks (rag/eval/metrics.py's formula: sum of grade / log2(rank+1)
    over the top k, over the same sum for ``ideal`` sorted best first); 0.0 with no ideal."""
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(grades[:k]) if g > 0)
    best = sorted((g for g in ideal if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(best))
    return dcg / idcg if idcg > 0 else 0.0


def reciprocal_rank(grades: Sequence[int]) -> float:
    """1 / the rank of the first relevant grade, 0.0 when none."""
    return next((1.0 / i for i, g in enumerate(grades, 1) if g > 0), 0.0)


def incomplete_metrics(judgements: Sequence[int | None], relevant_grades: Sequence[int],
                       n_nonrelevant: int) -> dict[str, float]:
    """:data:`METRICS` of one ranking.

    Args:
        judgements: as :func:`bpref`.
        relevant_grades: the grade of every judged relevant unit of the query.
        n_nonrelevant: N, as :func:`bpref`.
    """
    c = condensed(judgements)
    return {"bpref": bpref(judgements, len(relevant_grades), n_nonrelevant),
            f"condensed_ndcg_at_{CONDENSED_NDCG_K}": ndcg(c, relevant_grades, CONDENSED_NDCG_K),
            "condensed_mrr": reciprocal_rank(c)}
