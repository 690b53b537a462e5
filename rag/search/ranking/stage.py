"""The ranking stage: re-scores the first stage's candidates with registered features.

For one query with first-stage candidates ``base`` (chunk -> fused or single-channel score,
all > 0) and ``m = max(base)``:

    score(c) = (base(c) + m * sum over add features f of weight_f * f(c))
               * prod over scale features g of g(c) ** weight_g

(a chunk an ``add`` feature brings in has base 0) under ``ranking.combiner=weighted``; under
``lambdamart`` a trained model (rag/search/ranking/learned.py) scores each candidate from the
same feature values and the channel scores instead. The ranking is then read best first with
file saturation: the n-th further chunk of a file already read is scored
``score x file_saturation ** n`` and the list re-sorted, so one file does not fill the top 10
(semble's ``rerank_topk``, MinishLab/semble ranking/penalties.py, whose additive boosts in
units of the best score this stage generalises). Ties: by chunk index.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from rag.search.ranking.chunk_facts import facts_of
from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import FEATURES
from rag.search.ranking.options import RankingOptions
from rag.search.ranking.query_shape import query_shape

#: the prefix of a feature's per-hit score key (``Hit.scores["rank:definition"]``)
SCORE_PREFIX = "rank:"


class RankingStage:
    """Args:
        options: :class:`RankingOptions` (checked here).

    Raises:
        ValueError: bad options.
    """

    def __init__(self, options: RankingOptions) -> None:
        options.check()
        self.options = options
        self.features = [FEATURES[name] for name in FEATURES if name in options.features]
        self.model = None
        if options.combiner == "lambdamart":
            from rag.search.ranking.learned import model_at

            self.model = model_at(options.model)

    @property
    def answering_keys(self) -> tuple[str, ...]:
        """The per-hit score keys of the features that run and whose match answers a query
        (:attr:`rag.search.ranking.feature.Feature.answers`)."""
        return tuple(SCORE_PREFIX + f.name for f in self.features if getattr(f, "answers", False))

    @property
    def score_keys(self) -> tuple[str, ...]:
        """The per-hit score keys this stage fills: one per feature that runs, then
        ``ranking``."""
        return (*(SCORE_PREFIX + f.name for f in self.features), "first_stage", "ranking")

    def rank(self, query: str, order: Sequence[tuple[int, float]], index: Any, *,
             channels: Mapping[str, tuple[np.ndarray, float | None]] | None = None
             ) -> tuple[list[tuple[int, float]], dict[str, dict[int, float]]]:
        """Re-rank ``order`` (first-stage (chunk index, score) pairs, best first).

        Args:
            channels: each channel that ran -> (its scores of every chunk, its ``no_match``);
                read by the features (``file_semantic``) and the learned combiner.

        Returns:
            (the new (chunk index, stage score) pairs, best first, saturation applied; the
            per-hit scores: key of :attr:`score_keys` -> chunk index -> value: the first-stage
            score under ``first_stage``, the stage score before saturation under ``ranking``).
        """
        first_stage = {i: float(s) for i, s in order}
        base = dict(first_stage)
        # a first stage whose scores are not all positive (a dense cosine may be <= 0) is
        # shifted so that its worst candidate is a small positive score and its order kept
        low = min(base.values(), default=1.0)
        if low <= 0:
            span = max(base.values()) - low
            base = {i: s - low + (span or 1.0) * 1e-3 for i, s in base.items()}
        o = self.options
        ctx = RankingContext(shape=query_shape(query), chunks=index.chunks,
                             facts=facts_of(index), base=base, priors=o.priors, scan=o.scan,
                             channels={n: sc for n, (sc, _) in (channels or {}).items()},
                             index=index)
        top = max(base.values(), default=0.0)
        score = dict(base)
        values: dict[str, dict[int, float]] = {}
        scales = []
        for f in self.features:
            vals = f.compute(ctx)
            values[SCORE_PREFIX + f.name] = vals
            w = float(o.weights.get(f.name, 0.0))
            if f.combine == "scale":
                scales.append((vals, w))
                continue
            if w:
                for i, v in vals.items():
                    score[i] = score.get(i, 0.0) + top * w * v
        for vals, w in scales:
            if w:
                for i, v in vals.items():
                    if i in score:
                        score[i] *= v ** w
        values["first_stage"] = first_stage
        if self.model is not None:
            score = self._learned(ctx.shape.identifier, list(score), values, channels or {})
        values["ranking"] = dict(score)
        if self.model is not None and score:  # saturation multiplies: make the scores > 0
            low = min(score.values())
            score = {i: s - low + 1e-3 for i, s in score.items()}
        ranked = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))
        if o.file_saturation < 1.0:
            seen: dict[str, int] = {}
            decayed = []
            for i, s in ranked:
                path = index.chunks[i].path
                n = seen.get(path, 0)
                decayed.append((i, s * o.file_saturation ** n))
                seen[path] = n + 1
            ranked = sorted(decayed, key=lambda kv: (-kv[1], kv[0]))
        return ranked, values

    def _learned(self, identifier: bool, cands: list[int], values: dict[str, dict[int, float]],
                 channels: Mapping[str, tuple[np.ndarray, float | None]]) -> dict[int, float]:
        """The learned combiner's score of each candidate (rag/search/ranking/learned.py)."""
        from rag.search.channels import is_match
        from rag.search.ranking.learned import candidate_matrix

        rows = []
        for i in cands:
            row: dict[str, float | None] = {k: v.get(i) for k, v in values.items()}
            for name in ("bm25", "dense"):
                if name in channels:
                    sc, no_match = channels[name]
                    row[name] = float(sc[i]) if is_match(sc[i], no_match) else None
            rows.append(row)
        pred = self.model.predict(candidate_matrix(rows, identifier=identifier,
                                                   columns=self.model.columns))
        return {i: float(p) for i, p in zip(cands, pred)}
