"""A versioned index on disk: one directory per build with a manifest, published by atomic
rename, so a reader always sees a complete build and a build killed halfway leaves the
previous one serving.

Layout under ``<cache>/indexes/<corpus name>-<source hash>/`` (:func:`index_dir`: the corpus
name, checked by :func:`rag.core.names.safe_component`, and 8 hex digits of the SHA-256 of the
resolved corpus directory, or of the sdist requirement, so two directories that share a name
never share an index)::

    builds/<build id>/manifest.json   embedder id, dim, normalisation, tokenizer and chunker
                                      versions, corpus fingerprint, built_at, counts
    builds/<build id>/chunks.json     the chunks
    builds/<build id>/embeddings.npy  (n_chunks, dim) float32, L2-normalised
    builds/<build id>/ann.faiss       dense.index=hnsw|ivf only: the FAISS index
                                      (faiss.write_index); the manifest's ``ann`` records its
                                      settings, FAISS version and size (rag/index/ann.py)
    current -> builds/<build id>      a symlink swapped with os.replace (atomic)

A loaded build is checked against the configured embedder: a different model id or dimension
is refused (:class:`IndexMismatchError`), never scored; and against the requested corpus: a
build whose recorded ``corpus_root`` (or ``corpus_sdist``) is not the requested one is refused
(:class:`CorpusMismatchError`). Its recorded settings (``settings``, with ``dense`` when the
build holds an ANN) are compared by the caller (:func:`settings_changes`): a build whose
ANN differs from the request is rebuilt, never served. Clean-up after a publish removes only folders it can prove are
its own builds: a name of the build-id format (:data:`BUILD_ID`), not a symlink, holding a
``manifest.json`` (not a symlink) whose ``build_id`` is that name — and never the new build or
the one ``current`` points to.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rag.corpus.chunk import CHUNKER_VERSION, Chunk
from rag.index.tokenize import TOKENIZER_VERSION
from rag.core.names import digest, safe_component

FORMAT_VERSION = "1"
# the ids publish() gives its builds: UTC time stamp and 6 hex digits
BUILD_ID = re.compile(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{6}")


class IndexMismatchError(RuntimeError):
    """The published index was built with another embedder (or dimension) than requested."""


class NoIndexError(FileNotFoundError):
    """No build has been published for this corpus yet."""


class CorpusMismatchError(RuntimeError):
    """The published build was made from another corpus (directory or sdist) than requested."""


def index_dir(cache_dir: Path, corpus_name: str, corpus_source: str | None = None) -> Path:
    """The directory holding the builds of one corpus: ``<cache_dir>/indexes/<name>`` or, with
    ``corpus_source`` (the resolved corpus directory, or the sdist requirement),
    ``<cache_dir>/indexes/<name>-<8 hex of its SHA-256>``.

    Raises:
        ValueError: ``corpus_name`` is not a safe folder name (``..``, a separator, ``${``,
            ...; see :func:`rag.core.names.safe_component`).
    """
    name = safe_component(corpus_name, what="corpus.name")
    if corpus_source is not None:
        name = f"{name}-{digest(corpus_source)}"
    return cache_dir / "indexes" / name


def _current_build_name(root_dir: Path) -> str | None:
    """The build folder name ``current`` points to (not followed further), or None."""
    try:
        return Path(os.readlink(root_dir / "current")).name
    except OSError:
        return None


def _own_builds(builds: Path) -> list[Path]:
    """The folders under ``builds`` that are provably builds written by :func:`publish`: a
    real directory (never a symlink) named like :data:`BUILD_ID`, holding a regular
    ``manifest.json`` whose ``build_id`` is that name. Oldest first (by ``built_at``)."""
    out = []
    for p in builds.iterdir():
        if not BUILD_ID.fullmatch(p.name):
            continue
        try:
            if not stat.S_ISDIR(os.lstat(p).st_mode):
                continue
            mf = p / "manifest.json"
            if not stat.S_ISREG(os.lstat(mf).st_mode):
                continue
            manifest = json.loads(mf.read_text())
            if manifest.get("build_id") != p.name:
                continue
            out.append((float(manifest.get("built_at") or 0.0), p.name, p))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return [p for _, _, p in sorted(out)]


def publish(index: Any, root_dir: Path, *, embedder_id: str, dim: int, normalized: bool,
            corpus_root: str, corpus_sdist: str | None = None, keep: int = 3,
            settings: dict[str, Any] | None = None,
            source: dict[str, Any] | None = None) -> Path:
    """Write ``index`` as a new build and make it current (atomic symlink swap).

    Args:
        corpus_root: the resolved corpus directory, recorded in the manifest (with the corpus
            fingerprint) and compared by :func:`load_current`.
        corpus_sdist: the sdist requirement the corpus was fetched from, if any (recorded).
        settings: what else decided the build's contents (:func:`rag.app.stages.index_settings`:
            walk rules, chunker, tokenizer, header, code versions), recorded so a reader can
            refuse a build made under other rules.
        keep: how many of this index's own builds to keep (at least the new one).
        source: where the indexed files can be opened, resolved once for this build
            (:meth:`rag.core.trace_links.SourceRef.as_dict`: commit, dirty, URL template), so the
            links of its hits stay pinned to what it indexed.

    Returns:
        The new build directory. Older builds beyond ``keep`` are removed — only folders
        proven to be builds of this function (see :func:`_own_builds`), never a symlink, the
        new build or the build ``current`` pointed to.
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
        "corpus_sdist": corpus_sdist, "chunks": len(index.chunks), "stats": index.stats,
        "settings": settings, "source": source,
    }
    (tmp / "chunks.json").write_text(json.dumps([asdict(c) for c in index.chunks]))
    bm25_info = index.bm25.save(tmp) if getattr(index, "bm25", None) is not None else None
    if bm25_info:  # read back by load_current instead of re-tokenizing every chunk
        manifest["bm25"] = bm25_info
    if index.dense is not None:
        np.save(tmp / "embeddings.npy", index.dense.matrix)
        ann = getattr(index.dense, "ann", None)
        if ann is not None:  # dense.index=hnsw|ivf (rag/index/ann.py)
            ann.save(tmp / ann.info()["file"])
            manifest["ann"] = ann.info()
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    final = builds / build_id
    os.replace(tmp, final)
    previous = _current_build_name(root_dir)
    link_tmp = root_dir / f".current.{uuid.uuid4().hex[:6]}"
    os.symlink(Path("builds") / build_id, link_tmp)
    os.replace(link_tmp, root_dir / "current")  # readers see the old or the new build, whole
    protected = {build_id, previous, _current_build_name(root_dir)}
    own = _own_builds(builds)
    for p in own[:max(len(own) - max(keep, 1), 0)]:
        if p.name not in protected:
            shutil.rmtree(p, ignore_errors=True)  # a real directory: rmtree does not follow links
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


def check_compatible(manifest: dict[str, Any], *, embedder_id: str, dim: int,
                     query_id: str | None = None) -> None:
    """Raise :class:`IndexMismatchError` naming what differs between index and request.

    ``embedder_id`` is the model that embeds chunks; ``query_id``, when queries are embedded by
    another encoder declared compatible with it (an ONNX export of the same model,
    :class:`rag.index.onnx_embedder.SplitEmbedder`), is named in the message."""
    problems = []
    if manifest.get("embedder_id") != embedder_id:
        via = (f" (query encoder {query_id!r}, declared compatible with {embedder_id!r})"
               if query_id and query_id != embedder_id else "")
        problems.append(f"embedder: index {manifest.get('embedder_id')!r}, requested "
                        f"{embedder_id!r}{via}")
    if manifest.get("dim") != dim:
        problems.append(f"dimension: index {manifest.get('dim')}, requested {dim}")
    if manifest.get("tokenizer_version") != TOKENIZER_VERSION:
        problems.append(f"BM25 tokenizer version: index {manifest.get('tokenizer_version')}, "
                        f"code {TOKENIZER_VERSION}")
    if problems:
        raise IndexMismatchError("index is incompatible with the request (" + "; ".join(problems)
                                 + "); rebuild it with `rag index` using the same config")


def settings_changes(manifest: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The names of the settings (:func:`rag.app.stages.index_settings`; ``corpus.*`` one level
    down) whose recorded value differs from ``settings``; ``["all (recorded by an older
    version)"]`` when the build recorded none."""
    built = manifest.get("settings")
    if not isinstance(built, dict):
        return ["all (recorded by an older version)"]
    out = []
    for k in sorted(set(built) | set(settings)):
        a, b = built.get(k), settings.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
        elif a != b:
            out.append(k)
    return out


def check_corpus(manifest: dict[str, Any], expect: dict[str, Any]) -> None:
    """Raise :class:`CorpusMismatchError` if a manifest field in ``expect`` (``corpus_root``,
    ``corpus_sdist``) differs from the requested value, naming the field and both values."""
    problems = [f"{k}: index {manifest.get(k)!r}, requested {v!r}"
                for k, v in expect.items() if manifest.get(k) != v]
    if problems:
        raise CorpusMismatchError(f"build {manifest.get('build_id')} was made from another corpus ("
                                  + "; ".join(problems) + ")")


def load_current(root_dir: Path, embedder: Any, *, bm25_backend: str = "bm25s", k1: float = 1.5,
                 b: float = 0.75, expect: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The current build as an :class:`rag.index.build.Index`, after the compatibility check.

    Args:
        expect: manifest fields the build must have, e.g. ``{"corpus_root": "/src/tiny"}``
            (checked before anything else is read).

    Raises:
        NoIndexError, CorpusMismatchError, IndexMismatchError.
    """
    from rag.index.build import Index
    from rag.index.dense import DenseChannel

    manifest = read_manifest(root_dir)
    check_corpus(manifest, expect or {})
    # a split embedder's chunks are the documents model's: a build of that model is accepted
    check_compatible(manifest, embedder_id=getattr(embedder, "documents_model_id", embedder.model_id),
                     dim=embedder.dim, query_id=embedder.model_id)
    build = (root_dir / "current").resolve()
    chunks = [Chunk(**c) for c in json.loads((build / "chunks.json").read_text())]
    matrix = np.load(build / "embeddings.npy")
    bm25 = _load_bm25(build, manifest, chunks, backend=bm25_backend, k1=k1, b=b)
    stats = {**manifest.get("stats", {}), "chunks_embedded": 0, "corpus_read": 0,
             "loaded_build": manifest["build_id"]}
    return (Index(chunks=chunks, bm25=bm25,
                  dense=DenseChannel(embedder, matrix, ann=_load_ann(build, manifest, matrix)),
                  corpus_fingerprint=manifest["corpus_fingerprint"], stats=stats), manifest)


def _load_bm25(build: Path, manifest: dict[str, Any], chunks: list[Chunk], *, backend: str,
               k1: float, b: float):
    """The build's saved BM25 channel (``bm25.npz``, described by the manifest's ``bm25``) when
    it was saved with these settings; otherwise rebuilt from the chunks' indexed texts (a build
    made before BM25 was saved, another backend or k1/b) — and, for a file that is missing or
    damaged, with a warning on stderr."""
    import sys

    from rag.index.bm25 import build_bm25, load_bm25
    from rag.index.build import indexed_texts

    stats = manifest.get("stats", {})
    tokenizer = stats.get("bm25_tokenizer", "code")
    # the build's own BM25 text and IDF (recorded in its stats; absent: as before they existed)
    idf, path_field = stats.get("bm25_idf", "okapi"), bool(stats.get("bm25_path_field", 0))
    try:
        saved = load_bm25(build, manifest.get("bm25"), n_chunks=len(chunks), backend=backend,
                          k1=k1, b=b, tokenizer=tokenizer, idf=idf, path_field=path_field)
        if saved is not None:
            return saved
    except (OSError, ValueError, TypeError, IndexError) as exc:
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"warning: build {manifest.get('build_id')}: its saved BM25 is unusable "
              f"({problem}); rebuilding BM25 from its chunks", file=sys.stderr)
    # the chunk text the build indexed (index.header, recorded in its stats)
    texts, _ = indexed_texts(chunks, stats.get("header", "path_symbol"))
    return build_bm25(texts, backend=backend, k1=k1, b=b, tokenizer=tokenizer, idf=idf,
                      paths=[c.path for c in chunks] if path_field else None)


def _load_ann(build: Path, manifest: dict[str, Any], matrix: np.ndarray):
    """The build's ANN (``ann.faiss``, described by the manifest's ``ann``), or None for an
    exact build. A file that is missing, unreadable or does not match the embeddings (count,
    dimension) is rebuilt from them with the recorded settings, with a warning on stderr.

    Raises:
        IndexMismatchError: the manifest's ANN settings are not valid here (e.g. an unknown
            ``dense.index``).
    """
    info = manifest.get("ann")
    if not info:
        return None
    import sys

    from rag.index.ann import ANN_FILE, AnnIndex, AnnSettings

    try:
        settings = AnnSettings.from_config(info.get("settings") or {})
        settings.validate()
    except (ValueError, TypeError) as exc:
        raise IndexMismatchError(f"build {manifest.get('build_id')}: its ANN settings are "
                                 f"invalid ({exc}); rebuild it with `rag index`") from None
    path = build / str(info.get("file") or ANN_FILE)
    try:
        ann = AnnIndex.load(path, settings, nlist=info.get("nlist"),
                            build_s=float(info.get("build_s") or 0.0))
        if ann.ntotal == matrix.shape[0] and int(ann.index.d) == matrix.shape[1]:
            return ann
        problem = f"it holds {ann.ntotal} x {ann.index.d} vectors, the build {matrix.shape}"
    except (OSError, RuntimeError) as exc:
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(f"warning: build {manifest.get('build_id')}: {path.name} unusable ({problem}); "
          "rebuilding the ANN from its embeddings", file=sys.stderr)
    return AnnIndex.build(matrix, settings)


def age_hours(manifest: dict[str, Any], now: float | None = None) -> float:
    """Hours since the build was published; ``now``: epoch seconds (default: the clock)."""
    return ((time.time() if now is None else now) - float(manifest["built_at"])) / 3600.0
