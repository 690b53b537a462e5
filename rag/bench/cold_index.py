"""Benchmark section ``index_cold``: a cold ``rag index`` — a new process that walks, chunks,
embeds and publishes the corpus into an empty cache — for the fast path (``system=rag_fast``:
static embeddings distilled offline from the packaged MiniLM) against the default (MiniLM),
alternating which runs first.

"Cold" is an empty cache but for the fetched corpus and the ``models/`` folder (the distilled
static model and the ONNX query encoder, made once per machine, untimed here by a first
``rag index`` of each configuration in the configured cache): every chunk is read, chunked
and embedded in the timed process. The goal (issue 24, item 5): the fast path indexes a
1,000-chunk repository cold in under 10 s on 2 cores; the report gives each configuration's
wall time and its seconds per 1,000 chunks.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

from rag.bench.measure import progress, ratio, run_child, summary

#: label -> the overrides that select it
CONFIGS: dict[str, tuple[str, ...]] = {"fast path (system=rag_fast)": ("system=rag_fast",),
                                       "default (MiniLM)": ()}
#: the fast path's goal: seconds per 1,000 chunks, cold
GOAL_S_PER_1000 = 10.0
_CHUNKS = re.compile(r"^indexed ([\d,]+) files, ([\d,]+) chunks", re.M)


def indexed_counts(log_text: str) -> tuple[int, int]:
    """``(files, chunks)`` from ``rag index``'s first line (``indexed 7 files, 15 chunks
    (...)``).

    Raises:
        ValueError: no such line (the log is named by the caller).
    """
    m = _CHUNKS.search(log_text)
    if m is None:
        raise ValueError("no 'indexed N files, M chunks' line in the rag index output")
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def _cold_cache(cfg: Any, target: Path) -> None:
    """``target``: the fetched corpus (:func:`rag.bench.runs.cold_cache`) and a copy of the
    configured cache's ``models/`` folder, nothing else."""
    from rag.app.config import expand_path
    from rag.bench.runs import cold_cache

    cold_cache(cfg, None, target, keep_embeddings=False)
    models = expand_path(cfg.paths.cache_dir) / "models"
    if models.is_dir():
        shutil.copytree(models, target / "models", symlinks=True)


def bench_cold_index(cfg: Any, overrides: Sequence[str], scratch: Path, *, reps: int,
                     configs: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Cold ``rag index`` wall time per configuration (module docstring).

    Args:
        cfg: the composed config (``paths.cache_dir``, ``corpus``).
        overrides: the benchmark's config overrides (another corpus, ...); a
            ``paths.cache_dir`` among them is replaced by each cold cache.
        reps: cold builds per configuration.
        configs: label -> overrides (default :data:`CONFIGS`).

    Returns:
        ``{"reps", "goal_s_per_1000_chunks", label: {"wall": summary (s), "peak_rss_mib":
        summary, "files", "chunks", "s_per_1000_chunks", "command"}, "ratio_fast_to_default",
        "meets_goal"}`` (``meets_goal``: the first configuration's median seconds per 1,000
        chunks within the goal).

    Raises:
        rag.bench.measure.ChildFailed: a ``rag index`` exited non-zero.
        ValueError: its output names no chunk count.
    """
    configs = dict(CONFIGS if configs is None else configs)
    base = [o for o in overrides if not o.split("=", 1)[0].lstrip("+~") == "paths.cache_dir"]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for label, extra in configs.items():
        progress(f"index_cold: {label}: a first rag index in the configured cache (untimed: "
                 "the distilled model and the query encoder)")
        run_child([sys.executable, "-m", "rag", "index", *overrides, *extra],
                  log=scratch / "logs" / f"index-cold-prepare-{_slug(label)}.log", env=env)
    walls: dict[str, list[float]] = {k: [] for k in configs}
    peaks: dict[str, list[float]] = {k: [] for k in configs}
    counts: dict[str, tuple[int, int]] = {}
    for r in range(reps):
        for label in (list(configs) if r % 2 == 0 else list(configs)[::-1]):
            cache = scratch / f"index-cold-{_slug(label)}-{r}"
            _cold_cache(cfg, cache)
            log = scratch / "logs" / f"index-cold-{_slug(label)}-{r}.log"
            run = run_child([sys.executable, "-m", "rag", "index", *base, *configs[label],
                             f"paths.cache_dir={cache}"], log=log, env=env)
            counts[label] = indexed_counts(log.read_text(errors="replace"))
            walls[label].append(run.wall_s)
            peaks[label].append(run.max_rss_mib)
            shutil.rmtree(cache, ignore_errors=True)
            progress(f"index_cold: {label}: {run.wall_s:.1f} s, {counts[label][1]} chunks")
    out: dict = {"reps": reps, "goal_s_per_1000_chunks": GOAL_S_PER_1000}
    for label, extra in configs.items():
        wall = summary(walls[label], unit="s")
        files, chunks = counts[label]
        out[label] = {"wall": wall, "peak_rss_mib": summary(peaks[label], unit="MiB"),
                      "files": files, "chunks": chunks,
                      "s_per_1000_chunks": ratio(1000 * wall["median"], chunks),
                      "command": " ".join(["rag index", *base, *extra,
                                           "paths.cache_dir=<empty but for models/>"])}
    first, *rest = list(configs)
    out["ratio_fast_to_default"] = (ratio(out[first]["wall"]["median"],
                                          out[rest[0]]["wall"]["median"]) if rest else None)
    per = out[first]["s_per_1000_chunks"]
    out["meets_goal"] = per is not None and per <= GOAL_S_PER_1000
    return out


def _slug(label: str) -> str:
    return re.sub(r"\W+", "_", label).strip("_")


def render_cold_index(r: dict) -> list[str]:
    """The section's markdown."""
    labels = [k for k, v in r.items() if isinstance(v, dict) and "wall" in v]
    lines = ["## Cold `rag index` (`index_cold`)", "",
             f"`rag index` as a new process into an empty cache (but for the fetched corpus and "
             f"the `models/` folder), {r['reps']} time(s) per configuration, alternating. Goal: "
             f"the fast path under {r['goal_s_per_1000_chunks']:g} s per 1,000 chunks.", "",
             "| configuration | files | chunks | wall median (min-max) | s per 1,000 chunks "
             "| peak RSS |", "|---|---:|---:|---|---:|---|"]
    for label in labels:
        v = r[label]
        w, m = v["wall"], v["peak_rss_mib"]
        per = v["s_per_1000_chunks"]
        lines.append(f"| {label} | {v['files']} | {v['chunks']} | {w['median']:.1f} s "
                     f"({w['min']:.1f}-{w['max']:.1f}) | "
                     f"{'n/a' if per is None else f'{per:.1f}'} | {m['median']:.0f} MiB |")
    if r.get("ratio_fast_to_default") is not None:
        lines += ["", f"Fast path / default wall time: {r['ratio_fast_to_default']:.2f}. "
                      f"Goal met: {'yes' if r['meets_goal'] else 'no'}."]
    lines += ["", "Commands: " + "; ".join(f"`{r[k]['command']}`" for k in labels)]
    return lines
