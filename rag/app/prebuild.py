"""Build a sweep's indexes once, on the driver, before any job starts.

:class:`rag.app.sweep_callback.SweepCallback` calls :func:`prebuild_sweep` in
``on_multirun_start``. It lists the jobs the sweeper will launch (Hydra's basic sweeper: the
product of ``hydra.sweeper.params`` and the command line's ``k=a,b`` overrides), composes each
job's config exactly as the launcher will (``load_sweep_config``), and builds every distinct
index those configs need into the on-disk caches under ``paths.cache_dir``: the chunk store
(``chunks/``) and the embedding cache (``embeddings/``, keyed by chunk content hash and model
id). Every job, in whatever worker process the launcher puts it (joblib's loky workers, or the
driver itself under the basic launcher), then finds its chunks in the store and every vector in
the embedding cache and embeds nothing (``index/chunks_embedded`` 0 on its row): across the
whole sweep each chunk is embedded at most once, here. The count is logged on the sweep's
parent run as ``sweep/chunks_embedded``.

Two indexes are "distinct" here when their on-disk caches differ: the ``corpus`` subtree (walk
rules, chunker, windows), ``index`` (the header embedded with each chunk), whether the run
embeds at all (:func:`rag.app.config.needs_dense`), the embedder (when it does), the corpus root
and ``paths.cache_dir``. BM25 settings and the ANN are in-memory only and are left to the jobs.

Under the basic launcher the jobs run in this process, so the prebuild uses the process-wide
:data:`rag.app.stages.STAGES`: the first job of each index reuses it in memory. Under any other
launcher it uses a throw-away :class:`rag.app.stages.StageCache` (one model load) and keeps no
index in the driver's memory.

The prebuild is best effort: a job config that fails validation, whose corpus cannot be had,
or whose build fails is skipped with a one-line note (the job itself then fails with its own
error, as it would without a prebuild). A sweeper other than Hydra's basic one (whose job list
is not known in advance) gets one prebuild from the multirun's base config.

Under ``hydra/launcher=ray`` (:mod:`rag.app.ray_launcher`) the jobs are Ray tasks in
worker processes of a local Ray instance or of a cluster; the launcher pins each job's
``paths.cache_dir`` to the absolute path resolved here, so that every worker reads this
prebuild whatever its working directory or environment. For a launcher whose workers run on
other machines, ``paths.cache_dir`` must be storage every worker sees at that path (a shared
file system): the prebuild writes there and the jobs read from there.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


@dataclass
class Prebuild:
    """What :func:`prebuild_indexes` did.

    Attributes:
        builds: one dict per distinct index built: ``corpus`` (its ``corpus.name``),
            ``job`` (the overrides of the first job that needs it), ``dense``, ``chunks``,
            ``chunks_embedded``, ``seconds``.
        skipped: job overrides (joined) -> why that config was not prebuilt.
        seconds: wall time of the whole prebuild.
    """

    builds: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def chunks_embedded(self, corpus: str | None = None) -> int:
        """Chunks embedded by the prebuild (of one corpus's indexes, or of all)."""
        return sum(int(b["chunks_embedded"]) for b in self.builds
                   if corpus is None or b["corpus"] == corpus)

    def indexes(self, corpus: str | None = None) -> int:
        """Distinct indexes built (of one corpus, or of all)."""
        return sum(1 for b in self.builds if corpus is None or b["corpus"] == corpus)


def sweep_job_overrides(config: Any) -> list[list[str]] | None:
    """The override list of every job the multirun's sweeper will launch, in launch order, or
    None when the sweeper is not Hydra's basic sweeper (its jobs are not known in advance).

    Mirrors :meth:`hydra._internal.core_plugins.basic_sweeper.BasicSweeper.sweep`: the sweep
    file's ``hydra.sweeper.params`` first, then the command line's overrides, expanded into
    their product.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if str(config.hydra.sweeper.get("_target_")) != BASIC_SWEEPER:
        return None
    from omegaconf import OmegaConf

    params = config.hydra.sweeper.get("params") or {}
    # the command line's overrides as typed: read through the config, an override's own
    # ``${dataset.repo}`` would be resolved against the base config (to None)
    task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    args = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in task]
    parsed = OverridesParser.create().parse_overrides(args)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def sweep_job_configs(config: Any) -> list[tuple[list[str], Any]]:
    """``(overrides, composed config)`` of every job of the multirun, composed as the launcher
    will compose them; ``[([], config)]`` (the base config) when the jobs cannot be listed or
    composed here."""
    try:
        from hydra.core.global_hydra import GlobalHydra

        jobs = sweep_job_overrides(config)
        if jobs is None or not GlobalHydra.instance().is_initialized():
            return [([], config)]
        loader = GlobalHydra.instance().config_loader()
        return [(job, loader.load_sweep_config(config, job)) for job in jobs]
    except Exception as exc:  # noqa: BLE001 - a job that cannot compose fails on its own
        print(f"sweep prebuild: the jobs' configs could not be composed here "
              f"({type(exc).__name__}: {exc}); prebuilding the base config only", file=sys.stderr)
        return [([], config)]


def disk_key(cfg: Any, root: Any, dense: bool) -> str:
    """What decides the on-disk caches an index reads (see the module docstring)."""
    from rag.app.config import expand_path
    from rag.app.stages import stage_key

    return stage_key("prebuild", corpus=cfg.corpus, index=cfg.index, dense=dense,
                     embedder=cfg.embedder if dense else None, root=str(root),
                     cache_dir=str(expand_path(cfg.paths.cache_dir)))


def prebuild_indexes(jobs: list[tuple[list[str], Any]], *, stages: Any = None,
                     keep: bool = False, progress: bool = True,
                     log: Callable[[str], None] | None = None) -> Prebuild:
    """Build every distinct index ``jobs`` need into the on-disk caches.

    Args:
        jobs: ``(overrides, composed config)`` per job (:func:`sweep_job_configs`).
        stages: the :class:`rag.app.stages.StageCache` that loads embedders (and, with ``keep``,
            keeps the built indexes for jobs in this process); default a fresh one.
        keep: build through ``stages.index`` so that jobs run in this process reuse the
            index in memory (the basic launcher); else build and drop it.
        progress: draw tqdm bars (the caller passes ``sys.stderr.isatty()``).
        log: where skip notes go (default: stderr).
    """
    from rag.app.config import needs_dense, validate
    from rag.app.run import run_inputs
    from rag.app.stages import StageCache, build_corpus_index

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    stages = StageCache() if stages is None else stages
    out = Prebuild()
    seen: set[str] = set()
    t0 = time.perf_counter()
    for overrides, cfg in jobs:
        label = " ".join(overrides) or "(base config)"
        try:
            validate(cfg)
            root, _, _ = run_inputs(cfg)
            dense = needs_dense(cfg)
            key = disk_key(cfg, root, dense)
            if key in seen:
                continue
            t1 = time.perf_counter()
            embedder = stages.embedder(cfg) if dense or keep else None
            if keep:
                index = stages.index(cfg, root, embedder, progress=progress)
            else:
                index = build_corpus_index(cfg, root, embedder, dense=dense, progress=progress)
        except Exception as exc:  # noqa: BLE001 - the job reports its own error
            out.skipped[label] = f"{type(exc).__name__}: {exc}"
            log(f"sweep prebuild: skipped {label} ({type(exc).__name__}: {exc})")
            continue
        seen.add(key)
        out.builds.append({"corpus": str(cfg.corpus.name), "job": label, "dense": dense,
                           "chunks": int(index.stats.get("chunks", len(index.chunks))),
                           "chunks_embedded": int(index.stats.get("chunks_embedded", 0)),
                           "seconds": round(time.perf_counter() - t1, 3)})
        del index
    out.seconds = time.perf_counter() - t0
    return out


def prebuild_sweep(config: Any) -> Prebuild:
    """Prebuild the indexes of the multirun whose base config is ``config`` (called on the
    driver by :meth:`rag.app.sweep_callback.SweepCallback.on_multirun_start`)."""
    from rag.app.stages import STAGES

    in_process = str(config.hydra.launcher.get("_target_")) == BASIC_LAUNCHER
    # progress bars only on a terminal, as in the jobs: `python -m rag.run +sweep=... 2> log`
    # writes no bar frames
    return prebuild_indexes(sweep_job_configs(config), stages=STAGES if in_process else None,
                            keep=in_process, progress=sys.stderr.isatty())
