"""First-stage channels beyond the index's own two, registered by name (:data:`CHANNELS`).

A channel scores every chunk for a query (shape (n_chunks,), higher is better; 0 means "no
match" and never makes a candidate) and is built once per index from the chunks' indexed
texts. The pipeline ranks a single-channel route (``search.mode=<name>``) by it and fuses any
subset of channels with RRF (``search.fuse``). ``bm25`` and ``dense`` live in the index
(rag/index/); they are listed in :data:`CHANNEL_NAMES` so config validation, the CLI and the
request schema read one vocabulary.

* ``grep`` — :class:`GrepChannel`: literal, case-insensitive matches of the query's
  identifier and keyword tokens, as a coding agent's ``grep -i`` would find them. Score of a
  chunk: ``sum over distinct query terms t of ln(1 + count of t in the chunk)`` — every term
  found counts, repeated hits of one term count less and less.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Protocol, Sequence

import numpy as np

# terms a grep for a question would not be run on
GREP_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its of on or should "
    "that the then there these this to use used using what when where which who why will with "
    "you your".split())
_TERM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Channel(Protocol):
    """One first-stage retriever over the chunks of an index."""

    name: str

    def scores(self, query: str) -> np.ndarray:
        """Score of every chunk, shape (n_chunks,); 0 = no match."""


def grep_terms(query: str) -> list[str]:
    """The literal terms grep looks for: identifier-shaped tokens of >= 3 characters that are
    not stopwords, lower-cased, deduplicated in query order (``"How does url_for build
    URLs?"`` -> ``["url_for", "build", "urls"]``)."""
    out: list[str] = []
    for tok in _TERM.findall(query):
        t = tok.lower()
        if len(t) >= 3 and t not in GREP_STOPWORDS and t not in out:
            out.append(t)
    return out


class GrepChannel:
    """Literal grep over the chunks' indexed texts (see the module docstring for the score).

    Args:
        texts: the indexed text of each chunk, in index order.
    """

    name = "grep"

    def __init__(self, texts: Sequence[str]) -> None:
        self._lower = [t.lower() for t in texts]

    def scores(self, query: str) -> np.ndarray:
        """``sum_t ln(1 + count_t)`` per chunk, float64, shape (n_chunks,)."""
        terms = grep_terms(query)
        out = np.zeros(len(self._lower), dtype=np.float64)
        for i, text in enumerate(self._lower):
            s = 0.0
            for t in terms:
                n = text.count(t)
                if n:
                    s += math.log1p(n)
            out[i] = s
        return out


# name -> builder(indexed texts) for channels built on demand from an index
CHANNELS: dict[str, Callable[[Sequence[str]], Channel]] = {"grep": GrepChannel}
# every channel a route or a fusion may name (the index's own two first)
CHANNEL_NAMES: tuple[str, ...] = ("bm25", "dense", *CHANNELS)
