"""Registered channels (rag/search/channels.py): grep by hand, and fusion over any subset."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rag.search.channels import CHANNEL_NAMES, GrepChannel, channel_of, grep_terms, has_channel


def test_grep_terms_and_scores_by_hand():
    assert grep_terms("How does url_for build URLs? url_for!") == ["url_for", "build", "urls"]
    assert grep_terms("is it a db") == []  # stopwords and 1-2 letter words only
    ch = GrepChannel(["def url_for(): build(url_for)", "URLS and urls", "nothing here"])
    s = ch.score("url_for urls")
    # chunk 0: url_for x2, "urls" x0 -> ln 3; chunk 1: urls x2 (case-insensitive) -> ln 3
    assert s == pytest.approx([math.log(3), math.log(3), 0.0])
    assert ch.score("zzz_missing").tolist() == [0.0, 0.0, 0.0]
    assert CHANNEL_NAMES == ("bm25", "dense", "grep")


def test_pipeline_routes_to_and_fuses_any_channel(fixture_repo):
    from rag.index.build import build_index
    from rag.search.fusion import rrf
    from rag.search.pipeline import SearchOptions, SearchPipeline

    idx = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False)
    q = "handleAuthCallback refund"
    grep = SearchPipeline(idx, SearchOptions(mode="grep")).search(q, depth=5)
    expected = channel_of(idx, "grep").score(q)
    order = sorted(np.flatnonzero(expected > 0), key=lambda i: (-expected[i], i))
    assert [h.chunk_id for h in grep.ranked] == [idx.chunks[i].id for i in order][:len(grep.ranked)]
    assert all(h.scores["grep"] == pytest.approx(expected[idx.chunks.index(
        next(c for c in idx.chunks if c.id == h.chunk_id))]) for h in grep.ranked)
    fused = SearchPipeline(idx, SearchOptions(mode="hybrid", fuse=("bm25", "grep"),
                                                  fusion_method="rrf")).search(q, depth=5)
    bm25_rank = idx.bm25.search(q, 40)
    want = rrf({"bm25": [i for i, _ in bm25_rank], "grep": list(order)}, k=60)
    assert [h.chunk_id for h in fused.ranked[:3]] == [idx.chunks[i].id for i, _ in want[:3]]
    assert fused.ranked[0].scores["rrf"] == pytest.approx(want[0][1])
    assert "grep" in fused.timings_ms and "dense" not in fused.timings_ms
    with pytest.raises(ValueError, match="unknown channel 'nope'"):
        channel_of(idx, "nope")


def test_fuse_is_validated(compose):
    from rag.app.config import needs_dense, validate

    for bad in ("[grep]", "[grep,grep]", "[grep,nope]"):
        with pytest.raises(ValueError, match="search.fuse must name two or more distinct"):
            validate(compose([f"search.fuse={bad}"]))
    cfg = compose(["search.mode=hybrid", "search.fuse=[bm25,grep]"])
    validate(cfg)
    assert not needs_dense(cfg) and needs_dense(compose(["search.mode=hybrid"]))
    assert not needs_dense(compose(["search.mode=grep"]))


@pytest.mark.skipif(__import__("shutil").which("rg") is None,
                    reason="ripgrep is not installed (make test installs the Debian package)")
def test_ripgrep_and_python_backends_agree(fixture_repo):
    from rag.index.build import build_index, indexed_texts

    idx = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False)
    texts, _ = indexed_texts(idx.chunks)
    rg, py = GrepChannel(texts, backend="ripgrep"), GrepChannel(texts, backend="python")
    assert (rg.backend, py.backend) == ("ripgrep", "python")
    for q in ("handleAuthCallback refund", "how do customers use a voucher to pay less",
              "Shop shop SHOP deploy", "who won the football world cup", "item items"):
        assert rg.score(q) == pytest.approx(py.score(q)), q
    # counts by hand: "items" occurs twice in Cart.add_item (self.items[...], self.items.get)
    add_item = next(i for i, c in enumerate(idx.chunks) if c.symbol == "Cart.add_item")
    assert rg.counts("items")[add_item] == py.counts("items")[add_item] == 2


class LengthChannel:
    """A toy channel defined only here: scores a chunk by how many of its lines contain the
    query's first word (0 = no match)."""

    name = "lines"
    no_match = 0.0

    @classmethod
    def from_texts(cls, texts):
        return cls(texts)

    def __init__(self, texts):
        self.texts = list(texts)

    def score(self, query, *, timings=None):
        word = query.split()[0].lower()
        return np.array([sum(word in ln.lower() for ln in t.splitlines()) for t in self.texts],
                        dtype=np.float64)


def test_a_new_channel_is_one_class_in_the_registry(fixture_repo, monkeypatch):
    """A channel registered by name is routed to, fused and scored with no other change: the
    pipeline and the evaluator name no channel."""
    from rag.eval.evaluate import evaluate
    from rag.eval.golden import GoldenQuery, GoldenSet, Label
    from rag.index.build import build_index, indexed_texts
    from rag.search import channels
    from rag.search.fusion import rrf
    from rag.search.pipeline import SearchOptions, SearchPipeline

    monkeypatch.setitem(channels.CHANNELS, "lines", LengthChannel)
    idx = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False)
    texts, _ = indexed_texts(idx.chunks)
    q = "refund money back"
    expect = LengthChannel(texts).score(q)
    order = sorted(np.flatnonzero(expect > 0), key=lambda i: (-expect[i], i))
    alone = SearchPipeline(idx, SearchOptions(mode="lines", top_k=3)).search(q, depth=5)
    assert [h.chunk_id for h in alone.ranked] == [idx.chunks[i].id for i in order][:len(alone.ranked)]
    assert alone.ranked[0].scores["lines"] == expect[order[0]] and alone.ranked[0].scores["bm25"] is None
    fused = SearchPipeline(idx, SearchOptions(mode="hybrid", fuse=("bm25", "lines"),
                                                  fusion_method="rrf")).search(q)
    want = rrf({"bm25": [i for i, _ in idx.bm25.search(q, 40)], "lines": order[:40]}, k=60)
    assert [h.chunk_id for h in fused.ranked] == [idx.chunks[i].id for i, _ in want[:8]]
    assert fused.ranked[0].scores["rrf"] == pytest.approx(want[0][1])
    assert "lines" in fused.timings_ms
    # the evaluator scores it without knowing it: refund_order's file is the one hit
    first = idx.chunks[order[0]].path
    golden = GoldenSet(positives=[GoldenQuery(id="q1", query=q, tags=(),
                                              relevant=(Label(path=first),))],
                       negatives=[], fingerprint="", directory=fixture_repo)
    res = evaluate(SearchPipeline(idx, SearchOptions(mode="lines")), golden, recall_ks=[1],
                   ndcg_k=1, depth=5, progress=False)
    assert res.metrics["mrr"] == 1.0


def test_a_channel_the_index_was_built_without_is_named():
    from rag.index.build import Index

    idx = Index(chunks=[], bm25=None, dense=None, corpus_fingerprint="")
    with pytest.raises(ValueError, match="channel 'dense' is built with the index"):
        channel_of(idx, "dense")
    assert not has_channel(idx, "dense") and has_channel(idx, "grep")
