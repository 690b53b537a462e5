"""Benchmark section 2: the dense channel's query latency next to its floor.

At each size, ``n`` synthetic unit vectors of the embedder's dimension (float32, fixed seed;
see :func:`synthetic_matrix`) stand in for the chunk matrix. Per query:

* **ours** — :meth:`DenseChannel.embed_query` (timed as *embedding*), then
  :meth:`DenseChannel.scores` and :meth:`DenseChannel.top` with ``depth = search.candidates``
  (timed together as *scoring*), the way :class:`rag.search.pipeline.SearchPipeline` runs a
  dense route;
* **floor** — the model's own ``SentenceTransformer.encode`` of that one query, timed in a
  loop of encodes only, plus one matrix-vector product ``matrix @ q`` timed in a loop of
  products only, with one BLAS thread and with all cores: the faster of the two p50s counts
  (whatever our channel does; on a shared machine either can win).

The floor is the sum of the two p50s; ``ratio = p50(ours) / floor``. The queries are taken in
groups of 8; each group runs the three blocks (floor encodes, floor products, ours) with their
order rotated from group to group, so a change of load on shared cores hits all three alike.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Sequence

import numpy as np

from rag.bench.measure import progress, ratio, spread, summary


def synthetic_matrix(n: int, dim: int, *, seed: int = 0, block: int = 65_536) -> np.ndarray:
    """``n`` distinct unit vectors of dimension ``dim``, float32, shape (n, dim), C-contiguous.

    One block of ``block`` Gaussian rows normalised to unit length (uniform directions) is
    drawn; every further block is that one with a random sign per coordinate (an orthogonal
    map: rows stay unit length and distinct). That is ~10x cheaper than drawing all 1M x 384
    values (10 s here), and the timing does not depend on the values. The float32 matrix
    (n * dim * 4 bytes: 1.5 GB at 1M x 384) is the only large allocation.
    """
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((min(block, n), dim), dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    out = np.empty((n, dim), dtype=np.float32)
    for a in range(0, n, block):
        b = min(n, a + block)
        signs = (rng.integers(0, 2, size=dim) * 2 - 1).astype(np.float32) if a else 1.0
        np.multiply(base[: b - a], signs, out=out[a:b])
    return out


def bench_size(embedder, matrix: np.ndarray, queries: Sequence[str], *, depth: int,
               passes: int, group_size: int = 8) -> dict:
    """Ours and the floor at one matrix size (see the module docstring).

    Returns:
        JSON-ready dict with ``ours_embed``, ``ours_scoring``, ``ours_total``,
        ``floor_embed``, ``floor_matvec`` (ms summaries, p50 = median), ``floor_ms`` and the
        ratios ``ratio`` (total), ``embed_ratio``, ``scoring_ratio``.
    """
    from threadpoolctl import threadpool_limits

    from rag.index.dense import DenseChannel

    channel = DenseChannel(embedder, matrix)  # (limits BLAS to one thread, as in a real run)
    model = embedder.model
    encode_kwargs = dict(batch_size=embedder.batch_size, normalize_embeddings=embedder.normalize,
                         convert_to_numpy=True, show_progress_bar=False)
    qvecs = {q: np.asarray(model.encode([q], **encode_kwargs), dtype=np.float32)[0]
             for q in queries}
    cores = os.cpu_count() or 1
    ours_e: list[float] = []
    ours_s: list[float] = []
    ours_t: list[float] = []
    floor_e: list[float] = []
    floor_m1: list[float] = []
    floor_mn: list[float] = []

    def run_ours(group: Sequence[str]) -> None:
        for q in group:
            t0 = time.perf_counter()
            v = channel.embed_query(q)
            t1 = time.perf_counter()
            channel.top(channel.scores(v), depth)
            t2 = time.perf_counter()
            ours_e.append((t1 - t0) * 1000.0)
            ours_s.append((t2 - t1) * 1000.0)
            ours_t.append((t2 - t0) * 1000.0)

    def run_floor_embed(group: Sequence[str]) -> None:
        for q in group:
            t0 = time.perf_counter()
            model.encode([q], **encode_kwargs)
            floor_e.append((time.perf_counter() - t0) * 1000.0)

    def run_floor_matvec(group: Sequence[str]) -> None:
        for threads, sink in ((1, floor_m1), (cores, floor_mn)):
            with threadpool_limits(limits=threads, user_api="blas"):
                for q in group:
                    v = qvecs[q]
                    t0 = time.perf_counter()
                    matrix @ v
                    sink.append((time.perf_counter() - t0) * 1000.0)
        # OpenBLAS's worker threads spin for a while after a call; let them go idle before
        # anything else is timed
        time.sleep(0.15)

    channel.top(channel.scores(channel.embed_query(queries[0])), depth)  # warm-up
    blocks = [run_floor_embed, run_floor_matvec, run_ours]
    groups = [list(queries[i:i + group_size]) for i in range(0, len(queries), group_size)]
    turn = 0
    for _ in range(passes):
        for group in groups:  # small groups, each block's order rotated: drift hits all alike
            for k in range(3):
                blocks[(turn + k) % 3](group)
            turn += 1
    oe, os_, ot = (summary(x, unit="ms", p95=True) for x in (ours_e, ours_s, ours_t))
    fe, fm1, fmn = (summary(x, unit="ms", p95=True) for x in (floor_e, floor_m1, floor_mn))
    fm, threads = (fm1, 1) if fm1["median"] <= fmn["median"] else (fmn, cores)
    floor = fe["median"] + fm["median"]
    return {"vectors": int(matrix.shape[0]), "dim": int(matrix.shape[1]),
            "queries": len(queries), "passes": passes, "depth": depth,
            "ours_embed": oe, "ours_scoring": os_, "ours_total": ot,
            "floor_embed": fe, "floor_matvec": fm, "floor_matvec_blas_threads": threads,
            "matvec_one_thread": fm1, "matvec_all_cores": fmn, "floor_ms": floor,
            "ratio": ratio(ot["median"], floor),
            "embed_ratio": ratio(oe["median"], fe["median"]),
            "scoring_ratio": ratio(os_["median"], fm["median"])}


def bench_dense(embedder, queries: Sequence[str], *, sizes: Sequence[int], depth: int,
                passes: int, max_queries: dict[int, int] | None = None) -> dict:
    """Section 2 at every size in ``sizes`` (e.g. 10k, 100k, 1M vectors).

    Args:
        embedder: a :class:`rag.index.dense.SentenceTransformerEmbedder` (has ``.model``).
        queries: query texts, cycled in order.
        max_queries: per size, how many of ``queries`` to use, spread over the list
            (default all).
    """
    from rag.index.dense import PARALLEL_MIN_ROWS

    out = {"sizes": [], "parallel_min_rows": PARALLEL_MIN_ROWS}
    for n in sizes:
        t0 = time.perf_counter()
        matrix = synthetic_matrix(n, embedder.dim)
        gen_s = time.perf_counter() - t0
        qs = spread(queries, (max_queries or {}).get(n))
        progress(f"dense: {n} vectors generated in {gen_s:.1f} s; {len(qs)} queries x {passes}")
        res = bench_size(embedder, matrix, qs, depth=depth, passes=passes)
        res["generate_s"] = gen_s
        out["sizes"].append(res)
        progress(f"dense: {n} vectors: ours p50 {res['ours_total']['median']:.1f} ms, floor "
                 f"{res['floor_ms']:.1f} ms, ratio {res['ratio']:.2f}")
        del matrix
        gc.collect()
    return out
