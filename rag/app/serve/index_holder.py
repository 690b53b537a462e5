"""The build ``rag serve`` answers from, swapped live when ``rag index`` publishes a new one.

* :class:`ServedBuild` — one loaded build and everything derived from it that a request reads
  (the index, its manifest, the link source, chunk texts, the dense batcher). Immutable once
  made; a request takes one (:meth:`IndexHolder.use`) and reads only that one from start to
  end, so an answer is never made from two builds.
* :class:`PublishedBuilds` — the builds of the served corpus on disk
  (:mod:`rag.index.versioned`): which one ``current`` names (one ``readlink``), loading one
  with its checks (sizes, shapes, finite embeddings; :func:`rag.index.versioned.load_build`)
  and the cheap check of a served build's files (sizes only).
* :class:`IndexHolder` — the build answered from now. :meth:`IndexHolder.check` (every
  ``reload_s`` seconds on a thread of its own, and at once on ``SIGHUP``) reads the
  ``current`` pointer; when it names another build, that build is loaded *beside* the served
  one (requests keep being answered meanwhile), checked, and swapped in with one reference
  assignment between requests; the old build's batcher is closed once its last request is
  done. A new build that fails its checks, or was made with other settings than the service's
  config, is not served: the old one keeps answering and :attr:`IndexHolder.problem` says why
  (``/health`` answers 503 with it) until a good build is published. A build id that failed is
  not loaded again on every poll, only after ``SIGHUP``.

``/health`` is readiness (:meth:`IndexHolder.health`): 200 ``ok`` when the service answers from
the build published as ``current``; 503 ``refusing`` / ``no index`` when it cannot answer at
all; 503 ``degraded`` when it answers, but not from the published build (damaged, incompatible
or made with other settings) or the served build's files on disk no longer match its manifest
(truncated, deleted: a restart would fail) — ``/search`` still answers then, from the build
named in each response's ``index.build_id``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ``rag serve --reload-s`` / ``RAG_RELOAD_S`` default: seconds between two reads of the
#: ``current`` pointer (0: only on SIGHUP)
DEFAULT_RELOAD_S = 5.0


def resolve_reload_s(value: float | str | None = None,
                     environ: dict[str, str] | None = None) -> float:
    """Seconds between polls of the published build: ``value`` (``--reload-s``) if given,
    else ``RAG_RELOAD_S`` if set, else :data:`DEFAULT_RELOAD_S`; 0 polls never (SIGHUP only).

    Raises:
        ValueError: not a finite number >= 0 (the message names its source).
    """
    import math
    import os

    environ = os.environ if environ is None else environ
    source, raw = ("--reload-s", value) if value is not None else \
        ("RAG_RELOAD_S", environ.get("RAG_RELOAD_S") or None)
    if raw is None:
        return DEFAULT_RELOAD_S
    try:
        seconds = float(str(raw).strip())
    except ValueError:
        seconds = float("nan")
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"{source} must be a number of seconds >= 0, got {raw!r}")
    return seconds


@dataclass(eq=False)
class ServedBuild:
    """One build as the service answers from it.

    Attributes:
        index: the :class:`rag.index.build.Index` (None when refused).
        manifest: its manifest (``{"refused": ...}`` when the embedder or dimension differs).
        source: the :class:`rag.core.trace_links.SourceRef` its hits link with.
        texts: chunk id -> chunk text (``with_text``), filled once, never lazily.
        batcher: its :class:`rag.search.batching.DenseBatcher`, or None.
        refused: why nothing is scored (the manifest's ``refused``), or None.
    """

    index: Any
    manifest: dict
    source: Any
    texts: dict[str, str]
    batcher: Any
    refused: str | None
    users: int = 0
    retired: bool = False

    @property
    def build_id(self) -> str | None:
        """The build's id (None for an index that was never published)."""
        return self.manifest.get("build_id")

    def text(self, chunk_id: str) -> str:
        """The text of the chunk ``chunk_id``."""
        return self.texts[chunk_id]

    def close(self) -> None:
        """Stop its batcher's worker (after the queued queries are answered)."""
        if self.batcher is not None:
            self.batcher.close()


def serve_build(cfg, index, manifest: dict | None, *, max_batch: int | None = None,
                batch_wait_ms: float | None = None) -> ServedBuild:
    """The :class:`ServedBuild` of ``index`` under ``cfg``: its link source, chunk texts and
    a dense batcher (``max_batch`` > 1, default 16, and an exact dense channel: an ANN —
    ``dense.index=hnsw|ivf`` — searches each query with its own pool and filter inside the
    pipeline, so its requests are not batched)."""
    from rag.app.search_cli import link_source
    from rag.search.batching import DEFAULT_BATCH_WAIT_MS, DEFAULT_MAX_BATCH, DenseBatcher

    manifest = manifest or {}
    refused = manifest.get("refused")
    max_batch = DEFAULT_MAX_BATCH if max_batch is None else max_batch
    dense = None if refused or index is None else getattr(index, "dense", None)
    batcher = None
    if dense is not None and max_batch > 1 and getattr(dense, "ann", None) is None:
        batcher = DenseBatcher(dense, max_batch=max_batch,
                               wait_ms=DEFAULT_BATCH_WAIT_MS if batch_wait_ms is None
                               else batch_wait_ms)
    texts = {c.id: c.text for c in getattr(index, "chunks", None) or ()}
    return ServedBuild(index=index, manifest=manifest, source=link_source(cfg, manifest),
                       texts=texts, batcher=batcher, refused=refused)


class PublishedBuilds:
    """The published builds of one corpus's index, read as the service's config reads them.

    Args:
        root_dir: the index folder (:func:`rag.index.versioned.index_dir`).
        embedder: the service's embedder (a build of another model is refused).
        bm25: ``bm25_backend``, ``k1``, ``b`` for :func:`rag.index.versioned.load_build`.
        expect: the corpus identity a build must record (``corpus_root`` / ``corpus_sdist``).
        settings: the service's index settings (:func:`rag.app.stages.index_settings`); a build
            made under others is refused, never served.
    """

    def __init__(self, root_dir: Path, embedder: Any, *, bm25: dict[str, Any],
                 expect: dict[str, Any], settings: dict[str, Any]) -> None:
        self.root_dir, self.embedder = root_dir, embedder
        self.bm25, self.expect, self.settings = bm25, expect, settings

    @classmethod
    def for_config(cls, cfg, embedder: Any) -> "PublishedBuilds":
        """The builds ``rag search`` / ``rag serve`` would read for the composed ``cfg``."""
        from rag.app.config import expand_path
        from rag.app.search_cli import corpus_identity, corpus_name
        from rag.app.stages import index_settings
        from rag.index import versioned

        identity = corpus_identity(cfg)
        source = identity.get("corpus_root") or identity["corpus_sdist"]
        root_dir = versioned.index_dir(expand_path(cfg.paths.cache_dir), corpus_name(cfg), source)
        backend = str(getattr(cfg.bm25.backend, "value", cfg.bm25.backend))
        return cls(root_dir, embedder, bm25={"bm25_backend": backend, "k1": cfg.bm25.k1,
                                             "b": cfg.bm25.b},
                   expect=identity, settings=index_settings(cfg))

    def current_id(self) -> str | None:
        """The build ``current`` names now (None: nothing published)."""
        from rag.index.versioned import current_build_id

        return current_build_id(self.root_dir)

    def load(self, build_id: str) -> tuple[Any, dict]:
        """(index, manifest) of the build, checked.

        Raises:
            rag.core.errors.RunError: made under other settings than the service's;
                :class:`rag.index.versioned.DamagedBuildError`, ``NoIndexError``,
                ``IndexMismatchError``, ``CorpusMismatchError`` from the loader.
        """
        from rag.core.errors import RunError
        from rag.index import versioned

        index, manifest = versioned.load_build(self.root_dir, build_id, self.embedder,
                                               expect=self.expect, **self.bm25)
        changed = [c for c in versioned.settings_changes(manifest, self.settings)
                   if c != "corpus.url_template"]
        if changed:
            raise RunError(f"build {build_id} was made with other settings ({', '.join(changed)}) "
                           "than this service's")
        return index, manifest

    def check_files(self, build_id: str) -> None:
        """The served build's files on disk still have their recorded sizes (a few ``stat``
        calls).

        Raises:
            rag.index.versioned.DamagedBuildError: naming the file."""
        from rag.index import versioned

        versioned.check_files(self.root_dir / "builds" / build_id)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class IndexHolder:
    """The build answered from now, and the watcher that swaps in a newly published one
    (module docstring).

    Args:
        build: the build to answer from first.
        prepare: makes the :class:`ServedBuild` of a newly loaded (index, manifest).
        builds: where newly published builds are read from (None: never swapped).
        log: ``log(level, event)`` for the swap and refusal lines (default: the service's
            JSON log, :func:`rag.app.serve.app.log_event`).
    """

    def __init__(self, build: ServedBuild, *,
                 prepare: Callable[[Any, dict], ServedBuild] | None = None,
                 builds: PublishedBuilds | None = None,
                 log: Callable[[int, dict], None] | None = None) -> None:
        self._current = build
        self._prepare = prepare
        self._builds = builds
        self._log = log
        self._lock = threading.Lock()  # the served reference and the users counts
        self._checking = threading.Lock()  # one check at a time
        fallback = build.manifest.get("fallback") or {}
        #: why the service does not answer from the published build, or None
        self.problem: str | None = (f"{fallback['problem']}; answering from build "
                                    f"{build.build_id}" if fallback.get("problem") else None)
        self._failed: dict[str, str] = {}
        if fallback.get("from"):
            self._failed[fallback["from"]] = self.problem or ""
        self._wake = threading.Event()
        self._force = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        #: how many builds were swapped in since start
        self.swaps = 0

    @property
    def current(self) -> ServedBuild:
        """The build a request starting now is answered from."""
        return self._current

    @contextmanager
    def use(self) -> Iterator[ServedBuild]:
        """The build one request reads from start to end (a swap meanwhile serves the next
        request from the new build; this one finishes on its own)."""
        with self._lock:
            build = self._current
            build.users += 1
        try:
            yield build
        finally:
            with self._lock:
                build.users -= 1
                done = build.retired and build.users == 0
            if done:
                build.close()

    def _swap(self, new: ServedBuild) -> ServedBuild:
        with self._lock:
            old, self._current = self._current, new
            old.retired = True
            done = old.users == 0
        if done:
            old.close()
        self.swaps += 1
        return old

    def _emit(self, level: int, event: dict) -> None:
        if self._log is not None:
            self._log(level, event)
            return
        from rag.app.serve.app import log_event

        log_event(level, event)

    def check(self, *, force: bool = False) -> bool:
        """Read the ``current`` pointer once; load, check and swap in the build it names when
        that is not the served one (a build that failed before only with ``force``); else
        check the served build's file sizes. Sets or clears :attr:`problem`.

        Returns:
            True when a new build was swapped in.
        """
        if self._builds is None or self._prepare is None:
            return False
        with self._checking:
            served = self._current.build_id
            try:
                published = self._builds.current_id()
            except OSError as exc:
                self.problem = f"cannot read the published build ({_one_line(exc)})"
                return False
            if published is None:
                self.problem = (f"no build is published under {self._builds.root_dir} any "
                                f"more; answering from build {served}")
                return False
            if published == served:
                try:
                    self._builds.check_files(published)
                    self.problem = None
                except Exception as exc:  # noqa: BLE001 - DamagedBuildError, OSError
                    self.problem = f"{_one_line(exc)}; answering from its copy in memory"
                return False
            if published in self._failed and not force:
                self.problem = self._failed[published]
                return False
            try:
                index, manifest = self._builds.load(published)
                new = self._prepare(index, manifest)
            except Exception as exc:  # noqa: BLE001 - any refusal keeps the served build
                problem = (f"build {published} is not served ({_one_line(exc)}); answering "
                           f"from build {served}")
                self._failed[published] = self.problem = problem
                self._emit(logging.WARNING, {"event": "reload_refused", "build": published,
                                             "served": served, "problem": _one_line(exc)})
                return False
            self._swap(new)
            self._failed.pop(published, None)
            self.problem = None
            self._emit(logging.INFO, {"event": "reload", "build": published, "previous": served,
                                      "chunks": len(index.chunks)})
            return True

    def wake(self, *, force: bool = True) -> None:
        """Check now (from a SIGHUP handler: it only sets a flag and an event)."""
        self._force = self._force or force
        self._wake.set()

    def start(self, every_s: float) -> None:
        """Check every ``every_s`` seconds (0: only when woken) on a daemon thread."""
        if self._builds is None or self._thread is not None:
            return

        def run() -> None:
            while not self._stopped.is_set():
                self._wake.wait(every_s if every_s > 0 else None)
                self._wake.clear()
                if self._stopped.is_set():
                    return
                force, self._force = self._force, False
                try:
                    self.check(force=force)
                except Exception as exc:  # noqa: BLE001 - the watcher never dies
                    self.problem = f"the build watcher failed ({type(exc).__name__})"

        self._thread = threading.Thread(target=run, name="rag-build-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watcher thread."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def health(self, build: ServedBuild, *, now: float | None = None) -> tuple[int, dict]:
        """(HTTP status, body) of ``/health`` answered while ``build`` is served: 200 ``ok``,
        or 503 ``refusing`` / ``no index`` / ``degraded`` (module docstring). The body holds
        ``build_id`` and ``age_s`` (seconds since it was published; None if never)."""
        built = build.manifest.get("built_at")
        age = None if built is None else round((time.time() if now is None else now)
                                               - float(built), 1)
        info = {"build_id": build.build_id, "age_s": age}
        if build.refused:
            return 503, {"status": "refusing", "reason": build.refused, **info}
        if build.index is None:
            return 503, {"status": "no index", **info}
        if self.problem:
            return 503, {"status": "degraded", "problem": self.problem, **info}
        return 200, {"status": "ok", **info}
