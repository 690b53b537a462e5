"""Benchmark section 7: the HTTP service over loopback.

At least 2,000 POST /search requests (fewer under ``--quick``), ``concurrency`` at a time (client
threads, default 8), to a ``rag serve`` started here on 127.0.0.1 (:mod:`rag.app.serve.process`),
with p50/p95/p99, errors and throughput next to the in-process search latency of the same
queries (one at a time, ``SearchPipeline.search``). Each server variant is started, warmed up
with one request per client thread, measured and stopped in turn: ``batched`` (the service's
defaults: concurrent queries embedded in one batch, :mod:`rag.search.batching`) and
``unbatched`` (``--max-batch 1``: each request embeds its own query), so the gain of batching is
measured side by side. The batched server's log gives the batch sizes it formed.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rag.bench.measure import progress, ratio, summary

#: server variant -> ``rag serve`` options
VARIANTS = {"batched": [], "unbatched": ["--max-batch", "1"]}
#: the issue's goal: p50 under ``concurrency`` concurrent clients within this many times the
#: in-process p50
SERVE_MAX_RATIO = 2.0

# loopback traffic never goes through an HTTP proxy set in the environment
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, query: str) -> tuple[float, int]:
    body = json.dumps({"query": query}).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with _LOOPBACK.open(req, timeout=60) as resp:
            resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return (time.perf_counter() - t0) * 1000.0, status


def _batch_sizes(log_path: Path) -> dict | None:
    """Summary of the ``batch`` field of the server's per-request log lines (None if none)."""
    sizes = []
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("batch"), int):
            sizes.append(entry["batch"])
    if not sizes:
        return None
    return {**summary(sizes, unit="queries"), "mean": float(np.mean(sizes))}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; None elsewhere)."""
    import os

    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _run_variant(queries: list[str], options: list[str], *, requests: int, concurrency: int,
                 overrides: list[str], scratch: Path, label: str) -> dict:
    from rag.app.serve import process

    log_path = scratch / f"serve-{label}.log"
    proc, base = process.start(overrides, options=options, log_path=log_path)
    try:
        url = f"{base}/search"
        work = [queries[i % len(queries)] for i in range(requests)]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda q: _post(url, q), work[:concurrency]))  # warm-up, not counted
            cpu0 = _cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            results = list(pool.map(lambda q: _post(url, q), work))
            wall = time.perf_counter() - t0
            cpu1 = _cpu_seconds(proc.pid)
    finally:
        process.stop(proc)
    lat = [r[0] for r in results]
    http = summary(lat, unit="ms", p95=True)
    http["p99"] = float(np.percentile(lat, 99))
    cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) * 1000.0 / requests
    return {"options": options, "http": http, "throughput_rps": requests / wall,
            "server_cpu_ms_per_request": cpu,
            "errors": sum(1 for _, status in results if status != 200),
            "batch_sizes": _batch_sizes(log_path)}


def bench_serve(queries: list[str], *, requests: int, concurrency: int,
                overrides: list[str], variants: dict[str, list[str]] | None = None) -> dict:
    """For each server variant (default :data:`VARIANTS`), start ``rag serve`` on a free
    loopback port, send ``requests`` POSTs ``concurrency`` at a time (cycling through
    ``queries``) after one untimed request per client thread, and stop it; then search the same
    queries in process, one at a time.

    Returns:
        JSON-ready dict: ``variants`` -> {``http`` latency summary (ms, with p95 and p99),
        ``errors`` (non-200 answers), ``throughput_rps``, ``server_cpu_ms_per_request`` (the
        server's CPU time over the timed requests, per request: unlike wall times, it hardly
        moves when other jobs share the cores), ``batch_sizes``,
        ``ratio_http_over_inprocess_p50``}; ``inprocess`` latency summary and ``inprocess_throughput_qps`` (one
        thread, back to back); and, for the first variant, its ``http``, ``errors``,
        ``throughput_rps`` and ratio at the top level.
    """
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.app.search_cli import SERVING_QUERY_BACKEND, _load

    from rag.app.search_cli import read_overrides

    overrides = read_overrides(overrides)  # a run's eval.* / tracking.* keys: not the service's
    variants = dict(VARIANTS if variants is None else variants)
    out_variants: dict = {}
    with tempfile.TemporaryDirectory(prefix="rag-bench-serve-") as tmp:
        for label, options in variants.items():
            out_variants[label] = _run_variant(queries, list(options), requests=requests,
                                               concurrency=concurrency, overrides=overrides,
                                               scratch=Path(tmp), label=label)
            v = out_variants[label]
            progress(f"serve: {label} p50 {v['http']['median']:.1f} ms, "
                     f"{v['throughput_rps']:.1f} req/s, {v['errors']} errors")
    # in process with the query encoder the server uses
    cfg, index, _ = _load(overrides, query_backend=SERVING_QUERY_BACKEND)
    pipe = SearchPipeline(index, SearchOptions.from_config(cfg))
    pipe.search(queries[0])  # warm-up
    inproc = []
    work = queries * max(1, 200 // max(len(queries), 1))
    t0, c0 = time.perf_counter(), time.process_time()
    for q in work:
        t = time.perf_counter()
        pipe.search(q)
        inproc.append((time.perf_counter() - t) * 1000.0)
    inproc_wall = time.perf_counter() - t0
    inproc_cpu = (time.process_time() - c0) * 1000.0 / len(inproc)
    local = summary(inproc, unit="ms", p95=True)
    local["p99"] = float(np.percentile(inproc, 99))
    for v in out_variants.values():
        v["ratio_http_over_inprocess_p50"] = ratio(v["http"]["median"], local["median"])
    first = next(iter(out_variants.values()))
    return {"requests": requests, "concurrency": concurrency, "errors": first["errors"],
            "http": first["http"], "throughput_rps": first["throughput_rps"],
            "ratio_http_over_inprocess_p50": first["ratio_http_over_inprocess_p50"],
            "variants": out_variants, "inprocess": local,
            "inprocess_throughput_qps": len(inproc) / inproc_wall,
            "inprocess_cpu_ms_per_search": inproc_cpu,
            "inprocess_searches": len(inproc), "max_ratio": SERVE_MAX_RATIO}
