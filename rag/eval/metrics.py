"""Ranking metrics over a run (``dict[query_id, dict[doc_id, score]]``) and qrels
(``dict[query_id, dict[doc_id, grade]]``), exactly as DESIGN.md §5 defines them.

* One ranking for every metric: :func:`rank` (one query) and :func:`rag.eval.ranked.rank_all`
  (a whole run, the order the metrics are computed on) sort by (-score, doc id). With
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

The per-query values are computed for the whole run at once (:mod:`rag.eval.ranked`), bit-identical
to the per-query formulas above.

MLflow forbids ``@`` in metric keys, so keys are ``recall_at_8``, ``hit_at_8``, ``mrr``,
``ndcg_at_10`` everywhere (MLflow, reports, code).
"""

from __future__ import annotations

import operator
from typing import Iterable, Mapping, Sequence

import numpy as np

from rag.eval.ranked import TIES, Qrels, Rankings, Run, check_ties, rank_all

__all__ = ["TIES", "Qrels", "Run", "evaluate_run", "first_relevant_rank", "mean_metrics",
           "percentile", "query_metrics", "rank", "ranking_metrics"]


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
    check_ties(ties)
    if ties == "doc_id":
        return [d for d, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]
    rel = rel or {}
    return [d for d, _ in sorted(scores.items(),
                                 key=lambda kv: (-kv[1], max(rel.get(kv[0], 0), 0), kv[0]))]


def first_relevant_rank(ranking: Sequence[str], rel: Mapping[str, int]) -> int | None:
    """1-based rank of the first relevant doc, None if none is retrieved."""
    for i, d in enumerate(ranking, start=1):
        if rel.get(d, 0) > 0:
            return i
    return None


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den where den > 0, else 0.0 (float64)."""
    out = np.zeros(len(num), dtype=np.float64)
    ok = den > 0
    out[ok] = num[ok] / den[ok]
    return out


def ranking_metrics(r: Rankings, *, recall_ks: Iterable[int], ndcg_k: int
                    ) -> dict[str, np.ndarray]:
    """The built-in metrics of every query of ``r``: name -> float64 (n,), in the order
    ``recall_at_k``, ``hit_at_k`` (each k), ``mrr``, ``ndcg_at_<ndcg_k>``, then every computed
    measure of the registry (rag/eval/measures/). Formulas as the module docstring."""
    from rag.eval.measures import computed

    out: dict[str, np.ndarray] = {}
    first = r.first_rank(r.relevant)
    for k in recall_ks:
        found = r.per_query_sum(r.relevant.astype(np.float64), r.relevant & (r.rank <= k))
        out[f"recall_at_{k}"] = _ratio(found, r.n_relevant)
        out[f"hit_at_{k}"] = ((first > 0) & (first <= k)).astype(np.float64)
    out["mrr"] = _ratio(np.ones(r.n), first)
    dcg = r.per_query_sum(r.gain / r.discount(), r.relevant & (r.rank <= ndcg_k))
    idcg = r.per_query_sum(r.ideal_gain / r.discount(ideal=True), r.ideal_rank <= ndcg_k,
                           ideal=True)
    out[f"ndcg_at_{ndcg_k}"] = _ratio(dcg, idcg)
    for measure in computed():
        out.update(measure.values(r))
    return out


def evaluate_run(run: Run, qrels: Qrels, *, recall_ks: Iterable[int] = (1, 3, 5, 8, 10, 20, 40),
                 ndcg_k: int = 10, ties: str = "doc_id") -> dict[str, dict[str, float]]:
    """Per-query metrics for every query in ``qrels`` (keys as :func:`ranking_metrics`); a
    query missing from ``run`` scores 0.

    Raises:
        ValueError: unknown ``ties``.
    """
    qids, r = rank_all(run, qrels, ties=ties)
    cols = ranking_metrics(r, recall_ks=tuple(recall_ks), ndcg_k=ndcg_k)
    names = list(cols)  # never empty: mrr and ndcg_at_k are always computed
    rows = zip(*(c.tolist() for c in cols.values()))
    return {q: dict(zip(names, row)) for q, row in zip(qids, rows)}


def query_metrics(scores: Mapping[str, float], rel: Mapping[str, int], *,
                  recall_ks: Iterable[int] = (1, 3, 5, 8, 10, 20, 40),
                  ndcg_k: int = 10, ties: str = "doc_id") -> dict[str, float]:
    """Every ranking metric of one query (``scores``: doc id -> score; ``rel``: doc id ->
    grade), as :func:`evaluate_run` computes it for a whole run."""
    return evaluate_run({"q": scores}, {"q": rel}, recall_ks=recall_ks, ndcg_k=ndcg_k,
                        ties=ties)["q"]


def mean_metrics(per_query: Mapping[str, Mapping[str, float]],
                 query_ids: Iterable[str] | None = None) -> dict[str, float]:
    """Arithmetic mean of each metric over ``query_ids`` (default: all); {} if there are none."""
    ids = list(query_ids) if query_ids is not None else list(per_query)
    if not ids:
        return {}
    keys = list(per_query[ids[0]])
    if len(keys) == 1:
        return {keys[0]: float(np.mean([per_query[q][keys[0]] for q in ids]))}
    row = operator.itemgetter(*keys)
    table = np.array([row(per_query[q]) for q in ids], dtype=np.float64)
    # each column as its own contiguous array: np.mean's pairwise sum, as over a list
    return {k: float(np.ascontiguousarray(table[:, j]).mean()) for j, k in enumerate(keys)}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation (numpy's default); NaN if empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")
