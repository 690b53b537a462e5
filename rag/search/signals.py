"""Abstention signals: per-query numbers that say how likely the corpus holds an answer.

Each signal is larger when an answer is more likely, so one rule fits all: a query is
flagged (abstained on) when its signal is *below* a threshold. The same function computes
them at evaluation time (to calibrate and to fit the learned gate) and at search time (to
apply the learned gate), so a gate never sees features computed another way.

Registered signals (:data:`SIGNALS`):

* ``top_dense`` — the best dense cosine over the corpus (the seeds' signal).
* ``dense_margin`` — top-1 cosine minus the best cosine of a chunk from *another* file
  (several chunks of one file do not make a margin).
* ``bm25_top_z`` — the top BM25 score standardised against the query's own matching chunks
  among its top ``BM25_POOL``: ``(s_1 - mean) / std`` over the positive scores (0 when fewer
  than two chunks match). Raw BM25 scores are not comparable across queries (they grow with
  query length and IDF); their spread within one query is.
* ``channel_agreement`` — |files in dense top 10 ∩ files in BM25 top 10| / 10.
* ``top_rerank`` — the best rerank score (only when a reranker ran; in its own units).
* ``term_coverage`` — the IDF-weighted share of the query's terms the corpus holds
  (rag/search/term_coverage.py; needs the BM25 index's vocabulary).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

SIGNALS: tuple[str, ...] = ("top_dense", "dense_margin", "bm25_top_z", "channel_agreement",
                            "top_rerank", "term_coverage")
#: the signals a dense channel measures, and those that need the BM25 index
DENSE_SIGNALS = ("top_dense", "dense_margin", "channel_agreement")
LEXICAL_SIGNALS = ("bm25_top_z", "channel_agreement", "term_coverage")
AGREEMENT_DEPTH = 10
BM25_POOL = 40


def _top_paths(scores: np.ndarray, chunk_paths: Sequence[str], depth: int) -> list[str]:
    """The first ``depth`` distinct paths in (-score, index) order among finite, positive-mass scores."""
    order = np.lexsort((np.arange(scores.size), -scores.astype(np.float64)))
    out: list[str] = []
    for i in order:
        if not np.isfinite(scores[i]):
            break
        p = chunk_paths[i]
        if p not in out:
            out.append(p)
            if len(out) == depth:
                break
    return out


def compute_signals(*, dense_scores: np.ndarray | None, bm25_scores: np.ndarray | None,
                    chunk_paths: Sequence[str], top_rerank: float | None = None,
                    term_coverage: float | None = None) -> dict[str, float | None]:
    """Every signal of :data:`SIGNALS` for one query.

    Args:
        dense_scores: cosine of every chunk, shape (n_chunks,), or None without a dense channel
            (``-inf`` marks chunks excluded by a type filter).
        bm25_scores: BM25 score of every chunk, shape (n_chunks,), or None.
        chunk_paths: the path of each chunk, length n_chunks.
        top_rerank: the best rerank score, or None.
        term_coverage: the query's :class:`rag.search.term_coverage.TermCoverage` value, or
            None without a BM25 index.

    Returns:
        signal name -> value, None where the needed channel did not score the query.
    """
    out: dict[str, float | None] = {s: None for s in SIGNALS}
    if dense_scores is not None and dense_scores.size:
        d = dense_scores.astype(np.float64)
        finite = np.isfinite(d)
        if finite.any():
            best = int(np.argmax(np.where(finite, d, -np.inf)))
            out["top_dense"] = float(d[best])
            other = np.array([p != chunk_paths[best] for p in chunk_paths]) & finite
            out["dense_margin"] = float(d[best] - d[other].max()) if other.any() else 0.0
    if bm25_scores is not None and bm25_scores.size:
        b = np.asarray(bm25_scores, dtype=np.float64)
        top = np.sort(b)[::-1][:BM25_POOL]
        top = top[top > 0]
        if top.size < 2 or top.std() == 0:
            out["bm25_top_z"] = 0.0
        else:
            out["bm25_top_z"] = float((top[0] - top.mean()) / top.std())
    if dense_scores is not None and bm25_scores is not None and dense_scores.size:
        dp = set(_top_paths(np.asarray(dense_scores), chunk_paths, AGREEMENT_DEPTH))
        b = np.asarray(bm25_scores, dtype=np.float64)
        bp = set(_top_paths(np.where(b > 0, b, -np.inf), chunk_paths, AGREEMENT_DEPTH))
        out["channel_agreement"] = len(dp & bp) / AGREEMENT_DEPTH
    if top_rerank is not None:
        out["top_rerank"] = float(top_rerank)
    if term_coverage is not None:
        out["term_coverage"] = float(term_coverage)
    return out


class LearnedGate:
    """Logistic regression over signals: P(answerable | signals), fitted by
    :func:`rag.eval.abstention.fit_learned_gate` and applied by the pipeline.

    The model is stored as plain numbers (features, standardisation, coefficients), so a
    ledger artifact (``abstention_gate.json``) round-trips without pickle.

    Args:
        features: signal names, in coefficient order.
        mean, scale: per-feature standardisation (x - mean) / scale.
        coef, intercept: logistic regression weights on the standardised features.
        min_score, weak_score: thresholds on the probability (drop below ``min_score``,
            weak below ``weak_score``).
    """

    def __init__(self, *, features: Sequence[str], mean: Sequence[float], scale: Sequence[float],
                 coef: Sequence[float], intercept: float, min_score: float | None = None,
                 weak_score: float | None = None) -> None:
        self.features = list(features)
        self.mean = np.asarray(mean, dtype=float)
        self.scale = np.asarray(scale, dtype=float)
        self.coef = np.asarray(coef, dtype=float)
        self.intercept = float(intercept)
        self.min_score = min_score
        self.weak_score = weak_score

    def probability(self, signals: dict[str, float | None]) -> float:
        """P(answerable) for one query; a missing signal counts as its training mean.

        Source: logistic function 1 / (1 + exp(-(w·x + b))).
        """
        x = np.array([self.mean[i] if signals.get(f) is None else float(signals[f])
                      for i, f in enumerate(self.features)])
        z = float(((x - self.mean) / self.scale) @ self.coef + self.intercept)
        return float(1.0 / (1.0 + np.exp(-z)))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (see :meth:`from_dict`)."""
        return {"kind": "logistic_regression", "features": self.features,
                "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "coef": self.coef.tolist(), "intercept": self.intercept,
                "min_score": self.min_score, "weak_score": self.weak_score}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LearnedGate":
        """Inverse of :meth:`as_dict`.

        Raises:
            ValueError: a field is missing or the lengths disagree.
        """
        try:
            gate = cls(features=d["features"], mean=d["mean"], scale=d["scale"], coef=d["coef"],
                       intercept=d["intercept"], min_score=d.get("min_score"),
                       weak_score=d.get("weak_score"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"learned gate: missing or bad field {exc}") from None
        n = len(gate.features)
        if not (gate.mean.size == gate.scale.size == gate.coef.size == n):
            raise ValueError("learned gate: features, mean, scale and coef differ in length")
        unknown = [f for f in gate.features if f not in SIGNALS]
        if unknown or not n:
            raise ValueError(f"learned gate: unknown feature(s) {unknown} (known: {list(SIGNALS)})")
        if not (np.isfinite(gate.mean).all() and np.isfinite(gate.coef).all()
                and np.isfinite(gate.scale).all() and (gate.scale > 0).all()
                and np.isfinite(gate.intercept)):
            raise ValueError("learned gate: mean, coef and intercept must be finite and every "
                             "scale > 0")
        for key in ("min_score", "weak_score"):
            v = getattr(gate, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not np.isfinite(v)):
                raise ValueError(f"learned gate: {key} must be a finite number or null, got {v!r}")
        return gate
