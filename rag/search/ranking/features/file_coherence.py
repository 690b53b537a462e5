"""``file_coherence``: a file with several strong candidates. The best candidate of each file
gets value ``sum of the file's first-stage scores / the largest such sum`` (so the file that
holds most of the first stage's mass gets 1). After semble's ``boost_multi_chunk_files``
(MinishLab/semble, ranking/boosting.py).
"""

from __future__ import annotations

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register


class FileCoherence:
    name = "file_coherence"
    combine = "add"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        total: dict[str, float] = {}
        best: dict[str, int] = {}
        for i in sorted(ctx.base):
            v = ctx.base[i]
            path = ctx.chunks[i].path
            total[path] = total.get(path, 0.0) + v
            if path not in best or v > ctx.base[best[path]]:
                best[path] = i
        if not total:
            return {}
        top = max(total.values())
        if top <= 0:
            return {}
        return {i: total[p] / top for p, i in best.items()}


register(FileCoherence())
