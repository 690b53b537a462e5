"""Three-band abstention on the query's top dense cosine (CRAG-shaped).

* top < ``min_dense``: every hit is dropped (counted in ``dropped``);
* ``min_dense`` <= top < ``weak_dense``: hits returned with ``weak_match: true``;
* top >= ``weak_dense``: normal.

With no dense score (a BM25-only route) no band applies.
"""

from __future__ import annotations

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


def never_acts(mode: str) -> bool:
    """Whether abstention on the dense signals never acts under ``search.mode=mode``: a
    single-channel route on a channel other than ``dense`` (``bm25``, ``grep``) scores no
    dense cosine, so no band applies to any of its queries (``auto``, ``hybrid`` and
    ``dense`` run the dense channel)."""
    from rag.search.channels import CHANNEL_NAMES

    return mode in CHANNEL_NAMES and mode != "dense"
