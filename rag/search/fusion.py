"""Reciprocal Rank Fusion.

``score(d) = sum over channels c that ranked d of 1 / (k + rank_c(d))``, ranks 1-based,
default k = 60 (Cormack, Clarke, Büttcher, "Reciprocal rank fusion outperforms Condorcet and
individual rank learning methods", SIGIR 2009).
"""

from __future__ import annotations

from typing import Hashable, Mapping, Optional, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(rankings: Mapping[str, Sequence[K]], *, k: int = 60,
        weights: Optional[Mapping[str, float]] = None) -> list[tuple[K, float]]:
    """Fuse best-first rankings (channel name -> items) into (item, rrf score), best first.

    ``weights`` (channel name -> w, missing: 1) weigh each channel's terms, ``w / (k + rank)``
    (weighted RRF, as semble fuses its channels with ``alpha`` and ranx's ``wrrf``); equal
    weights give plain RRF's order. Ties are broken by the item itself (ascending), so the
    output is deterministic.

    Raises:
        ValueError: ``k`` or a weight is negative.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    w = dict(weights or {})
    if any(v < 0 for v in w.values()):
        raise ValueError(f"rrf weights must be >= 0, got {w}")
    scores: dict[K, float] = {}
    for name, items in rankings.items():
        wc = float(w.get(name, 1.0))
        if wc == 0:
            continue
        for rank, item in enumerate(items, start=1):
            scores[item] = scores.get(item, 0.0) + wc / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
