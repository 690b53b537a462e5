"""Fusion of the channels' rankings: a registry of methods (``fusion.method``).

- ``rrf``, Reciprocal Rank Fusion: ``score(d) = sum over channels c that ranked d
  of w_c / (k + rank_c(d))``, ranks 1-based, k = 60 by default (Cormack, Clarke, Büttcher,
  "Reciprocal rank fusion outperforms Condorcet and individual rank learning methods",
  SIGIR 2009); reads ranks only.
- ``wsum`` (the default since 2026-12-06, experiments/fusion.md), a weighted sum of
  normalised scores (CombSUM with weights; a convex combination when the weights sum to 1,
  Bruch, Gai, Ingber, "An Analysis of Fusion Functions for Hybrid
  Retrieval", ACM TOIS 2023): ``score(d) = sum over channels c that ranked d of
  w_c * norm_c(s_c(d))``, each channel's scores normalised over the candidates it returned
  for the query, a channel that did not return d adding 0 (ranx's ``fuse(..., method="wsum",
  norm=...)``, https://amenra.github.io/ranx/fusion/).
- ``combmnz``: ``wsum`` times the number of channels that returned d: CombMNZ (Fox & Shaw,
  "Combination of multiple searches", TREC-2 1994; ranx's ``mnz``) when every weight is 1,
  with the channel weights inside the sum otherwise (not ranx's ``wmnz``, which multiplies
  the unweighted sum by the returning channels' summed weights).

Normalisations (``fusion.norm``, read by the score methods; ranx's names): ``min-max``
``(s - min) / (max - min)``, ``max`` ``s / max`` (for scores whose best is > 0; a channel
whose best is <= 0, a dense cosine can be, is min-max normalised instead, so its order is
kept), ``zmuv`` ``(s - mean) / std`` (population std). A channel whose candidates all score
the same (one candidate included) normalises to 1 under ``min-max`` and ``max`` — every
candidate it returned counts fully, where ranx's min-max gives 0 — and 0 under ``zmuv``.
A channel of weight 0 is left out under every method: its candidates enter the fused list
only through the other channels.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping, Optional, Sequence, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)

#: the defaults of ``fusion.method`` and ``fusion.norm`` (the one place they are written)
DEFAULT_METHOD = "wsum"
DEFAULT_NORM = "min-max"

#: one channel's ranking of one query: (item, score) pairs, best first
Scored = Sequence[tuple[K, float]]


def _check_weights(weights: Optional[Mapping[str, float]]) -> dict[str, float]:
    w = dict(weights or {})
    if any(not v >= 0 for v in w.values()):
        raise ValueError(f"fusion weights must be >= 0, got {w}")
    return w


def _best_first(scores: Mapping[K, float]) -> list[tuple[K, float]]:
    # ties broken by the item itself (ascending), so the output is deterministic
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


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
    w = _check_weights(weights)
    scores: dict[K, float] = {}
    for name, items in rankings.items():
        wc = float(w.get(name, 1.0))
        if wc == 0:
            continue
        for rank, item in enumerate(items, start=1):
            scores[item] = scores.get(item, 0.0) + wc / (k + rank)
    return _best_first(scores)


def _min_max(s: np.ndarray) -> np.ndarray:
    span = s.max() - s.min()
    return (s - s.min()) / span if span > 0 else np.ones_like(s)


def _max(s: np.ndarray) -> np.ndarray:
    top = s.max()
    return s / top if top > 0 else _min_max(s)


def _zmuv(s: np.ndarray) -> np.ndarray:
    sd = s.std()
    return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)


#: fusion.norm -> the normalisation of one channel's candidate scores (a 1-d float array)
NORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "min-max": _min_max, "max": _max, "zmuv": _zmuv}


def normalise(scores: Sequence[float], norm: str) -> np.ndarray:
    """One channel's candidate scores (any order, finite) normalised by ``NORMS[norm]``.

    Raises:
        ValueError: an unknown norm or a non-finite score.
    """
    if norm not in NORMS:
        raise ValueError(f"fusion.norm must be one of {sorted(NORMS)}, got {norm!r}")
    s = np.asarray(scores, dtype=np.float64)
    if s.size and not np.isfinite(s).all():
        raise ValueError(f"fusion: a channel's candidate scores must be finite, got {s}")
    return NORMS[norm](s) if s.size else s


def wsum(scored: Mapping[str, Scored], *, weights: Optional[Mapping[str, float]] = None,
         norm: str = DEFAULT_NORM, mnz: bool = False) -> list[tuple[K, float]]:
    """Weighted sum of normalised scores (``mnz``: times the number of channels that returned
    the item), best first; channel name -> its (item, score) candidates.

    ``weights``: channel -> w (missing: 1). A channel with no candidates adds nothing.

    Raises:
        ValueError: a negative weight, an unknown norm or a non-finite score.
    """
    w = _check_weights(weights)
    total: dict[K, float] = {}
    hits: dict[K, int] = {}
    for name, pairs in scored.items():
        wc = float(w.get(name, 1.0))
        if not pairs or wc == 0:
            continue
        normed = normalise([s for _, s in pairs], norm)
        for (item, _), v in zip(pairs, normed):
            total[item] = total.get(item, 0.0) + wc * float(v)
            hits[item] = hits.get(item, 0) + 1
    if mnz:
        total = {i: s * hits[i] for i, s in total.items()}
    return _best_first(total)


#: fusion.method -> fuse(channel -> (item, score) candidates best first, *, k, weights, norm)
FUSIONS: dict[str, Callable[..., list]] = {
    "rrf": lambda scored, *, k, weights, norm: rrf(
        {n: [i for i, _ in pairs] for n, pairs in scored.items()}, k=k, weights=weights),
    "wsum": lambda scored, *, k, weights, norm: wsum(scored, weights=weights, norm=norm),
    "combmnz": lambda scored, *, k, weights, norm: wsum(scored, weights=weights, norm=norm,
                                                        mnz=True),
}


def fuse(method: str, scored: Mapping[str, Scored], *, k: int = 60,
         weights: Optional[Mapping[str, float]] = None,
         norm: str = DEFAULT_NORM) -> list[tuple[K, float]]:
    """Fuse each channel's best-first (item, score) candidates with ``FUSIONS[method]``.

    Args:
        method: ``rrf`` (reads ranks and ``k``), ``wsum`` or ``combmnz`` (read scores, ``norm``).
        weights: channel -> weight (missing: 1), for every method.

    Returns:
        (item, fused score) pairs, best first; ties by item, ascending.

    Raises:
        ValueError: an unknown method or norm, ``k`` < 0, a negative weight.
    """
    if method not in FUSIONS:
        raise ValueError(f"fusion.method must be one of {sorted(FUSIONS)}, got {method!r}")
    return FUSIONS[method](scored, k=k, weights=weights, norm=norm)
