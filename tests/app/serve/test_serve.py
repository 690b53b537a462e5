"""rag serve: POST /search with overrides, 422s that name the field, and logs that never hold
the query text (malformed requests included). One test drives FastAPI in process; one starts
`rag serve` on 127.0.0.1. Hostile input in depth: test_serve_bad_input.py."""

from __future__ import annotations

import json
import os
import logging
import urllib.error
import urllib.request

import pytest

from rag.app.stages import StageCache

from conftest import run_overrides


@pytest.fixture
def client(fixture_repo, fixture_golden, tmp_path, compose, embedder, monkeypatch):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app

    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    index = StageCache().index(cfg, fixture_repo, embedder, progress=False)
    return TestClient(create_app(cfg, index))


@pytest.mark.slow
def test_search_with_overrides_and_validation(client, caplog):
    caplog.set_level(logging.INFO, logger="rag.serve")
    marker = "quokka handleAuthCallback"
    r = client.post("/search", json={"query": "handleAuthCallback", "mode": "bm25", "top_k": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert 1 <= len(body["hits"]) <= 2 and body["route"] == "bm25"
    assert body["hits"][0]["symbol"] == "handleAuthCallback"
    assert body["hits"][0]["scores"]["dense"] is None
    assert {"dropped", "weak_match", "timings_ms", "index"} <= set(body)
    r = client.post("/search", json={"query": "refund money", "mode": "dense", "top_k": 2,
                                     "min_dense": 0.0, "weak_dense": 0.0})
    assert len(r.json()["hits"]) == 2 and r.json()["route"] == "dense"
    r = client.post("/search", json={"query": "refund money", "types": ["documentation"],
                                     "min_dense": 0.0, "weak_dense": 0.0})
    assert r.status_code == 200 and {h["category"] for h in r.json()["hits"]} == {"documentation"}
    bad = client.post("/search", json={"query": "x", "topk": 3})
    assert bad.status_code == 422 and "topk" in bad.text
    bad = client.post("/search", json={"query": "x", "mode": "fuzzy"})
    assert bad.status_code == 422 and "mode" in bad.text
    assert client.post("/search", json={"query": ""}).status_code == 422
    assert client.post("/search", json={"query": "   "}).status_code == 422
    assert client.post("/search", json={"query": "a" * 5000}).status_code == 422
    assert client.post("/search", json={"query": "x", "min_dense": 0.9, "weak_dense": 0.1}).status_code == 422
    client.post("/search", json={"query": marker})
    # malformed requests carrying the marker: 4xx naming the field, the value never echoed,
    # and the marker in no log record of any logger (tracebacks included)
    caplog.set_level(logging.DEBUG)
    raw = {"min_dense": b'{"query": "quokka", "min_dense": NaN}',
           "weak_dense": b'{"query": "quokka", "weak_dense": Infinity}',
           "query": b'{"query": "quokka\\ud800"}',
           "types": b'{"query": "quokka", "types": ["quokka"]}'}
    for field, body in raw.items():
        r = client.post("/search", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", field], r.text
        assert "quokka" not in r.text
    # curl's default form encoding: said to be the content type, not a "dictionary" problem
    r = client.post("/search", content=b'{"query": "quokka"}',
                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 422 and r.json()["detail"] == [
        {"loc": ["header", "content-type"], "type": "content_type",
         "msg": "the body must be JSON, sent with Content-Type: application/json"}]
    r = client.post("/search", json={"query": "quokka " * 3_000_000})  # 21 MB
    assert r.status_code == 413 and r.json()["detail"][0]["type"] == "body_too_large"
    assert "quokka" not in r.text
    assert client.post("/search", json={"query": "refund money"}).status_code == 200
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "rag.serve"]
    assert lines and all("query" not in line for line in lines)
    assert any(line.get("query_chars") == len(marker) for line in lines)
    # topk, mode, "" and the 5000-character query above, the four above, the form-encoded
    # body and the 413
    assert [line["status"] for line in lines if line["event"] == "rejected"] == [422] * 9 + [413]
    assert "quokka" not in caplog.text
    assert not any(rec.exc_info for rec in caplog.records)
    assert client.get("/health").json()["status"] == "ok"
    rr = client.post("/search", json={"query": "refund money", "rerank": True, "mode": "dense",
                                      "min_dense": 0.0, "weak_dense": 0.0})
    assert rr.status_code == 200 and rr.json()["hits"][0]["scores"]["rerank"] is not None


@pytest.mark.slow
def test_rag_serve_on_loopback_with_env_flags(fixture_repo, tmp_path):
    from rag.app.serve import process

    proc, base = process.start([f"corpus.path={fixture_repo}", "corpus.name=shop"], capture=True,
                               env={"RAG_CACHE_DIR": str(tmp_path / "cache"), "RAG_TOP_K": "3",
                                    "RAG_SEARCH_MODE": "bm25"})
    try:
        req = urllib.request.Request(f"{base}/search", method="POST",
                                     data=json.dumps({"query": "zebra refund_order"}).encode(),
                                     headers={"Content-Type": "application/json"})
        body = json.loads(urllib.request.urlopen(req, timeout=30).read())
        # RAG_TOP_K=3 and RAG_SEARCH_MODE=bm25 are the service defaults
        assert body["route"] == "bm25" and len(body["hits"]) <= 3
        assert body["hits"][0]["symbol"] == "refund_order"
        bad = urllib.request.Request(f"{base}/search", method="POST",
                                     data=json.dumps({"query": "x", "colour": 1}).encode(),
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=30)
        assert err.value.code == 422
        for body in (b'{"query": "zebra", "min_dense": NaN}', b'{"query": "zebra\\ud800"}'):
            bad = urllib.request.Request(f"{base}/search", method="POST", data=body,
                                         headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(bad, timeout=30)
            assert err.value.code == 422 and b"zebra" not in err.value.read()
        # queries are embedded by the ONNX export (SERVING_QUERY_BACKEND), ranked as torch does
        health = json.loads(urllib.request.urlopen(f"{base}/health", timeout=30).read())
        assert "onnx(" in health["embedder"]
        dense = urllib.request.Request(
            f"{base}/search", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"query": "give the customer their money back", "mode": "dense",
                             "top_k": 5, "min_dense": 0, "weak_dense": 0}).encode())
        served = json.loads(urllib.request.urlopen(dense, timeout=30).read())["hits"]
    finally:
        out = process.stop(proc)
    assert '"query_chars": 18' in out
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.app.search_cli import _load

    os.environ["RAG_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        cfg, index, _ = _load([f"corpus.path={fixture_repo}", "corpus.name=shop",
                               "embedder.query_backend=torch"])
    finally:
        del os.environ["RAG_CACHE_DIR"]
    opts = SearchOptions(**{**SearchOptions.from_config(cfg).__dict__, "mode": "dense",
                            "top_k": 5, "min_dense": 0.0, "weak_dense": 0.0})
    local = SearchPipeline(index, opts).search("give the customer their money back").hits
    assert [(h["path"], h["symbol"]) for h in served] == [(h.path, h.symbol) for h in local]
    assert [h["scores"]["dense"] for h in served] == \
        pytest.approx([h.as_dict()["scores"]["dense"] for h in local], abs=1e-5)
    assert "zebra" not in out and "Traceback" not in out


@pytest.mark.slow
def test_bench_serve_section_on_fixture(fixture_repo, tmp_path, monkeypatch):
    """The benchmark's service section runs end to end on tiny inputs; no time is asserted."""
    from rag.bench import main

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench.md"
    assert main(["--sections", "serve", "--requests", "24", "--concurrency", "4",
                 "--out", str(out), f"corpus.path={fixture_repo}", "corpus.name=shop"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["serve"]["requests"] == 24 and data["serve"]["errors"] == 0
    assert data["serve"]["http"]["n"] == 24
    assert "Service over loopback" in out.read_text()


def test_cross_encoder_without_a_model_is_a_422_naming_the_training_command(
        fixture_repo, fixture_golden, tmp_path, compose, embedder, monkeypatch):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app, env_overrides

    assert env_overrides({"RAG_RERANK_KIND": "cross_encoder", "RAG_RERANK_MODEL": "/m",
                          "RAG_RERANK_CANDIDATES": "20"}) == [
        "rerank.kind=cross_encoder", "rerank.model=/m", "rerank.candidates=20"]
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden, "rerank=cross_encoder",
                                "rerank.enabled=false"))
    index = StageCache().index(cfg, fixture_repo, embedder, progress=False)
    client = TestClient(create_app(cfg, index))
    assert client.post("/search", json={"query": "refund money"}).status_code == 200
    r = client.post("/search", json={"query": "refund money", "rerank": True})
    assert r.status_code == 422 and "rag reranker train" in r.text
