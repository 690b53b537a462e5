"""The per-query metric formulas written one query at a time, in plain Python: the reference
the vectorised evaluator (rag/eval/metrics.py over rag/eval/ranked.py) must equal bit for bit.
They are the definitions of DESIGN.md §5 as rag computed them before the evaluator was
vectorised."""

from __future__ import annotations

import math
from typing import Mapping, Sequence


def recall_at(ranking: Sequence[str], rel: Mapping[str, int], k: int) -> float:
    """|relevant ∩ top k| / |relevant|; relevant = grade > 0. 0.0 if nothing is relevant."""
    relevant = {d for d, g in rel.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def hit_at(ranking: Sequence[str], rel: Mapping[str, int], k: int) -> float:
    """1.0 if any relevant doc is in the top k, else 0.0."""
    return 1.0 if any(rel.get(d, 0) > 0 for d in ranking[:k]) else 0.0


def reciprocal_rank(ranking: Sequence[str], rel: Mapping[str, int]) -> float:
    """1 / (1-based rank of the first relevant doc), 0.0 if none is retrieved."""
    for i, d in enumerate(ranking, start=1):
        if rel.get(d, 0) > 0:
            return 1.0 / i
    return 0.0


def ndcg_at(ranking: Sequence[str], rel: Mapping[str, int], k: int) -> float:
    """nDCG@k with gain = grade and discount log2(rank + 1); 0.0 if nothing is relevant."""
    dcg = sum(rel.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranking[:k], start=1)
              if rel.get(d, 0) > 0)
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def average_precision(ranking: Sequence[str], rel: Mapping[str, int]) -> float:
    """AP (trec_eval ``map``): precision at each relevant doc's rank, summed, / |relevant|."""
    relevant = sum(1 for g in rel.values() if g > 0)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for i, d in enumerate(ranking, start=1):
        if rel.get(d, 0) > 0:
            found += 1
            total += found / i
    return total / relevant


def query_metrics(ranking: Sequence[str], rel: Mapping[str, int], *, recall_ks, ndcg_k
                  ) -> dict[str, float]:
    """Every metric of one ranking, keyed and ordered as rag.eval.metrics.query_metrics."""
    out: dict[str, float] = {}
    for k in recall_ks:
        out[f"recall_at_{k}"] = recall_at(ranking, rel, k)
        out[f"hit_at_{k}"] = hit_at(ranking, rel, k)
    out["mrr"] = reciprocal_rank(ranking, rel)
    out[f"ndcg_at_{ndcg_k}"] = ndcg_at(ranking, rel, ndcg_k)
    out["map"] = average_precision(ranking, rel)
    return out
