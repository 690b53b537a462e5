"""``python -m rag.bench``: performance measurements, written to reports/bench.md (+ JSON).

Sections so far: ``serve`` — at least 2,000 POST /search requests, 8 concurrent, over loopback
to a ``rag serve`` started here on 127.0.0.1, with p50/p99 and errors next to the in-process
search latency of the same queries. (The channel, index-build, evaluation and sweep sections
of the benchmark issue are still to come.) Figures are measured on this machine, now; nothing
here is asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np


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
    time (cycling through ``queries``), stop it, and measure the same queries in process."""
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
    lat = np.array([r[0] for r in results])
    errors = sum(1 for _, status in results if status != 200)
    cfg, index, _ = _load(overrides)
    pipe = SearchPipeline(index, SearchOptions.from_config(cfg))
    inproc = []
    for q in queries * max(1, 200 // max(len(queries), 1)):
        t = time.perf_counter()
        pipe.search(q)
        inproc.append((time.perf_counter() - t) * 1000.0)
    return {"requests": requests, "concurrency": concurrency, "errors": errors,
            "http_p50_ms": float(np.percentile(lat, 50)), "http_p99_ms": float(np.percentile(lat, 99)),
            "throughput_rps": requests / wall,
            "inprocess_p50_ms": float(np.percentile(inproc, 50)),
            "inprocess_p99_ms": float(np.percentile(inproc, 99)),
            "inprocess_searches": len(inproc)}


def render(results: dict) -> str:
    """reports/bench.md."""
    s = results["serve"]
    return "\n".join([
        "# Benchmark", "",
        "<!-- GENERATED FILE: written by `python -m rag.bench`; do not edit by hand. -->", "",
        f"Machine: {results['machine']['cores']} cores, Python {results['machine']['python']}, "
        f"{results['machine']['platform']}; {results['machine']['when']}.", "",
        "## Service over loopback", "",
        f"{s['requests']} POST /search requests, {s['concurrency']} at a time, to `rag serve` on "
        "127.0.0.1, against the same queries searched in process (p50/p99 per request).", "",
        "| | p50 ms | p99 ms | errors | throughput |", "|---|---|---|---|---|",
        f"| HTTP (rag serve) | {s['http_p50_ms']:.1f} | {s['http_p99_ms']:.1f} | {s['errors']} | "
        f"{s['throughput_rps']:.0f} req/s |",
        f"| in process (SearchPipeline) | {s['inprocess_p50_ms']:.1f} | {s['inprocess_p99_ms']:.1f} "
        f"| — | — |",
        f"| ratio HTTP / in process (p50) | {s['http_p50_ms'] / s['inprocess_p50_ms']:.1f}× | | | |", "",
    ])


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m rag.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (a short run)")
    parser.add_argument("--requests", type=int, default=None, help="HTTP requests (default 2000; --quick 2000)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", default="reports/bench.md")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides for the served corpus")
    args = parser.parse_args(argv)
    from rag.config import expand_path, project_root
    from rag.eval.golden import load_golden

    golden = load_golden(project_root() / "golden/flask")
    queries = [q.query for q in golden.positives] + [q.query for q in golden.negatives]
    if any(o.startswith("corpus.path=") for o in args.overrides):
        queries = ["main entry point", "configuration", "error handling", "tests"]
    n = args.requests or 2000
    results = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
               "serve": bench_serve(queries, requests=n, concurrency=args.concurrency,
                                    overrides=list(args.overrides))}
    out = expand_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(results) + "\n")
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
