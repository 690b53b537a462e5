"""``file_semantic``: how near the query each candidate's file is as a whole — the query's
cosine with the file's centroid, the mean of its chunks' embeddings (file-level dense
evidence, for a question about a file or component that no one chunk answers alone).

With ``s_i`` the dense channel's cosine of chunk ``i`` and ``e_i`` its unit embedding, file
``f`` with chunks ``C_f`` has ``c_f = cos(q, mean e) = mean_{i in C_f} s_i / ||mean_{i in C_f}
e_i||``, so only the centroid norms are computed (once per index, from the dense matrix).
Value of every candidate chunk of a candidate file: ``(c_f - c_min) / (c_max - c_min)`` over
the candidate files (1: the file whose centroid is nearest the query). Nothing for an
identifier query (``definition`` answers those), when the dense channel did not run (BM25 or
grep routes) or when fewer than two files are candidates; under an ANN (``dense.index``), only
for the files whose every chunk it scored. Weight 0 by default: logged per hit
for attribution and the learned combiner; experiments/ranking.md has its sweep.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register


def file_centroids(index: Any) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """(path -> its chunks' indices, int64; path -> the norm of the mean of those chunks'
    unit embeddings, in [0, 1]) over ``index.dense.matrix``, built on first use and kept with
    the index (as :func:`rag.search.ranking.chunk_facts.facts_of` is)."""
    cache = index.__dict__.setdefault("_ranking_facts", {})
    if "file_centroids" not in cache:
        members: dict[str, list[int]] = {}
        for i, c in enumerate(index.chunks):
            members.setdefault(c.path, []).append(i)
        matrix = index.dense.matrix
        rows = {p: np.asarray(ix, dtype=np.int64) for p, ix in members.items()}
        norms = {p: float(np.linalg.norm(matrix[ix].astype(np.float64).mean(axis=0)))
                 for p, ix in rows.items()}
        cache["file_centroids"] = (rows, norms)
    return cache["file_centroids"]


class FileSemantic:
    name = "file_semantic"
    combine = "add"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        dense = ctx.channels.get("dense")
        if (ctx.shape.identifier or dense is None or ctx.index is None
                or getattr(ctx.index, "dense", None) is None):
            return {}
        rows, norms = file_centroids(ctx.index)
        files: dict[str, list[int]] = {}
        for i in sorted(ctx.base):
            files.setdefault(ctx.chunks[i].path, []).append(i)
        scores = np.asarray(dense, dtype=np.float64)
        cos: dict[str, float] = {}
        for path in files:
            s = scores[rows[path]]
            # an ANN scores only its own candidates (-inf elsewhere): a file some of whose
            # chunks it did not score has no centroid cosine (a mean over part of the file
            # divided by the whole file's norm is not one)
            if norms[path] > 0 and np.isfinite(s).all():
                cos[path] = float(s.mean()) / norms[path]
        if len(cos) < 2:
            return {}
        lo, hi = min(cos.values()), max(cos.values())
        if hi <= lo:
            return {}
        return {i: (c - lo) / (hi - lo) for p, c in cos.items() for i in files[p]}


register(FileSemantic())
