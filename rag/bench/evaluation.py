"""Benchmark section 4: computing every ranking metric for many queries, ours against
trec_eval (pytrec-eval-terrier) and ranx (if installed) on the same run and qrels.

The synthetic run is built so that all three rank alike: within a query every score is
distinct (trec_eval breaks ties by docno descending, ours by doc id ascending, ranx by its
sort), every doc id occurs once per query (our run is already collapsed to one entry per
file), and grades are integers with 0 meaning judged non-relevant. About 5% of queries have an
empty run; they score 0 (trec_eval ``-c`` semantics: pytrec_eval leaves them out, so they are
filled with 0 here). Measures compared (ours -> trec_eval / ranx):
``recall_at_k`` -> ``recall_k`` / ``recall@k``, ``hit_at_k`` -> ``success_k`` /
``hit_rate@k`` for k in ``eval.recall_ks``; ``mrr`` -> ``recip_rank`` / ``mrr``;
``ndcg_at_10`` -> ``ndcg_cut_10`` / ``ndcg@10`` (linear gains, log2 discount in all three).

Timed on each side: building the evaluator from the qrels, per-query values of every measure,
and their means. ranx compiles its kernels with numba on first use; that first call is timed
apart (``ranx_first_call_s``) and not counted.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from rag.bench.measure import progress, ratio, summary


def synthetic_case(n_queries: int, *, n_docs: int = 5000, max_run: int = 60, seed: int = 6
                   ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """(run, qrels) of ``n_queries`` queries: runs of 0-``max_run`` distinct docs with distinct
    scores (5% empty), qrels of 1-8 judged docs, half binary, half graded 0-3 (at least one
    relevant), with a relevant doc planted in the run of most queries at a random rank."""
    rng = np.random.default_rng(seed)
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for n in range(n_queries):
        qid = f"q{n:05d}"
        n_judged = int(rng.integers(1, 9))
        judged = rng.choice(n_docs, size=n_judged, replace=False)
        if n % 2:
            grades = rng.integers(0, 4, size=n_judged)
            grades[0] = max(int(grades[0]), 1)
        else:
            grades = np.ones(n_judged, dtype=int)
        qrels[qid] = {f"d{i:05d}": int(g) for i, g in zip(judged, grades)}
        size = 0 if rng.random() < 0.05 else int(rng.integers(1, max_run + 1))
        pool = list(rng.choice(n_docs, size=size, replace=False))
        if size and rng.random() < 0.8:  # plant some judged docs in the run
            for i in judged[: int(rng.integers(1, n_judged + 1))]:
                if i not in pool:
                    pool[int(rng.integers(0, len(pool)))] = i
            pool = list(dict.fromkeys(pool))
        scores = rng.permutation(len(pool)).astype(float) / max(len(pool), 1) + 0.5
        run[qid] = {f"d{i:05d}": float(s) for i, s in zip(pool, scores)}
    return run, qrels


def measure_names(ks: Sequence[int], ndcg_k: int) -> list[tuple[str, str, str]]:
    """(ours, trec_eval, ranx) names of every compared measure."""
    out = []
    for k in ks:
        out.append((f"recall_at_{k}", f"recall_{k}", f"recall@{k}"))
        out.append((f"hit_at_{k}", f"success_{k}", f"hit_rate@{k}"))
    out.append(("mrr", "recip_rank", "mrr"))
    out.append((f"ndcg_at_{ndcg_k}", f"ndcg_cut_{ndcg_k}", f"ndcg@{ndcg_k}"))
    return out


def _ours(run, qrels, ks, ndcg_k):
    from rag.eval.metrics import evaluate_run, mean_metrics

    per_q = evaluate_run(run, qrels, recall_ks=ks, ndcg_k=ndcg_k)
    return per_q, mean_metrics(per_q)


def _trec(run, qrels, ks, ndcg_k):
    import pytrec_eval

    kk = ",".join(str(k) for k in ks)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {f"recall.{kk}", f"success.{kk}", "recip_rank",
                                                f"ndcg_cut.{ndcg_k}"})
    per_q = ev.evaluate({q: s for q, s in run.items() if s})
    names = [t for _, t, _ in measure_names(ks, ndcg_k)]
    # a query without a run scores 0 (trec_eval -c); averaged like ours (numpy, qrels order)
    means = {m: float(np.mean([per_q[q][m] if q in per_q else 0.0 for q in qrels]))
             for m in names}
    return per_q, means


def _ranx(run, qrels, ks, ndcg_k):
    from ranx import Qrels, Run, evaluate

    names = [r for _, _, r in measure_names(ks, ndcg_k)]
    nonempty = {q: s for q, s in run.items() if s}
    res = evaluate(Qrels(qrels), Run(nonempty), names, return_mean=False, make_comparable=True)
    return res


def compare(ours_pq, trec_pq, ranx_res, qids, ks, ndcg_k) -> dict:
    """Per measure: queries whose values are exactly equal, and the largest absolute
    difference, ours against trec_eval and against ranx."""
    out = {}
    for mine, trec, rx in measure_names(ks, ndcg_k):
        a = np.array([ours_pq[q][mine] for q in qids])
        t = np.array([trec_pq[q][trec] if q in trec_pq else 0.0 for q in qids])
        row = {"trec_eval": trec, "equal_trec_eval": int((a == t).sum()),
               "max_abs_diff_trec_eval": float(np.abs(a - t).max())}
        if ranx_res is not None:
            r = np.asarray(ranx_res[rx], dtype=float)
            row.update(ranx=rx, equal_ranx=int((a == r).sum()),
                       max_abs_diff_ranx=float(np.abs(a - r).max()))
        out[mine] = row
    return out


def bench_evaluation(*, n_queries: int, reps: int, ks: Sequence[int], ndcg_k: int,
                     use_ranx: bool | None = True) -> dict:
    """Section 4: ``reps`` timed evaluations of ``n_queries`` synthetic queries per library,
    alternating the order, and the value comparison.

    Args:
        use_ranx: True: include ranx if installed; False: the quick profile leaves it out;
            None: left out on request (``--no-ranx``).
    """
    ks = tuple(ks)
    run, qrels = synthetic_case(n_queries)
    qids = list(qrels)
    try:
        import pytrec_eval  # noqa: F401

        have_trec = True
    except ImportError:
        have_trec = False
    ranx_note = None
    have_ranx = False
    if use_ranx:
        try:
            import ranx  # noqa: F401

            have_ranx = True
        except ImportError:
            ranx_note = "not installed (pip install -e '.[bench]')"
    elif use_ranx is None:
        ranx_note = "skipped (--no-ranx)"
    else:
        ranx_note = "full run only (its import, numba compile and evaluations cost ~20 s)"
    out: dict = {"queries": n_queries, "reps": reps, "empty_runs": sum(1 for s in run.values() if not s),
                 "run_entries": sum(len(s) for s in run.values()),
                 "qrels_entries": sum(len(r) for r in qrels.values()),
                 "measures": [m for m, _, _ in measure_names(ks, ndcg_k)]}
    ranx_first = None
    if have_ranx:
        t0 = time.perf_counter()
        small = dict(list(run.items())[:50])
        _ranx(small, {q: qrels[q] for q in small}, ks, ndcg_k)
        ranx_first = time.perf_counter() - t0
        progress(f"eval: ranx first call (numba compile) {ranx_first:.1f} s")
    times: dict[str, list[float]] = {"ours": [], "trec_eval": [], "ranx": []}
    sides = ["ours"] + (["trec_eval"] if have_trec else []) + (["ranx"] if have_ranx else [])
    results = {}
    for r in range(reps):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            t0 = time.perf_counter()
            if side == "ours":
                results[side] = _ours(run, qrels, ks, ndcg_k)
            elif side == "trec_eval":
                results[side] = _trec(run, qrels, ks, ndcg_k)
            else:
                results[side] = _ranx(run, qrels, ks, ndcg_k)
            times[side].append(time.perf_counter() - t0)
        progress(f"eval: {n_queries} queries, rep {r + 1}/{reps} ("
                 + ", ".join(f"{s} {times[s][-1]:.2f} s" for s in sides) + ")")
    out["time_ours"] = summary(times["ours"], unit="s")
    if have_trec:
        out["time_trec_eval"] = summary(times["trec_eval"], unit="s")
        out["ratio_ours_over_trec_eval"] = ratio(out["time_ours"]["median"],
                                                 out["time_trec_eval"]["median"])
        cmp = compare(results["ours"][0], results["trec_eval"][0],
                      results["ranx"] if have_ranx else None, qids, ks, ndcg_k)
        out["comparison"] = cmp
        out["all_equal_trec_eval"] = all(v["equal_trec_eval"] == len(qids) for v in cmp.values())
        out["max_abs_diff_trec_eval"] = max(v["max_abs_diff_trec_eval"] for v in cmp.values())
        mean_diff = max(abs(results["ours"][1][m] - results["trec_eval"][1][t])
                        for m, t, _ in measure_names(ks, ndcg_k))
        out["max_abs_diff_means_trec_eval"] = mean_diff
    else:
        out["trec_eval_note"] = "pytrec-eval-terrier is not installed"
    if have_ranx:
        out["time_ranx"] = summary(times["ranx"], unit="s")
        out["ratio_ours_over_ranx"] = ratio(out["time_ours"]["median"], out["time_ranx"]["median"])
        out["ranx_first_call_s"] = ranx_first
        if have_trec:
            out["all_equal_ranx"] = all(v["equal_ranx"] == len(qids) for v in out["comparison"].values())
            out["max_abs_diff_ranx"] = max(v["max_abs_diff_ranx"] for v in out["comparison"].values())
    else:
        out["ranx_note"] = ranx_note
    return out
