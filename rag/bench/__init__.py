"""``python -m rag.bench``: measures the pipeline against its peers and its own limits in one
run and writes reports/bench.md with a JSON twin (reports/bench.json).

Sections (``--sections``; default all), each compared side by side in the same process and
minute, because absolute times on a shared machine drift:

1. ``bm25`` — our BM25 channel against rank_bm25's BM25Okapi, on the default corpus and on it
   replicated to about 50k chunks: build time, query p50, rankings (:mod:`rag.bench.bm25`).
2. ``dense`` — dense query p50 (embedding + scoring) against its floor, one ``encode()`` plus
   one matrix-vector product, at 10k/100k/1M synthetic vectors (:mod:`rag.bench.dense`).
3. ``build`` — chunking, BM25 and embedding throughput, embedding against the model's own
   ``encode()``, and the warm re-run (:mod:`rag.bench.index_build`).
4. ``eval`` — every metric for 10,000 synthetic queries against pytrec-eval-terrier and ranx:
   time and values (:mod:`rag.bench.evaluation`).
5. ``sweep`` — the routing sweep in one process against its jobs run one by one.
6. ``e2e`` — ``python -m rag.run`` warm and cold (wall, peak memory) (:mod:`rag.bench.runs`);
   ``latency`` — per-mode query p50/p95 next to the seed's figures (:mod:`rag.bench.latency`).
7. ``serve`` — ``rag serve`` over loopback (:mod:`rag.bench.serve`).
8. ``ann`` — exact dense search against FAISS HNSW and IVF on clustered synthetic vectors
   (100k with ``--quick``, else 1M and 5M; ``--ann-sizes``): recall@10, p50, build time and
   memory (:mod:`rag.bench.ann`). Needs no model or corpus.
9. ``dtype`` — every embedding backend and dtype (torch/onnx x float32/int8/bfloat16) against
   fp32 torch on the same long chunks: chunks/s, achieved GFLOP/s against the CPU's
   estimated peak, cosine to fp32 (:mod:`rag.bench.encoders`).
10. ``cli`` — a cold ``rag search`` process, ONNX query encoder against torch
    (:mod:`rag.bench.cold_search`).
11. ``launchers`` — the routing sweep under the basic launcher and ``hydra/launcher=ray``:
    wall time and chunks embedded, each from a cold cache (:mod:`rag.bench.launchers`).
12. ``index_cold`` — a cold ``rag index`` process, the fast path (``system=rag_fast``) against
    the default embedder: wall time and seconds per 1,000 chunks (:mod:`rag.bench.cold_index`).

Every figure is the median of repeated measurements with their min and max. Runs of
``rag.app.run`` log into a temporary MLflow store, never the project's ledger. Nothing here is
asserted by a test: speed goals are checked in the report's "Targets" table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path

SECTIONS = ("bm25", "dense", "build", "eval", "latency", "sweep", "e2e", "serve", "ann",
            "dtype", "cli", "launchers", "index_cold")

#: Queries for a corpus without golden labels (``corpus.path`` without ``eval.golden_dir``).
GENERIC_QUERIES = ["main entry point", "configuration", "error handling", "tests",
                   "how is the request handled", "parse_args", "README", "install"]


@dataclass
class Profile:
    """How much each section measures; :meth:`quick` fits in under 5 minutes on 2 cores."""

    bm25_build_reps: int = 5
    bm25_query_passes: int = 3
    bm25_target_chunks: int = 50_000
    bm25_large_build_reps: int = 3
    bm25_large_query_passes: int = 2
    bm25_large_max_queries: int | None = None
    dense_sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    dense_passes: int = 2
    dense_max_queries: dict[int, int] = field(default_factory=lambda: {1_000_000: 64})
    build_reps: int = 5
    embed_sample: int = 128
    embed_reps: int = 3
    warm_build_reps: int = 3
    eval_queries: int = 10_000
    eval_reps: int = 5
    eval_ranx: bool = True
    latency_passes: int = 3
    latency_max_queries: int | None = None
    rerank_queries: int = 10_000
    rerank_passes: int = 2
    cross_encoder_queries: int = 12
    sweep_modes: tuple[str, ...] = ("dense", "bm25", "hybrid", "auto")
    sweep_reps: int = 2
    warm_reps: int = 2
    cold_index_reps: int = 2
    cold_full_reps: int = 1
    serve_requests: int = 2000
    ann_sizes: tuple[int, ...] = (1_000_000, 5_000_000)
    ann_exact_queries: int = 100
    dtype_sample: int = 64
    dtype_reps: int = 3
    cli_reps: int = 5
    index_cold_reps: int = 3
    launcher_reps: int = 2
    launcher_modes: tuple[str, ...] = ("dense", "bm25", "hybrid", "auto")

    @classmethod
    def quick(cls) -> "Profile":
        """The ``--quick`` profile: fewer repetitions and queries, the same sizes (the issue's
        targets are checked at ~50k chunks, 1M vectors and 10,000 queries), a two-job routing
        sweep, a cold run that keeps the embedding cache, and no ranx (its import, numba
        compile and evaluations cost ~20 s; the full run has it)."""
        return cls(bm25_build_reps=3, bm25_query_passes=2, bm25_large_build_reps=1,
                   bm25_large_query_passes=1, bm25_large_max_queries=16, dense_passes=2,
                   dense_max_queries={10_000: 24, 100_000: 24, 1_000_000: 12},
                   build_reps=3, embed_sample=16, embed_reps=3, warm_build_reps=2,
                   eval_queries=10_000, eval_reps=3, eval_ranx=False, latency_passes=1,
                   latency_max_queries=64, rerank_queries=12,
                   rerank_passes=1, cross_encoder_queries=2, sweep_modes=("dense", "auto"),
                   sweep_reps=1, warm_reps=1, cold_index_reps=1, cold_full_reps=0,
                   serve_requests=120, ann_sizes=(100_000,), ann_exact_queries=50,
                   dtype_sample=24, dtype_reps=2, cli_reps=2, index_cold_reps=1,
                   launcher_reps=1,
                   launcher_modes=("dense", "bm25"))


@dataclass
class Context:
    """What every in-process section shares: the composed config, model, index, queries."""

    cfg: object
    overrides: list[str]
    root: Path
    embedder: object
    index: object
    queries: list[str]
    golden_queries: bool


def load_context(overrides: list[str]) -> Context:
    """Compose the config, load the embedder and build (or reuse) the corpus's index as
    ``python -m rag.run`` does, and read the golden queries (positives then negatives).

    Raises:
        SystemExit: a bad override or a user-facing run error (``error: ...``).
    """
    from rag.app.config import expand_path, project_root, validate
    from rag.eval.golden import GoldenError, load_golden
    from rag.corpus.fetch import corpus_root
    from rag.app.stages import STAGES
    from rag.app.search_cli import cli_error, compose_config

    try:
        cfg = compose_config(overrides)
        validate(cfg)
        embedder = STAGES.embedder(cfg)
        root = corpus_root(cfg)
        index = STAGES.index(cfg, root, embedder, progress=sys.stderr.isatty(), with_dense=True)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)
    queries, golden = GENERIC_QUERIES, False
    try:
        g = load_golden(expand_path(cfg.eval.golden_dir, base=project_root()),
                        corpus_paths=index.paths, corpus_symbols=index.symbols)
        queries = [q.query for q in g.positives] + [q.query for q in g.negatives]
        golden = bool(queries)
    except (GoldenError, OSError):
        pass
    return Context(cfg=cfg, overrides=list(overrides), root=root, embedder=embedder,
                   index=index, queries=list(queries), golden_queries=golden)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rag.bench", description=(__doc__ or "").replace("``", "`"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python -m rag.bench --quick            # every section, < 5 min\n"
               "  python -m rag.bench                    # the full run (~15-30 min)\n"
               "  python -m rag.bench --sections bm25,dense --quick\n"
               "  python -m rag.bench corpus.path=/src/repo corpus.name=repo\n"
               "Figures are measured on this machine, now; compare ratios, not absolute times.")
    p.add_argument("--quick", action="store_true",
                   help="fewer repetitions and queries, a two-job sweep, a cold run that keeps "
                        "the embedding cache, 120 HTTP requests: under 5 minutes on 2 idle cores")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--out", default="reports/bench.md",
                   help="markdown report; the JSON twin goes next to it (.json)")
    p.add_argument("--requests", type=int, default=None,
                   help="serve: HTTP requests (default 2000; --quick 120)")
    p.add_argument("--concurrency", type=int, default=8,
                   help="serve: requests in flight (client threads)")
    p.add_argument("--serve-variants", default="batched,unbatched",
                   help="serve: server variants to measure, in order: batched (the service's "
                        "defaults), unbatched (--max-batch 1) (default: both)")
    p.add_argument("--bm25-chunks", type=int, default=None,
                   help="bm25: size of the replicated corpus (default 50000)")
    p.add_argument("--dense-sizes", default=None,
                   help="dense: comma-separated vector counts (default 10000,100000,1000000)")
    p.add_argument("--ann-sizes", default=None,
                   help="ann: comma-separated vector counts (default 1000000,5000000; "
                        "--quick 100000)")
    p.add_argument("--eval-queries", type=int, default=None,
                   help="eval: synthetic queries (default 10000)")
    p.add_argument("--embed-sample", type=int, default=None,
                   help="build: chunks embedded per measurement (default 128; --quick 24)")
    p.add_argument("--no-ranx", action="store_true",
                   help="eval: leave ranx out even if installed (--quick always does)")
    p.add_argument("--keep-scratch", action="store_true",
                   help="keep the scratch directory (temporary MLflow store, run logs)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, as for python -m rag.run (e.g. another corpus)")
    return p


def _profile(args: argparse.Namespace) -> Profile:
    prof = Profile.quick() if args.quick else Profile()
    if args.requests is not None:
        prof.serve_requests = args.requests
    if args.bm25_chunks is not None:
        prof.bm25_target_chunks = args.bm25_chunks
    if args.dense_sizes:
        prof.dense_sizes = tuple(int(x) for x in args.dense_sizes.split(",") if x.strip())
    if args.eval_queries is not None:
        prof.eval_queries = args.eval_queries
    if args.ann_sizes:
        prof.ann_sizes = tuple(int(x) for x in args.ann_sizes.split(",") if x.strip())
    if args.embed_sample is not None:
        prof.embed_sample = args.embed_sample
    return prof


def run_sections(args: argparse.Namespace, prof: Profile, sections: list[str],
                 scratch: Path) -> dict:
    """Run the chosen sections in order; a failing section is recorded as ``{"error": ...}``
    and the others still run."""
    from rag.bench.measure import library_versions, machine, progress

    results: dict = {"machine": machine(), "versions": library_versions(), "quick": args.quick,
                     "profile": {f.name: getattr(prof, f.name) for f in fields(prof)},
                     "sections": sections}
    results["profile"]["dense_max_queries"] = {str(k): v for k, v in prof.dense_max_queries.items()}
    overrides = list(args.overrides)
    ctx = None
    if set(sections) & {"bm25", "dense", "build", "latency", "e2e"}:
        progress("loading the model and the index")
        ctx = load_context(overrides)
        progress(f"{len(ctx.index.chunks)} chunks, {len(ctx.queries)} queries"
                 + ("" if ctx.golden_queries else " (no golden set for this corpus: generic)"))

    def section(name: str, fn) -> None:
        progress(f"section {name}")
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["section_s"] = time.perf_counter() - t0

    cfg = ctx.cfg if ctx else None
    if "bm25" in sections:
        from rag.bench.bm25 import bench_bm25

        section("bm25", lambda: bench_bm25(
            ctx.index.chunks, ctx.queries, k1=float(cfg.bm25.k1), b=float(cfg.bm25.b),
            depth=int(cfg.search.candidates), target_chunks=prof.bm25_target_chunks,
            build_reps=prof.bm25_build_reps, query_passes=prof.bm25_query_passes,
            large_build_reps=prof.bm25_large_build_reps,
            large_query_passes=prof.bm25_large_query_passes,
            large_max_queries=prof.bm25_large_max_queries))
    if "dense" in sections:
        from rag.bench.dense import bench_dense

        section("dense", lambda: bench_dense(
            ctx.embedder, ctx.queries, sizes=prof.dense_sizes, depth=int(cfg.search.candidates),
            passes=prof.dense_passes, max_queries=prof.dense_max_queries))
    if "build" in sections:
        from rag.bench.index_build import bench_build

        section("build", lambda: bench_build(
            cfg, ctx.root, ctx.embedder, ctx.index.chunks, reps=prof.build_reps,
            embed_sample=prof.embed_sample, embed_reps=prof.embed_reps,
            warm_reps=prof.warm_build_reps))
    if "eval" in sections:
        from rag.bench.evaluation import bench_evaluation

        ks = list(cfg.eval.recall_ks) if cfg else [1, 3, 5, 8, 10, 20, 40]
        section("evaluation", lambda: bench_evaluation(
            n_queries=prof.eval_queries, reps=prof.eval_reps, ks=ks,
            ndcg_k=int(cfg.eval.ndcg_k) if cfg else 10,
            use_ranx=None if args.no_ranx else prof.eval_ranx))
    if "latency" in sections:
        from rag.bench.latency import bench_latency

        from rag.bench.measure import spread

        section("latency", lambda: bench_latency(
            cfg, ctx.index, ctx.embedder, spread(ctx.queries, prof.latency_max_queries),
            overrides=overrides,
            passes=prof.latency_passes, rerank_queries=prof.rerank_queries,
            rerank_passes=prof.rerank_passes, cross_encoder_queries=prof.cross_encoder_queries))
    if {"sweep", "e2e"} & set(sections):
        from rag.bench import runs

        progress("creating the temporary MLflow store")
        results["tracking_init_s"] = runs.init_tracking(scratch)
        warm: list = []
        if "sweep" in sections:
            def sweep():
                out = runs.bench_sweep(overrides, scratch, modes=prof.sweep_modes,
                                       reps=prof.sweep_reps)
                warm.extend(out.pop("_warm_auto"))
                return out

            section("sweep", sweep)
        if "e2e" in sections:
            section("end_to_end", lambda: runs.bench_end_to_end(
                cfg, ctx.embedder, overrides, scratch, warm_runs=warm, warm_reps=prof.warm_reps,
                cold_index_reps=prof.cold_index_reps, cold_full_reps=prof.cold_full_reps))
    if "serve" in sections:
        from rag.bench.serve import bench_serve

        queries = ctx.queries if ctx else GENERIC_QUERIES
        from rag.bench.serve import VARIANTS

        chosen = [v.strip() for v in args.serve_variants.split(",") if v.strip()]
        wrong = sorted(set(chosen) - set(VARIANTS))
        if wrong or not chosen:
            raise SystemExit(f"error: unknown serve variant(s) {wrong or '(none given)'}; "
                             f"choose from {','.join(VARIANTS)}")
        section("serve", lambda: bench_serve(queries, requests=prof.serve_requests,
                                             concurrency=args.concurrency, overrides=overrides,
                                             variants={v: VARIANTS[v] for v in chosen}))
    if "ann" in sections:
        from rag.bench.ann import bench_ann

        section("ann", lambda: bench_ann(sizes=prof.ann_sizes,
                                         exact_queries=prof.ann_exact_queries))
    if {"dtype", "launchers", "index_cold"} & set(sections) and cfg is None:
        from rag.corpus.fetch import corpus_root
        from rag.app.search_cli import cli_error, compose_config

        try:
            cfg = compose_config(overrides)
            root = corpus_root(cfg)
        except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
            cli_error(exc)
    if "dtype" in sections:
        from rag.bench.encoders import bench_encoders

        section("dtype", lambda: bench_encoders(cfg, ctx.root if ctx else root,
                                                sample=prof.dtype_sample, reps=prof.dtype_reps))
    if "cli" in sections:
        from rag.bench.cold_search import bench_cold_search

        section("cli", lambda: bench_cold_search(overrides, scratch, reps=prof.cli_reps))
    if "index_cold" in sections:
        from rag.bench.cold_index import bench_cold_index

        section("index_cold", lambda: bench_cold_index(cfg, overrides, scratch,
                                                       reps=prof.index_cold_reps))
    if "launchers" in sections:
        from rag.bench.launchers import bench_launchers

        section("launchers", lambda: bench_launchers(
            overrides, scratch, modes=prof.launcher_modes, reps=prof.launcher_reps, cold=True,
            cfg=cfg))
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; exit status 0, or 1 when a section failed (the report is
    written either way, naming the failure)."""
    args = _parser().parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        raise SystemExit(f"error: unknown section(s) {unknown or '(none given)'}; choose from "
                         f"{','.join(SECTIONS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import logging

    for name in ("sentence_transformers", "bm25s", "transformers", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from rag.bench.measure import cpu_pressure, load_average, progress
    from rag.bench.render import render
    from rag.app.config import expand_path

    prof = _profile(args)
    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    try:
        results = run_sections(args, prof, sections, scratch)
    finally:
        if args.keep_scratch:
            progress(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    results["wall_s"] = time.perf_counter() - t0
    results["load_average_end"] = load_average()
    results["cpu_pressure_end"] = cpu_pressure()
    results["command"] = "python -m rag.bench" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    out = expand_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(results)
    from rag.bench.ann import render_ann
    from rag.bench.cold_index import render_cold_index
    from rag.bench.cold_search import render_cold_search
    from rag.bench.encoders import render_encoders
    from rag.bench.launchers import render_launchers

    for name, render_section in (("ann", render_ann), ("dtype", render_encoders),
                                 ("cli", render_cold_search), ("launchers", render_launchers),
                                 ("index_cold", render_cold_index)):
        if isinstance(results.get(name), dict) and "error" not in results[name]:
            text += "\n" + "\n".join(render_section(results[name]))
    out.write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(text)
    failed = [k for k, v in results.items() if isinstance(v, dict) and "error" in v]
    progress(f"wrote {out} and {out.with_suffix('.json')} in {results['wall_s']:.0f} s"
             + (f"; failed sections: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
