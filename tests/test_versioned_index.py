"""The published index: atomic builds, refusal on a mismatched embedder, stale flag."""

from __future__ import annotations

import json
import time

import pytest

from rag.index import versioned


@pytest.fixture
def built(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index

    return build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)


def test_publish_load_and_refuse(built, embedder, tmp_path):
    root = tmp_path / "idx"
    with pytest.raises(versioned.NoIndexError):
        versioned.read_manifest(root)
    first = versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                              normalized=True, corpus_root="/x")
    index, manifest = versioned.load_current(root, embedder)
    assert manifest["build_id"] == first.name and manifest["chunks"] == len(built.chunks)
    assert manifest["chunker_version"] and manifest["tokenizer_version"] and manifest["built_at"]
    assert [c.id for c in index.chunks] == [c.id for c in built.chunks]
    assert (index.dense.matrix == built.dense.matrix).all()
    assert index.stats["corpus_read"] == 0

    # a build that died halfway (its temporary directory left behind) changes nothing
    (root / "builds" / ".20990101T000000-dead.tmp").mkdir()
    assert versioned.read_manifest(root)["build_id"] == first.name
    second = versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                               normalized=True, corpus_root="/x")
    assert versioned.read_manifest(root)["build_id"] == second.name != first.name

    class Other:
        model_id, dim = "static-model|pca=256", 256

    with pytest.raises(versioned.IndexMismatchError) as err:
        versioned.load_current(root, Other())
    assert "static-model" in str(err.value) and "dimension: index 384, requested 256" in str(err.value)


def test_age_and_stale_flag_in_service(built, embedder, tmp_path, compose, fixture_repo,
                                       fixture_golden):
    from fastapi.testclient import TestClient

    from conftest import run_overrides
    from rag.serve.app import create_app

    root = tmp_path / "idx"
    versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                      normalized=True, corpus_root="/x")
    manifest = versioned.read_manifest(root)
    assert versioned.age_hours(manifest, now=manifest["built_at"] + 7200) == pytest.approx(2.0)
    old = {**manifest, "built_at": time.time() - 10 * 3600}
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden, "index.max_age_h=1"))
    body = TestClient(create_app(cfg, built, old)).post("/search", json={"query": "refund"}).json()
    assert body["index"]["stale"] is True and body["index"]["age_s"] >= 36000
    fresh = TestClient(create_app(cfg, built, manifest)).post("/search", json={"query": "refund"}).json()
    assert fresh["index"]["stale"] is False and fresh["index"]["version"] == manifest["build_id"]
    refusing = TestClient(create_app(cfg, None, {"refused": "embedder: index 'a', requested 'b'"}))
    r = refusing.post("/search", json={"query": "refund"})
    assert r.status_code == 409 and "requested 'b'" in r.json()["detail"]
    assert refusing.get("/health").json()["status"] == "refusing"
