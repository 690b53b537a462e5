"""``path_match``: a prose query's words in the candidate's file stem or its directory.

The stem's and the parent directory's identifier parts
(:func:`rag.search.ranking.query_shape.identifier_parts`: ``radix_tree.go`` -> ``radix_tree,
radix, tree``) are matched with the query's keywords, a keyword matching a part equal to it or
sharing a prefix of >= 3 letters with it (morphology: ``dependency`` ~ ``dependencies``,
``route`` ~ ``router``). Value: matched keywords / keywords, when that is >= 0.1. Identifier
queries: nothing (``definition`` covers them). After semble's ``_boost_stem_matches``
(MinishLab/semble, ranking/boosting.py).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import PurePosixPath

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register
from rag.search.ranking.query_shape import identifier_parts

#: shortest shared prefix that counts as a match between a keyword and a path part
MIN_PREFIX = 3
#: smallest share of the keywords that counts
MIN_SHARE = 0.10


@lru_cache(maxsize=16384)
def path_parts(path: str) -> frozenset[str]:
    """The identifier parts of ``path``'s stem and of its parent directory's name."""
    p = PurePosixPath(path)
    parts = set(identifier_parts(p.stem))
    if p.parent.name not in ("", ".", ".."):
        parts.update(identifier_parts(p.parent.name))
    return frozenset(parts)


def matched_keywords(keywords: frozenset[str], parts: frozenset[str]) -> int:
    """How many ``keywords`` match one of ``parts`` (equal, or a shared prefix of
    >= :data:`MIN_PREFIX` letters: the shorter is a prefix of the longer)."""
    n = 0
    for k in keywords:
        if k in parts:
            n += 1
            continue
        for part in parts:
            short, long_ = (k, part) if len(k) <= len(part) else (part, k)
            if len(short) >= MIN_PREFIX and long_.startswith(short):
                n += 1
                break
    return n


class PathMatch:
    name = "path_match"
    combine = "add"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring."""
        kws = ctx.shape.keywords
        if not kws:
            return {}
        out: dict[int, float] = {}
        for i in ctx.base:
            share = matched_keywords(kws, path_parts(ctx.chunks[i].path)) / len(kws)
            if share >= MIN_SHARE:
                out[i] = share
        return out


register(PathMatch())
