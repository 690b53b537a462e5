"""Benchmark section 6 (second half): per-mode query latency in process, next to the seed's.

Each query is searched as the evaluator searches it (``SearchPipeline.search(query,
depth=eval.depth)``) over the configured corpus's index; latency is the wall time of that
call, in ms. Modes: ``bm25``, ``dense``, ``hybrid``, ``auto`` (router), and with a second
stage when one is available: ``rerank=late_interaction`` (needs no training) and
``rerank=cross_encoder`` only if its trained model is already in the cache (it is never trained
here). The late-interaction reranker's first pass fills its cache (token embeddings of the
candidate chunks) and is timed apart as ``first_pass_s``; latency comes from the passes after
it.

The seed's figures come from the seed documents, measured on different hardware; they are
printed next to ours for orientation only.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from rag.bench.measure import progress, ratio, spread, summary

#: Per-query latency p50 reported by the seed system (ms), different hardware.
SEED_P50_MS = {"bm25": 2.0, "dense": 32.0, "auto": 34.0, "rerank": 2050.0}


def _time_queries(pipe, queries: Sequence[str], *, depth: int, passes: int) -> list[float]:
    out = []
    for _ in range(passes):
        for q in queries:
            t0 = time.perf_counter()
            pipe.search(q, depth=depth)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def available_rerankers(overrides: Sequence[str], embedder) -> dict:
    """``{label: (cfg, reranker) | reason string}`` for ``late_interaction`` and, when the
    config group exists, ``cross_encoder`` (only an already-trained model: built with
    ``train_if_missing=False``; anything else is reported as unavailable, with the reason)."""
    from rag.app.config import expand_path, project_root
    from rag.app.search_cli import compose_config

    out: dict = {}
    for kind in ("late_interaction", "cross_encoder"):
        if not (project_root() / "conf" / "rerank" / f"{kind}.yaml").is_file():
            continue
        try:
            cfg = compose_config([*overrides, f"rerank={kind}"])
            if kind == "late_interaction":
                from rag.app.stages import STAGES

                out[kind] = (cfg, STAGES.reranker(cfg, embedder))
            else:
                import inspect

                from rag.search import rerank as rr

                build = getattr(rr, "build_reranker", None)
                if build is None or "train_if_missing" not in inspect.signature(build).parameters:
                    out[kind] = "no way to load it without training"
                    continue
                out[kind] = (cfg, build(cfg, embedder, expand_path(cfg.paths.cache_dir),
                                        train_if_missing=False))
        except Exception as exc:  # noqa: BLE001 - reported, never fatal to the benchmark
            out[kind] = f"unavailable: {str(exc).splitlines()[0][:200]}"
    return out


def bench_latency(cfg, index, embedder, queries: Sequence[str], *, overrides: Sequence[str],
                  passes: int, rerank_queries: int, rerank_passes: int,
                  cross_encoder_queries: int) -> dict:
    """Per-mode p50/p95 over ``queries`` (``passes`` times each). Rerankers: late interaction
    over ``rerank_queries`` queries spread over the list, one untimed pass (filling its token
    cache) then ``rerank_passes`` timed passes; a cross-encoder (no cache, ~2 s a query on 2
    cores) over ``cross_encoder_queries`` queries after one untimed query.

    Returns:
        JSON-ready dict: ``modes`` -> {latency summary (ms, p50 = median, p95), seed p50,
        ratio ours / seed}, and ``rerankers_unavailable`` with reasons.
    """
    from rag.search.pipeline import SearchOptions, SearchPipeline

    depth = int(cfg.eval.depth)
    base = SearchOptions.from_config(cfg)
    out: dict = {"queries": len(queries), "passes": passes, "depth": depth, "modes": {},
                 "rerankers_unavailable": {}}
    for mode in ("bm25", "dense", "hybrid", "auto"):
        pipe = SearchPipeline(index, replace(base, mode=mode))
        pipe.search(queries[0], depth=depth)  # warm-up
        lat = _time_queries(pipe, queries, depth=depth, passes=passes)
        s = summary(lat, unit="ms", p95=True)
        out["modes"][mode] = {"latency": s, "seed_p50_ms": SEED_P50_MS.get(mode),
                              "ratio_to_seed": ratio(s["median"], SEED_P50_MS.get(mode))}
        progress(f"latency: {mode} p50 {s['median']:.1f} ms")
    for kind, got in available_rerankers(overrides, embedder).items():
        if isinstance(got, str):
            out["rerankers_unavailable"][kind] = got
            continue
        rcfg, reranker = got
        opts = SearchOptions.from_config(rcfg)
        pipe = SearchPipeline(index, opts, reranker=reranker)
        cross = kind == "cross_encoder"
        qs = spread(queries, cross_encoder_queries if cross else rerank_queries)
        t0 = time.perf_counter()
        _time_queries(pipe, qs[:1] if cross else qs, depth=depth, passes=1)
        first = time.perf_counter() - t0
        lat = _time_queries(pipe, qs, depth=depth, passes=rerank_passes)
        s = summary(lat, unit="ms", p95=True)
        label = f"rerank ({kind}, {opts.mode})"
        out["modes"][label] = {"latency": s, "seed_p50_ms": SEED_P50_MS["rerank"],
                               "ratio_to_seed": ratio(s["median"], SEED_P50_MS["rerank"]),
                               "queries": len(qs), "first_pass_s": first,
                               "first_pass": ("one warm-up query" if cross else
                                              "first pass, filling the token cache")}
        progress(f"latency: {label} p50 {s['median']:.1f} ms (first pass {first:.1f} s)")
    return out
