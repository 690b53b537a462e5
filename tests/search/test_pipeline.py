"""The pipeline over a fixture index: routing, fusion pool, per-hit scores, bands, depth."""

from __future__ import annotations

import pytest

from rag.corpus.chunk import split_lines
from rag.search.fusion import rrf
from rag.search.pipeline import SearchOptions, SearchPipeline


@pytest.fixture
def index(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index

    return build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)


def test_routes_and_channel_scores(index):
    p = SearchPipeline(index, SearchOptions(min_dense=0.0, weak_dense=0.0))
    sym = p.search("handleAuthCallback")
    assert sym.route == "bm25" and sym.top_dense is None
    assert sym.hits[0].symbol == "handleAuthCallback"
    assert sym.hits[0].scores["dense"] is None and sym.hits[0].scores["wsum"] is None
    assert sym.hits[0].scores["bm25"] > 0
    prose = p.search("give money back for a cancelled order")
    assert prose.route == "dense" and prose.hits[0].scores["bm25"] is None
    assert prose.top_dense == pytest.approx(prose.hits[0].scores["dense"])


def test_hybrid_fuses_only_the_candidate_pools(index):
    query = "refund order money back"
    wide = SearchPipeline(index, SearchOptions(mode="hybrid", top_k=2, candidates=40,
                                               min_dense=0.0, weak_dense=0.0)).search(query)
    narrow = SearchPipeline(index, SearchOptions(mode="hybrid", top_k=2, candidates=2,
                                                 fusion_method="rrf", min_dense=0.0,
                                                 weak_dense=0.0))
    res = narrow.search(query, depth=40)
    # with 2 candidates per channel at most 4 chunks can be fused
    assert len(res.ranked) <= 4
    dense = index.dense.top(index.dense.scores(index.dense.embed_query(query)), 2)
    from rag.index.bm25 import top_positive
    bm25 = top_positive(index.bm25.score(query), 2)
    expected = rrf({"dense": [i for i, _ in dense], "bm25": [i for i, _ in bm25]}, k=60)
    assert [h.chunk_id for h in res.ranked] == [index.chunks[i].id for i, _ in expected]
    assert [h.score for h in res.ranked] == pytest.approx([s for _, s in expected])
    # every hit reports a positive BM25 score whenever BM25 matched it, pool or not
    full = index.bm25.score(query)
    by_id = {c.id: n for n, c in enumerate(index.chunks)}
    for h in wide.ranked:
        s = full[by_id[h.chunk_id]]
        assert h.scores["bm25"] == (pytest.approx(s) if s > 0 else None)


def test_wsum_fuses_normalised_scores_and_names_its_score(index):
    query = "refund order money back"
    p = SearchPipeline(index, SearchOptions(mode="hybrid", top_k=3, candidates=3,
                                            fusion_method="wsum", min_dense=0.0,
                                            weak_dense=0.0))
    res = p.search(query, depth=40)
    dense = index.dense.top(index.dense.scores(index.dense.embed_query(query)), 3)
    from rag.index.bm25 import top_positive
    bm25 = top_positive(index.bm25.score(query), 3)

    def min_max(pairs):
        lo, hi = min(s for _, s in pairs), max(s for _, s in pairs)
        return {i: (s - lo) / (hi - lo) for i, s in pairs}

    by_hand: dict[int, float] = {}
    for pairs in (dense, bm25):
        for i, v in min_max(pairs).items():
            by_hand[i] = by_hand.get(i, 0.0) + v
    expected = sorted(by_hand.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [h.chunk_id for h in res.ranked] == [index.chunks[i].id for i, _ in expected]
    assert [h.scores["wsum"] for h in res.ranked] == pytest.approx([s for _, s in expected])
    assert "rrf" not in res.ranked[0].scores


def test_bands_drop_and_flag(index):
    q = "who won the football world cup"
    top = SearchPipeline(index, SearchOptions(min_dense=0.0, weak_dense=0.0)).search(q).top_dense
    dropped = SearchPipeline(index, SearchOptions(min_dense=top + 0.01, weak_dense=top + 0.02)).search(q)
    assert len(index.chunks) >= 8
    assert dropped.hits == [] and dropped.dropped == 8
    assert dropped.reason == (f"dropped by abstention: top dense cosine {top:.3f} < floor "
                              f"{top + 0.01:.3f}")
    # the ranking before abstention is untouched by the floor (DESIGN.md §5)
    kept = SearchPipeline(index, SearchOptions(min_dense=0.0, weak_dense=0.0)).search(q)
    assert [h.chunk_id for h in dropped.ranked] == [h.chunk_id for h in kept.ranked]
    assert len(dropped.ranked) == 8
    weak = SearchPipeline(index, SearchOptions(min_dense=top - 0.01, weak_dense=top + 0.01)).search(q)
    assert weak.weak_match and len(weak.hits) > 0 and weak.dropped == 0
    normal = SearchPipeline(index, SearchOptions(min_dense=top - 0.02, weak_dense=top)).search(q)
    assert not normal.weak_match  # top == weak_dense is the normal band


def test_a_returned_definition_of_the_queried_identifier_is_never_abstained_on(index):
    from rag.search.ranking import RankingOptions

    def run(query, trust):
        return SearchPipeline(index, SearchOptions(
            mode="hybrid", min_dense=0.99, weak_dense=0.995, ranking=RankingOptions(),
            trust_definitions=trust)).search(query)

    # every top cosine is < 0.99: without the rule the identifier lookup is dropped
    off = run("handleAuthCallback", False)
    assert off.hits == [] and off.dropped == 8
    on = run("handleAuthCallback", True)
    assert on.hits[0].symbol == "handleAuthCallback" and on.hits[0].scores["rank:definition"] > 0
    assert not on.weak_match and on.dropped == 0
    # a name the corpus does not define, and prose, still abstain
    assert run("handleRefundWebhook", True).hits == []
    assert run("who won the football world cup", True).hits == []


def test_ranked_runs_to_depth_distinct_paths(index):
    p = SearchPipeline(index, SearchOptions(mode="dense", top_k=2, min_dense=0.0, weak_dense=0.0))
    res = p.search("shop", depth=3)
    paths = list(dict.fromkeys(h.path for h in res.ranked))
    assert len(paths) == 3 and res.ranked[-1].path == paths[-1]
    assert len(res.hits) == 2


def test_split_lines_counts_only_newlines():
    text = "x = 1\n\x0c\ny = 2\ns = 'a\u2028b'\r\nz\rlast"
    assert split_lines(text) == ["x = 1\n", "\x0c\n", "y = 2\n", "s = 'a\u2028b'\r\n", "z\r", "last"]


def test_type_filter_applies_before_scoring(index):
    docs_only = SearchPipeline(index, SearchOptions(mode="hybrid", types=("documentation",),
                                                    min_dense=0.0, weak_dense=0.0))
    res = docs_only.search("deploy the shop behind a reverse proxy", depth=40)
    assert res.ranked and {h.category for h in res.ranked} == {"documentation"}
    # the unfiltered run ranks other categories too, so the filter really removed candidates
    everything = SearchPipeline(index, SearchOptions(mode="hybrid", min_dense=0.0, weak_dense=0.0))
    assert {h.category for h in everything.search("deploy the shop", depth=40).ranked} > {"documentation"}
    none = SearchPipeline(index, SearchOptions(types=("issue",))).search("refunds")
    assert none.hits == [] and "issue" in none.reason and none.dropped == 0


@pytest.mark.slow
def test_rag_search_cli_json(fixture_repo, tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "rag", "search", "handleAuthCallback", "--mode",
                           "bm25", "-r", str(fixture_repo), "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    first = out["hits"][0]
    assert (first["path"], first["symbol"]) == ("src/shop/payments.py", "handleAuthCallback")
    assert set(first) >= {"path", "symbol", "start_line", "end_line", "category", "scores"}
    assert first["scores"]["dense"] is None and first["scores"]["bm25"] > 0
    assert out["dropped"] == 0 and out["weak_match"] is False
    bad = subprocess.run([sys.executable, "-m", "rag", "search", "x", "-r", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode != 0 and "is not a directory" in bad.stderr and "Traceback" not in bad.stderr


def test_expected_type_filters_and_their_false_negative_rate(index, fixture_golden):
    from rag.eval.evaluate import evaluate
    from rag.eval.golden import load_golden

    q = fixture_golden / "queries.yaml"
    text = q.read_text()
    # voucher -> [source] keeps its answer (cart.py); deploy -> [source] hides docs/guide.md
    text = text.replace("    tags: [prose]\n", "    tags: [prose]\n    types: [source]\n")
    text = text.replace("    tags: [prose, docs]\n", "    tags: [prose, docs]\n    types: [source]\n")
    q.write_text(text)
    golden = load_golden(fixture_golden)
    assert [g.types for g in golden.positives] == [(), ("source",), ("source",)]
    p = SearchPipeline(index, SearchOptions(min_dense=0.0, weak_dense=0.0))
    res = evaluate(p, golden, recall_ks=[1, 8], ndcg_k=10, depth=8, progress=False,
                   use_expected_types=True)
    # 2 queries carry types; the deploy query's only relevant doc is documentation: 1/2
    assert res.metrics["filtered_queries"] == 2.0
    assert res.metrics["filter_false_negative_rate"] == 0.5
    deploy = next(r for r in res.per_query if r["query_id"] == "prose-deploy")
    assert deploy["recall_at_8"] == 0.0  # the filter hid it, so nothing relevant came back
    unfiltered = evaluate(p, golden, recall_ks=[1, 8], ndcg_k=10, depth=8, progress=False)
    assert "filter_false_negative_rate" not in unfiltered.metrics
    assert next(r for r in unfiltered.per_query if r["query_id"] == "prose-deploy")["recall_at_8"] == 1.0


def test_index_header_is_an_ablation_axis(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index, indexed_texts

    full = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    bare = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False,
                       header="none")
    chunk = next(c for c in full.chunks if c.symbol == "handleAuthCallback")
    texts, keys = indexed_texts([chunk], "symbol")
    assert texts == ["handleAuthCallback\n" + chunk.text]
    assert indexed_texts([chunk], "path_symbol") == (
        ["src/shop/payments.py: handleAuthCallback\n" + chunk.text], [chunk.content_hash])
    assert indexed_texts([chunk], "none")[0] == [chunk.text] and keys[0] != chunk.content_hash
    # a header mode never reuses another mode's embeddings: the bare index embedded anew
    assert bare.stats["chunks_embedded"] == len(bare.chunks) and bare.stats["header"] == "none"
    # the path is searchable only when it is indexed
    assert full.bm25.score("payments").max() > 0
    assert bare.bm25.score("payments").max() == 0
    with pytest.raises(ValueError, match="index.header must be one of"):
        indexed_texts([chunk], "bogus")


def test_a_routed_query_bm25_cannot_answer_falls_back_to_dense_a_named_mode_does_not(index):
    from dataclasses import replace

    opts = SearchOptions(mode="auto", fallback="dense", min_dense=0.0, weak_dense=0.0)
    res = SearchPipeline(index, opts).search("zzqxWvutNop")
    assert res.route == "bm25>dense"
    assert res.ranked and all(h.scores["bm25"] is None for h in res.ranked)
    # the dense channel's own order and scores
    dense = index.dense.top(index.dense.scores(index.dense.embed_query("zzqxWvutNop")),
                            len(res.ranked))
    assert [h.chunk_id for h in res.ranked] == [index.chunks[i].id for i, _ in dense]
    assert "answered by the dense channel instead" in res.reason
    named = SearchPipeline(index, replace(opts, mode="bm25")).search("zzqxWvutNop")
    assert named.route == "bm25" and named.ranked == []
    none = SearchPipeline(index, replace(opts, fallback=None)).search("zzqxWvutNop")
    assert none.route == "bm25" and none.ranked == []


def test_the_ranking_stage_logs_its_features_per_hit(index):
    from rag.search.ranking import RankingOptions
    from rag.search.ranking.features.definition import WHOLE_NAME_BONUS

    opts = SearchOptions(mode="hybrid", min_dense=0.0, weak_dense=0.0,
                         ranking=RankingOptions())
    res = SearchPipeline(index, opts).search("handleAuthCallback")
    top = res.ranked[0]
    assert top.symbol == "handleAuthCallback"
    # a defining chunk (1) whose whole symbol is the query (+ WHOLE_NAME_BONUS); its file
    # stem, payments, is not the name (no STEM_BONUS)
    assert top.scores["rank:definition"] == 1.0 + WHOLE_NAME_BONUS
    keys = [k for k in top.scores if k.startswith("rank:")]
    assert keys == ["rank:definition", "rank:embedded_identifier", "rank:path_match",
                    "rank:file_coherence", "rank:file_semantic", "rank:category_prior",
                    "rank:chunk_length"]
    assert top.scores["ranking"] == pytest.approx(top.score)
    assert "ranking" in res.timings_ms
    plain = SearchPipeline(index, SearchOptions(mode="hybrid", min_dense=0.0, weak_dense=0.0))
    assert "ranking" not in plain.search("handleAuthCallback").ranked[0].scores


@pytest.mark.parametrize("mode", ["bm25", "dense"])
def test_a_single_channel_route_ranks_the_same_top_at_any_depth(index, mode):
    """The ranking stage re-ranks the first ``rank_pool`` chunks of a single-channel route
    whatever depth an evaluation asks for; the rest follows in the channel's order. So
    ``rag search`` (no depth) shows the top the ledger row (depth 40) measured."""
    from rag.search.ranking import RankingOptions

    opts = SearchOptions(mode=mode, top_k=3, candidates=3, rank_pool=3, min_dense=0.0,
                         weak_dense=0.0, ranking=RankingOptions())
    p = SearchPipeline(index, opts)
    query = "cart total price discount"
    shallow, deep = p.search(query), p.search(query, depth=40)
    assert [h.chunk_id for h in shallow.ranked[:3]] == [h.chunk_id for h in deep.ranked[:3]]
    # below the stage's head: the channel's own order, unscored by the stage
    channel = index.bm25.score(query) if mode == "bm25" else \
        index.dense.scores(index.dense.embed_query(query))
    tail = deep.ranked[3:]
    assert tail and all(h.scores.get("ranking") is None for h in tail)
    got = [channel[[c.id for c in index.chunks].index(h.chunk_id)] for h in tail]
    assert got == sorted(got, reverse=True)
