"""Benchmark section ``ann``: exact dense search against FAISS HNSW and IVF (rag/index/ann.py)
on synthetic clustered vectors.

Data (:func:`clustered_matrix`): ``n`` unit vectors of dimension 384 (MiniLM's), float32,
drawn from a Gaussian mixture of 1,000 centres — a uniform random cloud in 384 dimensions
has no near neighbours worth the name and makes every ANN look bad. Each vector is a random
unit centre plus Gaussian noise whose per-coordinate scale decays as ``1/sqrt(d)`` (a
decaying spectrum, like real sentence embeddings'), normalised; 1,000 queries are data
points plus half that noise, normalised (top-1 cosine ~0.93, 10th ~0.67 at 100k).

Per index, with 1,000 queries (exact: ``exact_queries`` of them timed, all 1,000 as ground
truth by blocked matrix products):

* **exact** — :meth:`DenseChannel.scores` + :meth:`DenseChannel.top` (depth 10): what
  ``dense.index=exact`` does per query;
* **hnsw / ivf** — build time and the process's peak memory growth while building
  (resident set size sampled every 20 ms), then per query the FAISS search alone and the
  channel's whole path — :meth:`DenseChannel.candidate_scores` (``dense.ann_candidates``
  candidates rescored exactly, -inf elsewhere) + :meth:`DenseChannel.top` over all ``n``
  scores, as the pipeline runs it; recall@10 of the channel's top 10 against exact's.

Every p50 is single-threaded per query (FAISS answers one query on one thread; the exact
product uses the channel's row blocks, one per core). Building uses every core. The channel
path of a query is timed right after the FAISS search of the same query, so it runs on warm
caches (its p50 can come out below the FAISS search alone, which it includes).
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import numpy as np

from rag.bench.measure import progress, ratio, summary

DIM = 384
CENTRES = 1_000
QUERIES = 1_000


def clustered_matrix(n: int, *, dim: int = DIM, centres: int = CENTRES, queries: int = QUERIES,
                     noise: float = 0.8, seed: int = 0,
                     block: int = 100_000) -> tuple[np.ndarray, np.ndarray]:
    """(``n`` x ``dim`` data, ``queries`` x ``dim`` queries), float32, rows L2-normalised
    (see the module docstring). ``noise`` is the noise vector's expected norm before
    normalisation."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim), dtype=np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    spectrum = np.arange(1, dim + 1, dtype=np.float32) ** -0.5
    spectrum *= noise / np.sqrt((spectrum ** 2).sum())
    x = np.empty((n, dim), dtype=np.float32)
    for a in range(0, n, block):
        b = min(n, a + block)
        x[a:b] = c[rng.integers(0, centres, b - a)]
        x[a:b] += rng.standard_normal((b - a, dim), dtype=np.float32) * spectrum
        x[a:b] /= np.linalg.norm(x[a:b], axis=1, keepdims=True)
    src = rng.integers(0, n, queries)
    q = x[src] + rng.standard_normal((queries, dim), dtype=np.float32) * (spectrum * 0.5)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x, np.ascontiguousarray(q)


def exact_top(x: np.ndarray, q: np.ndarray, k: int = 10, block: int = 50) -> np.ndarray:
    """Exact top-``k`` row ids of every query, shape (len(q), k), ordered by (-score, id) as
    :meth:`DenseChannel.top` orders them (blocked products: ground truth, untimed)."""
    from rag.index.dense import DenseChannel

    out = np.empty((len(q), k), dtype=np.int64)
    for a in range(0, len(q), block):
        s = q[a:a + block] @ x.T
        for j in range(s.shape[0]):
            out[a + j] = [i for i, _ in DenseChannel.top(s[j], k)]
    return out


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class PeakRSS:
    """Peak resident set size while the ``with`` block runs (sampled every 20 ms), as growth
    over the size at entry, in MiB."""

    def __enter__(self) -> "PeakRSS":
        self.start = self.peak = _rss_kib()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_kib())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss_kib())
        self.growth_mib = (self.peak - self.start) / 1024.0


def _recall(approx: np.ndarray | list, truth: np.ndarray, k: int = 10) -> float:
    return float(np.mean([len(set(list(a)[:k]) & set(t[:k].tolist())) / k
                          for a, t in zip(approx, truth)]))


#: the largest size the bench builds an HNSW graph for (IVF is measured at every size)
HNSW_MAX_VECTORS = 2_000_000


def bench_ann_size(n: int, *, exact_queries: int, hnsw_ef: tuple[int, ...],
                   ivf_nprobe: tuple[int, ...], settings=None) -> dict:
    """Exact, HNSW and IVF at one size (see the module docstring)."""
    from rag.index.ann import AnnIndex, AnnSettings
    from rag.index.dense import DenseChannel

    base = settings or AnnSettings()
    t0 = time.perf_counter()
    x, q = clustered_matrix(n)
    gen_s = time.perf_counter() - t0
    progress(f"ann: {n:,} x {DIM} clustered vectors generated in {gen_s:.1f} s")
    t0 = time.perf_counter()
    truth = exact_top(x, q)
    truth_s = time.perf_counter() - t0
    channel = DenseChannel(None, x)  # exact; limits BLAS to one thread per row block
    ex_ms = []
    for v in q[:exact_queries]:
        t1 = time.perf_counter()
        channel.top(channel.scores(v), 10)
        ex_ms.append((time.perf_counter() - t1) * 1000.0)
    exact = summary(ex_ms, unit="ms", p95=True)
    progress(f"ann: exact p50 {exact['median']:.1f} ms over {exact_queries} queries "
             f"(ground truth {truth_s:.0f} s)")
    out = {"vectors": n, "dim": DIM, "centres": CENTRES, "queries": len(q),
           "generate_s": gen_s, "exact": exact, "exact_queries": exact_queries,
           "data_mib": x.nbytes / 2 ** 20, "indexes": []}
    for kind, grid, key in (("hnsw", hnsw_ef, "ef_search"), ("ivf", ivf_nprobe, "ivf_nprobe")):
        if kind == "hnsw" and n > HNSW_MAX_VECTORS:
            # measured: 596 s to build at 1M on 2 shared cores, growing faster than n
            out["skipped"] = (f"hnsw above {HNSW_MAX_VECTORS:,} vectors (its build takes over "
                              "an hour on 2 cores); ivf only")
            progress(f"ann: {out['skipped']}")
            continue
        s0 = AnnSettings(**{**base.as_dict(), "index": kind})
        gc.collect()
        with PeakRSS() as mem:
            ann = AnnIndex.build(x, s0)
        progress(f"ann: {kind} built in {ann.build_s:.1f} s (+{mem.growth_mib:.0f} MiB)")
        for value in grid:
            s = AnnSettings(**{**s0.as_dict(), key: value})
            ann.settings = s
            ann._apply_search_params()
            ch = DenseChannel(None, x, ann=ann)
            faiss_ms, path_ms, tops = [], [], []
            for v in q:
                t1 = time.perf_counter()
                ann.search(v, s.ann_candidates)
                t2 = time.perf_counter()
                top = ch.top(ch.candidate_scores(v, k=10), 10)
                t3 = time.perf_counter()
                faiss_ms.append((t2 - t1) * 1000.0)
                path_ms.append((t3 - t2) * 1000.0)
                tops.append([i for i, _ in top])
            row = {"index": kind, key: value, "ann_candidates": s.ann_candidates,
                   "settings": s.as_dict(), "nlist": ann.nlist, "build_s": ann.build_s,
                   "build_peak_mib": mem.growth_mib,
                   "faiss": summary(faiss_ms, unit="ms", p95=True),
                   "channel": summary(path_ms, unit="ms", p95=True),
                   "recall_at_10": _recall(tops, truth)}
            row["speedup_faiss"] = ratio(exact["median"], row["faiss"]["median"])
            row["speedup_channel"] = ratio(exact["median"], row["channel"]["median"])
            out["indexes"].append(row)
            progress(f"ann: {kind} {key}={value}: recall@10 {row['recall_at_10']:.3f}, p50 "
                     f"faiss {row['faiss']['median']:.2f} ms, channel "
                     f"{row['channel']['median']:.2f} ms (exact {exact['median']:.1f} ms)")
        del ann, ch
        gc.collect()
    del x, q, channel
    gc.collect()
    return out


def bench_ann(*, sizes: tuple[int, ...], exact_queries: int = 100,
              hnsw_ef: tuple[int, ...] = (64, 128, 256),
              ivf_nprobe: tuple[int, ...] = (8, 16, 32, 64)) -> dict:
    """The ``ann`` section at every size in ``sizes``."""
    import faiss

    from rag.index.ann import AnnSettings

    return {"sizes": [bench_ann_size(n, exact_queries=exact_queries, hnsw_ef=hnsw_ef,
                                     ivf_nprobe=ivf_nprobe) for n in sizes],
            "defaults": AnnSettings().as_dict(), "faiss_version": faiss.__version__,
            "faiss_threads": faiss.omp_get_max_threads()}


def render_ann(r: dict) -> list[str]:
    """The section's part of reports/bench.md."""
    d = r.get("defaults", {})
    lines = ["## ANN: exact dense search against FAISS HNSW and IVF", "",
             f"Synthetic clustered unit vectors (Gaussian mixture of {CENTRES:,} centres, "
             f"decaying noise spectrum), {QUERIES:,} queries near the data, recall@10 against "
             "exact top-10. Exact: `DenseChannel.scores` + `top`; faiss: the FAISS search "
             f"alone ({d.get('ann_candidates', 100)} candidates); channel: "
             "`candidate_scores` (candidates rescored exactly, -inf elsewhere) + `top` over "
             f"all n scores, the pipeline's path. FAISS {r.get('faiss_version')}, "
             f"defaults hnsw_m={d.get('hnsw_m')}, ef_construction={d.get('ef_construction')}, "
             f"ivf_nlist=auto (sqrt n). Build memory: resident-set growth while building.", "",
             "| vectors | index | parameter | recall@10 | p50 ms faiss | p50 ms channel (p95) | "
             "exact p50 ms | speed-up faiss / channel | build s | build +MiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in r.get("sizes", []):
        lines.append(f"| {s['vectors']:,} | exact | — | 1 | — | — | {s['exact']['median']:.1f} "
                     f"| 1 | — | — |")
        for row in s["indexes"]:
            key = "ef_search" if row["index"] == "hnsw" else "ivf_nprobe"
            extra = f", nlist {row['nlist']}" if row.get("nlist") else ""
            lines.append(
                f"| {s['vectors']:,} | {row['index']} | {key}={row[key]}{extra} | "
                f"{row['recall_at_10']:.3f} | {row['faiss']['median']:.2f} | "
                f"{row['channel']['median']:.2f} ({row['channel']['p95']:.2f}) | "
                f"{s['exact']['median']:.1f} | {row['speedup_faiss']:.0f}× / "
                f"{row['speedup_channel']:.0f}× | {row['build_s']:.1f} | "
                f"{row['build_peak_mib']:.0f} |")
    lines.append("")
    lines += [f"{s['vectors']:,} vectors: {s['skipped']}." for s in r.get("sizes", [])
              if s.get("skipped")]
    return lines
