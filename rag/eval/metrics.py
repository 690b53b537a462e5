"""Ranking metrics over a run (``dict[query_id, dict[doc_id, score]]``) and qrels
(``dict[query_id, dict[doc_id, grade]]``), exactly as DESIGN.md §5 defines them.

* One ranking function for every metric: :func:`rank` sorts by (-score, doc id). With
  ``ties="pessimistic"`` (``eval.ties``) docs of equal score are ordered by ascending grade
  first (non-relevant before relevant, then doc id): a relevant doc tied with others gets the
  worst rank among its ties, as CoSQA's reference figures (and trec_eval-style pessimistic
  tie handling) count it. MRR, Recall@k, hit@k, nDCG@k and the first relevant rank all read
  that one ranking, so they stay consistent.
* Recall@k = |relevant ∩ top k| / |relevant| (trec_eval ``recall_k``; not capped at k).
* hit@k = 1 if any relevant doc is in the top k.
* MRR: 1 / rank of the first relevant doc, 0 if none (trec_eval ``recip_rank``).
* nDCG@k: sum of grade / log2(rank + 1) over the top k, divided by the same sum over the
  ideal ordering of the judged grades (Järvelin & Kekäläinen, "Cumulated gain-based
  evaluation of IR techniques", TOIS 2002; trec_eval ``ndcg_cut_k``).
* A query with an empty run scores 0 on every metric (trec_eval ``-c``).

MLflow forbids ``@`` in metric keys, so keys are ``recall_at_8``, ``hit_at_8``, ``mrr``,
``ndcg_at_10`` everywhere (MLflow, reports, code).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

#: ``eval.ties``: how docs with equal scores are ordered before scoring.
TIES = ("doc_id", "pessimistic")


def rank(scores: Mapping[str, float], rel: Mapping[str, int] | None = None, *,
         ties: str = "doc_id") -> list[str]:
    """Doc ids best first, by descending score.

    Args:
        scores: doc id -> score.
        rel: doc id -> grade; needed for ``ties="pessimistic"`` only.
        ties: ``doc_id``: equal scores by ascending doc id (a relevant doc may win a tie).
            ``pessimistic``: equal scores by ascending grade, then doc id, so every relevant
            doc is ranked after every non-relevant doc of the same score (and a higher grade
            after a lower one: the order that minimises every metric below).

    Raises:
        ValueError: unknown ``ties``.
    """
    if ties == "doc_id":
        return [d for d, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]
    if ties == "pessimistic":
        rel = rel or {}
        return [d for d, _ in sorted(scores.items(),
                                     key=lambda kv: (-kv[1], max(rel.get(kv[0], 0), 0), kv[0]))]
    raise ValueError(f"eval.ties must be one of {list(TIES)}, got {ties!r}")


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


def first_relevant_rank(ranking: Sequence[str], rel: Mapping[str, int]) -> int | None:
    """1-based rank of the first relevant doc, None if none is retrieved."""
    for i, d in enumerate(ranking, start=1):
        if rel.get(d, 0) > 0:
            return i
    return None


def ndcg_at(ranking: Sequence[str], rel: Mapping[str, int], k: int) -> float:
    """nDCG@k with gain = grade and discount log2(rank + 1); 0.0 if nothing is relevant."""
    dcg = sum(rel.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranking[:k], start=1)
              if rel.get(d, 0) > 0)
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def query_metrics(scores: Mapping[str, float], rel: Mapping[str, int], *,
                  recall_ks: Iterable[int] = (1, 3, 5, 8, 10, 20, 40),
                  ndcg_k: int = 10, ties: str = "doc_id") -> dict[str, float]:
    """Every ranking metric of one query, keyed ``recall_at_k``, ``hit_at_k``, ``mrr``,
    ``ndcg_at_k``, then every computed measure of the registry (rag/eval/measures/: ``map``),
    on the ranking :func:`rank` gives with ``ties``."""
    from rag.eval.measures import computed

    ranking = rank(scores, rel, ties=ties)
    out: dict[str, float] = {}
    for k in recall_ks:
        out[f"recall_at_{k}"] = recall_at(ranking, rel, k)
        out[f"hit_at_{k}"] = hit_at(ranking, rel, k)
    out["mrr"] = reciprocal_rank(ranking, rel)
    out[f"ndcg_at_{ndcg_k}"] = ndcg_at(ranking, rel, ndcg_k)
    for measure in computed():
        out.update(measure.values(ranking, rel))
    return out


def evaluate_run(run: Run, qrels: Qrels, *, recall_ks: Iterable[int] = (1, 3, 5, 8, 10, 20, 40),
                 ndcg_k: int = 10, ties: str = "doc_id") -> dict[str, dict[str, float]]:
    """Per-query metrics for every query in ``qrels``; a query missing from ``run`` scores 0."""
    ks = tuple(recall_ks)
    return {qid: query_metrics(run.get(qid, {}), rel, recall_ks=ks, ndcg_k=ndcg_k, ties=ties)
            for qid, rel in qrels.items()}


def mean_metrics(per_query: Mapping[str, Mapping[str, float]],
                 query_ids: Iterable[str] | None = None) -> dict[str, float]:
    """Arithmetic mean of each metric over ``query_ids`` (default: all); {} if there are none."""
    ids = list(query_ids) if query_ids is not None else list(per_query)
    if not ids:
        return {}
    keys = per_query[ids[0]].keys()
    return {k: float(np.mean([per_query[q][k] for q in ids])) for k in keys}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation (numpy's default); NaN if empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")
