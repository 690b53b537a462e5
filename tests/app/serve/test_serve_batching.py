"""rag serve embeds concurrent queries in one batch (rag/search/batching.py) and scores them with
one matrix product: the hits equal unbatched search (scores to 1e-6, identical rankings), a
lone request never waits, a batch never exceeds ``max_batch``, an error reaches every caller,
and the options resolve like ``--max-body-bytes``. One test starts `rag serve` on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import replace

import numpy as np
import pytest

from rag.app.stages import StageCache

from conftest import run_overrides

QUERIES = ["how do customers use a voucher to pay less", "how should I deploy the shop",
           "refund money to a customer", "handleAuthCallback", "sum of prices in the cart",
           "who won the football world cup in 1998", "verify the signed callback",
           "shopping cart line items"]


def _concurrently(fn, args: list) -> list:
    """``fn(arg)`` for every arg on its own thread, all released together; results in order
    (an exception is returned in its slot)."""
    out: list = [None] * len(args)
    barrier = threading.Barrier(len(args))

    def run(k: int) -> None:
        barrier.wait()
        try:
            out[k] = fn(args[k])
        except BaseException as exc:  # noqa: BLE001 — checked by the caller
            out[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def _same_result(a, b) -> None:
    """Two SearchResults rank and return the same chunks, scores within 1e-6 of their size
    (or 1e-6 absolute near 0): a query embedded in a batch differs from one embedded alone in
    the float32 rounding of the matrix product (~1e-7), and the ranking stage's scores (its
    features in units of the best first-stage score, the definition's up to 4.5x that) carry
    it scaled up."""
    for got, want in ((a.ranked, b.ranked), (a.hits, b.hits)):
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want]
        for x, y in zip(got, want):
            assert x.score == pytest.approx(y.score, rel=1e-6, abs=1e-6)
            assert x.scores.keys() == y.scores.keys()
            for k in x.scores:
                assert (x.scores[k] is None) == (y.scores[k] is None)
                if x.scores[k] is not None:
                    assert x.scores[k] == pytest.approx(y.scores[k], rel=1e-6, abs=1e-6)
    assert (a.route, a.dropped, a.weak_match, a.reason) == (b.route, b.dropped, b.weak_match,
                                                           b.reason)
    assert a.top_dense == pytest.approx(b.top_dense, abs=1e-6)
    assert (a.signals is None) == (b.signals is None)
    for k, v in (a.signals or {}).items():
        assert (v is None) == (b.signals[k] is None)
        if v is not None:
            assert v == pytest.approx(b.signals[k], abs=1e-6)


@pytest.fixture
def index(fixture_repo, fixture_golden, tmp_path, compose, embedder):
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    return cfg, StageCache().index(cfg, fixture_repo, embedder, progress=False)


def test_batched_scores_and_hits_equal_unbatched_search(index):
    from rag.search.batching import DenseBatcher, dense_needed
    from rag.search.pipeline import SearchOptions, SearchPipeline

    cfg, idx = index
    batcher = DenseBatcher(idx.dense, wait_ms=20_000, max_batch=16)

    def ask(q: str):
        with batcher.request():
            return batcher.scores(q)

    try:
        t0 = time.perf_counter()
        got = _concurrently(ask, QUERIES)
        # the batch closed as soon as every search in flight had queued (not after 20 s)
        assert time.perf_counter() - t0 < 15
    finally:
        batcher.close()
    assert not [g for g in got if isinstance(g, BaseException)]
    assert max(batcher.sizes) > 1 and sum(k * n for k, n in batcher.sizes.items()) == len(QUERIES)
    assert {g.batch_size for g in got} == set(batcher.sizes)
    assert all({"batch_wait", "embed_query", "dense"} <= set(g.timings_ms) for g in got)
    base = SearchOptions.from_config(cfg)
    for q, g in zip(QUERIES, got):
        assert g.scores.shape == (len(idx.chunks),)
        np.testing.assert_allclose(g.scores, idx.dense.score(q), atol=1e-6, rtol=0)
        for opts in (replace(base, mode="dense", min_dense=0.0, weak_dense=0.0),
                     replace(base, mode="hybrid"), replace(base, mode="auto"),
                     replace(base, mode="dense", types=("documentation",)),
                     replace(base, mode="bm25")):
            pipe = SearchPipeline(idx, opts)
            signals = opts.mode == "bm25"
            assert dense_needed(idx, opts, q, signals=signals) == (
                opts.mode != "bm25" and not (opts.mode == "auto" and q == "handleAuthCallback")
                or signals)
            want = pipe.search(q, depth=5, with_signals=signals)
            have = pipe.search(q, depth=5, with_signals=signals, precomputed={"dense": g.scores})
            _same_result(have, want)
            assert "embed_query" not in have.timings_ms  # the batch's time is the caller's
    assert not dense_needed(idx, replace(base, mode="dense", types=("nonexistent",)), "x",
                            signals=True)
    with pytest.raises(ValueError, match="shape"):
        SearchPipeline(idx, replace(base, mode="dense")).search(
            "refund", precomputed={"dense": np.zeros(3, dtype=np.float32)})


def test_a_lone_request_never_waits_and_equals_the_unbatched_product(index):
    from rag.search.batching import DenseBatcher

    _, idx = index
    batcher = DenseBatcher(idx.dense, wait_ms=60_000, max_batch=16)
    try:
        for q in QUERIES[:2]:
            t0 = time.perf_counter()
            with batcher.request():
                got = batcher.scores(q)
            assert time.perf_counter() - t0 < 30  # not the 60 s wait
            assert got.batch_size == 1
            # a batch of one is the unbatched matrix-vector product, bit for bit
            assert np.array_equal(got.scores, idx.dense.score(q))
    finally:
        batcher.close()


def test_the_app_batches_only_an_exact_dense_channel(index, monkeypatch):
    from rag.app.serve.app import create_app

    cfg, idx = index
    assert create_app(cfg, idx).state.batcher is not None
    assert create_app(cfg, idx, max_batch=1).state.batcher is None
    monkeypatch.setattr(idx.dense, "ann", object(), raising=False)  # dense.index=hnsw|ivf
    assert create_app(cfg, idx).state.batcher is None


class _FakeEmbedder:
    dim = 4

    def __init__(self, fail: bool = False, poison: str | None = None) -> None:
        self.fail = fail
        self.poison = poison  # a query text this encoder fails on
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        if self.fail or self.poison in texts:
            raise RuntimeError("encoder broke")
        time.sleep(0.05)  # long enough for the other callers to queue behind this batch
        out = np.array([[len(t), 1.0, t.count("a"), 2.0] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class _FakeChannel:
    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.matrix = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)

    def scores(self, qvec):
        return self.matrix @ qvec


def test_batches_never_exceed_max_batch_and_errors_reach_only_their_caller():
    from rag.search.batching import DenseBatcher

    emb = _FakeEmbedder()
    channel = _FakeChannel(emb)
    batcher = DenseBatcher(channel, wait_ms=100, max_batch=3)
    texts = [f"query {'a' * k}" for k in range(10)]
    try:
        got = _concurrently(batcher.scores, texts)
    finally:
        batcher.close()
    assert all(not isinstance(g, BaseException) for g in got)
    assert sum(emb.calls) == 10 and max(emb.calls) <= 3 and max(emb.calls) > 1
    for t, g in zip(texts, got):
        np.testing.assert_allclose(g.scores, channel.scores(emb.embed([t])[0]), atol=1e-6)

    bad = DenseBatcher(_FakeChannel(_FakeEmbedder(fail=True)), wait_ms=50, max_batch=8)
    try:
        got = _concurrently(bad.scores, ["a", "b", "c"])
    finally:
        bad.close()
    assert all(isinstance(g, RuntimeError) and str(g) == "encoder broke" for g in got)
    # one query the encoder fails on: only its caller gets the error, the others their scores
    mixed = DenseBatcher(_FakeChannel(_FakeEmbedder(poison="boom")), wait_ms=50, max_batch=8)
    try:
        got = _concurrently(mixed.scores, ["a", "boom", "c"])
    finally:
        mixed.close()
    assert isinstance(got[1], RuntimeError)
    assert not isinstance(got[0], BaseException) and not isinstance(got[2], BaseException)
    with pytest.raises(RuntimeError, match="closed"):
        bad.scores("a")
    with pytest.raises(ValueError):
        DenseBatcher(channel, max_batch=0)
    with pytest.raises(ValueError):
        DenseBatcher(channel, wait_ms=-1)


def test_batching_options_resolve_like_the_body_limit(capsys):
    from rag.app.cli import main
    from rag.app.serve.app import resolve_batching

    assert resolve_batching(environ={}) == (5.0, 16)
    assert resolve_batching(environ={"RAG_BATCH_WAIT_MS": "2.5", "RAG_MAX_BATCH": "4"}) == (2.5, 4)
    assert resolve_batching("0", "1", environ={"RAG_BATCH_WAIT_MS": "9",
                                               "RAG_MAX_BATCH": "9"}) == (0.0, 1)
    for wait, batch, env, source in (("-1", None, {}, "--batch-wait-ms"),
                                     ("nan", None, {}, "--batch-wait-ms"),
                                     (None, None, {"RAG_BATCH_WAIT_MS": "soon"}, "RAG_BATCH_WAIT_MS"),
                                     (None, "0", {}, "--max-batch"),
                                     (None, None, {"RAG_MAX_BATCH": "2.5"}, "RAG_MAX_BATCH")):
        with pytest.raises(ValueError, match=source):
            resolve_batching(wait, batch, environ=env)
    assert main(["serve", "--max-batch", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-batch must be a positive integer") and err.count("\n") == 1


@pytest.mark.slow
def test_rag_serve_batches_concurrent_requests_with_the_hits_of_sequential_search(
        fixture_repo, tmp_path, monkeypatch):
    """8 concurrent POST /search to `rag serve` on 127.0.0.1 (stopped by its PID) answer what
    the same pipeline answers in process, one query at a time; the log shows a real batch."""
    from rag.search.pipeline import SearchPipeline
    from rag.app.search_cli import _load, search_abstention
    from rag.app.serve import process

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    overrides = [f"corpus.path={fixture_repo}", "corpus.name=shop"]
    log = tmp_path / "serve.log"
    proc, base = process.start(overrides, options=["--batch-wait-ms", "3000", "--max-batch", "8"],
                               env={"RAG_CACHE_DIR": str(tmp_path / "cache")}, log_path=log)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(body: dict) -> dict:
        req = urllib.request.Request(f"{base}/search", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=120) as resp:
            return json.loads(resp.read())

    bodies = [{"query": q, "mode": mode, "depth": 4, "signals": True, "min_dense": 0.0,
               "weak_dense": 0.0} for q in QUERIES for mode in ("dense", "hybrid")][:8]
    try:
        answers = _concurrently(post, bodies)
    finally:
        process.stop(proc)
    assert proc.poll() is not None
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    sizes = [x["batch"] for x in lines if x.get("event") == "search"]
    assert len(sizes) == 8 and max(sizes) > 1, sizes
    cfg, index, _ = _load(overrides)
    options, gate = search_abstention(cfg, index)
    for body, answer in zip(bodies, answers):
        opts = replace(options, mode=body["mode"], min_dense=0.0, weak_dense=0.0)
        # the request's bands win over the server's learned gate
        want = SearchPipeline(index, opts, gate=None).search(body["query"], depth=4,
                                                             with_signals=True)
        assert gate is not None and answer["abstention"] == "top_dense"
        assert {"batch_wait", "embed_query", "dense", "total"} <= set(answer["timings_ms"])
        for got, exp in ((answer["hits"], want.hits), (answer["ranked"], want.ranked)):
            assert [(h["path"], h["symbol"], h["start_line"]) for h in got] == [
                (h.path, h.symbol, h.start_line) for h in exp]
            for h, e in zip(got, exp):
                for k, v in e.scores.items():
                    assert (h["scores"][k] is None) == (v is None)
                    if v is not None:
                        assert h["scores"][k] == pytest.approx(v, abs=1e-6)
        assert answer["top_dense"] == pytest.approx(want.top_dense, abs=1e-6)
        for k, v in want.signals.items():
            assert answer["signals"][k] == pytest.approx(v, abs=1e-6) if v is not None \
                else answer["signals"][k] is None
