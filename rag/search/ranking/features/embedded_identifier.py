"""``embedded_identifier``: a chunk that defines an identifier written inside a prose query
(``where is HandlerStack built``): value 1, 1.5 when its file stem is that identifier; with
``ranking.scan`` chunks outside the candidates whose file stem is the identifier or a prefix of
it of >= 4 letters (``state.ts`` for ``StateManager``) are added when they define it. Its
default weight is half of ``definition``'s: the identifier may be incidental to the question.
After semble's ``_boost_embedded_symbols`` (MinishLab/semble, ranking/boosting.py).
"""

from __future__ import annotations

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register
from rag.search.ranking.features.definition import definition_values

#: shortest file stem that may match an identifier as its prefix
MIN_PREFIX = 4


class EmbeddedIdentifier:
    name = "embedded_identifier"
    combine = "add"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        names = ctx.shape.embedded
        if not names:
            return {}
        lower = {n.lower() for n in names}
        stems: set[str] = set(lower)
        if ctx.scan:
            stems.update(form for form in ctx.facts.by_stem
                         if len(form) >= MIN_PREFIX and any(n.startswith(form) for n in lower))
        return definition_values(ctx, names, scan=ctx.scan, scan_stems=frozenset(stems))


register(EmbeddedIdentifier())
