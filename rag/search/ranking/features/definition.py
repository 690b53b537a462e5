"""``definition``: a chunk that defines the identifier an identifier-shaped query names.

Value 1 for a defining chunk (:meth:`ChunkFacts.defines`), plus 0.5 when its file stem is the
name too (``Router`` in ``router.go``) and plus 0.5 when its whole symbol is the query (``Engine``
for the query ``Engine`` over the method ``defaultValidator.Engine``; ``AppContext.pop`` over
``RequestContext.pop``: the tightest definition of the name first); with ``ranking.scan`` the chunks outside the candidates that
define the name, or whose file stem matches it and that define it, are added (so
``Command`` finds ``type Command struct`` even when BM25 ranks it nowhere). Prose: nothing.
After semble's ``_boost_symbol_definitions`` (MinishLab/semble, ranking/boosting.py).
"""

from __future__ import annotations

from rag.search.ranking.chunk_facts import stem_forms, symbol_components
from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register

#: added to a definition's value when its file stem is the name
STEM_BONUS = 0.5
#: added when the definition's whole symbol is the queried name (no enclosing type left over)
WHOLE_NAME_BONUS = 0.5


def definition_values(ctx: RankingContext, names: frozenset[str], *, scan: bool,
                      scan_stems: frozenset[str], whole: tuple[str, ...] = ()) -> dict[int, float]:
    """chunk index -> 1, plus :data:`STEM_BONUS` when its file stem matches one of ``names``
    (:func:`rag.search.ranking.chunk_facts.stem_forms`) and :data:`WHOLE_NAME_BONUS` when its
    symbol's components are ``whole`` (the query's, :func:`symbol_components`), for chunks
    defining one of ``names``: the candidates, then, when ``scan``, the chunks defining a name
    and those whose stem form is one of ``scan_stems``."""
    facts, chunks = ctx.facts, ctx.chunks
    pool = set(ctx.base)
    if scan:
        for n in names:
            pool.update(facts.by_defined.get(n, ()))
        for n in scan_stems:
            pool.update(facts.by_stem.get(n, ()))
    lower = {n.lower() for n in names}
    out: dict[int, float] = {}
    for i in sorted(pool):
        if facts.defines(i, chunks[i], names):
            out[i] = (1.0 + (STEM_BONUS if stem_forms(facts.stems[i]) & lower else 0.0)
                      + (WHOLE_NAME_BONUS if whole and chunks[i].symbol
                         and symbol_components(chunks[i].symbol) == whole else 0.0))
    return out


class Definition:
    name = "definition"
    combine = "add"
    # a returned definition of the queried name answers it (abstain.trust_definitions)
    answers = True

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        shape = ctx.shape
        if not shape.identifier:
            return {}
        last = min(shape.names, key=len)
        return definition_values(ctx, frozenset({last}) | shape.names, scan=ctx.scan,
                                 scan_stems=frozenset({last.lower()}),
                                 whole=symbol_components(shape.text))


register(Definition())
