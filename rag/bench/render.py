"""reports/bench.md from the benchmark's results (the JSON twin holds the same numbers)."""

from __future__ import annotations

from typing import Any

#: Targets of the benchmark issue, checked in the report (never in tests).
BM25_MIN_SPEEDUP = 5.0
DENSE_MAX_RATIO = 1.3


def stat(s: dict | None, digits: int = 1) -> str:
    """``median [min–max] (n)`` of a :func:`rag.bench.measure.summary`."""
    if not s:
        return "—"
    return (f"{s['median']:.{digits}f} [{s['min']:.{digits}f}–{s['max']:.{digits}f}] "
            f"(n={s['n']})")


def num(x: float | None, digits: int = 1, suffix: str = "") -> str:
    """A number or an em dash."""
    return "—" if x is None else f"{x:,.{digits}f}{suffix}"


def times(x: float | None, digits: int = 2) -> str:
    """A ratio as ``1.23×``."""
    return "—" if x is None else f"{x:.{digits}f}×"


def targets(results: dict) -> list[dict[str, Any]]:
    """The issue's three checks: what was measured and whether it was met."""
    out = []
    b = results.get("bm25", {}).get("replicated")
    if b and "query_speedup_p50" in b:
        out.append({"target": f"BM25 query p50 ≥ {BM25_MIN_SPEEDUP:g}× faster than rank_bm25 "
                              f"at ~{results['bm25'].get('target_chunks', 50000):,} chunks",
                    "measured": f"{b['query_speedup_p50']:.1f}× at {b['chunks']:,} chunks",
                    "met": b["query_speedup_p50"] >= BM25_MIN_SPEEDUP})
    d = results.get("dense", {}).get("sizes")
    if d:
        worst = max(s["ratio"] for s in d)
        out.append({"target": f"dense query p50 within {DENSE_MAX_RATIO:g}× of its floor",
                    "measured": ", ".join(f"{s['ratio']:.2f}× at {s['vectors']:,}" for s in d),
                    "met": worst <= DENSE_MAX_RATIO})
    e = results.get("evaluation", {})
    if "all_equal_trec_eval" in e:
        out.append({"target": "metric values equal pytrec-eval-terrier's exactly",
                    "measured": (f"{e['queries']:,} queries x {len(e['measures'])} measures: "
                                 + ("all equal" if e["all_equal_trec_eval"] else
                                    f"max abs diff {e['max_abs_diff_trec_eval']:.3g}")),
                    "met": bool(e["all_equal_trec_eval"])})
    s = results.get("serve")
    if s and "error" not in s and s.get("variants"):
        label, v = next(iter(s["variants"].items()))
        r = v.get("ratio_http_over_inprocess_p50")
        limit = s.get("max_ratio", 2.0)
        out.append({"target": f"`rag serve` p50 at {s['concurrency']} concurrent requests "
                              f"within {limit:g}× of the in-process p50 ({label})",
                    "measured": "—" if r is None else
                    f"{r:.2f}× ({v['http']['median']:.1f} vs {s['inprocess']['median']:.1f} ms)",
                    "met": r is not None and r <= limit})
    c = results.get("index_cold")
    if c and "error" not in c and c.get("meets_goal") is not None:
        label = next(k for k, v in c.items() if isinstance(v, dict) and "wall" in v)
        v = c[label]
        out.append({"target": f"a cold `rag index` under {c['goal_s_per_1000_chunks']:g} s per "
                              f"1,000 chunks ({label})",
                    "measured": "—" if v["s_per_1000_chunks"] is None else
                    f"{v['s_per_1000_chunks']:.1f} s ({v['wall']['median']:.1f} s for "
                    f"{v['chunks']:,} chunks)",
                    "met": bool(c["meets_goal"])})
    return out


def _psi(p: dict | None) -> str:
    return "n/a" if not p else "/".join(f"{p[k]:.0f}%" for k in ("avg10", "avg60", "avg300") if k in p)


def _header(results: dict) -> list[str]:
    m = results["machine"]
    lines = ["# Benchmark", "",
             "<!-- GENERATED FILE: written by `python -m rag.bench`; do not edit by hand. -->", "",
             f"Command: `{results['command']}` ({'quick' if results['quick'] else 'full'} run, "
             f"{results['wall_s'] / 60:.1f} min). Machine: {m['cores']} cores ({m['cpu']}), "
             f"{m['memory_gib']} GiB, Python {m['python']}, torch threads {m['torch_threads']}, "
             f"{m['platform']}; {m['when']}. Load average (1/5/15 min) at start "
             f"{m['load_average_start']}, at end {results.get('load_average_end')}; CPU pressure "
             f"(share of time a task waited for a core, 10/60/300 s) at start "
             f"{_psi(m.get('cpu_pressure_start'))}, at end {_psi(results.get('cpu_pressure_end'))}"
             " — the cores may be shared, so absolute times drift; the ratios compare two things "
             "measured side by side in the same process and minute.", "",
             "Every figure is the **median [min–max] (n measurements)**; latency p50 is the "
             "median of the per-query times, p95 their 95th percentile. Ratios are of medians.", "",
             "Libraries: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()), ""]
    t = targets(results)
    if t:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {x['target']} | {x['measured']} | {'yes' if x['met'] else '**no**'} |"
                  for x in t]
        lines.append("")
    errors = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    if errors:
        lines += ["## Sections that failed", ""]
        lines += [f"- `{k}`: {v.splitlines()[0] if v else ''}" for k, v in errors.items()]
        lines.append("")
    return lines


def _bm25(r: dict) -> list[str]:
    tok = r["tokenize"]
    lines = ["## 1. BM25 channel against rank_bm25", "",
             "Our channel (bm25s, scores rescaled to Okapi) against `rank_bm25.BM25Okapi` "
             "(epsilon=0) used directly, on the same token lists (our tokenizer: "
             f"{tok['chunks']:,} chunks in {tok['seconds']:.2f} s = "
             f"{num(tok['chunks_per_s'], 0)} chunks/s, not part of either build time). A query is "
             "tokenize + score every chunk + top "
             f"{r['default']['depth']} on both sides. Rankings: our top {r['default']['depth']} "
             "against rank_bm25's scores ordered by (-score, chunk index).", "",
             "| corpus | chunks | build ours s | build rank_bm25 s | build ratio (rank_bm25 / ours) "
             "| query p50 ours ms | p95 | query p50 rank_bm25 ms | p95 | query speed-up "
             "(rank_bm25 / ours) | rankings identical |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in ("default", "replicated"):
        c = r.get(key)
        if not c:
            continue
        name = "default" if key == "default" else f"replicated ×{c.get('replicas')}"
        lines.append(
            f"| {name} | {c['chunks']:,} | {stat(c['build_ours'], 2)} | "
            f"{stat(c['build_rank_bm25'], 2)} | {times(c['build_ratio_rank_bm25_over_ours'])} | "
            f"{stat(c['query_ours'], 2)} | {c['query_ours']['p95']:.2f} | "
            f"{stat(c['query_rank_bm25'], 2)} | {c['query_rank_bm25']['p95']:.2f} | "
            f"**{times(c['query_speedup_p50'], 1)}** | {c['rankings_identical']}/"
            f"{c['rankings_compared']} (max score diff {c['max_score_diff_relative_to_top']:.1e}"
            " of the top score) |")
    lines += ["", "A build ratio below 1× means rank_bm25 builds faster: bm25s turns the token "
              "lists into ids and counts in Python (most of its build time), rank_bm25 counts "
              "with one Counter per chunk.", ""]
    return lines


def _dense(r: dict) -> list[str]:
    lines = ["## 2. Dense channel against its floor", "",
             "Synthetic unit vectors (float32). Ours: `DenseChannel.embed_query` (embedding), "
             "then `scores` + `top` (scoring); floor: the model's own `encode()` of one query "
             "alone, plus one `matrix @ q` alone, the faster p50 of one BLAS thread and all "
             "cores (threads in brackets). Ratio = "
             f"p50(ours) / (p50 floor embedding + p50 floor mat-vec). Our channel splits the "
             f"product into one row block per core from {r.get('parallel_min_rows', 0):,} rows "
             "(one BLAS thread each); below that it is one single-threaded BLAS call.", "",
             "| vectors | queries × passes | ours embedding ms | ours scoring ms | ours total ms "
             "(p95) | floor encode() ms | floor mat-vec ms (BLAS threads) | mat-vec 1 thread / "
             "all cores p50 | floor ms | ratio | embedding ratio | scoring ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in r["sizes"]:
        lines.append(
            f"| {s['vectors']:,} × {s['dim']} | {s['queries']} × {s['passes']} | "
            f"{stat(s['ours_embed'])} | {stat(s['ours_scoring'], 2)} | {stat(s['ours_total'])} "
            f"({s['ours_total']['p95']:.1f}) | {stat(s['floor_embed'])} | "
            f"{stat(s['floor_matvec'], 2)} ({s['floor_matvec_blas_threads']}) | "
            f"{s['matvec_one_thread']['median']:.2f} / {s['matvec_all_cores']['median']:.2f} | "
            f"{s['floor_ms']:.1f} | **{times(s['ratio'])}** | "
            f"{times(s['embed_ratio'])} | {times(s['scoring_ratio'])} |")
    lines.append("")
    return lines


def _build(r: dict) -> list[str]:
    e = r["embedding"]
    w = r["warm"]
    ws, wn = w.get("stats_with_chunk_store") or {}, w.get("stats_without_chunk_store") or {}
    return ["## 3. Index build", "",
            f"Default corpus: {r['files']} files, {r['chunks']:,} chunks.", "",
            "| stage | throughput | |", "|---|---|---|",
            f"| chunking (walk + read + chunk) | {stat(r['chunking'], 0)} chunks/s | |",
            f"| BM25 (tokenize + build) | {stat(r['bm25'], 0)} chunks/s | |",
            f"| embedding, ours (`embed_with_cache`, empty cache) | {stat(e['ours_rate'], 1)} "
            f"chunks/s | {e['sample_chunks']} chunks per measurement |",
            f"| embedding, the model's `encode()` | {stat(e['encode_rate'], 1)} chunks/s | batch "
            f"{e['batch_size']}, max_seq_length {e['max_seq_length']} |",
            f"| our overhead (time ours / encode()) | **{times(e['overhead_ratio'])}** | vectors "
            f"differ by at most {e['max_abs_diff_vs_encode']:.1e} |", "",
            "Warm re-runs of `build_index` (embedding cache filled):", "",
            "| re-run | wall s | chunks embedded | chunks from cache | corpus read |",
            "|---|---|---|---|---|",
            f"| as `python -m rag.run` (chunk store + embedding cache) | "
            f"{stat(w['with_chunk_store'], 2)} | {ws.get('chunks_embedded')} | "
            f"{ws.get('chunks_from_cache')} | {ws.get('corpus_read')} |",
            f"| chunk store off (every file re-read and re-chunked) | "
            f"{stat(w['without_chunk_store'], 2)} | {wn.get('chunks_embedded')} | "
            f"{wn.get('chunks_from_cache')} | {wn.get('corpus_read')} |", ""]


def _evaluation(r: dict) -> list[str]:
    lines = ["## 4. Evaluation: our metrics against trec_eval and ranx", "",
             f"{r['queries']:,} synthetic queries ({r['empty_runs']} with an empty run, "
             f"{r['run_entries']:,} run entries, {r['qrels_entries']:,} judgements), distinct "
             "scores per query so every library ranks alike; measures: "
             + ", ".join(f"`{m}`" for m in r["measures"]) + ". Timed: build the evaluator, "
             "per-query values of every measure, means.", "",
             "| library | time s | ratio ours / it | per-query values equal to ours |",
             "|---|---|---|---|",
             f"| ours (`rag.eval.metrics.evaluate_run` + `mean_metrics`) | {stat(r['time_ours'], 3)} "
             "| — | — |"]
    n_cells = r["queries"] * len(r["measures"])
    if "time_trec_eval" in r:
        eq = sum(v["equal_trec_eval"] for v in r["comparison"].values())
        lines.append(f"| pytrec-eval-terrier | {stat(r['time_trec_eval'], 3)} | "
                     f"{times(r['ratio_ours_over_trec_eval'])} | **{eq:,}/{n_cells:,}** (max abs "
                     f"diff {r['max_abs_diff_trec_eval']:.1e}; means: "
                     f"{r['max_abs_diff_means_trec_eval']:.1e}) |")
    else:
        lines.append(f"| pytrec-eval-terrier | {r.get('trec_eval_note')} | | |")
    if "time_ranx" in r:
        eq = (sum(v.get("equal_ranx", 0) for v in r["comparison"].values())
              if "comparison" in r else None)
        lines.append(f"| ranx | {stat(r['time_ranx'], 3)} | {times(r['ratio_ours_over_ranx'])} | "
                     + (f"**{eq:,}/{n_cells:,}** (max abs diff {r['max_abs_diff_ranx']:.1e})"
                        if eq is not None else "—")
                     + f"; first call (numba compile) {r['ranx_first_call_s']:.1f} s, not counted |")
    else:
        lines.append(f"| ranx | {r.get('ranx_note')} | | |")
    lines.append("")
    return lines


def _sweep(r: dict) -> list[str]:
    lines = ["## 5. Sweep against single runs", "",
             f"`{r['sweep_command'].strip()}` (jobs: search.mode = {', '.join(r['modes'])}"
             + ("; a subset of the routing sweep's four, under --quick" if r["subset_of_routing"]
                else "") + ") in one process, against the same jobs as `python -m rag.run "
             "search.mode=M` started one by one. Each run logs to a temporary MLflow store.", "",
             "| | wall s | peak RSS MiB |", "|---|---|---|",
             f"| sweep, one process | {stat(r['sweep_wall'])} | {stat(r['sweep_peak_rss_mib'], 0)} |",
             f"| single runs, sum | {stat(r['singles_wall'])} | |"]
    for m, v in r["single_runs"].items():
        lines.append(f"| &nbsp; search.mode={m} | {stat(v['wall'])} | {stat(v['peak_rss_mib'], 0)} |")
    lines += [f"| **saving from sharing the index and model** | **{times(r['saving_ratio'])}** "
              f"({r['saving_s']:.0f} s) | |", ""]
    return lines


def _end_to_end(e2e: dict | None, lat: dict | None) -> list[str]:
    lines = ["## 6. End to end", ""]
    if e2e:
        lines += [f"`{e2e['command']}` as a child process (temporary MLflow store): wall time from "
                  "start to exit, peak memory = the child's peak resident set size (VmHWM).", "",
                  "| run | wall s | peak RSS MiB | ratio to warm | what it means |",
                  "|---|---|---|---|---|"]
        for key, name in (("warm", "warm"), ("cold_index", "cold index"), ("cold_full", "cold")):
            if key in e2e:
                x = e2e[key]
                extra = ("; chunks embedded: " + ", ".join(str(c) for c in x["chunks_embedded"])
                         if "chunks_embedded" in x else "")
                lines.append(f"| {name} | {stat(x['wall'])} | {stat(x['peak_rss_mib'], 0)} | "
                             f"{times(x.get('ratio_to_warm'))} | {x['meaning']}{extra} |")
        lines.append("")
    elif e2e is None:
        lines += ["(whole runs not measured in this invocation)", ""]
    if lat:
        lines += [f"Per-mode query latency in process ({lat['queries']} golden queries × "
                  f"{lat['passes']} passes, `search(query, depth={lat['depth']})` as the "
                  "evaluator calls it), next to the seed's reported p50 — **the seed, "
                  "different hardware**: for orientation, not a like-for-like comparison.", "",
                  "| mode | p50 ms | p95 ms | seed p50 ms (different hardware) | ours / seed |",
                  "|---|---|---|---|---|"]
        for mode, v in lat["modes"].items():
            s = v["latency"]
            note = (f" ({v['queries']} queries; {v['first_pass']}: {v['first_pass_s']:.1f} s, "
                    "not counted)" if "first_pass_s" in v else "")
            lines.append(f"| {mode}{note} | {stat(s)} | {s['p95']:.1f} | "
                         f"{num(v['seed_p50_ms'], 0)} | {times(v['ratio_to_seed'])} |")
        for kind, why in lat.get("rerankers_unavailable", {}).items():
            lines.append(f"| rerank ({kind}) | not measured: {why} | | | |")
        lines.append("")
    return lines


def _serve(s: dict) -> list[str]:
    variants = s.get("variants") or {"rag serve": {  # a report from before the variants
        "http": s["http"], "errors": s["errors"], "throughput_rps": s["throughput_rps"],
        "ratio_http_over_inprocess_p50": s.get("ratio_http_over_inprocess_p50")}}
    lines = ["## 7. Service over loopback", "",
             f"{s['requests']} POST /search requests, {s['concurrency']} at a time (client "
             "threads), to `rag serve` on 127.0.0.1 — `batched`: the service's defaults "
             "(concurrent queries embedded in one batch), `unbatched`: `--max-batch 1` — against "
             "the same queries searched in process, one at a time.", "",
             "Server CPU ms per request is the server process's CPU time over the timed requests "
             "(Linux): unlike the wall times it hardly moves when other jobs share the cores.", "",
             "| | p50 ms | p95 ms | p99 ms | errors | throughput | p50 / in process | batch size "
             "| CPU ms / request |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, v in variants.items():
        opts = " ".join(v.get("options") or [])
        b = v.get("batch_sizes")
        sizes = "—" if not b else f"mean {b['mean']:.1f}, max {b['max']:.0f}"
        lines.append(
            f"| HTTP {label}{f' (`{opts}`)' if opts else ''} | {stat(v['http'])} | "
            f"{v['http']['p95']:.1f} | {v['http']['p99']:.1f} | {v['errors']} | "
            f"{v['throughput_rps']:.1f} req/s | "
            f"{times(v.get('ratio_http_over_inprocess_p50'), 1)} | "
            f"{sizes} | {num(v.get('server_cpu_ms_per_request'))} |")
    tput = s.get("inprocess_throughput_qps")
    lines += [f"| in process (SearchPipeline) | {stat(s['inprocess'])} | "
              f"{s['inprocess']['p95']:.1f} | {s['inprocess']['p99']:.1f} | — | "
              f"{'—' if tput is None else f'{tput:.1f} q/s (1 thread)'} | 1× | — | "
              f"{num(s.get('inprocess_cpu_ms_per_search'))} |", ""]
    return lines


def render(results: dict) -> str:
    """The whole of reports/bench.md."""
    lines = _header(results)
    for key, fn in (("bm25", _bm25), ("dense", _dense), ("build", _build),
                    ("evaluation", _evaluation), ("sweep", _sweep)):
        part = results.get(key)
        if part and "error" not in part:
            lines += fn(part)
    e2e = results.get("end_to_end")
    lat = results.get("latency")
    if (e2e and "error" not in e2e) or (lat and "error" not in lat):
        lines += _end_to_end(e2e if e2e and "error" not in e2e else None,
                             lat if lat and "error" not in lat else None)
    s = results.get("serve")
    if s and "error" not in s:
        lines += _serve(s)
    return "\n".join(lines)
