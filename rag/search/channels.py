"""First-stage channels, registered by name (:data:`CHANNELS`).

A channel (:class:`Channel`) scores every chunk for a query: shape (n_chunks,), higher is
better; a score at or below the channel's ``no_match`` (or not finite) means "no match" and
never makes a candidate. The pipeline ranks a single-channel route (``search.mode=<name>``)
by one channel and fuses any subset with RRF (``search.fuse``), without knowing which
channels exist. :data:`CHANNEL_NAMES` is the one vocabulary config validation, the search
modes (rag/app/config.py ``SearchMode``), the CLI and the request schema read.

Adding a channel is one class here (``name``, ``no_match``, ``score(query)`` and a
``from_texts(texts)`` classmethod so an index can build it on demand) and one YAML under
conf/channels/. ``bm25`` (rag/index/bm25.py) and ``dense`` (rag/index/dense.py) have no
``from_texts``: they need settings or a model, are built with the index and persist in its
versioned build.

* ``grep`` — :class:`GrepChannel`: literal, case-insensitive matches of the query's
  identifier and keyword tokens, as a coding agent's ``grep -i`` would find them. Score of a
  chunk: ``sum over distinct query terms t of ln(1 + count of t in the chunk)`` — every term
  found counts, repeated hits of one term count less and less. Counted by the ``ripgrep``
  binary (``rg --count-matches --ignore-case --fixed-strings``) over the chunks written once
  to a private folder when ``rg`` is on PATH (backend ``auto``), else in Python
  (``str.count`` on lower-cased text); the two give the same counts on ASCII text (tested).
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol, Sequence

import numpy as np

from rag.index.bm25 import BM25Channel
from rag.index.dense import DenseChannel

# terms a grep for a question would not be run on
GREP_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its of on or should "
    "that the then there these this to use used using what when where which who why will with "
    "you your".split())
_TERM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Channel(Protocol):
    """One first-stage retriever over the chunks of an index.

    Attributes:
        name: the registry name (:data:`CHANNELS`), the key of its score in ``Hit.scores``
            and of its wall time in ``SearchResult.timings_ms``.
        no_match: scores at or below this are "no match" (BM25 and grep: 0); None when
            every finite score ranks (dense cosines).
    """

    name: str
    no_match: float | None

    def score(self, query: str, *, timings: dict[str, float] | None = None) -> np.ndarray:
        """Score of every chunk, shape (n_chunks,). A channel with inner stages (dense:
        ``embed_query``) adds their seconds to ``timings``; its own time excludes them."""


def top_matches(scores: np.ndarray, depth: int, no_match: float | None) -> list[tuple[int, float]]:
    """The ``depth`` best (chunk index, score) pairs, ordered by (-score, index), leaving out
    non-finite scores (chunks a type filter removed are set to -inf) and, when ``no_match``
    is set, scores at or below it."""
    if no_match is None:
        return DenseChannel.top(scores, depth)
    keep = np.flatnonzero(np.isfinite(scores) & (scores > no_match))
    order = np.lexsort((keep, -scores[keep].astype(np.float64)))
    return [(int(i), float(scores[i])) for i in keep[order[:depth]]]


def is_match(score: float, no_match: float | None) -> bool:
    """Whether one channel score counts as a match (finite and above ``no_match``)."""
    return bool(np.isfinite(score)) and (no_match is None or score > no_match)


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
        backend: ``auto`` (ripgrep when ``rg`` is on PATH, else Python), ``ripgrep`` or
            ``python``.

    Raises:
        FileNotFoundError: ``backend="ripgrep"`` without an ``rg`` binary.
    """

    name = "grep"
    no_match = 0.0

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> "GrepChannel":
        """Build over an index's indexed texts (the registry's on-demand constructor)."""
        return cls(texts)

    def __init__(self, texts: Sequence[str], *, backend: str = "auto") -> None:
        import shutil

        self._lower = [t.lower() for t in texts]
        rg = shutil.which("rg")
        if backend == "ripgrep" and rg is None:
            raise FileNotFoundError("grep backend 'ripgrep' needs the rg binary (Debian: ripgrep)")
        self.backend = "ripgrep" if rg is not None and backend in ("auto", "ripgrep") else "python"
        self._rg = rg
        self._dir = None
        if self.backend == "ripgrep":
            import tempfile
            import weakref

            self._dir = tempfile.TemporaryDirectory(prefix="rag-grep-")
            for i, t in enumerate(texts):
                with open(f"{self._dir.name}/{i}", "w", encoding="utf-8", newline="") as fh:
                    fh.write(t)
            weakref.finalize(self, self._dir.cleanup)

    def counts(self, term: str) -> dict[int, int]:
        """chunk index -> occurrences of ``term`` (case-insensitive, literal), chunks with none
        left out."""
        if self.backend == "python":
            return {i: n for i, text in enumerate(self._lower) if (n := text.count(term))}
        import subprocess

        proc = subprocess.run(
            [self._rg, "--count-matches", "--ignore-case", "--fixed-strings", "--no-ignore",
             "--hidden", "--no-messages", "--with-filename", "-e", term, self._dir.name],
            capture_output=True, text=True, check=False)
        out: dict[int, int] = {}
        for line in proc.stdout.splitlines():
            path, _, n = line.rpartition(":")
            out[int(path.rsplit("/", 1)[-1])] = int(n)
        return out

    def score(self, query: str, *, timings: dict[str, float] | None = None) -> np.ndarray:
        """``sum_t ln(1 + count_t)`` per chunk, float64, shape (n_chunks,)."""
        out = np.zeros(len(self._lower), dtype=np.float64)
        for t in grep_terms(query):
            for i, n in self.counts(t).items():
                out[i] += math.log1p(n)
        return out


# name -> channel class; a class with ``from_texts`` is built on demand by Index.channel
CHANNELS: dict[str, type] = {"bm25": BM25Channel, "dense": DenseChannel, "grep": GrepChannel}
# every channel a route or a fusion may name
CHANNEL_NAMES: tuple[str, ...] = tuple(CHANNELS)


def channel_of(index: Any, name: str) -> Any:
    """The channel ``name`` (:data:`CHANNELS`) over ``index``'s chunks: one the index was built
    with (``bm25``, ``dense``), or one built on first use from the texts the index holds
    (``from_texts``) and kept with the index.

    Raises:
        ValueError: no such channel, or one that is built with an index and this index has
            none (``dense`` on a BM25-only index).
    """
    from rag.index.build import indexed_texts

    for own in (index.bm25, index.dense):
        if own is not None and own.name == name:
            return own
    cache = index.__dict__.setdefault("_channels", {})
    if name not in cache:
        cls = CHANNELS.get(name)
        if cls is None:
            raise ValueError(f"unknown channel {name!r}; registered: {sorted(CHANNELS)}")
        if not hasattr(cls, "from_texts"):
            raise ValueError(f"channel {name!r} is built with the index and this index has "
                             "none (was it built without an embedder?)")
        texts, _ = indexed_texts(index.chunks, str(index.stats.get("header", "path_symbol")))
        cache[name] = cls.from_texts(texts)
    return cache[name]


def has_channel(index: Any, name: str) -> bool:
    """Whether :func:`channel_of` can give ``name`` over ``index`` (without building it)."""
    if any(own is not None and own.name == name for own in (index.bm25, index.dense)):
        return True
    return hasattr(CHANNELS.get(name), "from_texts")

