"""The contract of a ranking feature (:class:`Feature`) and what it reads (:class:`RankingContext`).

A feature scores candidate chunks for one query and says how its value enters the stage's
score (rag/search/ranking/stage.py): ``add`` — ``weight x value x`` the best first-stage score
is added (a feature may add a chunk the first stage did not return, e.g. the definition of the
queried identifier); ``scale`` — the score is multiplied by ``value ** weight`` (a prior).
Adding a feature is one file under rag/search/ranking/features/ that calls
:func:`rag.search.ranking.features.register`, plus its test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol

from rag.search.ranking.chunk_facts import ChunkFacts
from rag.search.ranking.query_shape import QueryShape


@dataclass(frozen=True)
class RankingContext:
    """One query's candidates as a feature sees them.

    Attributes:
        shape: the query's :class:`QueryShape`.
        chunks: every chunk of the index (``rag.corpus.chunk.Chunk``), by index.
        facts: the index's :class:`ChunkFacts`.
        base: chunk index -> first-stage score (fused or one channel's), every score > 0.
        priors: ``ranking.priors`` (category or path pattern -> factor).
        scan: whether features may add chunks outside ``base`` (``ranking.scan``).
        channels: each first-stage channel that ran -> its score of every chunk, shape
            (n_chunks,) (a filtered-out chunk: -inf); empty when the caller gave none.
        index: the index the chunks belong to (for per-index caches such as the dense
            matrix), or None.
    """

    shape: QueryShape
    chunks: Any
    facts: ChunkFacts
    base: Mapping[int, float]
    priors: Mapping[str, float] = field(default_factory=dict)
    scan: bool = True
    channels: Mapping[str, Any] = field(default_factory=dict)
    index: Any = None


class Feature(Protocol):
    """A registered ranking feature.

    Attributes:
        name: the registry name, the key ``ranking.weights`` sets and the per-hit score key
            (``Hit.scores["rank:<name>"]``).
        combine: ``add`` or ``scale`` (module docstring).
        answers: a returned chunk this feature scores above 0 is evidence that the corpus
            answers the query (a definition of the queried identifier), so abstention never
            flags or drops it under ``abstain.trust_definitions`` (optional; default False).
    """

    name: str
    combine: Literal["add", "scale"]

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """chunk index -> value; a chunk left out has value 0 (``add``) or 1 (``scale``)."""
        ...
