"""``category_prior``: a multiplicative prior on where a chunk lives (``combine = "scale"``).

The factor is the product of ``ranking.priors`` entries that apply: the chunk's category
(rag.corpus.walk ``CATEGORIES``: ``test``, ``example``, ``documentation``, ``config``, ...),
``reexport`` for a re-export or package-metadata file (``__init__.py``, ``package-info.java``,
``index.ts``/``index.js`` are *not* counted: they often hold code), ``compat`` for a file under
``compat/``, ``_compat/`` or ``legacy/``, and ``declaration`` for a TypeScript ``.d.ts`` stub.
An entry missing from ``ranking.priors`` is 1. After semble's ``_file_path_penalty``
(MinishLab/semble, ranking/penalties.py), whose factors are the defaults (conf/ranking/).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Mapping

from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import register

REEXPORT_NAMES = frozenset({"__init__.py", "package-info.java"})
_COMPAT = re.compile(r"(?:^|/)(?:compat|_compat|legacy)(?:/|$)")


@lru_cache(maxsize=16384)
def path_marks(path: str) -> tuple[str, ...]:
    """The path-pattern entries of ``ranking.priors`` that apply to ``path``."""
    marks = []
    if PurePosixPath(path).name in REEXPORT_NAMES:
        marks.append("reexport")
    if _COMPAT.search(path):
        marks.append("compat")
    if path.endswith(".d.ts"):
        marks.append("declaration")
    return tuple(marks)


def prior(category: str, path: str, priors: Mapping[str, float]) -> float:
    """The factor of a chunk of ``category`` at ``path`` (module docstring)."""
    f = float(priors.get(category, 1.0))
    for mark in path_marks(path):
        f *= float(priors.get(mark, 1.0))
    return f


class CategoryPrior:
    name = "category_prior"
    combine = "scale"

    def compute(self, ctx: RankingContext) -> dict[int, float]:
        """See the module docstring (chunks whose factor is 1 are left out)."""
        out = {}
        for i in ctx.base:
            c = ctx.chunks[i]
            f = prior(c.category, c.path, ctx.priors)
            if f != 1.0:
                out[i] = f
        return out


register(CategoryPrior())
