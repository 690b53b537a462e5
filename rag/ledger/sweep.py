"""Sweeps in the ledger: one sweep id for every job, a parent run, and each job's paired
significance against the sweep's baseline.

* :class:`SweepCallback` (a Hydra callback, wired in conf/config.yaml) runs once around a
  multirun: it creates the experiment and the parent run *before* any job starts (so parallel
  joblib workers never race to create them) and writes ``sweep.json`` (sweep id, parent run,
  the keys that vary, start time) into the multirun directory, where every job — also in a
  reused joblib worker — reads it. At the end it logs the Holm-corrected summary to the parent
  run and closes it; if the multirun dies first, an ``atexit`` hook marks the parent FAILED,
  and the report flags the sweep as incomplete. Before any job it also builds every distinct
  index the sweep's jobs need into the on-disk caches under ``paths.cache_dir``
  (:mod:`rag.ledger.prebuild`), so that no job, in any worker, embeds a chunk; the count is
  logged on the parent run as ``sweep/chunks_embedded``.
* :func:`sweep_significance` runs **once, when the multirun ends**: for every finished job,
  the paired randomization test of each per-query metric against its baseline row (read from
  the rows' ``per_query.csv`` artifacts), the minimum detectable effect, and Holm across the
  sweep's jobs, all logged on the job rows. No job waits for or polls its baseline, so jobs
  may finish in any order on any launcher.
"""

from __future__ import annotations

import io
import json
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from rag.eval.significance import holm, minimum_detectable_effect, paired_randomization, paired_sd

SWEEP_FILE = "sweep.json"


def significance_columns(df: pd.DataFrame) -> tuple[str, ...]:
    """The per-query metric columns of a per_query table that are tested against a baseline
    (declared ``significance`` in rag/eval/measures.py): ``mrr`` and ``answer_support`` first,
    then the cut-off families by name and k (``ndcg_at_*``, ``recall_at_*``,
    ``semble_ndcg_at_*``)."""
    from rag.eval.measures import significance_metric

    tested = [c for c in df.columns if significance_metric(c)]
    cols = [c for c in ("mrr", "answer_support") if c in tested]
    cols += sorted((c for c in tested if c not in cols),
                   key=lambda c: (c.rsplit("_at_", 1)[0], int(c.rsplit("_at_", 1)[1])))
    return tuple(cols)


def read_sweep_file(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep.json the callback wrote into a multirun directory, or None."""
    try:
        return json.loads((Path(sweep_dir) / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return None


def job_label(overrides: list[str], varying: set[str]) -> str:
    """A job's name: its overrides of the keys that vary in the sweep, sorted."""
    own = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in varying]
    return " ".join(sorted(own)) or "(defaults)"


def baseline_label(overrides: list[str], varying: set[str], baseline: str) -> str:
    """The label of *this* job's baseline: its own overrides with the baseline's keys set to
    the baseline values (so a sweep extended on the command line pairs like with like)."""
    base = dict(o.split("=", 1) for o in baseline.split())
    swapped = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        swapped.append(f"{key}={base[key]}" if key in base else o)
    for key, value in base.items():
        if not any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides):
            swapped.append(f"{key}={value}")
    return job_label(swapped, varying)


def new_sweep_id(name: str) -> str:
    """``<name>-<UTC timestamp>-<4 hex>``, unique per multirun."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{name}-{stamp}-{uuid.uuid4().hex[:4]}"


def per_query_frame(csv_text: str) -> pd.DataFrame:
    """The positives of a per_query.csv artifact, indexed by query id."""
    df = pd.read_csv(io.StringIO(csv_text), dtype={"query_id": str}, keep_default_na=False,
                     na_values={"first_relevant_rank": [""]})
    return df[df["kind"] == "positive"].set_index("query_id")


def compare_per_query(baseline: pd.DataFrame, job: pd.DataFrame, *, seed: int = 0,
                      metrics: tuple[str, ...] | None = None) -> dict[str, float]:
    """Paired test of each metric (job minus baseline) on the queries both rows share.

    Returns:
        ``{m}_delta``, ``{m}_p``, ``{m}_ci_low``, ``{m}_ci_high`` and ``{m}_mde`` (the minimum
        detectable effect at α 0.05, power 0.8, from the paired differences — see
        :func:`rag.eval.significance.paired_sd`) for each metric present in both frames, and
        ``paired_queries``.

    Raises:
        ValueError: the rows share no query.
    """
    common = baseline.index.intersection(job.index)
    if len(common) == 0:
        raise ValueError("baseline and job share no query id")
    out: dict[str, float] = {"paired_queries": float(len(common))}
    for m in metrics or significance_columns(job):
        if m not in baseline.columns or m not in job.columns:
            continue
        a = baseline.loc[common, m].astype(float).to_numpy()
        b = job.loc[common, m].astype(float).to_numpy()
        res = paired_randomization(a, b, seed=seed)
        sd, _ = paired_sd(a, b)
        out.update({f"{m}_delta": res.delta, f"{m}_p": res.p_value,
                    f"{m}_ci_low": res.ci_low, f"{m}_ci_high": res.ci_high,
                    f"{m}_mde": minimum_detectable_effect(sd, len(common))})
    return out


def sweep_significance(ledger: Any, experiment_id: str, sweep_id: str) -> dict[str, Any]:
    """Paired tests of every finished job of ``sweep_id`` against its baseline row, logged on
    the job rows in the ``vs_baseline`` group (:mod:`rag.ledger.metric_groups`):
    ``vs_baseline/{m}_delta``, ``_p``, ``_ci_low``, ``_ci_high``, ``_mde``, ``_p_holm`` (Holm
    across the sweep's jobs) and ``vs_baseline/paired_queries``, tag ``baseline_run_id`` — or
    tag ``significance_skipped`` with the reason (no finished baseline row, another golden
    set, an unreadable per-query table).

    Returns:
        ``{"jobs": [{run_id, job, ...metrics}], "holm": run_id -> {m_p_holm}, "skipped":
        {run_id: reason}}`` (JSON-ready), for the sweep's parent run.
    """
    from mlflow.entities import Metric, RunTag

    from rag.ledger.metric_groups import baseline_name, ordered

    runs = ledger.rows([experiment_id], where=f"tags.sweep_id = '{sweep_id}'")
    baselines = {r.data.tags.get("sweep_job"): r for r in runs if r.data.tags.get("is_baseline") == "true"}
    frames: dict[str, pd.DataFrame] = {}

    def frame(run_id: str) -> pd.DataFrame:
        if run_id not in frames:
            frames[run_id] = per_query_frame(ledger.download_text(run_id, "per_query.csv"))
        return frames[run_id]

    jobs, skipped = [], {}
    for r in runs:
        t = r.data.tags
        if t.get("is_baseline") == "true" or not t.get("sweep_baseline"):
            continue  # a baseline, or a sweep without one (a suite alone): nothing to compare
        base = baselines.get(t.get("sweep_baseline_job"))
        if base is None:
            skipped[r.info.run_id] = f"no finished baseline row '{t.get('sweep_baseline_job')}'"
        elif base.data.tags.get("golden_fingerprint") != t.get("golden_fingerprint"):
            skipped[r.info.run_id] = "baseline used another golden set"
        else:
            try:
                metrics = compare_per_query(frame(base.info.run_id), frame(r.info.run_id))
            except Exception as exc:  # noqa: BLE001 - a bad artifact skips this job, not the sweep
                skipped[r.info.run_id] = f"per-query table unreadable ({type(exc).__name__}: {exc})"
                continue
            jobs.append({"run_id": r.info.run_id, "job": t.get("sweep_job"),
                         "baseline_run_id": base.info.run_id, **metrics})
    table = holm_table(jobs)
    now = int(time.time() * 1000)
    for j in jobs:
        values = {k: v for k, v in j.items() if isinstance(v, float) and v == v}  # NaN: not logged
        values.update(table.get(j["run_id"], {}))
        values = {baseline_name(k): v for k, v in values.items()}
        ledger.client.log_batch(j["run_id"], metrics=[Metric(k, float(values[k]), now, 0)
                                                      for k in ordered(values)],
                                tags=[RunTag("baseline_run_id", j["baseline_run_id"])])
    for run_id, why in skipped.items():
        ledger.client.set_tag(run_id, "significance_skipped", why)
    return {"jobs": jobs, "holm": table, "skipped": skipped}


def holm_table(rows: list[Mapping[str, Any]],
               metrics: tuple[str, ...] | None = None) -> dict[str, dict[str, float]]:
    """Holm-adjusted p-values across the non-baseline rows of one sweep.

    Args:
        rows: dicts with ``run_id`` and the raw ``{m}_p`` values (missing ones are skipped).

    Returns:
        run_id -> {``{m}_p_holm``: adjusted p}.
    """
    out: dict[str, dict[str, float]] = {r["run_id"]: {} for r in rows}
    if metrics is None:
        metrics = tuple(sorted({k[:-2] for r in rows for k in r if k.endswith("_p")}))
    for m in metrics:
        have = [r for r in rows if r.get(f"{m}_p") is not None]
        for r, adj in zip(have, holm([float(r[f"{m}_p"]) for r in have])):
            out[r["run_id"]][f"{m}_p_holm"] = adj
    return out


try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a hard dependency
    Callback = object  # type: ignore[misc,assignment]


def suite_corpora(config: Any) -> dict[str, str]:
    """For a suite multirun, corpus group option -> that corpus's name (its experiment is
    ``<prefix>-<name>``), read from each option's ``corpus/<option>.yaml`` (first found on
    Hydra's config search path, so ``hydra.searchpath`` corpora work) over the schema's
    defaults; for any other multirun ``{}``.

    Raises:
        ValueError: a corpus option has no config file.
    """
    from omegaconf import OmegaConf

    from rag.config import CorpusConfig, project_root

    dirs = [Path(str(src.path)) for src in config.hydra.runtime.get("config_sources", [])
            if str(src.schema) == "file"] or [project_root() / "conf"]

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    params = config.hydra.sweeper.get("params") or {}
    if not config.get("suite") or not config.suite.name:
        return {}
    # the command line's corpus=... wins over the suite file's, as it does for the jobs
    given = [o.split("=", 1)[1] for o in config.hydra.overrides.task
             if o.split("=", 1)[0].lstrip("+~") == "corpus" and "=" in o]
    value = given[-1] if given else params.get("corpus")
    if value is None:
        return {}
    parsed = OverridesParser.create().parse_override(f"corpus={value}")
    if not parsed.is_sweep_override():
        options = [str(parsed.value())]
    elif isinstance(parsed.value(), ChoiceSweep):
        options = [str(o) for o in parsed.sweep_string_iterator()]
    else:
        raise ValueError(f"suite {config.suite.name!r}: list the corpora (corpus: a,b or "
                         f"choice(a,b)), not {value!r}")
    out = {}
    for opt in options:
        f = next((d / "corpus" / f"{opt}.yaml" for d in dirs
                  if (d / "corpus" / f"{opt}.yaml").is_file()), None)
        if f is None:
            raise ValueError(f"suite {config.suite.name!r}: corpus {opt!r} has no config "
                             f"(corpus/{opt}.yaml in {', '.join(map(str, dirs))})")
        node = OmegaConf.merge(OmegaConf.structured(CorpusConfig), OmegaConf.load(f))
        root = OmegaConf.create({"corpus": node, "paths": config.paths, "dataset": config.dataset})
        out[opt] = str(root.corpus.name)
    return out


def suite_summary(rows: list[Any], metrics: tuple[str, ...] = ("mrr", "recall_at_8",
                                                              "answer_support_rate")
                  ) -> list[dict[str, Any]]:
    """Per configuration of a suite (a row's ``sweep_job`` without its ``corpus=`` part), the
    value of each metric on every corpus and their macro average (the unweighted mean over
    the suite's corpora — every corpus that has a row; absent when a configuration lacks the
    metric on one of them, so a partial mean never looks like a winner), with each corpus's
    ΔMRR and Holm p when the sweep had a baseline.

    Args:
        rows: the suite's rows, anything with ``.tags``, ``.metrics``, ``.experiment``
            (:class:`rag.ledger.report.LedgerRow`).

    Returns:
        ``[{"config": label, "corpora": {experiment: {metric: value, ...}}, "macro":
        {metric: mean}, "corpora_with_rows": "k/n"}]`` in first-seen order.
    """
    from rag.ledger.metric_groups import baseline_values

    groups: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        label = " ".join(p for p in r.tags.get("sweep_job", "").split()
                         if not p.lstrip("+~").startswith("corpus=")) or "(defaults)"
        vals = {m: float(r.metrics[m]) for m in metrics if m in r.metrics}
        vals.update({k: float(v) for k, v in baseline_values(r.metrics).items()
                     if k in ("mrr_delta", "mrr_p_holm", "mrr_p")})
        groups.setdefault(label, {})[r.experiment] = vals
    every = list(dict.fromkeys(r.experiment for r in rows))  # the suite's corpora
    out = []
    for label, corpora in groups.items():
        macro = {}
        for m in metrics:
            have = [v[m] for v in corpora.values() if m in v]
            if len(have) == len(every):  # a mean over some corpora would mislead
                macro[m] = sum(have) / len(have)
        out.append({"config": label, "corpora": corpora, "macro": macro,
                    "corpora_with_rows": f"{len(corpora)}/{len(every)}"})
    return out


SUMMARY_MD = "sweep_summary.md"
SUMMARY_CSV = "sweep_summary.csv"


def log_sweep_summary(ledger: Any, parent_id: str, rows: list[Any]) -> list[str]:
    """Log on a sweep's parent run its summary table — :data:`SUMMARY_MD` (the report's
    section for this sweep id, figures linked) and :data:`SUMMARY_CSV`
    (:func:`rag.ledger.report.sweep_table`, one line per row) — and its figures
    (:func:`rag.ledger.figures.sweep_figures`: ``figures/pareto.png``, ...). Returns the
    artifact names logged.

    Args:
        rows: the sweep id's finished rows (:class:`rag.ledger.report.LedgerRow`), read after
            :func:`sweep_significance` so that they carry their deltas.
    """
    import shutil
    import tempfile

    from rag.ledger.figures import per_query_frame_any, save_png, sweep_figures
    from rag.ledger.mlflow_store import LedgerError, log_file
    from rag.ledger.report import render_sweep, sweep_table

    if not rows:
        return []
    tables = {}
    for r in rows:
        try:
            tables[r.run_id] = per_query_frame_any(ledger.download_text(r.run_id, "per_query.csv"))
        except LedgerError:
            continue
    tmp = Path(tempfile.mkdtemp(prefix="rag-sweep-"))
    logged = []
    try:
        for name, fig in sweep_figures(rows, tables).items():
            log_file(ledger.client, parent_id, name, save_png(fig, tmp / Path(name).name))
            logged.append(name)
        sid = rows[0].tags.get("sweep_id", "")
        links = {sid: {n: n for n in logged}}
        md = "\n".join(render_sweep(rows[0].tags.get("sweep_name", "?"), rows, None,
                                    figures=links)) + "\n"
        ledger.client.log_text(parent_id, md, SUMMARY_MD)
        ledger.client.log_text(parent_id, sweep_table(rows).to_csv(index=False), SUMMARY_CSV)
        logged += [SUMMARY_MD, SUMMARY_CSV]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return logged


def check_repository_suite(config: Any) -> None:
    """Before a semble suite opens its parent run: its folder lists repositories and every
    repository of the sweep converts (rag/datasets/semble.py; conversions are cached, so the
    jobs reuse them). The first problem is printed as one ``error:`` line and the multirun
    exits 2, leaving no parent run and no row.

    Raises:
        SystemExit: with status 2, on the first bad repository or folder.
    """
    if str(getattr(config.dataset.format, "value", config.dataset.format)) != "semble":
        return
    from rag.config import semble_repos
    from rag.core.paths import expand_path
    from rag.datasets.common import DatasetError
    from rag.datasets.semble import default_root, prepare_semble

    try:
        given = [o.split("=", 1)[1] for o in config.hydra.overrides.task
                 if o.split("=", 1)[0].lstrip("+~") == "dataset.repo" and "=" in o]
        repos = (given[-1] if given else semble_repos(config.dataset.path)).split(",")
        root = (expand_path(config.dataset.path, base=Path.cwd()) if config.dataset.path
                else default_root())
        for repo in repos:
            prepare_semble(root, repo=repo.strip(), name=str(config.dataset.name),
                           cache_root=expand_path(config.paths.cache_dir) / "datasets")
    except (ValueError, DatasetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class SweepCallback(Callback):  # type: ignore[misc]
    """Hydra callback: sweep id, experiment and parent run before the jobs; summary after."""

    def __init__(self, prebuild: bool = True) -> None:
        # (uri, corpus -> parent run, sweep id, corpus -> experiment id)
        self._open: tuple[str, dict[str, str], str, dict[str, str]] | None = None
        self._names: dict[str, str] = {}  # corpus -> experiment name
        # build every distinct index of the sweep once, before any job (rag/ledger/prebuild.py);
        # off with +hydra.callbacks.sweep.prebuild=false
        self.prebuild = prebuild

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from rag.config import sweep_name

        check_repository_suite(config)  # a bad dataset: one line, exit 2, no parent run

        name = sweep_name(config)
        if name and config.tracking.enabled:
            self._open_sweep(config, name)
        if self.prebuild:
            try:
                self._prebuild(config)
            except Exception as exc:  # noqa: BLE001 - without it every job builds its own
                print(f"warning: sweep prebuild failed ({type(exc).__name__}: {exc}); each job "
                      "builds its index itself", file=sys.stderr)

    def _prebuild(self, config: Any) -> None:
        """Build the sweep's indexes into the on-disk caches before any job starts, and log
        ``sweep/chunks_embedded``, ``sweep/indexes_prebuilt`` and ``sweep/prebuild_s`` on the
        parent run(s)."""
        from rag.ledger.prebuild import prebuild_sweep

        pre = prebuild_sweep(config)
        print(f"sweep prebuild: {pre.indexes()} index(es) built before the jobs, "
              f"{pre.chunks_embedded()} chunks embedded ({pre.seconds:.1f} s); every job reads "
              "them from the caches in paths.cache_dir", flush=True)
        if self._open is None:
            return
        from mlflow.entities import Metric

        from rag.ledger.mlflow_store import Ledger

        uri, parents, _, _ = self._open
        ledger = Ledger(uri)
        now = int(time.time() * 1000)
        for corpus, parent_id in parents.items():
            only = corpus if len(parents) > 1 else None  # a suite: that corpus's indexes
            values = {"sweep/chunks_embedded": pre.chunks_embedded(only),
                      "sweep/indexes_prebuilt": pre.indexes(only),
                      "sweep/prebuild_s": round(pre.seconds, 3)}
            ledger.client.log_batch(parent_id, metrics=[Metric(k, float(v), now, 0)
                                                        for k, v in values.items()])

    def _open_sweep(self, config: Any, name: str) -> None:
        import atexit

        from rag.config import experiment_name, ledger_uri, output_path, register_configs
        from rag.ledger.mlflow_store import Ledger

        register_configs()
        sweep_id = new_sweep_id(name)
        t = config.tracking
        uri = ledger_uri(config)
        ledger = Ledger(uri, output_path(config, t.artifact_root))
        # one experiment per corpus: the run's own, or every corpus of a suite (a semble
        # suite's repositories share one experiment: rag.config.experiment_name)
        corpora = list(suite_corpora(config).values())
        names = ({c: f"{t.experiment_prefix}-{c}" for c in corpora} if corpora
                 else {experiment_name(config): experiment_name(config)})
        exps = {c: ledger.experiment_id(n) for c, n in names.items()}
        # keys that vary: the sweep file's multi-valued params and any "k=a,b" on the command line
        varying = {str(k).lstrip("+~") for k, v in (config.hydra.sweeper.get("params") or {}).items()
                   if "," in str(v)}
        varying |= {o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task
                    if "=" in o and "," in o.split("=", 1)[1]}
        tags = {"sweep_id": sweep_id, "sweep_name": name,
                "sweep_baseline": str(config.sweep.baseline or ""), "rag.sweep_parent": "1",
                "sweep_varying": " ".join(sorted(varying))}
        if config.suite.name:
            tags["suite"] = str(config.suite.name)
        parents = {c: ledger.client.create_run(e, run_name=f"sweep {sweep_id}", tags=tags).info.run_id
                   for c, e in exps.items()}
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        first = next(iter(parents.values()))
        (sweep_dir / SWEEP_FILE).write_text(json.dumps({
            "sweep_id": sweep_id, "parent_run_id": first, "parent_run_ids": parents,
            "varying": sorted(varying), "started_at": time.time()}))
        self._open = (uri, parents, sweep_id, exps)
        self._names = names
        atexit.register(self._close_if_open)
        print(f"sweep {sweep_id}: parent run" + ("s " if len(parents) > 1 else " ")
              + ", ".join(f"{p} ({c})" if len(parents) > 1 else p for c, p in parents.items()))

    def _close_if_open(self) -> None:
        """atexit: the multirun died before on_multirun_end (a job failed) — compare the jobs
        that did finish with their baseline, then mark the parents FAILED (the sweep is
        incomplete, and the report says so)."""
        if self._open is None:
            return
        uri, parents, sweep_id, exps = self._open
        self._open = None
        try:
            from rag.ledger.mlflow_store import Ledger

            ledger = Ledger(uri)
            try:
                for exp_id in exps.values():
                    sweep_significance(ledger, exp_id, sweep_id)
            finally:
                for parent_id in parents.values():
                    ledger.client.set_terminated(parent_id, status="FAILED")
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            print(f"warning: the incomplete sweep {sweep_id} was not compared with its baseline "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr)

    @staticmethod
    def _repository_suite(ledger: Any, config: Any, parents: dict[str, str],
                          rows: list[Any]) -> None:
        """A repository suite (``+suite=semble``): the tables of
        :func:`rag.ledger.suite_tables.suite_tables` (per-query tests from the rows'
        per_query.csv) logged on the parent as ``suite_tables.json`` / ``.md`` and printed."""
        from rag.ledger.figures import per_query_frame_any
        from rag.ledger.mlflow_store import LedgerError
        from rag.ledger.suite_tables import render_suite_tables, suite_tables

        frames = {}
        for r in rows:
            try:
                frames[r.run_id] = per_query_frame_any(ledger.download_text(r.run_id,
                                                                            "per_query.csv"))
            except LedgerError:
                continue
        tables = suite_tables(rows, frames=frames, baseline=str(config.sweep.baseline or "")
                              or None)
        md = "\n".join(render_suite_tables(tables)) + "\n"
        for parent_id in parents.values():
            ledger.client.log_text(parent_id, json.dumps(tables, indent=2) + "\n",
                                   "suite_tables.json")
            ledger.client.log_text(parent_id, md, "suite_tables.md")
        m = tables["metric"]
        print(f"suite {config.suite.name}: {m}, macro over repositories (micro over queries)")
        for c in tables["configs"]:
            mac, mic = c["macro"].get(m), c["micro"].get(m)
            cats = ", ".join(f"{k} {v['macro_' + m]:.3f}" for k, v in c["categories"].items()
                             if v.get("macro_" + m) is not None)
            print(f"  {c['config']}: macro {'n/a' if mac is None else f'{mac:.3f}'} (micro "
                  f"{'n/a' if mic is None else f'{mic:.3f}'}; {c['repos_with_rows']} "
                  f"repositories); by category, macro: {cats}")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self._open is None:
            return
        uri, parents, sweep_id, exps = self._open
        from rag.config import output_path
        from rag.ledger.mlflow_store import Ledger
        from rag.ledger.report import LedgerRow
        from rag.report import write_report

        t = config.tracking
        ledger = Ledger(uri, output_path(config, t.artifact_root))
        suite_rows = []
        for corpus, exp_id in exps.items():
            sig = sweep_significance(ledger, exp_id, sweep_id)  # Holm within each corpus
            rows = ledger.rows([exp_id], where=f"tags.sweep_id = '{sweep_id}'")
            suite_rows += [LedgerRow.from_mlflow(r, self._names[corpus]) for r in rows]
            summary = {"sweep_id": sweep_id, "baseline": str(config.sweep.baseline),
                       "corpus": corpus, "rows": len(rows), **sig}
            if len(exps) > 1:
                print(f" {corpus}:")
            for j in sig["jobs"]:
                h = sig["holm"].get(j["run_id"], {})
                mde = j.get("mrr_mde")
                print(f"  {j['job']}: MRR {j.get('mrr_delta', float('nan')):+.3f} (p "
                      f"{j.get('mrr_p', float('nan')):.4f}, Holm {h.get('mrr_p_holm', float('nan')):.4f})"
                      + (f", minimum detectable effect {mde:.3f}" if mde is not None and mde == mde else "")
                      + (f"  UNDERPOWERED (> sweep.min_effect {config.sweep.min_effect:g})"
                         if mde is not None and mde == mde and mde > config.sweep.min_effect else ""))
            for run_id, why in sig["skipped"].items():
                print(f"  {run_id[:8]}: significance skipped: {why}")
            ledger.client.log_text(parents[corpus], json.dumps(summary, indent=2) + "\n",
                                   "sweep_significance.json")
            try:  # the summary table and the sweep's figures, on the parent run
                log_sweep_summary(ledger, parents[corpus], [
                    LedgerRow.from_mlflow(r, self._names[corpus]) for r in rows])
            except Exception as exc:  # noqa: BLE001 - the rows and significance are logged
                print(f"warning: sweep {sweep_id}: summary table or figures not logged "
                      f"({type(exc).__name__}: {exc})", file=sys.stderr)
            ledger.client.set_tag(parents[corpus], "sweep_rows", str(len(rows)))
        if config.suite.name and any(r.tags.get("dataset_repo") for r in suite_rows):
            self._repository_suite(ledger, config, parents, suite_rows)
        elif config.suite.name:
            table = suite_summary(suite_rows)
            for parent_id in parents.values():
                ledger.client.log_text(parent_id, json.dumps(table, indent=2) + "\n",
                                       "suite_summary.json")
            print(f"suite {config.suite.name}: MRR per corpus and macro average")
            for g in table:
                per = ", ".join(f"{c.split('-', 1)[-1]} {v['mrr']:.3f}" for c, v in g["corpora"].items()
                                if "mrr" in v)
                print(f"  {g['config']}: macro {g['macro'].get('mrr', float('nan')):.3f} ({per})")
        for parent_id in parents.values():
            ledger.client.set_terminated(parent_id, status="FINISHED")
        self._open = None
        report = write_report(uri, output_path(config, t.report_path), prefix=t.experiment_prefix,
                              ledger=ledger)
        print(f"sweep {sweep_id} done: {len(suite_rows)} rows; report: {report}")
