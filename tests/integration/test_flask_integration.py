"""Integration tests on the real default corpus (Flask 3.1.3 sdist, fetched with pip once).

Select with ``pytest -m integration``; skip with ``-m "not integration"``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag.app.stages import StageCache

from conftest import PROJECT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def flask_root() -> Path:
    from rag.app.config import expand_path
    from rag.corpus.fetch import fetch_sdist

    return fetch_sdist("flask==3.1.3", expand_path(os.environ.get("RAG_CACHE_DIR", "~/.cache/rag")))


@pytest.fixture(scope="module")
def flask_bm25_indexes(flask_root):
    from rag.index.build import build_index

    return {backend: build_index(flask_root, embedder=None, cache_dir=None,
                                 bm25_backend=backend, progress=False)
            for backend in ("bm25s", "rank_bm25")}


@pytest.fixture(scope="module")
def flask_golden(flask_bm25_indexes):
    from rag.eval.golden import load_golden

    idx = flask_bm25_indexes["bm25s"]
    return load_golden(PROJECT / "golden/flask", corpus_paths=idx.paths,
                       corpus_symbols=idx.symbols)


def test_flask_corpus_walk_and_chunks(flask_bm25_indexes):
    idx = flask_bm25_indexes["bm25s"]
    assert idx.stats["files_indexed"] > 200
    assert idx.stats["files_skipped_binary"] >= 1  # the sdist ships images
    assert ("src/flask/app.py", "Flask.make_response") in idx.symbols
    assert ("src/flask/helpers.py", "url_for") in idx.symbols
    assert len({c.id for c in idx.chunks}) == len(idx.chunks)


def test_golden_set_meets_its_brief(flask_golden):
    from rag.search.route import looks_like_symbol

    pos, neg = flask_golden.positives, flask_golden.negatives
    assert len(pos) >= 60 and len(neg) >= 15
    symbol = [q for q in pos if "symbol" in q.tags]
    assert len(symbol) >= 20 and all(looks_like_symbol(q.query) for q in symbol)
    assert sum("prose" in q.tags for q in pos) >= 30
    assert sum("docs" in q.tags for q in pos) >= 10
    assert all(not looks_like_symbol(q.query) for q in pos if "prose" in q.tags)


def test_bm25s_and_rank_bm25_agree_on_golden_top10(flask_bm25_indexes, flask_golden):
    a, b = flask_bm25_indexes["bm25s"], flask_bm25_indexes["rank_bm25"]
    queries = [q.query for q in flask_golden.positives] + [q.query for q in flask_golden.negatives]
    for query in queries:
        ra, rb = a.bm25.search(query, 10), b.bm25.search(query, 10)
        assert [i for i, _ in ra] == [i for i, _ in rb], query
        assert [s for _, s in ra] == pytest.approx([s for _, s in rb], rel=1e-4), query


def test_flask_main_job_metrics_in_range(flask_root, compose, embedder, monkeypatch):
    import rag.app.run as run_mod

    stages = StageCache(embedder=embedder)
    metrics = run_mod.run_job(compose(["tracking.enabled=false"]), stages=stages)
    assert metrics["n_positives"] >= 60 and metrics["n_negatives"] >= 15
    for k, v in metrics.items():
        if k.startswith(("recall", "hit", "mrr", "ndcg", "abstain", "false_weak")) or "/recall" in k:
            assert 0.0 <= v <= 1.0, k
    ks = [1, 3, 5, 8, 10, 20, 40]
    assert [metrics[f"recall_at_{k}"] for k in ks] == sorted(metrics[f"recall_at_{k}"] for k in ks)
    assert metrics["index/chunks_truncated_share"] > 0
    # Anserini-style regression: the default row matches golden/flask/expected.yaml
    from rag.eval.expected import check_expected, load_expected

    header, expectations = load_expected(PROJECT / "golden/flask/expected.yaml")
    assert header["overrides"] == [] and len(expectations) >= 8
    assert check_expected(metrics, expectations) == []
