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

**Integrity** (:func:`verify_build`). The manifest records every file of the build with its size
in bytes and SHA-256 (``files``), the shapes that must agree (``shapes``: chunks, the
embeddings' rows x dimension, the BM25 matrix's chunk count) and cheap statistics of the
embeddings (``embeddings_check``: sum, sum of absolute values, smallest and largest row norm).
Loading always checks, cheaply: every recorded file is present with its recorded size, the
``.npy`` header says (chunks, dim) float32 and the file is exactly that long, ``chunks.json``
parses into the recorded number of chunks, and the embeddings are finite and reproduce the
recorded statistics (one pass over the matrix, as cheap as one query against it; it catches a
truncated, zeroed, NaN or garbled matrix that still parses). SHA-256 of every file is checked
at publish (the files are read back before ``current`` moves) and by ``rag index --verify``,
not at every load. A build that fails is refused with :class:`DamagedBuildError` naming the
file; :func:`load_current` then serves the newest previous build that passes, saying so on
stderr. A damaged *derived* file (the saved BM25 matrix, the ANN) is rebuilt from the chunks or
embeddings with a warning instead. A build published before sizes and hashes were recorded
still loads (shapes checked; a warning says ``rag index`` publishes one that records them).

**Concurrency.** Publishers take ``.publish.lock`` (``flock``) around moving the finished build
into ``builds/``, the pointer swap and the clean-up (so no publish's clean-up can remove
another's build before it is current); a reader resolves ``current`` once and reads every file from that one build folder
while holding a shared ``flock`` on its ``manifest.json``, which the clean-up never removes
(it skips a build it cannot lock exclusively). A reader therefore never mixes two builds, and a
build is never deleted under it; a build that vanished between resolving and locking is
retried with the new ``current``.

**Failures leave nothing behind.** A publish that cannot write (out of space, read-only cache)
removes its temporary folder and raises :class:`BuildWriteError` naming the path; the previous
build stays current. A temporary folder left by a killed publish (``.<build id>.<pid>.tmp``
whose process is gone) is removed by the next publish.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rag.corpus.chunk import CHUNKER_VERSION, Chunk
from rag.index.tokenize import TOKENIZER_VERSION
from rag.core.errors import CacheWriteError, RunError, os_problem
from rag.core.names import digest, safe_component

FORMAT_VERSION = "1"
# the ids publish() gives its builds: UTC time stamp and 6 hex digits
BUILD_ID = re.compile(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{6}")
# a publish's temporary folder: ``.<build id>.<pid>.tmp``
TMP_BUILD = re.compile(r"\.(?P<id>[0-9]{8}T[0-9]{6}-[0-9a-f]{6})\.(?P<pid>[0-9]+)\.tmp")
#: the files a reader cannot do without; the others (saved BM25, ANN) are rebuilt when damaged
PRIMARY_FILES = ("chunks.json", "embeddings.npy")
#: relative tolerance of the recorded embeddings statistics (float64 sums of float32 values)
CHECK_RTOL = 1e-6
#: how often a reader re-resolves ``current`` when the build it resolved vanished meanwhile
READ_RETRIES = 8


class IndexMismatchError(RuntimeError):
    """The published index was built with another embedder (or dimension) than requested."""


class NoIndexError(FileNotFoundError):
    """No build has been published for this corpus yet."""


class CorpusMismatchError(RuntimeError):
    """The published build was made from another corpus (directory or sdist) than requested."""


class DamagedBuildError(RunError):
    """A build's file is missing, has another size or hash than its manifest records, or does
    not agree with the other files (shapes, counts, non-finite values). The message is one line
    naming the build and the file; ``path`` is that file, ``build_id`` the build."""

    def __init__(self, message: str, *, path: Path | None = None,
                 build_id: str | None = None) -> None:
        super().__init__(message)
        self.path, self.build_id = path, build_id


class BuildWriteError(CacheWriteError):
    """A publish could not write its build (out of space, read-only or unwritable cache); its
    temporary folder is removed and the previous build stays current. Names the path."""


class _Vanished(Exception):
    """The build a reader resolved was removed before it could lock it (retry)."""


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


def current_build_id(root_dir: Path) -> str | None:
    """The id of the build ``current`` points to now (one ``readlink``, no file read), or None
    when nothing is published. What ``rag serve`` polls to notice a new build."""
    return _current_build_name(root_dir)


def build_ids(root_dir: Path) -> list[str]:
    """The ids of this index's own builds (:func:`_own_builds`), oldest first."""
    builds = root_dir / "builds"
    return [p.name for p in _own_builds(builds)] if builds.is_dir() else []


@contextlib.contextmanager
def _locked(path: Path, *, shared: bool, blocking: bool = True) -> Iterator[Any]:
    """Hold a ``flock`` on ``path`` (opened read-only; created when ``shared`` is False and it
    is a lock file) for the block. Yields the open file. Raises BlockingIOError when
    ``blocking`` is False and another holds a conflicting lock."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking (a reader may then retry)
        fcntl = None  # type: ignore[assignment]
    fh = open(path, "rb")  # noqa: SIM115 - closed below
    try:
        if fcntl is not None:
            flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
            fcntl.flock(fh.fileno(), flags)
        yield fh
    finally:
        fh.close()  # releases the lock


@contextlib.contextmanager
def _publish_lock(root_dir: Path) -> Iterator[None]:
    """Exclusive ``<root>/.publish.lock`` for the pointer swap and clean-up of one publish."""
    lock = root_dir / ".publish.lock"
    if not lock.exists():
        with open(lock, "ab"):
            pass
    with _locked(lock, shared=False):
        yield


def _remove_build(path: Path) -> bool:
    """Remove the build folder ``path`` unless a reader holds it (a shared lock on its
    manifest): True when removed."""
    try:
        with _locked(path / "manifest.json", shared=False, blocking=False):
            shutil.rmtree(path, ignore_errors=True)  # a real directory: rmtree does not follow links
        return True
    except (BlockingIOError, FileNotFoundError):
        return False


def _remove_dead_temporaries(builds: Path) -> None:
    """Remove the temporary folders of publishes whose process no longer runs."""
    for p in builds.iterdir():
        m = TMP_BUILD.fullmatch(p.name)
        if m is None or int(m["pid"]) == os.getpid():
            continue
        try:
            os.kill(int(m["pid"]), 0)
            continue  # still running (or not ours to signal): leave it
        except ProcessLookupError:
            pass
        except OSError:
            continue
        if stat.S_ISDIR(os.lstat(p).st_mode):
            shutil.rmtree(p, ignore_errors=True)


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


def _write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` and flush it to the disk (``fsync``)."""
    with open(path, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def embeddings_check(matrix: np.ndarray) -> dict[str, float]:
    """The cheap statistics a loader recomputes to catch a damaged matrix that still parses:
    ``sum`` and ``abs_sum`` (float64 over every value) and ``norm_min`` / ``norm_max`` (the
    rows' L2 norms). Raises ValueError when a value is not finite."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.size and not bool(np.isfinite(m).all()):
        bad = int(np.flatnonzero(~np.isfinite(m).all(axis=1))[0])
        raise ValueError(f"row {bad} holds a value that is not finite")
    with np.errstate(over="ignore", invalid="ignore"):  # garbled values: huge, not NaN
        norms = np.linalg.norm(m, axis=1) if m.size else np.zeros(0, dtype=np.float32)
    return {"sum": float(m.sum(dtype=np.float64)), "abs_sum": float(np.abs(m).sum(dtype=np.float64)),
            "norm_min": float(norms.min()) if norms.size else 0.0,
            "norm_max": float(norms.max()) if norms.size else 0.0}


def publish(index: Any, root_dir: Path, *, embedder_id: str, dim: int, normalized: bool,
            corpus_root: str, corpus_sdist: str | None = None, keep: int = 3,
            settings: dict[str, Any] | None = None,
            source: dict[str, Any] | None = None,
            write_bytes: Callable[[Path, bytes], None] = _write_bytes) -> Path:
    """Write ``index`` as a new build, verify it, and make it current (atomic symlink swap).

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
        write_bytes: writes one new file of the build (``chunks.json``, ``embeddings.npy``);
            a test passes one that fails as a full disk would.

    Returns:
        The new build directory. Its manifest records every file's size and SHA-256 and the
        shapes that must agree; every file is read back and checked (:func:`verify_build`,
        hashes included) before ``current`` moves. Older builds beyond ``keep`` are removed —
        only folders proven to be builds of this function (see :func:`_own_builds`), never a
        symlink, the new build, the build ``current`` pointed to, or a build a reader holds.

    Raises:
        BuildWriteError: a file or folder could not be written (out of space, read-only cache),
            naming the path; nothing is left behind and the previous build stays current.
        DamagedBuildError: the files read back differ from what was written.
    """
    builds = root_dir / "builds"
    build_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    tmp = builds / f".{build_id}.{os.getpid()}.tmp"
    where, moved = builds, False
    try:
        builds.mkdir(parents=True, exist_ok=True)
        _remove_dead_temporaries(builds)
        where = tmp
        tmp.mkdir()
        manifest = _write_build(index, tmp, write_bytes, build_id=build_id, embedder_id=embedder_id,
                                dim=dim, normalized=normalized, corpus_root=corpus_root,
                                corpus_sdist=corpus_sdist, settings=settings, source=source)
        verify_build(tmp, manifest=manifest, hashes=True)  # what was written reads back whole
        where = root_dir
        with _publish_lock(root_dir):
            # renamed under the lock: no other publish's clean-up sees it before it is current
            os.replace(tmp, builds / build_id)
            moved = True
            previous = _current_build_name(root_dir)
            link_tmp = root_dir / f".current.{uuid.uuid4().hex[:6]}.tmp"
            try:
                os.symlink(Path("builds") / build_id, link_tmp)
                os.replace(link_tmp, root_dir / "current")  # readers see the old or new build
            finally:
                if os.path.lexists(link_tmp):
                    link_tmp.unlink()
            protected = {build_id, previous, _current_build_name(root_dir)}
            try:  # published now: a clean-up that fails leaves old builds, nothing else
                own = _own_builds(builds)
                for p in own[:max(len(own) - max(keep, 1), 0)]:
                    if p.name not in protected:
                        _remove_build(p)
            except OSError:
                pass
    except BaseException as exc:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        if moved and _current_build_name(root_dir) != build_id:  # moved, never made current
            shutil.rmtree(builds / build_id, ignore_errors=True)
        if isinstance(exc, OSError):
            path = Path(str(getattr(exc, "filename", None) or where))
            if path == tmp or tmp in path.parents:  # removed now: name the folder and the file
                rel = str(path.relative_to(tmp))
                path = f"{builds}" + ("" if rel == "." else f" ({rel})")  # type: ignore[assignment]
            raise BuildWriteError(f"cannot write {path}: {os_problem(exc)}; nothing was "
                                  "published (the previous build, if any, stays current)") from None
        raise
    return builds / build_id


def unchanged_build(root_dir: Path, index: Any, *, embedder_id: str, dim: int,
                    normalized: bool, corpus_root: str, corpus_sdist: str | None = None,
                    settings: dict[str, Any] | None = None,
                    source: dict[str, Any] | None = None,
                    max_age_h: float | None = None) -> dict[str, Any] | None:
    """The current build's manifest when it already holds exactly what :func:`publish` would
    write for ``index`` with these arguments — the same files (``corpus_fingerprint``) and
    chunk count, embedder, settings, corpus and source (commit), the same saved BM25 (backend,
    ``k1``, ``b``) — is no older than ``max_age_h`` hours (None: any age; an older one is
    stale, and publishing anew refreshes it) and passes :func:`verify_build` with hashes; None
    otherwise (nothing published, another record, a stale or damaged build). What lets
    ``rag index`` on an unchanged tree publish nothing."""
    try:
        manifest = read_manifest(root_dir)
    except (NoIndexError, DamagedBuildError):
        return None
    if max_age_h is not None and ("built_at" not in manifest
                                  or age_hours(manifest) > float(max_age_h)):
        return None
    bm25 = getattr(index, "bm25", None)
    if bm25 is not None and bm25.backend == "bm25s":  # the backend whose matrix is saved
        saved = manifest.get("bm25")
        if not isinstance(saved, dict) or any(
                saved.get(k) != v for k, v in (("backend", bm25.backend),
                                               ("k1", float(bm25.k1)), ("b", float(bm25.b)))):
            return None
    would = {"format": FORMAT_VERSION, "embedder_id": embedder_id, "dim": dim,
             "normalized": normalized, "tokenizer_version": TOKENIZER_VERSION,
             "chunker_version": CHUNKER_VERSION,
             "corpus_fingerprint": index.corpus_fingerprint, "corpus_root": corpus_root,
             "corpus_sdist": corpus_sdist, "chunks": len(index.chunks),
             "settings": settings, "source": source}
    if any(manifest.get(k) != v for k, v in would.items()):
        return None
    ann = getattr(getattr(index, "dense", None), "ann", None)
    if (ann is not None) != isinstance(manifest.get("ann"), dict):
        return None
    try:
        verify_build(root_dir / "builds" / str(manifest.get("build_id")), hashes=True)
    except DamagedBuildError:
        return None
    return manifest


def _write_build(index: Any, tmp: Path, write_bytes: Callable[[Path, bytes], None], *,
                 build_id: str, embedder_id: str, dim: int, normalized: bool, corpus_root: str,
                 corpus_sdist: str | None, settings: dict[str, Any] | None,
                 source: dict[str, Any] | None) -> dict[str, Any]:
    """Write the build's files into ``tmp`` and its manifest last; returns the manifest."""
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION, "build_id": build_id, "built_at": time.time(),
        "embedder_id": embedder_id, "dim": dim, "normalized": normalized,
        "tokenizer_version": TOKENIZER_VERSION, "chunker_version": CHUNKER_VERSION,
        "corpus_fingerprint": index.corpus_fingerprint, "corpus_root": corpus_root,
        "corpus_sdist": corpus_sdist, "chunks": len(index.chunks), "stats": index.stats,
        "settings": settings, "source": source,
    }
    written: dict[str, str] = {}  # name -> SHA-256 of the bytes handed to write_bytes

    def put(name: str, data: bytes) -> None:
        try:
            write_bytes(tmp / name, data)
        except OSError as exc:
            if exc.filename is None:  # a failed write() names no file: this one
                exc.filename = str(tmp / name)
            raise
        written[name] = hashlib.sha256(data).hexdigest()

    put("chunks.json", json.dumps([asdict(c) for c in index.chunks]).encode("utf-8"))
    shapes: dict[str, Any] = {"chunks": len(index.chunks), "embeddings": None, "bm25_docs": None}
    bm25_info = index.bm25.save(tmp) if getattr(index, "bm25", None) is not None else None
    if bm25_info:  # read back by load_current instead of re-tokenizing every chunk
        manifest["bm25"] = bm25_info
        shapes["bm25_docs"] = int(index.bm25.n_chunks)
    if index.dense is not None:
        matrix = np.ascontiguousarray(index.dense.matrix, dtype=np.float32)
        buf = io.BytesIO()
        np.save(buf, matrix)
        put("embeddings.npy", buf.getvalue())
        shapes["embeddings"] = [int(matrix.shape[0]), int(matrix.shape[1])]
        manifest["embeddings_check"] = embeddings_check(matrix)
        ann = getattr(index.dense, "ann", None)
        if ann is not None:  # dense.index=hnsw|ivf (rag/index/ann.py)
            ann.save(tmp / ann.info()["file"])
            manifest["ann"] = ann.info()
    manifest["shapes"] = shapes
    files = {}
    for p in sorted(tmp.iterdir()):
        digest_ = _sha256(p)
        if p.name in written and written[p.name] != digest_:
            raise DamagedBuildError(f"build {build_id}: {p} reads back other bytes than were "
                                    "written (a failing disk?); nothing was published",
                                    path=p, build_id=build_id)
        files[p.name] = {"bytes": p.stat().st_size, "sha256": digest_}
    manifest["files"] = files
    put("manifest.json", json.dumps(manifest, indent=2, default=str).encode("utf-8"))
    return manifest


def read_manifest(root_dir: Path) -> dict[str, Any]:
    """The current build's manifest (``current`` resolved once).

    Raises:
        NoIndexError: nothing published yet (or the build ``current`` names is gone).
        DamagedBuildError: its ``manifest.json`` is not valid JSON.
    """
    name = _current_build_name(root_dir)
    path = root_dir / "builds" / name / "manifest.json" if name else root_dir / "current"
    try:
        return _parse_manifest(path.read_bytes(), path)
    except FileNotFoundError:
        raise NoIndexError(f"no index published under {root_dir}; run `rag index`") from None


def _parse_manifest(data: bytes, path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        manifest = None
    if not isinstance(manifest, dict):
        raise DamagedBuildError(f"build {path.parent.name}: {path} is not a manifest (truncated "
                                "or damaged); rebuild it with `rag index`", path=path,
                                build_id=path.parent.name)
    return manifest


def _damaged(manifest: dict[str, Any], path: Path, problem: str) -> DamagedBuildError:
    bid = manifest.get("build_id") or path.parent.name
    return DamagedBuildError(f"build {bid}: {path} {problem}", path=path, build_id=bid)


def _check_files(build: Path, manifest: dict[str, Any], *, hashes: bool) -> dict[str, str]:
    """Check every file the manifest records (``files``): present, a regular file, of the
    recorded size and — with ``hashes`` — of the recorded SHA-256.

    Returns:
        name -> problem of each *derived* file that fails (not in :data:`PRIMARY_FILES`: a
        saved BM25 matrix or ANN, which a loader rebuilds). Empty for a manifest that records
        no files (made before they were recorded).

    Raises:
        DamagedBuildError: a primary file fails (naming it).
    """
    files = manifest.get("files")
    if not isinstance(files, dict):
        return {}
    derived: dict[str, str] = {}
    for name, rec in sorted(files.items()):
        path = build / name
        try:
            st = os.stat(path)
        except FileNotFoundError:
            problem = "is missing"
        except OSError as exc:
            problem = f"cannot be read ({os_problem(exc)})"
        else:
            want = rec.get("bytes") if isinstance(rec, dict) else None
            if not stat.S_ISREG(st.st_mode):
                problem = "is not a regular file"
            elif st.st_size != want:
                problem = (f"holds {st.st_size} bytes, the manifest records {want} "
                           "(truncated or changed)")
            elif hashes and _sha256(path) != rec.get("sha256"):
                problem = "does not match the SHA-256 its manifest records (changed or damaged)"
            else:
                continue
        if name in PRIMARY_FILES:
            raise _damaged(manifest, path, problem)
        derived[name] = problem
    return derived


def _read_chunks(build: Path, manifest: dict[str, Any]) -> list[Chunk]:
    """``chunks.json``, checked: valid JSON, chunks, as many as the manifest records.

    Raises:
        DamagedBuildError: naming the file and the problem."""
    path = build / "chunks.json"
    try:
        raw = json.loads(path.read_bytes())
        chunks = [Chunk(**c) for c in raw]
    except FileNotFoundError:
        raise _damaged(manifest, path, "is missing") from None
    except OSError as exc:
        raise _damaged(manifest, path, f"cannot be read ({os_problem(exc)})") from None
    except (ValueError, UnicodeDecodeError):
        raise _damaged(manifest, path, "is not valid JSON (truncated or damaged)") from None
    except TypeError:
        raise _damaged(manifest, path, "does not hold chunks (damaged, or written by another "
                                       "version)") from None
    want = manifest.get("chunks")
    if want is not None and len(chunks) != want:
        raise _damaged(manifest, path, f"holds {len(chunks)} chunks, the manifest records {want}")
    return chunks


def _read_matrix(build: Path, manifest: dict[str, Any], *, n_chunks: int) -> np.ndarray:
    """``embeddings.npy``, checked before it is read — a float32 (n_chunks, dim) header and a
    file of exactly that length — and after: finite, and (when the manifest records them) the
    statistics of :func:`embeddings_check` within :data:`CHECK_RTOL`.

    Raises:
        DamagedBuildError: naming the file and the problem."""
    path = build / "embeddings.npy"
    dim = manifest.get("dim")
    fmt = np.lib.format
    try:
        with open(path, "rb") as fh:
            try:
                version = fmt.read_magic(fh)
                header = fmt.read_array_header_2_0 if version == (2, 0) else fmt.read_array_header_1_0
                shape, fortran, dtype = header(fh)
            except (ValueError, OSError, SyntaxError) as exc:
                raise _damaged(manifest, path, f"is not a .npy array ({os_problem(exc)})") from None
            size = os.fstat(fh.fileno()).st_size
            want_shape = (n_chunks, dim) if dim is not None else (n_chunks, *shape[1:])
            if dtype != np.float32 or fortran or tuple(shape) != tuple(want_shape):
                raise _damaged(manifest, path, f"holds a {dtype} array of shape {tuple(shape)}, "
                                               f"the build needs float32 {tuple(want_shape)}")
            want_size = fh.tell() + int(np.prod(shape)) * dtype.itemsize
            if size != want_size:
                raise _damaged(manifest, path, f"holds {size} bytes, its shape {tuple(shape)} "
                                               f"needs {want_size} (truncated or padded)")
            fh.seek(0)
            matrix = fmt.read_array(fh, allow_pickle=False)
    except FileNotFoundError:
        raise _damaged(manifest, path, "is missing") from None
    except OSError as exc:
        raise _damaged(manifest, path, f"cannot be read ({os_problem(exc)})") from None
    try:
        got = embeddings_check(matrix)
    except ValueError as exc:
        raise _damaged(manifest, path, f"is damaged: {exc}") from None
    rec = manifest.get("embeddings_check")
    if isinstance(rec, dict):
        tol = CHECK_RTOL * max(1.0, float(rec.get("abs_sum", 0.0)))
        if (abs(got["sum"] - float(rec["sum"])) > tol
                or abs(got["abs_sum"] - float(rec["abs_sum"])) > tol
                or got["norm_min"] < float(rec["norm_min"]) - 1e-4
                or got["norm_max"] > float(rec["norm_max"]) + 1e-4):
            raise _damaged(manifest, path, "does not hold the vectors its manifest records "
                                           "(their sums or norms differ: zeroed, garbled or "
                                           "replaced)")
    return matrix


def check_files(build: Path) -> None:
    """The cheap check of a build on disk: its manifest parses and its primary files
    (:data:`PRIMARY_FILES`) are present with their recorded sizes — a few ``stat`` calls, no
    file read but the manifest (what ``rag serve`` runs on the build it answers from).

    Raises:
        DamagedBuildError: naming the file."""
    path = build / "manifest.json"
    try:
        manifest = _parse_manifest(path.read_bytes(), path)
    except FileNotFoundError:
        raise DamagedBuildError(f"build {build.name}: {path} is missing", path=path,
                                build_id=build.name) from None
    _check_files(build, manifest, hashes=False)
    if not isinstance(manifest.get("files"), dict):
        for name in PRIMARY_FILES:
            if not (build / name).is_file():
                raise _damaged(manifest, build / name, "is missing")


def verify_build(build: Path, *, manifest: dict[str, Any] | None = None,
                 hashes: bool = True) -> dict[str, Any]:
    """Check every file of the build folder ``build`` against its manifest (``manifest``:
    the one to check against, default its ``manifest.json``): sizes and, with ``hashes``,
    SHA-256 of every recorded file (derived ones too), ``chunks.json``, the embeddings and
    the saved BM25 matrix's chunk count. What ``rag index --verify`` and :func:`publish` run.

    Returns:
        ``{"build_id", "files": <files checked>, "hashes": bool, "recorded": bool}``
        (``recorded`` False: an older manifest without sizes and hashes, checked by shape).

    Raises:
        DamagedBuildError: the first problem, naming the file.
    """
    if manifest is None:
        path = build / "manifest.json"
        try:
            manifest = _parse_manifest(path.read_bytes(), path)
        except FileNotFoundError:
            raise DamagedBuildError(f"build {build.name}: {path} is missing", path=path,
                                    build_id=build.name) from None
    derived = _check_files(build, manifest, hashes=hashes)
    for name, problem in derived.items():
        raise _damaged(manifest, build / name, problem)
    chunks = _read_chunks(build, manifest)
    shapes = manifest.get("shapes") or {}
    if shapes.get("embeddings") is not None or (build / "embeddings.npy").exists() \
            or "files" not in manifest:
        _read_matrix(build, manifest, n_chunks=len(chunks))
    if isinstance(manifest.get("bm25"), dict) and manifest["bm25"].get("backend") == "bm25s":
        from rag.index.bm25 import Bm25sScorer

        try:
            scorer = Bm25sScorer.load(build)
        except (OSError, ValueError, TypeError, IndexError) as exc:
            raise _damaged(manifest, build / Bm25sScorer.FILES[0],
                           f"is not a BM25 matrix ({os_problem(exc)})") from None
        if scorer._n != len(chunks):
            raise _damaged(manifest, build / Bm25sScorer.FILES[0],
                           f"scores {scorer._n} chunks, the build holds {len(chunks)}")
    files = manifest.get("files")
    return {"build_id": manifest.get("build_id"), "files": len(files) if isinstance(files, dict) else 0,
            "hashes": hashes, "recorded": isinstance(files, dict)}


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


@contextlib.contextmanager
def _reading(build: Path) -> Iterator[dict[str, Any]]:
    """Hold the build folder ``build`` for reading (a shared lock on its ``manifest.json``, so
    no clean-up removes it meanwhile) and yield its manifest.

    Raises:
        _Vanished: the folder or its manifest is gone (removed before the lock was taken).
        DamagedBuildError: the manifest is not valid JSON or names another build.
    """
    path = build / "manifest.json"
    try:
        lock = _locked(path, shared=True)
        fh = lock.__enter__()
    except FileNotFoundError:
        raise _Vanished(str(build)) from None
    try:
        if not path.exists():  # removed while the lock was awaited
            raise _Vanished(str(build))
        manifest = _parse_manifest(fh.read(), path)
        if manifest.get("build_id") != build.name:
            raise _damaged(manifest, path, f"names build {manifest.get('build_id')!r}, not its "
                                           "own folder")
        yield manifest
    finally:
        lock.__exit__(None, None, None)


def load_build(root_dir: Path, build_id: str, embedder: Any, *, bm25_backend: str = "bm25s",
               k1: float = 1.5, b: float = 0.75,
               expect: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The build ``build_id`` of the index ``root_dir`` as an :class:`rag.index.build.Index`,
    checked cheaply (module docstring: sizes, the ``.npy`` header, chunk count, finite
    embeddings and their statistics; no hashes) and read wholly from that one folder while
    holding it (no clean-up removes it meanwhile).

    Args:
        expect: manifest fields the build must have, e.g. ``{"corpus_root": "/src/tiny"}``
            (checked before anything else is read).

    Raises:
        NoIndexError: the build does not exist.
        CorpusMismatchError, IndexMismatchError: it is another corpus's or embedder's.
        DamagedBuildError: one of its files is damaged (naming it).
    """
    from rag.index.build import Index
    from rag.index.dense import DenseChannel

    build = root_dir / "builds" / build_id
    try:
        with _reading(build) as manifest:
            check_corpus(manifest, expect or {})
            # a split embedder's chunks are the documents model's: a build of that model is
            # accepted
            check_compatible(manifest, embedder_id=getattr(embedder, "documents_model_id",
                                                           embedder.model_id),
                             dim=embedder.dim, query_id=embedder.model_id)
            derived = _check_files(build, manifest, hashes=False)
            chunks = _read_chunks(build, manifest)
            matrix = _read_matrix(build, manifest, n_chunks=len(chunks))
            bm25 = _load_bm25(build, manifest, chunks, backend=bm25_backend, k1=k1, b=b,
                              damaged=derived)
            ann = _load_ann(build, manifest, matrix, damaged=derived)
    except _Vanished:
        raise NoIndexError(f"build {build_id} is not (or no longer) under {root_dir}") from None
    if not isinstance(manifest.get("files"), dict):
        print(f"warning: build {build_id} was published before builds recorded their file "
              "sizes and hashes: checked by shape only; `rag index` publishes one that records "
              "them", file=sys.stderr)
    stats = {**manifest.get("stats", {}), "chunks_embedded": 0, "corpus_read": 0,
             "loaded_build": manifest["build_id"]}
    return (Index(chunks=chunks, bm25=bm25, dense=DenseChannel(embedder, matrix, ann=ann),
                  corpus_fingerprint=manifest["corpus_fingerprint"], stats=stats), manifest)


def load_current(root_dir: Path, embedder: Any, *, bm25_backend: str = "bm25s", k1: float = 1.5,
                 b: float = 0.75, expect: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The current build as an :class:`rag.index.build.Index`, after the compatibility and
    integrity checks of :func:`load_build` — or, when the current build is damaged, the newest
    previous build that passes them, with a warning on stderr naming the damaged file and the
    build served instead (the manifest returned then carries ``fallback``: ``{"from": <the
    damaged build>, "problem": <the one line>}``).

    ``current`` is resolved once per attempt; a build removed by a concurrent publish's
    clean-up before it could be held is retried with the new ``current``
    (:data:`READ_RETRIES` times), so a reader never mixes two builds.

    Args:
        expect: manifest fields the build must have, e.g. ``{"corpus_root": "/src/tiny"}``
            (checked before anything else is read).

    Raises:
        NoIndexError, CorpusMismatchError, IndexMismatchError.
        DamagedBuildError: the current build is damaged and no previous one passes.
    """
    kw = dict(bm25_backend=bm25_backend, k1=k1, b=b, expect=expect)
    for _ in range(READ_RETRIES):
        name = _current_build_name(root_dir)
        if name is None:
            raise NoIndexError(f"no index published under {root_dir}; run `rag index`")
        try:
            return load_build(root_dir, name, embedder, **kw)
        except NoIndexError:
            if _current_build_name(root_dir) != name:
                continue  # replaced and removed by concurrent publishes: read the new one
            path = root_dir / "builds" / name / "manifest.json"
            damaged = DamagedBuildError(f"build {name}: {path} is missing", path=path,
                                        build_id=name)
        except DamagedBuildError as exc:
            damaged = exc
        return _previous_good(root_dir, damaged, embedder, **kw)
    raise RunError(f"the current build under {root_dir} changed {READ_RETRIES} times while it "
                   "was being read; try again")


def _previous_good(root_dir: Path, damaged: DamagedBuildError, embedder: Any,
                   **kw: Any) -> tuple[Any, dict[str, Any]]:
    """The newest build but ``damaged``'s that loads and passes its checks (a warning on
    stderr says which), else ``damaged`` raised with how to recover."""
    for other in reversed(build_ids(root_dir)):
        if other == damaged.build_id:
            continue
        try:
            index, manifest = load_build(root_dir, other, embedder, **kw)
        except (NoIndexError, DamagedBuildError, IndexMismatchError, CorpusMismatchError):
            continue
        print(f"warning: {damaged}; serving the previous build {other} instead (`rag index` "
              "publishes a new one)", file=sys.stderr)
        return index, {**manifest, "fallback": {"from": damaged.build_id, "problem": str(damaged)}}
    raise DamagedBuildError(f"{damaged}; no earlier build passes its checks: rebuild it with "
                            "`rag index`", path=damaged.path, build_id=damaged.build_id)


def _load_bm25(build: Path, manifest: dict[str, Any], chunks: list[Chunk], *, backend: str,
               k1: float, b: float, damaged: dict[str, str] | None = None):
    """The build's saved BM25 channel (``bm25.npz``, described by the manifest's ``bm25``) when
    it was saved with these settings; otherwise rebuilt from the chunks' indexed texts (a build
    made before BM25 was saved, another backend or k1/b) — and, for a file that is missing or
    damaged (``damaged``: name -> problem, from :func:`_check_files`), with a warning on
    stderr."""
    from rag.index.bm25 import build_bm25, load_bm25
    from rag.index.build import indexed_texts

    stats = manifest.get("stats", {})
    tokenizer = stats.get("bm25_tokenizer", "code")
    # the build's own BM25 text and IDF (recorded in its stats; absent: as before they existed)
    idf, path_field = stats.get("bm25_idf", "okapi"), bool(stats.get("bm25_path_field", 0))
    info = manifest.get("bm25")
    bad = [f"{n} {p}" for n, p in (damaged or {}).items()
           if isinstance(info, dict) and n in (info.get("files") or ())]
    try:
        if bad:
            raise ValueError("; ".join(bad))
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


def _load_ann(build: Path, manifest: dict[str, Any], matrix: np.ndarray, *,
              damaged: dict[str, str] | None = None):
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
    from rag.index.ann import ANN_FILE, AnnIndex, AnnSettings

    try:
        settings = AnnSettings.from_config(info.get("settings") or {})
        settings.validate()
    except (ValueError, TypeError) as exc:
        raise IndexMismatchError(f"build {manifest.get('build_id')}: its ANN settings are "
                                 f"invalid ({exc}); rebuild it with `rag index`") from None
    path = build / str(info.get("file") or ANN_FILE)
    try:
        if path.name in (damaged or {}):
            raise OSError(f"{path.name} {damaged[path.name]}")
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
