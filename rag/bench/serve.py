"""Benchmark section 7: the HTTP service over loopback.

At least 2,000 POST /search requests (fewer under ``--quick``), ``concurrency`` at a time, to a
``rag serve`` started here on 127.0.0.1 (:mod:`rag.serve.process`), with p50/p99 and errors
next to the in-process search latency of the same queries.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rag.bench.measure import ratio, summary


def _post(url: str, query: str) -> tuple[float, int]:
    body = json.dumps({"query": query}).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return (time.perf_counter() - t0) * 1000.0, status


def bench_serve(queries: list[str], *, requests: int, concurrency: int,
                overrides: list[str]) -> dict:
    """Start ``rag serve`` on a free loopback port, send ``requests`` POSTs ``concurrency`` at a
    time (cycling through ``queries``), stop it, and measure the same queries in process.

    Returns:
        JSON-ready dict: ``http`` and ``inprocess`` latency summaries (ms, with p95 and p99),
        ``errors`` (non-200 answers), ``throughput_rps``, and the p50 ratio.
    """
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.search_cli import _load
    from rag.serve import process

    proc, base = process.start(overrides)
    try:
        work = [queries[i % len(queries)] for i in range(requests)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda q: _post(f"{base}/search", q), work))
        wall = time.perf_counter() - t0
    finally:
        process.stop(proc)
    lat = [r[0] for r in results]
    errors = sum(1 for _, status in results if status != 200)
    cfg, index, _ = _load(overrides)
    pipe = SearchPipeline(index, SearchOptions.from_config(cfg))
    pipe.search(queries[0])  # warm-up
    inproc = []
    for q in queries * max(1, 200 // max(len(queries), 1)):
        t = time.perf_counter()
        pipe.search(q)
        inproc.append((time.perf_counter() - t) * 1000.0)
    http = summary(lat, unit="ms", p95=True)
    http["p99"] = float(np.percentile(lat, 99))
    local = summary(inproc, unit="ms", p95=True)
    local["p99"] = float(np.percentile(inproc, 99))
    return {"requests": requests, "concurrency": concurrency, "errors": errors,
            "http": http, "inprocess": local, "throughput_rps": requests / wall,
            "inprocess_searches": len(inproc),
            "ratio_http_over_inprocess_p50": ratio(http["median"], local["median"])}
