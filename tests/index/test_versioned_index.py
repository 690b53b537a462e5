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
    from rag.app.serve.app import create_app

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


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "${oc.env:HOME}", "a\0b", "",
                                  "a\\b", ".hidden"])
def test_index_dir_refuses_names_that_are_not_one_safe_folder(tmp_path, name):
    with pytest.raises(ValueError) as err:
        versioned.index_dir(tmp_path / "cache", name, "/src/tiny")
    assert f"corpus.name={name!r}" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_index_dir_is_keyed_by_name_and_corpus_source(tmp_path):
    from rag.core.names import digest

    cache = tmp_path / "cache"
    assert versioned.index_dir(cache, "flask-3.1.3") == cache / "indexes" / "flask-3.1.3"
    a = versioned.index_dir(cache, "tiny", "/a/tiny")
    b = versioned.index_dir(cache, "tiny", "/b/tiny")
    assert a == cache / "indexes" / f"tiny-{digest('/a/tiny')}" and len(digest("/a/tiny")) == 8
    assert a != b and a.parent == b.parent == cache / "indexes"
    assert versioned.index_dir(cache, "tiny", "/a/tiny") == a  # deterministic


def test_load_refuses_a_build_of_another_corpus(built, embedder, tmp_path):
    root = tmp_path / "idx"
    versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                      normalized=True, corpus_root="/a/tiny")
    manifest = versioned.read_manifest(root)
    assert manifest["corpus_root"] == "/a/tiny" and manifest["corpus_sdist"] is None
    assert manifest["corpus_fingerprint"] == built.corpus_fingerprint
    _, ok = versioned.load_current(root, embedder, expect={"corpus_root": "/a/tiny"})
    assert ok["build_id"] == manifest["build_id"]
    with pytest.raises(versioned.CorpusMismatchError) as err:
        versioned.load_current(root, embedder, expect={"corpus_root": "/b/tiny"})
    assert "corpus_root: index '/a/tiny', requested '/b/tiny'" in str(err.value)
    with pytest.raises(versioned.CorpusMismatchError):
        versioned.load_current(root, embedder, expect={"corpus_sdist": "flask==3.1.3"})


def test_clean_up_deletes_only_its_own_builds(built, embedder, tmp_path):
    root = tmp_path / "idx"
    builds = root / "builds"
    kw = dict(embedder_id=embedder.model_id, dim=embedder.dim, normalized=True, corpus_root="/x")
    first = versioned.publish(built, root, **kw)
    # things under builds/ that publish did not make, and must never delete
    foreign = builds / "my-notes"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "sub" / "keep.txt").write_text("mine")
    no_manifest = builds / "20000101T000000-abcdef"
    no_manifest.mkdir()
    (no_manifest / "data.bin").write_bytes(b"x")
    wrong_id = builds / "20000101T000001-abcdef"
    wrong_id.mkdir()
    (wrong_id / "manifest.json").write_text(json.dumps({"build_id": "20000101T000009-000000",
                                                        "built_at": 0}))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "manifest.json").write_text(json.dumps({"build_id": "20000101T000002-abcdef",
                                                       "built_at": 0}))
    (builds / "20000101T000002-abcdef").symlink_to(outside, target_is_directory=True)
    linked_manifest = builds / "20000101T000003-abcdef"
    linked_manifest.mkdir()
    (linked_manifest / "manifest.json").symlink_to(outside / "manifest.json")

    second = versioned.publish(built, root, keep=1, **kw)
    # with keep=1 the previous current build survives this publish (a reader may hold it)...
    assert first.is_dir() and second.is_dir()
    third = versioned.publish(built, root, keep=1, **kw)
    # ...and goes at the next one; the new build and the current one are never deleted
    assert not first.exists() and second.is_dir() and third.is_dir()
    assert (root / "current").resolve() == third.resolve()
    assert versioned.read_manifest(root)["build_id"] == third.name
    assert (foreign / "sub" / "keep.txt").read_text() == "mine"
    assert (no_manifest / "data.bin").read_bytes() == b"x"
    assert wrong_id.is_dir() and linked_manifest.is_dir()
    assert (builds / "20000101T000002-abcdef").is_symlink() and (outside / "manifest.json").is_file()
    assert sorted(p.name for p in versioned._own_builds(builds)) == sorted([second.name, third.name])


def test_clean_up_never_deletes_the_new_build(built, embedder, tmp_path):
    """A proven build that sorts after the new one (a clock set back) does not make publish
    delete the build it just made current."""
    root = tmp_path / "idx"
    kw = dict(embedder_id=embedder.model_id, dim=embedder.dim, normalized=True, corpus_root="/x")
    future = versioned.publish(built, root, **kw)
    mf = future / "manifest.json"
    mf.write_text(json.dumps({**json.loads(mf.read_text()), "built_at": time.time() + 1e6}))
    new = versioned.publish(built, root, keep=1, **kw)
    assert new.is_dir() and versioned.read_manifest(root)["build_id"] == new.name
    index, _ = versioned.load_current(root, embedder, expect={"corpus_root": "/x"})
    assert len(index.chunks) == len(built.chunks)


def test_a_build_made_under_other_walk_rules_is_rebuilt_not_served(tmp_path, capsys):
    """A build published with secrets indexed (or by an older version) is never served to a
    search that runs under other settings: it is rebuilt, saying which settings differ."""
    from rag.app.search_cli import _load

    repo = tmp_path / "leak"
    repo.mkdir()
    (repo / "app.py").write_text("def f():\n    return 1\n")
    (repo / ".env").write_text("GITHUB_TOKEN=ghp_SuperSecretTokenValue123\n")
    over = [f"paths.cache_dir={tmp_path / 'cache'}"]
    _, built, manifest = _load([*over, "corpus.index_secrets=true"], publish=True, corpus_dir=repo)
    assert ".env" in built.paths and manifest["settings"]["corpus"]["index_secrets"] is True
    _, index, again = _load(over, corpus_dir=repo)
    assert ".env" not in index.paths and again["build_id"] != manifest["build_id"]
    assert "other settings (corpus.index_secrets); rebuilding it" in capsys.readouterr().err
    # a build that records no settings (an older version's) is rebuilt too
    from rag.index import versioned

    assert versioned.settings_changes({}, again["settings"]) == ["all (recorded by an older version)"]
    _, same, third = _load(over, corpus_dir=repo)
    assert third["build_id"] == again["build_id"]  # unchanged settings: the build is served


QUERIES = ["refund", "how is a refund issued", "Cart total", "unknown_word_zz", "def", ""]


def _all_scores(bm25):
    return [bm25.score(q) for q in QUERIES]


def test_the_published_bm25_is_read_back_not_rebuilt_and_scores_to_the_bit(built, embedder,
                                                                           tmp_path, monkeypatch):
    """A build saves its BM25 matrix (bm25.npz); loading it needs no re-tokenizing of the
    chunks and gives bitwise the scores of the channel that was built."""
    import numpy as np

    import rag.index.bm25 as bm25_mod

    root = tmp_path / "idx"
    build = versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                              normalized=True, corpus_root="/x")
    manifest = versioned.read_manifest(root)
    assert manifest["bm25"] == {"backend": "bm25s", "k1": 1.5, "b": 0.75, "tokenizer": "code",
                                "idf": "okapi", "path_field": False,
                                "files": ["bm25.npz", "bm25_vocab.json"]}
    assert (build / "bm25.npz").is_file() and (build / "bm25_vocab.json").is_file()

    def no_rebuild(*a, **k):
        raise AssertionError("BM25 was rebuilt from the chunks")

    monkeypatch.setattr(bm25_mod, "build_bm25", no_rebuild)
    index, _ = versioned.load_current(root, embedder)
    for got, want in zip(_all_scores(index.bm25), _all_scores(built.bm25)):
        assert got.dtype == want.dtype == np.float32 and np.array_equal(got, want)
    assert index.bm25.search("refund", 5) == built.bm25.search("refund", 5)
    assert index.bm25.empty_reason("unknown_word_zz") == built.bm25.empty_reason("unknown_word_zz")
    assert [index.bm25.scorer.doc_freq(t) for t in ("refund", "def", "zz")] == \
        [built.bm25.scorer.doc_freq(t) for t in ("refund", "def", "zz")]


def test_bm25_saved_under_other_settings_or_damaged_is_rebuilt(built, embedder, tmp_path, capsys):
    """Another k1 (a sweep over one build) or backend rebuilds BM25 from the chunks, silently;
    a damaged saved matrix is rebuilt with a warning naming the build; the scores are those
    of a fresh build with the requested settings either way."""
    import numpy as np

    from rag.index.bm25 import build_bm25
    from rag.index.build import indexed_texts

    root = tmp_path / "idx"
    build = versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                              normalized=True, corpus_root="/x")
    texts, _ = indexed_texts(built.chunks, built.stats.get("header", "path_symbol"))
    for backend, k1 in [("bm25s", 0.9), ("rank_bm25", 1.5)]:
        index, _ = versioned.load_current(root, embedder, bm25_backend=backend, k1=k1)
        fresh = build_bm25(texts, backend=backend, k1=k1)
        assert index.bm25.backend == backend
        for got, want in zip(_all_scores(index.bm25), _all_scores(fresh)):
            assert np.array_equal(got, want)
    assert capsys.readouterr().err == ""

    (build / "bm25.npz").write_bytes(b"not a zip")
    index, manifest = versioned.load_current(root, embedder)
    err = capsys.readouterr().err
    assert f"build {manifest['build_id']}: its saved BM25 is unusable" in err
    assert "rebuilding BM25 from its chunks" in err
    for got, want in zip(_all_scores(index.bm25), _all_scores(built.bm25)):
        assert np.array_equal(got, want)

    (build / "bm25_vocab.json").write_text('["only-one-token"]')  # disagrees with the matrix
    (build / "bm25.npz").unlink()
    versioned.load_current(root, embedder)
    assert "its saved BM25 is unusable" in capsys.readouterr().err


def test_bm25s_scorer_equals_bm25s_own_get_scores(fixture_repo):
    """The scorer keeps bm25s's CSC arrays and sums them itself: its scores are bm25s's
    get_scores x (k1 + 1), to the bit, repeated and unknown tokens included."""
    import bm25s
    import numpy as np

    from rag.index.bm25 import Bm25sScorer
    from rag.index.tokenize import get_tokenizer

    tok = get_tokenizer("code")
    texts = [p.read_text() for p in sorted(fixture_repo.rglob("*.py"))]
    corpus = [tok(t) for t in texts]
    ours = Bm25sScorer.build(corpus, k1=1.2, b=0.6)
    ref = bm25s.BM25(method="robertson", k1=1.2, b=0.6)
    ref.index([list(t) for t in corpus], show_progress=False)
    vocab = set(ref.vocab_dict) - {""}
    for q in (["refund"], ["refund", "refund", "cart"], ["zz_unknown", "cart"], sorted(vocab)[:7]):
        known = [t for t in q if t in vocab]
        want = (np.asarray(ref.get_scores(known), dtype=np.float32) * np.float32(2.2) if known
                else np.zeros(len(corpus), dtype=np.float32))
        assert np.array_equal(ours.scores(q), want), q


def _resave(build, **changes):
    import numpy as np

    with np.load(build / "bm25.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    np.savez(build / "bm25.npz", **arrays)


@pytest.mark.parametrize("damage", [
    "negative_index", "float_indices", "n_docs_array", "scale_nan", "scale_not_k1", "data_inf",
    "indptr_decreasing", "indptr_huge", "data_2d", "indptr_float"])
@pytest.mark.slow
def test_a_saved_bm25_matrix_that_is_not_one_is_rebuilt_not_scored(built, embedder, tmp_path,
                                                                  capsys, damage):
    """Arrays of the right length but the wrong kind or values (which numpy would index or
    wrap silently) are refused at load, warned about and rebuilt: the scores stay right."""
    import numpy as np

    root = tmp_path / "idx"
    build = versioned.publish(built, root, embedder_id=embedder.model_id, dim=embedder.dim,
                              normalized=True, corpus_root="/x")
    with np.load(build / "bm25.npz") as z:
        a = {k: z[k] for k in z.files}
    bad = {
        "negative_index": {"indices": np.where(np.arange(len(a["indices"])) == 0, -1,
                                               a["indices"]).astype(a["indices"].dtype)},
        "float_indices": {"indices": a["indices"].astype(np.float64)},
        "n_docs_array": {"n_docs": np.array([a["n_docs"], a["n_docs"]])},
        "scale_nan": {"scale": np.float64("nan")},
        "scale_not_k1": {"scale": np.float64(9.0)},
        "data_inf": {"data": np.where(np.arange(len(a["data"])) == 0, np.inf,
                                      a["data"]).astype(np.float32)},
        "indptr_decreasing": {"indptr": a["indptr"][::-1].copy()},
        "indptr_huge": {"indptr": np.where(np.arange(len(a["indptr"])) == 1, 10 ** 12,
                                           a["indptr"]).astype(np.int64)},
        "data_2d": {"data": a["data"].reshape(1, -1)},
        "indptr_float": {"indptr": a["indptr"].astype(np.float64)},
    }[damage]
    _resave(build, **bad)
    index, manifest = versioned.load_current(root, embedder)
    assert "its saved BM25 is unusable" in capsys.readouterr().err
    for got, want in zip(_all_scores(index.bm25), _all_scores(built.bm25)):
        assert np.array_equal(got, want)
