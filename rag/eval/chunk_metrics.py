"""Metrics on the chunk list as returned (not collapsed to units): semble's NDCG@k.

semble's repository-search benchmark (MinishLab/semble ``benchmarks/metrics.py`` and
``benchmarks/data.py``) scores each query on the system's **top k chunks as returned**, several
chunks of one file included:

* a *target* is a path, optionally with a line span; a chunk matches it when either path is a
  suffix of the other at a ``/`` boundary (or they are equal; :func:`path_matches`) and, for a
  span, when the chunk's ``[start_line, end_line]`` overlaps it (:func:`chunk_matches`);
* each target gets the 1-based rank of the first chunk that matches it (:func:`target_rank`);
* NDCG@k = DCG / IDCG with binary gains: position ``r`` gains 1 when some target has rank
  ``r <= k`` (two targets found by one chunk gain once), DCG = Σ gain_i / log2(i + 1) over
  positions i = 1..k, and IDCG = the DCG of ``min(k, number of targets)`` ones — a target
  nothing can match (its file is not in the tree) still counts in the ideal
  (:func:`ndcg_at_k`).

rag's golden labels map onto targets one to one (:func:`targets_of`): a file label is a path
target; a span label a span target; a symbol label resolved against the index a target whose
span is the symbol's lines (several ranges: any overlap); the query's ``unresolved`` labels
are targets too. A golden set whose corpus is a ``subtree`` of the labels' repository (a
semble repository's ``benchmark_root``) has its relevant labels' paths compared as
``subtree/path``, as annotated: semble's suffix rule is looser for a shorter target. Names in the ledger: ``semble_ndcg_at_10`` and ``semble_ndcg_at_5``
(:data:`SEMBLE_KS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

#: the cut-offs semble reports (benchmarks/baselines/ablations.py: NDCG@5 and NDCG@10)
SEMBLE_KS = (10, 5)


def semble_metric(k: int) -> str:
    """The ledger name of semble's NDCG@k: ``semble_ndcg_at_<k>``."""
    return f"semble_ndcg_at_{k}"


@dataclass(frozen=True)
class Target:
    """One relevant target: a path (as labelled) and, for a span, its line ranges (1-based,
    inclusive; None: the whole file)."""

    path: str
    spans: tuple[tuple[int, int], ...] | None = None


def path_matches(file_path: str, target_path: str) -> bool:
    """semble's path rule (benchmarks/data.py ``path_matches``): equal, or one ends with
    ``/`` + the other, after turning ``\\`` into ``/``."""
    a, b = file_path.replace("\\", "/"), target_path.replace("\\", "/")
    return a == b or a.endswith(f"/{b}") or b.endswith(f"/{a}")


def chunk_matches(path: str, start_line: int, end_line: int, target: Target) -> bool:
    """Whether the chunk ``path:start_line-end_line`` covers ``target`` (semble's
    ``target_matches_location``): the path rule, then, for a span target, any overlap of the
    chunk's lines with one of its ranges. A chunk without lines (``start_line`` < 1, e.g. a
    TREC run file's docno) never covers a span target."""
    if not path_matches(path, target.path):
        return False
    if target.spans is None:
        return True
    if start_line < 1:
        return False
    return any(not (end_line < s or start_line > e) for s, e in target.spans)


def target_rank(chunks: Sequence[tuple[str, int, int]], target: Target) -> int | None:
    """The 1-based rank of the first of ``chunks`` (``(path, start_line, end_line)``, in the
    order returned) that covers ``target``, or None."""
    for i, (path, start, end) in enumerate(chunks, 1):
        if chunk_matches(path, start, end, target):
            return i
    return None


def dcg(gains: Iterable[float]) -> float:
    """Σ gain_i / log2(i + 1), i = 1.. (Järvelin & Kekäläinen 2002; semble's ``dcg``)."""
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranks: Iterable[int], n_targets: int, k: int) -> float:
    """NDCG@k from the targets' ranks (semble's ``ndcg_at_k``): binary gain at each rank
    ``<= k`` that some target holds (counted once per position), over the DCG of
    ``min(k, n_targets)`` ones; 0 when there is no target."""
    if n_targets <= 0:
        return 0.0
    gains = [0] * k
    for r in ranks:
        if 1 <= r <= k:
            gains[r - 1] = 1
    ideal = dcg([1] * min(k, n_targets))
    return dcg(gains) / ideal if ideal > 0 else 0.0


def semble_ndcg(chunks: Sequence[tuple[str, int, int]], targets: Sequence[Target], k: int) -> float:
    """semble's NDCG@k of one query: ``chunks`` as returned (only the first ``k`` are read),
    every target ranked by :func:`target_rank`."""
    top = list(chunks)[:k]
    ranks = [r for t in targets if (r := target_rank(top, t)) is not None]
    return ndcg_at_k(ranks, len(targets), k)


def label_target(label: Any) -> Target:
    """A golden :class:`rag.eval.golden.Label` as a :class:`Target`: its lines for a span
    label, its resolved lines (``spans``) for a symbol label, else the whole file."""
    if label.lines:
        return Target(label.path, (tuple(label.lines),))
    if label.spans:
        return Target(label.path, tuple(tuple(s) for s in label.spans))
    return Target(label.path)


def targets_of(query: Any, subtree: str | None = None) -> list[Target]:
    """A golden query's targets: every ``relevant`` label (its path under ``subtree``, when
    given), then every ``unresolved`` one (already relative to the repository)."""
    out = []
    for lab in query.relevant:
        t = label_target(lab)
        out.append(Target(f"{subtree}/{t.path}", t.spans) if subtree else t)
    return out + [label_target(lab) for lab in getattr(query, "unresolved", ())]


def hit_chunks(hits: Sequence[Any]) -> list[tuple[str, int, int]]:
    """``(path, start_line, end_line)`` of ranked hits, in order (0, 0 where a hit has no
    lines)."""
    return [(h.path, int(h.start_line or 0), int(h.end_line or 0)) for h in hits]


def chunk_metrics(hits: Sequence[Any], query: Any, *, subtree: str | None = None
                  ) -> dict[str, float]:
    """``semble_ndcg_at_<k>`` for every k of :data:`SEMBLE_KS`, on ``hits`` as ranked
    (``subtree``: :func:`targets_of`)."""
    chunks, targets = hit_chunks(hits), targets_of(query, subtree)
    return {semble_metric(k): semble_ndcg(chunks, targets, k) for k in SEMBLE_KS}
