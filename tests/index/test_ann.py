"""dense.index = exact | hnsw | ivf (rag/index/ann.py): recall against exact search, the
channel contract (-inf outside the candidates), type filters, the pipeline and a run on the
fixture repository, and published builds that store, reload and refuse an ANN."""

from __future__ import annotations

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from rag.bench.ann import clustered_matrix, exact_top  # noqa: E402
from rag.index.ann import AnnIndex, AnnSettings, auto_nlist, recall_at_k  # noqa: E402
from rag.index.dense import DenseChannel  # noqa: E402


@pytest.fixture(scope="module")
def data():
    """4,000 clustered unit vectors (100 centres) and 200 queries near them."""
    x, q = clustered_matrix(4000, centres=100, queries=200, seed=1)
    return x, q, exact_top(x, q, 10)


def _channel_top10(ch: DenseChannel, q: np.ndarray) -> list[list[int]]:
    return [[i for i, _ in ch.top(ch.candidate_scores(v, k=10), 10)] for v in q]


@pytest.mark.parametrize("kind,bound", [("hnsw", 0.97), ("ivf", 0.93)])
def test_ann_recall_against_exact(data, kind, bound):
    """Measured here: hnsw 1.000, ivf (nlist 63, nprobe 32) 0.996 with the defaults; the
    bounds leave room for FAISS versions and seeds."""
    x, q, truth = data
    ch = DenseChannel(None, x, ann=AnnIndex.build(x, AnnSettings(index=kind)))
    assert recall_at_k(_channel_top10(ch, q), truth.tolist(), 10) >= bound
    # fewer lists scanned / a narrower beam: lower recall, never higher than exact's 1
    narrow = AnnSettings(index=kind, ivf_nprobe=1, ef_search=1, ann_candidates=10)
    ch2 = DenseChannel(None, x, ann=AnnIndex.build(x, narrow))
    assert recall_at_k(_channel_top10(ch2, q), truth.tolist(), 10) <= 1.0


def test_candidate_scores_are_exact_cosines_of_the_candidates_only(data):
    x, q, _ = data
    ch = DenseChannel(None, x, ann=AnnIndex.build(x, AnnSettings(index="hnsw", ann_candidates=50)))
    v = q[0]
    s = ch.candidate_scores(v, k=20)
    finite = np.flatnonzero(np.isfinite(s))
    assert len(finite) == 50 and s.shape == (len(x),)
    exact = ch.scores(v)
    # rescored with numpy (a BLAS product over the candidate rows: equal up to rounding)
    np.testing.assert_allclose(s[finite], exact[finite], rtol=0, atol=1e-6)
    assert float(s.max()) == pytest.approx(float(exact.max()), abs=1e-6)  # top_dense
    # a deeper search asks the ANN for more
    assert np.isfinite(ch.candidate_scores(v, k=300)).sum() == 300
    # exact channels keep today's behaviour: every chunk scored, top() exact
    assert DenseChannel(None, x).ann is None
    assert ch.ann_recall(q[:20], k=10) >= 0.95 and DenseChannel(None, x).ann_recall(q[:2]) == 1.0


def test_a_type_filter_oversamples_or_falls_back_to_exact(data):
    x, q, _ = data
    ch = DenseChannel(None, x, ann=AnnIndex.build(x, AnnSettings(index="hnsw", ann_candidates=40)))
    rng = np.random.default_rng(0)
    v = q[3]
    exact = ch.scores(v)
    # half the chunks allowed: the ANN is asked for 40 / 0.5 * 2 = 160, every candidate kept
    # is allowed, and at least 40 are
    half = rng.random(len(x)) < 0.5
    s = ch.candidate_scores(v, k=40, allowed=half)
    kept = np.flatnonzero(np.isfinite(s))
    assert ch.ann_stats["exact_fallbacks"] == 0 and len(kept) >= 40 and half[kept].all()
    best_allowed = np.flatnonzero(half)[np.argmax(exact[half])]
    assert s[best_allowed] == pytest.approx(exact[best_allowed], abs=1e-6)  # filtered best found
    # 2% allowed: 40 / 0.02 * 2 = 4,000 candidates > 20% of the corpus -> exact scores
    rare = np.zeros(len(x), dtype=bool)
    rare[rng.choice(len(x), 80, replace=False)] = True
    s = ch.candidate_scores(v, k=40, allowed=rare)
    assert ch.ann_stats["exact_fallbacks"] == 1 and np.array_equal(s, exact)
    # nothing allowed: nothing scored
    assert not np.isfinite(ch.candidate_scores(v, k=40, allowed=np.zeros(len(x), bool))).any()


def test_ivf_auto_nlist_and_settings_validation():
    assert auto_nlist(1_000_000) == 1000 and auto_nlist(1600) == 40 and auto_nlist(800) == 20 and auto_nlist(10) == 1
    x, _ = clustered_matrix(50, centres=5, queries=1)
    ann = AnnIndex.build(x, AnnSettings(index="ivf"))
    assert ann.nlist == 1 and ann.ntotal == 50  # tiny corpora still build
    with pytest.raises(ValueError, match="dense.index"):
        AnnSettings(index="annoy").validate()
    with pytest.raises(ValueError, match="dense.ef_search"):
        AnnSettings(index="hnsw", ef_search=0).validate()


def _cfg(compose, tmp_path, fixture_repo, fixture_golden, *extra):
    from conftest import run_overrides

    return compose(run_overrides(tmp_path, fixture_repo, fixture_golden, "tracking.enabled=false",
                                 "search.mode=dense", *extra))


def test_pipeline_with_hnsw_ranks_and_filters(compose, tmp_path, fixture_repo, fixture_golden,
                                              embedder):
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.app.stages import StageCache

    stages = StageCache(embedder=embedder)
    cfg = _cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.index=hnsw")
    index = stages.index(cfg, fixture_repo, embedder, progress=False)
    assert index.dense.ann is not None and index.dense.ann.kind == "hnsw"
    assert index.stats["ann_build_s"] >= 0
    exact_cfg = _cfg(compose, tmp_path, fixture_repo, fixture_golden)
    exact_index = stages.index(exact_cfg, fixture_repo, embedder, progress=False)
    assert exact_index.dense.ann is None and len(stages) == 2  # dense.* is in the stage key

    query = "how is a discount code applied to the cart"
    got = SearchPipeline(index, SearchOptions.from_config(cfg)).search(query, depth=5)
    want = SearchPipeline(exact_index, SearchOptions.from_config(exact_cfg)).search(query, depth=5)
    assert got.ranked and [h.chunk_id for h in got.ranked] == [h.chunk_id for h in want.ranked]
    assert got.top_dense == pytest.approx(want.top_dense)
    # a type filter still holds: only chunks of that category come back
    opts = SearchOptions(**{**SearchOptions.from_config(cfg).__dict__, "types": ("test",)})
    filtered = SearchPipeline(index, opts).search(query, depth=5)
    assert filtered.ranked and {h.category for h in filtered.ranked} == {"test"}


def test_run_logs_ann_recall(compose, tmp_path, fixture_repo, fixture_golden, embedder):
    from rag.app.run import run_job
    from rag.app.stages import StageCache

    stages = StageCache(embedder=embedder)
    metrics = run_job(_cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.index=ivf"),
                      stages=stages)
    assert metrics["ann_recall_at_10"] == pytest.approx(1.0)  # a dozen chunks: one IVF list
    assert "ann_recall_at_10" not in run_job(
        _cfg(compose, tmp_path, fixture_repo, fixture_golden), stages=stages)


def test_unknown_dense_index_is_rejected(compose, tmp_path, fixture_repo, fixture_golden):
    from rag.app.config import validate

    with pytest.raises(Exception, match="annoy"):
        _cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.index=annoy")
    with pytest.raises(ValueError, match="dense.ivf_nprobe"):
        validate(_cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.ivf_nprobe=0"))


def test_published_build_stores_reloads_and_refuses_the_ann(compose, tmp_path, fixture_repo,
                                                            fixture_golden, embedder, capsys):
    from rag.index import versioned
    from rag.app.stages import StageCache, index_settings

    cfg = _cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.index=hnsw",
               "dense.ef_search=32")
    index = StageCache(embedder=embedder).index(cfg, fixture_repo, embedder, progress=False)
    root = tmp_path / "idx"
    build = versioned.publish(index, root, embedder_id=embedder.model_id, dim=embedder.dim,
                              normalized=True, corpus_root=str(fixture_repo),
                              settings=index_settings(cfg))
    assert (build / "ann.faiss").is_file()
    loaded, manifest = versioned.load_current(root, embedder)
    assert manifest["ann"]["settings"]["index"] == "hnsw" and manifest["ann"]["faiss_version"]
    assert manifest["settings"]["dense"]["ef_search"] == 32
    ann = loaded.dense.ann
    assert ann.kind == "hnsw" and ann.ntotal == len(index.chunks)
    assert ann.index.hnsw.efSearch == 32
    v = embedder.embed(["discount code"])[0]
    np.testing.assert_array_equal(loaded.dense.candidate_scores(v), index.dense.candidate_scores(v))
    # a request with other ANN settings (or exact) sees the difference and rebuilds
    assert versioned.settings_changes(manifest, index_settings(cfg)) == []
    other = _cfg(compose, tmp_path, fixture_repo, fixture_golden, "dense.index=hnsw")
    assert versioned.settings_changes(manifest, index_settings(other)) == ["dense.ef_search"]
    exact = _cfg(compose, tmp_path, fixture_repo, fixture_golden)
    assert versioned.settings_changes(manifest, index_settings(exact)) == ["dense"]
    assert "dense" not in index_settings(exact)  # exact builds match pre-ANN builds
    # a lost ann.faiss is rebuilt from the embeddings, with a warning
    (build / "ann.faiss").unlink()
    again, _ = versioned.load_current(root, embedder)
    assert again.dense.ann.ntotal == len(index.chunks)
    assert "ann.faiss unusable" in capsys.readouterr().err
