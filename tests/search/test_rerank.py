"""Late-interaction reranking: MaxSim by hand, and the stage in the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from rag.search.rerank import maxsim


def test_maxsim_by_hand():
    q = np.array([[1.0, 0.0], [0.0, 2.0]])            # normalised: (1,0), (0,1)
    d = np.array([[3.0, 0.0], [1.0, 1.0]])            # normalised: (1,0), (.7071,.7071)
    # token 1: max(1, .7071) = 1; token 2: max(0, .7071) = .7071; mean = .85355
    assert maxsim(q, d) == pytest.approx((1 + 2 ** -0.5) / 2)
    assert maxsim(q, d[:0]) == 0.0 and maxsim(q[:0], d) == 0.0
    # order of document tokens does not matter; a document equal to the query scores 1
    assert maxsim(q, d[::-1]) == pytest.approx(maxsim(q, d))
    assert maxsim(q, q) == pytest.approx(1.0)


def test_late_interaction_reranks_the_candidate_pool(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.search.rerank import LateInteractionReranker

    index = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    rr = LateInteractionReranker(embedder, tmp_path / "tok")
    opts = SearchOptions(mode="dense", top_k=3, candidates=4, min_dense=0.0, weak_dense=0.0,
                         rerank_candidates=4)
    plain = SearchPipeline(index, opts).search("send money back for a cancelled order", depth=10)
    res = SearchPipeline(index, opts, reranker=rr).search("send money back for a cancelled order",
                                                          depth=10)
    head = res.ranked[:4]
    # the reranked head is the dense top-4, sorted by MaxSim; the tail keeps the dense order
    assert {h.chunk_id for h in head} == {h.chunk_id for h in plain.ranked[:4]}
    assert [h.scores["rerank"] for h in head] == sorted((h.scores["rerank"] for h in head), reverse=True)
    assert [h.chunk_id for h in res.ranked[4:]] == [h.chunk_id for h in plain.ranked[4:len(res.ranked)]]
    assert all(h.scores["rerank"] is None for h in res.ranked[4:])
    chunk = next(c for c in index.chunks if c.id == head[0].chunk_id)
    qtok = rr._encode(["send money back for a cancelled order"])[0]
    assert head[0].scores["rerank"] == pytest.approx(maxsim(qtok, rr.token_embeddings([chunk])[0]), abs=2e-3)
    assert "rerank" in res.timings_ms
    # token embeddings are cached: a second reranker on the same cache computes nothing
    again = LateInteractionReranker(embedder, tmp_path / "tok")
    again._encode = None  # would fail if called for chunks
    assert len(again.token_embeddings([chunk])) == 1


def test_late_interaction_reranker_serves_other_threads(fixture_repo, embedder, tmp_path):
    """rag serve runs requests on a thread pool: the token cache opened in one thread must
    answer in another (it raised sqlite3.ProgrammingError, a 500)."""
    import threading

    from rag.index.build import build_index
    from rag.search.rerank import LateInteractionReranker

    index = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    rr = LateInteractionReranker(embedder, tmp_path / "tok")
    rr.score("refund money", index.chunks[:3])  # fills the (float16) cache
    here = rr.score("refund money", index.chunks[:3])  # read back from it, as the threads will
    got: list = []
    errors: list = []

    def work():
        try:
            got.append(rr.score("refund money", index.chunks[:3]))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(g == pytest.approx(here) for g in got) and len(got) == 3


def test_late_interaction_over_a_split_embedder_loads_its_document_side_once(embedder, tmp_path):
    """ONNX queries (rag search / rag serve's default), torch chunks: the tokens are the
    document side's, loaded on first use, and cached under the document model's id."""
    from rag.index.onnx_embedder import SplitEmbedder
    from rag.search.rerank import LateInteractionReranker, RerankerError, build_reranker

    class Query:  # stands in for the ONNX query encoder: no token vectors of its own
        model_id, dim, max_seq_length, name = "q|onnx", embedder.dim, 256, "q"

    loads: list = []
    split = SplitEmbedder(Query(), lambda: loads.append(1) or embedder,
                          documents_model_id=embedder.model_id)

    class Cfg:
        class rerank:  # noqa: N801 - the config group's shape
            enabled, kind = True, "late_interaction"

    rr = build_reranker(Cfg, split, tmp_path)
    assert isinstance(rr, LateInteractionReranker) and loads == []  # nothing loaded yet
    assert rr.model_id == embedder.model_id + "|token_embeddings"
    assert rr.load() is rr and rr.model is embedder.model and loads == [1]
    rr.load()
    assert loads == [1]
    direct = LateInteractionReranker(embedder, tmp_path / "direct")
    assert rr._encode(["refund money"])[0] == pytest.approx(direct._encode(["refund money"])[0])

    # a document side with no sentence-transformers model (embedder.backend=onnx): refused
    # when loaded, naming the keys; no embedder at all (a bm25-only index): refused when built
    class OnnxDocs:
        model_id, dim = "d|onnx", embedder.dim

    onnx_both = SplitEmbedder(Query(), lambda: OnnxDocs(), documents_model_id="d|onnx")
    with pytest.raises(RerankerError, match="embedder.backend=torch"):
        build_reranker(Cfg, onnx_both, tmp_path).load()
    with pytest.raises(RerankerError, match="late_interaction reads token embeddings"):
        build_reranker(Cfg, None, tmp_path)
