"""term_coverage by hand: IDF weights, stems, common words, the empty query, both BM25 backends."""

from __future__ import annotations

import math

import pytest

from rag.index.bm25 import Bm25sScorer, RankBM25Scorer
from rag.index.tokenize import tokenize
from rag.search.term_coverage import COMMON_WEIGHT, TermCoverage, common_words


def _cov(doc_freqs, n, common=frozenset()):
    return TermCoverage(doc_freqs=doc_freqs, n_docs=n, tokenize=tokenize, common=common)


def test_idf_weighted_share_by_hand():
    cov = _cov({"session": 2, "cookie": 1}, 4)
    w_session, w_kafka = math.log(1 + 4 / 2.5), math.log(1 + 4 / 0.5)
    assert cov.coverage("session kafka") == pytest.approx(w_session / (w_session + w_kafka))
    assert cov.coverage("session cookie") == 1.0
    assert cov.coverage("kafka") == 0.0
    # no term at all (stopwords, one letter, punctuation, another script): nothing measured
    assert cov.coverage("how do I") is None and cov.coverage("???") is None
    assert cov.coverage("日本語のテスト") is None


def test_a_missing_common_word_weighs_less():
    cov = _cov({"session": 2}, 4, common=frozenset({"kafka"}))
    w_session, w_kafka = math.log(1 + 4 / 2.5), math.log(1 + 4 / 0.5)
    assert cov.coverage("session kafka") == pytest.approx(
        w_session / (w_session + COMMON_WEIGHT * w_kafka))


def test_a_term_is_held_by_its_stem_and_compounds_are_left_out():
    cov = _cov({"dependency": 3}, 4)
    w = math.log(1 + 4 / 3.5)
    assert cov.terms("dependencies") == ["dependencies"]
    assert cov.coverage("dependencies") == 1.0
    # a dotted compound is left out; its parts stay
    assert cov.terms("flask.app") == ["app", "flask"]
    assert cov.coverage("dependency kafka") == pytest.approx(
        w / (w + math.log(1 + 4 / 0.5)))


def test_common_words_are_the_wordpiece_whole_words():
    words = common_words()
    assert {"entirely", "football", "session"} <= words
    assert not any(w.startswith("##") or len(w) < 2 for w in words)


@pytest.mark.parametrize("make", [
    lambda docs: Bm25sScorer.build(docs, k1=1.5, b=0.75),
    lambda docs: RankBM25Scorer(docs, k1=1.5, b=0.75)])
def test_both_backends_give_the_chunk_frequencies(make):
    docs = [["session", "cookie"], ["session"], ["cookie", "cookie"]]
    assert make(docs).term_doc_freqs() == {"session": 2, "cookie": 2}
