"""Micro-batching of concurrent dense queries (``rag serve``).

Each ``POST /search`` runs on its own thread. Embedding each query alone makes concurrent
requests queue for the cores one encoder call at a time (8 clients on 2 cores: p50 7x the
in-process latency). :class:`DenseBatcher` coalesces the queries that arrive within a short
window into one ``embedder.embed`` call and scores the whole batch with one matrix product
(``matrix @ Q.T``); each request then finishes its own pipeline (BM25, fusion, rerank,
abstention) with its precomputed dense scores (``SearchPipeline.search(...,
precomputed={"dense": scores})``).

How a batch forms: one worker thread takes the oldest waiting query and waits for more until
``max_batch`` are queued, ``wait_ms`` have passed since that query arrived, or every search in
flight (:meth:`DenseBatcher.request`) is already queued — so a lone client never waits. While
a batch is being embedded, new queries queue for the next one.

A batch of one is scored exactly as unbatched (``DenseChannel.scores``, a matrix-vector
product). A larger batch's matrix-matrix product and padded encoder batch may differ from the
unbatched scores in the last bits of float32 (tested: within 1e-6 and the same rankings).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

#: ``rag serve`` defaults (``--batch-wait-ms`` / ``RAG_BATCH_WAIT_MS``, ``--max-batch`` /
#: ``RAG_MAX_BATCH``); ``max_batch`` 1 turns batching off.
DEFAULT_BATCH_WAIT_MS = 5.0
DEFAULT_MAX_BATCH = 16


@dataclass
class _Pending:
    query: str
    arrived: float
    done: threading.Event = field(default_factory=threading.Event)
    scores: np.ndarray | None = None
    error: BaseException | None = None
    timings: dict[str, float] = field(default_factory=dict)
    batch_size: int = 0


@dataclass
class BatchedScores:
    """The dense scores of one query and what computing them cost.

    Attributes:
        scores: cosine with every chunk, shape (n_chunks,) (as ``DenseChannel.score``).
        timings_ms: ``batch_wait`` (queued before its batch started), ``embed_query`` (the
            batch's encoder call) and ``dense`` (the batch's matrix product), in ms.
        batch_size: queries embedded together.
    """

    scores: np.ndarray
    timings_ms: dict[str, float]
    batch_size: int


def batch_scores(channel, qvecs: np.ndarray) -> np.ndarray:
    """Cosine of each query vector with every chunk, shape (n_chunks, n_queries).

    A channel with its own ``scores_batch(qvecs)`` (e.g. an approximate index) answers itself;
    otherwise one product ``channel.matrix @ qvecs.T``, split into one row block per core
    from ``PARALLEL_MIN_ROWS`` rows on, as ``DenseChannel.scores`` does for one query.
    """
    own = getattr(channel, "scores_batch", None)
    if callable(own):
        return np.asarray(own(qvecs))
    from rag.index.dense import PARALLEL_MIN_ROWS

    m = channel.matrix
    q = np.ascontiguousarray(qvecs, dtype=m.dtype).T
    n = m.shape[0]
    workers = _cores()
    if n < PARALLEL_MIN_ROWS or workers < 2:
        return m @ q
    out = np.empty((n, q.shape[1]), dtype=np.result_type(m.dtype, q.dtype))
    bounds = np.linspace(0, n, workers + 1).astype(np.int64)

    def block(k: int) -> None:
        a, b = bounds[k], bounds[k + 1]
        np.matmul(m[a:b], q, out=out[a:b])

    list(_pool(workers).map(block, range(workers)))
    return out


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_POOL = None


def _pool(workers: int):
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rag-batch")
    return _POOL


class DenseBatcher:
    """Coalesces concurrent queries of one dense channel into batches (module docstring).

    Args:
        channel: a dense channel: ``embedder.embed(texts)``, ``scores(qvec)`` and ``matrix``
            (or ``scores_batch(qvecs)``).
        wait_ms: how long the oldest queued query waits for company (0: never wait; batches
            still form from queries that arrive while the previous batch is computed).
        max_batch: the most queries per batch (>= 1).

    Raises:
        ValueError: ``wait_ms`` < 0 or ``max_batch`` < 1.
    """

    def __init__(self, channel, *, wait_ms: float = DEFAULT_BATCH_WAIT_MS,
                 max_batch: int = DEFAULT_MAX_BATCH) -> None:
        if not wait_ms >= 0:
            raise ValueError(f"wait_ms must be >= 0, got {wait_ms!r}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        self.channel = channel
        self.wait_s = float(wait_ms) / 1000.0
        self.max_batch = int(max_batch)
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._in_flight = 0
        self._closed = False
        self._worker: threading.Thread | None = None
        # batch sizes so far (for tests and the log): size -> count
        self.sizes: dict[int, int] = {}

    @contextmanager
    def request(self) -> Iterator[None]:
        """Count one search in flight for as long as the block runs: the worker stops waiting
        for company once every search in flight has queued its query."""
        with self._cond:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def scores(self, query: str) -> BatchedScores:
        """The dense scores of ``query``, computed in a batch with the queries queued with it.
        Blocks until its batch is done; a batch that fails is retried one query at a time,
        so only the query that fails raises."""
        item = _Pending(query=query, arrived=time.perf_counter())
        with self._cond:
            if self._closed:
                raise RuntimeError("the dense batcher is closed")
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="rag-dense-batcher",
                                                daemon=True)
                self._worker.start()
            self._queue.append(item)
            self._cond.notify_all()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.scores is not None
        return BatchedScores(scores=item.scores, timings_ms=item.timings,
                             batch_size=item.batch_size)

    def close(self) -> None:
        """Stop the worker after the queued queries are answered."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout=30)

    def _take(self) -> list[_Pending] | None:
        """The next batch (None once closed and drained)."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0].arrived + self.wait_s
            while (len(self._queue) < self.max_batch and len(self._queue) < self._in_flight
                   and not self._closed):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch = self._queue[:self.max_batch]
            del self._queue[:self.max_batch]
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            self._compute(batch)

    def _compute(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        try:
            qvecs = self.channel.embedder.embed([p.query for p in batch])
            t1 = time.perf_counter()
            if len(batch) == 1:  # exactly the unbatched product
                columns = [self.channel.scores(qvecs[0])]
            else:
                s = batch_scores(self.channel, qvecs)
                columns = [np.ascontiguousarray(s[:, j]) for j in range(len(batch))]
            t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001
            if len(batch) > 1:  # one bad query must not fail the others: each on its own
                for p in batch:
                    self._compute([p])
                return
            batch[0].error = exc
            batch[0].done.set()
            return
        except BaseException as exc:  # noqa: BLE001 — interpreter exit: release every waiter
            for p in batch:
                p.error = exc
                p.done.set()
            return
        self.sizes[len(batch)] = self.sizes.get(len(batch), 0) + 1
        for p, col in zip(batch, columns):
            p.scores = col
            p.batch_size = len(batch)
            p.timings = {"batch_wait": (t0 - p.arrived) * 1000.0,
                         "embed_query": (t1 - t0) * 1000.0, "dense": (t2 - t1) * 1000.0}
            p.done.set()


def dense_needed(index, options, query: str, *, signals: bool) -> bool:
    """Whether ``SearchPipeline(index, options, gate=...).search(query, with_signals=...)``
    would score the dense channel: its route is ``dense`` or fuses it, or every abstention
    signal is asked for (``signals``), which read the dense scores whatever the route (a
    learned gate acts only where the route ran the dense channel, so it needs nothing more). False without a dense channel, for an invalid mode (the
    pipeline reports it) or a type filter that matches no chunk (nothing is scored). A routed
    query whose channel finds nothing and falls back to dense (``search.fallback``) is not
    foreseen here: the pipeline then embeds it itself, unbatched."""
    from rag.search.route import route

    if getattr(index, "dense", None) is None:
        return False
    try:
        eff = route(query, mode=options.mode, prose_mode=options.prose_mode)
    except ValueError:
        return False
    if options.types and not index.category_mask(options.types).any():
        return False
    names = tuple(options.fuse) if eff == "hybrid" else (eff,)
    return "dense" in names or signals
