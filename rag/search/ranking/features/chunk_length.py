"""``chunk_length``: the candidate's length in lines, as ``ln(1 + lines) / ln(1 + 200)``
capped at 1 (0 for one line, 1 from 200 lines). Weight 0 by default (conf/ranking/): it is
logged per hit for attribution and the learned combiner, and a sweep can weigh it."""

from __future__ import annotations

import math

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register

#: the length that counts as 1
FULL_LINES = 200


class ChunkLength:
    name = "chunk_length"
    combine = "add"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        out = {}
        for i in ctx.base:
            c = ctx.chunks[i]
            lines = max(0, int(c.end_line) - int(c.start_line))
            out[i] = min(1.0, math.log1p(lines) / math.log1p(FULL_LINES))
        return out


register(ChunkLength())
