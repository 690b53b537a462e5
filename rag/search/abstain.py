"""Three-band abstention on the query's top dense cosine (CRAG-shaped).

* top < ``min_dense``: every hit is dropped (counted in ``dropped``);
* ``min_dense`` <= top < ``weak_dense``: hits returned with ``weak_match: true``;
* top >= ``weak_dense``: normal.

With no dense score (a BM25-only route) no band applies.
"""

from __future__ import annotations

from typing import Sequence

from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    """The abstention decision for one query."""

    drop: bool
    weak_match: bool


def band(top_dense: float | None, *, min_dense: float, weak_dense: float) -> Band:
    """Classify a top dense cosine into drop / weak / normal (see module docstring)."""
    if top_dense is None:
        return Band(drop=False, weak_match=False)
    if top_dense < min_dense:
        return Band(drop=True, weak_match=False)
    return Band(drop=False, weak_match=top_dense < weak_dense)


def never_acts(mode: str, gate_features: Sequence[str] | None = None) -> bool:
    """Whether abstention never acts under ``search.mode=mode``: a single-channel route on a
    channel other than ``dense`` (``bm25``, ``grep``) scores no dense cosine, so no dense
    band applies to any of its queries (``auto``, ``hybrid`` and ``dense`` run the dense
    channel), nor a learned gate that reads a dense signal (:data:`rag.search.signals.
    DENSE_SIGNALS`). ``gate_features``: the learned gate's features, None for the bands; a
    gate reading none of them (``bm25_top_z``, ``term_coverage``) acts on any route."""
    from rag.search.channels import CHANNEL_NAMES
    from rag.search.signals import DENSE_SIGNALS

    if mode not in CHANNEL_NAMES or mode == "dense":
        return False
    return gate_features is None or any(f in DENSE_SIGNALS for f in gate_features)
