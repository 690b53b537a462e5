"""A versioned index on disk: one directory per build with a manifest, published by atomic
rename, so a reader always sees a complete build and a build killed halfway leaves the
previous one serving.

Layout under ``<cache>/indexes/<corpus name>/``::

    builds/<build id>/manifest.json   embedder id, dim, normalisation, tokenizer and chunker
                                      versions, corpus fingerprint, built_at, counts
    builds/<build id>/chunks.json     the chunks
    builds/<build id>/embeddings.npy  (n_chunks, dim) float32, L2-normalised
    current -> builds/<build id>      a symlink swapped with os.replace (atomic)

A loaded build is checked against the configured embedder: a different model id or dimension
is refused (:class:`IndexMismatchError`), never scored.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rag.corpus.chunk import CHUNKER_VERSION, Chunk
from rag.index.tokenize import TOKENIZER_VERSION

FORMAT_VERSION = "1"


class IndexMismatchError(RuntimeError):
    """The published index was built with another embedder (or dimension) than requested."""


class NoIndexError(FileNotFoundError):
    """No build has been published for this corpus yet."""


def index_dir(cache_dir: Path, corpus_name: str) -> Path:
    """The directory holding the builds of one corpus."""
    return cache_dir / "indexes" / corpus_name


def publish(index: Any, root_dir: Path, *, embedder_id: str, dim: int, normalized: bool,
            corpus_root: str, keep: int = 3) -> Path:
    """Write ``index`` as a new build and make it current (atomic symlink swap).

    Returns:
        The new build directory. Older builds beyond ``keep`` are removed.
    """
    builds = root_dir / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    build_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    tmp = builds / f".{build_id}.tmp"
    tmp.mkdir()
    manifest = {
        "format": FORMAT_VERSION, "build_id": build_id, "built_at": time.time(),
        "embedder_id": embedder_id, "dim": dim, "normalized": normalized,
        "tokenizer_version": TOKENIZER_VERSION, "chunker_version": CHUNKER_VERSION,
        "corpus_fingerprint": index.corpus_fingerprint, "corpus_root": corpus_root,
        "chunks": len(index.chunks), "stats": index.stats,
    }
    (tmp / "chunks.json").write_text(json.dumps([asdict(c) for c in index.chunks]))
    if index.dense is not None:
        np.save(tmp / "embeddings.npy", index.dense.matrix)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    final = builds / build_id
    os.replace(tmp, final)
    link_tmp = root_dir / f".current.{uuid.uuid4().hex[:6]}"
    os.symlink(Path("builds") / build_id, link_tmp)
    os.replace(link_tmp, root_dir / "current")  # readers see the old or the new build, whole
    old = sorted(p for p in builds.iterdir() if p.is_dir() and not p.name.startswith("."))
    for p in old[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def read_manifest(root_dir: Path) -> dict[str, Any]:
    """The current build's manifest.

    Raises:
        NoIndexError: nothing published yet.
    """
    try:
        return json.loads((root_dir / "current" / "manifest.json").read_text())
    except FileNotFoundError:
        raise NoIndexError(f"no index published under {root_dir}; run `rag index`") from None


def check_compatible(manifest: dict[str, Any], *, embedder_id: str, dim: int) -> None:
    """Raise :class:`IndexMismatchError` naming what differs between index and request."""
    problems = []
    if manifest.get("embedder_id") != embedder_id:
        problems.append(f"embedder: index {manifest.get('embedder_id')!r}, requested {embedder_id!r}")
    if manifest.get("dim") != dim:
        problems.append(f"dimension: index {manifest.get('dim')}, requested {dim}")
    if manifest.get("tokenizer_version") != TOKENIZER_VERSION:
        problems.append(f"BM25 tokenizer version: index {manifest.get('tokenizer_version')}, "
                        f"code {TOKENIZER_VERSION}")
    if problems:
        raise IndexMismatchError("index is incompatible with the request (" + "; ".join(problems)
                                 + "); rebuild it with `rag index` using the same config")


def load_current(root_dir: Path, embedder: Any, *, bm25_backend: str = "bm25s", k1: float = 1.5,
                 b: float = 0.75) -> tuple[Any, dict[str, Any]]:
    """The current build as an :class:`rag.index.build.Index`, after the compatibility check.

    Raises:
        NoIndexError, IndexMismatchError.
    """
    from rag.index.bm25 import build_bm25
    from rag.index.build import Index
    from rag.index.dense import DenseChannel

    manifest = read_manifest(root_dir)
    check_compatible(manifest, embedder_id=embedder.model_id, dim=embedder.dim)
    build = (root_dir / "current").resolve()
    chunks = [Chunk(**c) for c in json.loads((build / "chunks.json").read_text())]
    matrix = np.load(build / "embeddings.npy")
    bm25 = build_bm25([c.indexed_text for c in chunks], backend=bm25_backend, k1=k1, b=b)
    stats = {**manifest.get("stats", {}), "chunks_embedded": 0, "corpus_read": 0,
             "loaded_build": manifest["build_id"]}
    return (Index(chunks=chunks, bm25=bm25, dense=DenseChannel(embedder, matrix),
                  corpus_fingerprint=manifest["corpus_fingerprint"], stats=stats), manifest)


def age_hours(manifest: dict[str, Any], now: float | None = None) -> float:
    """Hours since the build was published."""
    return ((now or time.time()) - float(manifest["built_at"])) / 3600.0
