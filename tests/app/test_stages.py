"""rag/app/stages.py: one cache object, keyed by the config subtrees that determine each stage."""

from __future__ import annotations

from conftest import run_overrides
from rag.app.stages import StageCache, stage_key


class CountingEmbedder:
    """Stands in for a model: counts loads through the cache (never embeds here)."""

    model_id = "fake-model"
    dim = 4


def test_stage_key_is_a_hash_of_the_resolved_subtrees(compose, tmp_path):
    a = compose(["bm25.k1=1.2"])
    b = compose(["bm25.k1=1.2", "search.top_k=3"])
    c = compose(["bm25.k1=1.3"])
    assert stage_key("index", bm25=a.bm25) == stage_key("index", bm25=b.bm25)
    assert stage_key("index", bm25=a.bm25) != stage_key("index", bm25=c.bm25)
    # the stage name is part of the key
    assert stage_key("index", bm25=a.bm25) != stage_key("reranker", bm25=a.bm25)
    assert len(stage_key("index", bm25=a.bm25)) == 64


def test_index_reused_until_its_config_or_its_files_change(compose, tmp_path, fixture_repo,
                                                           fixture_golden):
    stages = StageCache(embedder=CountingEmbedder())
    base = run_overrides(tmp_path, fixture_repo, fixture_golden, "search.mode=bm25")
    cfg = compose(base)
    emb = stages.embedder(cfg)
    first = stages.index(cfg, fixture_repo, emb, progress=False)
    assert first.stats["index_reused"] == 0 and len(stages) == 1
    # keys that do not build the index (search, abstention) reuse it
    same = stages.index(compose([*base, "search.top_k=3", "abstain.min_dense=0.1"]),
                        fixture_repo, emb, progress=False)
    assert same is first and same.stats["index_reused"] == 1 and same.stats["chunks_embedded"] == 0
    # any key of corpus / bm25 / index builds another
    for extra in ("bm25.k1=1.2", "corpus.window_lines=30", "index.header=none"):
        other = stages.index(compose([*base, extra]), fixture_repo, emb, progress=False)
        assert other is not first, extra
    assert len(stages) == 4
    # a file added to the corpus: the stat fingerprint changes, the index is rebuilt
    (fixture_repo / "src" / "shop" / "shipping.py").write_text("def ship():\n    pass\n")
    grown = stages.index(cfg, fixture_repo, emb, progress=False)
    assert grown is not first and "src/shop/shipping.py" in grown.paths
    stages.clear()
    assert len(stages) == 0


def test_reranker_key_ignores_thresholds_and_pool_size(compose, monkeypatch):
    import rag.app.stages as st

    built = []
    monkeypatch.setattr(st, "load_reranker", lambda cfg, emb: built.append(cfg) or object())
    stages = StageCache(embedder=CountingEmbedder())
    on = ["rerank=late_interaction", "rerank.enabled=true"]
    r1 = stages.reranker(compose(on), CountingEmbedder())
    r2 = stages.reranker(compose([*on, "rerank.min_score=0.2", "rerank.candidates=10",
                                  "rerank.gate_thresholds=[0.5]"]), CountingEmbedder())
    r3 = stages.reranker(compose([*on, "rerank.max_length=64"]), CountingEmbedder())
    assert r1 is r2 and r3 is not r1 and len(built) == 2
    assert stages.reranker(compose(["rerank=disabled"]), CountingEmbedder()) is None


def test_embedder_loaded_once_per_embedder_subtree(compose, monkeypatch):
    import rag.app.stages as st

    loads = []
    monkeypatch.setattr(st, "load_embedder", lambda cfg: loads.append(cfg) or CountingEmbedder())
    stages = StageCache()
    a = stages.embedder(compose([]))
    assert stages.embedder(compose(["search.mode=bm25"])) is a
    assert stages.embedder(compose(["embedder.batch_size=8"])) is not a
    assert len(loads) == 2
    # a cache given a loaded model serves it for every config
    assert StageCache(embedder=a).embedder(compose(["embedder.batch_size=8"])) is a
