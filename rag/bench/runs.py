"""Benchmark sections 5 and 6 (first half): whole ``python -m rag.run`` processes.

Every run is a child process started here, timed from start to exit, with its peak memory
(peak resident set size, see :func:`rag.bench.measure.run_child`). Each logs into a **temporary** MLflow store, artifact root, ledger
report and Hydra output folder under the benchmark's scratch directory (see
:func:`scratch_overrides`), never into the project's ``mlflow.db`` / ``reports/ledger.md``. The
temporary store's schema is created before the first timed run, so no run pays MLflow's
database migrations (the project's ledger already has them).

* Sweep: the routing sweep (``+sweep=routing``: one process, Hydra's basic launcher, model
  and index shared by the jobs) against the same jobs as single runs started one by one.
* End to end: ``python -m rag.run`` warm (the chunk store and embedding cache of
  ``paths.cache_dir`` already filled) and cold, with what "cold" meant stated in the result.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Sequence

from rag.bench.measure import ChildRun, progress, ratio, run_child, summary

ROUTING_MODES = ("dense", "bm25", "hybrid", "auto")


def scratch_overrides(scratch: Path, label: str) -> list[str]:
    """Hydra overrides that keep a benchmarked run's ledger row, artifacts, report and Hydra
    folders inside ``scratch`` (the keys tests use, plus Hydra's run and sweep dirs)."""
    return [f"tracking.uri=sqlite:///{scratch / 'mlflow.db'}",
            f"tracking.artifact_root={scratch / 'mlartifacts'}",
            f"tracking.report_path={scratch / 'ledger.md'}",
            f"hydra.run.dir={scratch / 'outputs' / label}",
            f"hydra.sweep.dir={scratch / 'multirun' / label}"]


def init_tracking(scratch: Path) -> float:
    """Create the temporary MLflow store's schema now (returns the seconds it took)."""
    import time

    t0 = time.perf_counter()
    import mlflow

    mlflow.MlflowClient(tracking_uri=f"sqlite:///{scratch / 'mlflow.db'}").search_experiments()
    return time.perf_counter() - t0


def rag_run(args: Sequence[str], *, scratch: Path, label: str) -> ChildRun:
    """``python -m rag.run ARGS`` with the scratch overrides; raises ChildFailed on failure."""
    cmd = [sys.executable, "-m", "rag.run", *args, *scratch_overrides(scratch, label)]
    return run_child(cmd, log=scratch / "logs" / f"{label}.log",
                     env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})


def chunks_embedded(run: ChildRun) -> int | None:
    """The "chunks embedded: N" that rag.app.run printed (summed over a sweep's jobs)."""
    found = re.findall(r"chunks embedded: (\d+)", run.log.read_text(errors="replace"))
    return sum(int(x) for x in found) if found else None


def bench_sweep(overrides: Sequence[str], scratch: Path, *, modes: Sequence[str], reps: int
                ) -> dict:
    """Section 5: the routing sweep in one process against its jobs as single runs.

    Args:
        overrides: the benchmark's config overrides (e.g. another corpus), passed to every run.
        modes: the ``search.mode`` values (the routing sweep's four, or a subset under
            ``--quick``; a subset is passed on the command line, which Hydra's basic sweeper
            lets win over the sweep file's list).

    Returns:
        JSON-ready dict: ``sweep_wall``, ``singles_wall`` (sum of the single runs, per rep),
        ``saving_ratio`` (singles / sweep), ``saving_s``, and every single run's wall time
        and peak memory by mode (``single_runs``: what section 6 quotes as warm runs).
    """
    modes = list(modes)
    subset = [] if modes == list(ROUTING_MODES) else [f"search.mode={','.join(modes)}"]
    sweep_walls, single_sums, sweep_rss = [], [], []
    singles: dict[str, list[ChildRun]] = {m: [] for m in modes}
    for r in range(reps):
        order = ("singles", "sweep") if r % 2 == 0 else ("sweep", "singles")
        for what in order:
            if what == "sweep":
                run = rag_run(["+sweep=routing", *subset, *overrides], scratch=scratch,
                              label=f"sweep-{r}")
                sweep_walls.append(run.wall_s)
                sweep_rss.append(run.max_rss_mib)
                progress(f"sweep: routing sweep ({len(modes)} jobs) {run.wall_s:.1f} s")
            else:
                total = 0.0
                for m in modes:
                    run = rag_run([f"search.mode={m}", *overrides], scratch=scratch,
                                  label=f"single-{r}-{m}")
                    singles[m].append(run)
                    total += run.wall_s
                    progress(f"sweep: single run search.mode={m} {run.wall_s:.1f} s")
                single_sums.append(total)
    sw = summary(sweep_walls, unit="s")
    si = summary(single_sums, unit="s")
    return {"modes": modes, "reps": reps, "subset_of_routing": bool(subset),
            "sweep_command": "python -m rag.run +sweep=routing " + " ".join(subset),
            "sweep_wall": sw, "singles_wall": si,
            "sweep_peak_rss_mib": summary(sweep_rss, unit="MiB"),
            "saving_ratio": ratio(si["median"], sw["median"]),
            "saving_s": si["median"] - sw["median"],
            "single_runs": {m: {"wall": summary([x.wall_s for x in v], unit="s"),
                                "peak_rss_mib": summary([x.max_rss_mib for x in v], unit="MiB")}
                            for m, v in singles.items()},
            "_warm_auto": [(x.wall_s, x.max_rss_mib) for x in singles.get("auto", [])]}


def _copy_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of an SQLite database (its WAL included) via the backup API."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def cold_cache(cfg, embedder, target: Path, *, keep_embeddings: bool) -> str:
    """Make ``target`` a cache directory holding only the fetched corpus (and, with
    ``keep_embeddings``, a copy of the embedder's embedding cache). Returns a description."""
    from rag.app.config import expand_path
    from rag.index.dense import _safe_name

    src = expand_path(cfg.paths.cache_dir)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    what = []
    if not cfg.corpus.path and (src / "corpora").is_dir():
        shutil.copytree(src / "corpora", target / "corpora", symlinks=True)
        what.append("the fetched corpus (no download)")
    if keep_embeddings:
        name = f"{_safe_name(embedder.model_id)}.sqlite"
        if (src / "embeddings" / name).is_file():
            _copy_sqlite(src / "embeddings" / name, target / "embeddings" / name)
            what.append("a copy of the embedding cache")
    return " and ".join(what) if what else "nothing"


def bench_end_to_end(cfg, embedder, overrides: Sequence[str], scratch: Path, *,
                     warm_runs: list[tuple[float, float]], warm_reps: int,
                     cold_index_reps: int, cold_full_reps: int) -> dict:
    """Section 6, whole runs: ``python -m rag.run`` warm and cold, wall time and peak memory.

    Args:
        warm_runs: (wall s, peak MiB) of default-mode single runs already made by the sweep
            section (the same command); ``warm_reps`` more are made here if fewer.
        cold_index_reps: runs with a new cache holding the corpus and a copy of the embedding
            cache: walk, read, chunk, BM25 and chunk store from scratch, nothing embedded.
        cold_full_reps: runs with a new cache holding only the corpus: every chunk embedded.
    """
    warm = list(warm_runs)
    r = 0
    while len(warm) < warm_reps:
        run = rag_run(list(overrides), scratch=scratch, label=f"warm-{r}")
        warm.append((run.wall_s, run.max_rss_mib))
        progress(f"end to end: warm run {run.wall_s:.1f} s")
        r += 1
    out: dict = {"command": "python -m rag.run" + "".join(f" {o}" for o in overrides)}
    if warm:
        out["warm"] = {"wall": summary([w for w, _ in warm], unit="s"),
                       "peak_rss_mib": summary([m for _, m in warm], unit="MiB"),
                       "meaning": "chunk store and embedding cache of paths.cache_dir filled: no "
                                  "file read, 0 chunks embedded; model files in the OS page cache"}
    for key, reps, keep in (("cold_index", cold_index_reps, True),
                            ("cold_full", cold_full_reps, False)):
        walls, rss, embedded, desc = [], [], [], ""
        for i in range(reps):
            cache = scratch / f"cache-{key}-{i}"
            desc = cold_cache(cfg, embedder, cache, keep_embeddings=keep)
            run = rag_run([*overrides, f"paths.cache_dir={cache}"], scratch=scratch,
                          label=f"{key}-{i}")
            walls.append(run.wall_s)
            rss.append(run.max_rss_mib)
            embedded.append(chunks_embedded(run))
            progress(f"end to end: {key} run {run.wall_s:.1f} s, chunks embedded {embedded[-1]}")
            shutil.rmtree(cache, ignore_errors=True)
        if reps:
            meaning = ("new cache directory holding " + desc + ": every file walked, read and "
                       "chunked, BM25 built, chunk store written"
                       + ("; embeddings read from the copied cache" if keep
                          else "; every chunk embedded") + "; model files in the OS page cache")
            out[key] = {"wall": summary(walls, unit="s"), "peak_rss_mib": summary(rss, unit="MiB"),
                        "chunks_embedded": embedded, "meaning": meaning}
    if "warm" in out:
        for key in ("cold_index", "cold_full"):
            if key in out:
                out[key]["ratio_to_warm"] = ratio(out[key]["wall"]["median"],
                                                  out["warm"]["wall"]["median"])
    return out
