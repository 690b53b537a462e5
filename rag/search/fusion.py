"""Reciprocal Rank Fusion.

``score(d) = sum over channels c that ranked d of 1 / (k + rank_c(d))``, ranks 1-based,
default k = 60 (Cormack, Clarke, Büttcher, "Reciprocal rank fusion outperforms Condorcet and
individual rank learning methods", SIGIR 2009).
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(rankings: Mapping[str, Sequence[K]], *, k: int = 60) -> list[tuple[K, float]]:
    """Fuse best-first rankings (channel name -> items) into (item, rrf score), best first.

    Ties are broken by the item itself (ascending), so the output is deterministic.

    Raises:
        ValueError: ``k`` is negative.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[K, float] = {}
    for items in rankings.values():
        for rank, item in enumerate(items, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
