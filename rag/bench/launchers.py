"""Benchmark section "Ray vs basic launcher wall time and chunks embedded": the routing sweep
(``+sweep=routing``) under Hydra's basic launcher (every job in the driver process) and under
``hydra/launcher=ray`` (every job a task of a local Ray instance, :mod:`rag.app.ray_launcher`),
side by side in one run, alternating which goes first in each repetition.

Each sweep is a ``python -m rag.run`` child process (:func:`rag.bench.runs.rag_run`: a
temporary ledger in the benchmark's scratch directory). With ``cold`` every sweep gets a new
cache directory holding only the fetched corpus, so its prebuild embeds every chunk once and
the figure shows where the embedding happened; otherwise the sweeps share the configured cache
and embed nothing. The counts are read back from the sweep's rows in the scratch ledger: the
parent run's ``sweep/chunks_embedded`` (the driver's prebuild) and the jobs'
``index/chunks_embedded``. The same rows also give the largest difference of a quality metric
between the two launchers' jobs (0 expected).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Sequence

from rag.bench.measure import ChildRun, progress, ratio, summary
from rag.bench.runs import ROUTING_MODES, cold_cache, rag_run

#: the launchers compared, label -> extra command line arguments
LAUNCHERS = {"basic": (), "ray": ("hydra/launcher=ray",)}
#: metrics compared between the launchers' rows of the same job
QUALITY = ("mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate")


def sweep_rows(tracking_uri: str, log: Path) -> tuple[Any, dict[str, Any]]:
    """The parent run and the job rows (``sweep_job`` -> run) of the sweep whose
    ``python -m rag.run`` output is ``log`` (its ``sweep <id>: parent run ...`` line).

    Raises:
        ValueError: the log names no sweep, or the ledger has no parent run for it.
    """
    from mlflow.tracking import MlflowClient

    m = re.search(r"^sweep (\S+): parent run", log.read_text(errors="replace"), re.M)
    if m is None:
        raise ValueError(f"{log}: no 'sweep <id>: parent run' line")
    client = MlflowClient(tracking_uri=tracking_uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.sweep_id = '{m.group(1)}'")
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
    if not parents:
        raise ValueError(f"sweep {m.group(1)}: no parent run in {tracking_uri}")
    return parents[0], {r.data.tags.get("sweep_job"): r for r in runs
                        if r.data.tags.get("rag.sweep_parent") != "1"}


def bench_launchers(overrides: Sequence[str], scratch: Path, *,
                    modes: Sequence[str] = ROUTING_MODES, reps: int = 1, cold: bool = True,
                    cfg: Any = None, ray_args: Sequence[str] = ()) -> dict:
    """Ray vs basic launcher: wall time of the same sweep and the chunks each embedded.

    Args:
        overrides: the benchmark's config overrides (e.g. another corpus), given to every run.
        scratch: the benchmark's scratch directory (temporary ledger, logs, caches).
        modes: the ``search.mode`` values of the routing sweep (a subset is passed on the
            command line).
        reps: sweeps per launcher; the order alternates (basic first in even repetitions).
        cold: a new cache directory per sweep, holding only the fetched corpus (needs
            ``cfg``, the composed config, to find it); else the configured cache.
        ray_args: more overrides for the Ray sweep, e.g. ``hydra.launcher.ray.init.num_cpus=2``.

    Returns:
        JSON-ready: per launcher ``wall`` (summary, s), ``driver_peak_rss_mib`` (the driver
        process only: Ray's workers are not its descendants' peak), ``chunks_embedded``
        (``prebuild``, ``jobs``, ``total`` of the last repetition) and ``rows``;
        ``ratio_ray_to_basic`` (median wall, ray / basic), ``max_quality_diff`` (largest
        |difference| of :data:`QUALITY` between the two launchers' rows of the same job, last
        repetition), ``cache`` (what each sweep started from) and the commands.

    Raises:
        ValueError: ``cold`` without ``cfg``.
        rag.bench.measure.ChildFailed: a sweep failed.
    """
    if cold and cfg is None:
        raise ValueError("bench_launchers: cold=True needs cfg (the composed config)")
    modes = list(modes)
    subset = [] if modes == list(ROUTING_MODES) else [f"search.mode={','.join(modes)}"]
    uri = f"sqlite:///{scratch / 'mlflow.db'}"
    extra = {"basic": [], "ray": [*LAUNCHERS["ray"], *ray_args]}
    walls: dict[str, list[float]] = {k: [] for k in extra}
    peaks: dict[str, list[float]] = {k: [] for k in extra}
    last: dict[str, tuple[Any, dict[str, Any]]] = {}
    cache_meaning = "the configured paths.cache_dir (shared by every sweep)"
    for r in range(reps):
        for name in (("basic", "ray") if r % 2 == 0 else ("ray", "basic")):
            args = ["+sweep=routing", *subset, *extra[name], *overrides]
            cache = scratch / f"cache-launchers-{name}-{r}"
            if cold:
                cache_meaning = ("a new cache directory holding "
                                 + cold_cache(cfg, None, cache, keep_embeddings=False)
                                 + ": every chunk embedded by the sweep's prebuild")
                args.append(f"paths.cache_dir={cache}")
            run: ChildRun = rag_run(args, scratch=scratch, label=f"launchers-{name}-{r}")
            walls[name].append(run.wall_s)
            peaks[name].append(run.max_rss_mib)
            last[name] = sweep_rows(uri, run.log)
            progress(f"launchers: {name} sweep ({len(modes)} jobs) {run.wall_s:.1f} s")
            shutil.rmtree(cache, ignore_errors=True)
    out: dict[str, Any] = {"modes": modes, "reps": reps, "cache": cache_meaning,
                           "commands": {k: " ".join(["python -m rag.run +sweep=routing", *subset,
                                                     *v]).strip() for k, v in extra.items()}}
    for name in extra:
        parent, rows = last[name]
        prebuild = int(parent.data.metrics.get("sweep/chunks_embedded", 0))
        jobs = int(sum(r.data.metrics.get("index/chunks_embedded", 0) for r in rows.values()))
        out[name] = {"wall": summary(walls[name], unit="s"),
                     "driver_peak_rss_mib": summary(peaks[name], unit="MiB"),
                     "chunks_embedded": {"prebuild": prebuild, "jobs": jobs,
                                         "total": prebuild + jobs},
                     "rows": len(rows)}
    out["ratio_ray_to_basic"] = ratio(out["ray"]["wall"]["median"],
                                      out["basic"]["wall"]["median"])
    (_, a), (_, b) = last["basic"], last["ray"]
    diffs = [abs(float(a[j].data.metrics[m]) - float(b[j].data.metrics[m]))
             for j in set(a) & set(b) for m in QUALITY
             if m in a[j].data.metrics and m in b[j].data.metrics]
    out["max_quality_diff"] = max(diffs) if diffs else None
    out["jobs_compared"] = len(set(a) & set(b))
    return out


def render_launchers(res: dict) -> list[str]:
    """Markdown lines of the section (for the report's renderer)."""
    lines = ["## Ray vs basic launcher wall time and chunks embedded", "",
             f"The routing sweep ({len(res['modes'])} jobs), {res['reps']} time(s) per launcher, "
             f"alternating; each sweep started from {res['cache']}.", "",
             "| launcher | wall median (min-max) | chunks embedded: prebuild / jobs / total "
             "| rows |", "|---|---|---|---|"]
    for name in LAUNCHERS:
        r = res[name]
        w, c = r["wall"], r["chunks_embedded"]
        lines.append(f"| {name} (`{res['commands'][name]}`) | {w['median']:.1f} s "
                     f"({w['min']:.1f}-{w['max']:.1f}) | {c['prebuild']} / {c['jobs']} / "
                     f"{c['total']} | {r['rows']} |")
    ratio_ = res.get("ratio_ray_to_basic")
    diff = res.get("max_quality_diff")
    lines += ["", f"Ray / basic wall time: {ratio_:.2f}x." if ratio_ else "",
              f"Largest quality-metric difference between the launchers' rows of the same job "
              f"({res['jobs_compared']} jobs): {diff:.3g}." if diff is not None else ""]
    return [x for x in lines if x is not None]
