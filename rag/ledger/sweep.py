"""Sweeps in the ledger: one sweep id for every job, a parent run, and each job's paired
significance against the sweep's baseline. The Hydra callback that opens and closes a sweep
(below: "SweepCallback") lives in the application layer, rag/app/sweep_callback.py; this module
holds what it and the report compute from the ledger.

* :class:`SweepCallback` (a Hydra callback, wired in conf/config.yaml) runs once around a
  multirun: it creates the experiment and the parent run *before* any job starts (so parallel
  joblib workers never race to create them) and writes ``sweep.json`` (sweep id, parent run,
  the keys that vary, start time) into the multirun directory, where every job — also in a
  reused joblib worker — reads it. At the end it logs the Holm-corrected summary to the parent
  run and closes it; if the multirun dies first, an ``atexit`` hook marks the parent FAILED,
  and the report flags the sweep as incomplete. Before any job it also builds every distinct
  index the sweep's jobs need into the on-disk caches under ``paths.cache_dir``
  (:mod:`rag.app.prebuild`), so that no job, in any worker, embeds a chunk; the count is
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

from rag.eval.significance import compare_paired, holm

SWEEP_FILE = "sweep.json"


def significance_columns(df: pd.DataFrame) -> tuple[str, ...]:
    """The per-query metric columns of a per_query table that are tested against a baseline
    (declared ``significance`` in rag/eval/measures/): ``mrr`` and ``answer_support`` first,
    then the cut-off families by name and k (``ndcg_at_*``, ``recall_at_*``,
    ``semble_ndcg_at_*``)."""
    from rag.eval.measures import significance_metric

    tested = [c for c in df.columns if significance_metric(c)]
    cols = [c for c in ("mrr", "answer_support") if c in tested]
    cols += sorted((c for c in tested if c not in cols),
                   key=lambda c: (c.rsplit("_at_", 1)[0], int(c.rsplit("_at_", 1)[1])))
    return tuple(cols)


#: the folder of a multirun directory where each job that wrote no row says why
#: (:func:`record_job_outcome`): ``<job num>.json`` = {"outcome": "failed"|"skipped", "message"}
OUTCOMES_DIR = ".rag-jobs"


def record_job_outcome(sweep_dir: Path, job_num: int | str, *, outcome: str, message: str) -> None:
    """Note in the multirun directory that job ``job_num`` wrote no row (``outcome`` "failed"
    or "skipped", ``message`` its one line), for the sweep's end to report it; the sweep
    callback reads them back with :func:`read_job_outcomes`.

    Raises:
        OSError: the directory cannot be written.
    """
    folder = Path(sweep_dir) / OUTCOMES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job_num}.json").write_text(json.dumps({"job": str(job_num), "outcome": outcome,
                                                        "message": message}))


def read_job_outcomes(sweep_dir: Path) -> list[dict[str, str]]:
    """The outcomes :func:`record_job_outcome` wrote, by job number ([] when none)."""
    folder = Path(sweep_dir) / OUTCOMES_DIR
    out = []
    for f in sorted(folder.glob("*.json"), key=lambda f: (len(f.stem), f.stem)):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def incomplete_reason(sweep_id: str, parents: Mapping[str, str] | None) -> str | None:
    """Why the sweep ``sweep_id`` is incomplete, or None when its parent run FINISHED (the
    sweep callback finishes a parent only when every planned job logged its row or was
    skipped; otherwise it marks it FAILED). ``parents`` (sweep id -> parent status,
    :meth:`rag.ledger.mlflow_store.Ledger.sweep_parents`) None means unknown: not flagged.

    A sweep id with no parent run at all (rows of a multirun whose sweep was never opened,
    or a job run alone) is incomplete: nothing says which jobs it should have had."""
    if parents is None:
        return None
    status = parents.get(sweep_id)
    if status is None:
        return ("it has no parent run (the sweep was never opened, so nothing says which jobs "
                "it should have had); its rows are not compared with a baseline")
    if status != "FINISHED":
        return (f"its parent run is {status} (a job failed or wrote no row, or the multirun was "
                "interrupted); jobs may be missing and the Holm family below covers only the "
                "rows shown")
    return None


def baseline_mismatch(tags: Mapping[str, str], params: Mapping[str, str]) -> str | None:
    """Why a row tagged as its sweep's baseline is not the baseline its sweep names
    (``sweep_baseline``, e.g. ``search.mode=dense``), or None when it is: each ``key=value``
    of the baseline must be this row's own override (tag ``hydra_overrides``) or, where it did
    not override the key, its logged param. A key found in neither (a config group's default
    choice) is not held against it."""
    try:
        overrides = json.loads(tags.get("hydra_overrides") or "[]")
    except ValueError:
        overrides = []
    own = {str(o).split("=", 1)[0].lstrip("+~"): str(o).split("=", 1)[1]
           for o in overrides if "=" in str(o)}
    for pair in str(tags.get("sweep_baseline") or "").split():
        key, _, want = pair.partition("=")
        key = key.lstrip("+~")
        have = own.get(key, params.get(key))
        if have is not None and "${" not in want + str(have) and not same_value(have, want):
            return f"it has {key}={have}, not {pair}"
    return None


def same_value(a: Any, b: Any) -> bool:
    """Whether two spellings of a config value are one value: equal as text, or as YAML
    (``1`` and ``1.0``, ``false`` and ``False``, ``[a,b]`` and ``[a, b]``, ``'8'`` and ``8``)."""
    import yaml

    if str(a) == str(b):
        return True
    try:
        x, y = yaml.safe_load(str(a)), yaml.safe_load(str(b))
    except yaml.YAMLError:
        return False
    return x == y or str(x) == str(y)  # a quoted '8' is the schema's 8


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


def per_query_frame(csv_text: str, kind: str = "positive") -> pd.DataFrame:
    """The positives (``kind="negative"``: the negatives) of a per_query.csv artifact, indexed
    by query id."""
    df = pd.read_csv(io.StringIO(csv_text), dtype={"query_id": str}, keep_default_na=False,
                     na_values={"first_relevant_rank": [""]})
    return df[df["kind"] == kind].set_index("query_id")


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
        res = compare_paired(a, b, seed=seed)
        out.update({f"{m}_delta": res.delta, f"{m}_p": res.p_value,
                    f"{m}_ci_low": res.ci_low, f"{m}_ci_high": res.ci_high,
                    f"{m}_mde": res.mde})
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
    # a row tagged baseline whose own values are not the baseline's is never compared against
    baselines = {r.data.tags.get("sweep_job"): r for r in runs
                 if r.data.tags.get("is_baseline") == "true"
                 and baseline_mismatch(r.data.tags, r.data.params) is None}
    frames: dict[str, pd.DataFrame] = {}

    def frame(run_id: str) -> pd.DataFrame:
        if run_id not in frames:
            frames[run_id] = per_query_frame(ledger.download_text(run_id, "per_query.csv"))
        return frames[run_id]

    jobs, skipped = [], {}
    for r in runs:
        t = r.data.tags
        if not t.get("sweep_baseline") or (t.get("is_baseline") == "true" and r.info.run_id in
                                           {b.info.run_id for b in baselines.values()}):
            continue  # a baseline, or a sweep without one (a suite alone): nothing to compare
        base = baselines.get(t.get("sweep_baseline_job"))
        if t.get("is_baseline") == "true":  # tagged baseline, but its values are not
            skipped[r.info.run_id] = (f"tagged the baseline but not {t.get('sweep_baseline')}: "
                                      f"{baseline_mismatch(t, r.data.params)}")
        elif base is None:
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
                     if k in ("mrr_delta", "mrr_p_holm", "mrr_p", "mrr_ci_low", "mrr_ci_high")})
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


#: the side-by-side pages a sweep's parent carries: the queries that changed most, top hits
DIFF_PAGE_QUERIES, DIFF_PAGE_HITS, DIFF_PAGE_LINES = 50, 5, 12


def diff_page_name(job: str) -> str:
    """``diff/<job>.html`` with the job's overrides made a file name (``search.mode=bm25``
    -> ``diff/search.mode=bm25.html``); when that changes the label (a character other than
    letters, digits and ``.=,_-`` becomes ``_``, a label over 120 characters is cut), the
    first 8 hex digits of the label's SHA-256 are added, so two labels never share a page."""
    import hashlib
    import re

    name = re.sub(r"[^A-Za-z0-9.=,_-]+", "_", job).strip("_")[:120] or "job"
    if name != job:
        name += "-" + hashlib.sha256(job.encode()).hexdigest()[:8]
    return f"diff/{name}.html"


def log_diff_pages(ledger: Any, parent_id: str, rows: list[Any]) -> list[str]:
    """Log on the parent, for every job compared with its baseline (tag ``baseline_run_id``),
    the side-by-side page of ``rag diff BASELINE JOB --html`` (:mod:`rag.ledger.diff_html`),
    limited to the :data:`DIFF_PAGE_QUERIES` queries that changed most, their top
    :data:`DIFF_PAGE_HITS` hits and :data:`DIFF_PAGE_LINES` lines each. A job whose page cannot
    be made (no per-query table, no shared query) is skipped. Returns the names logged."""
    from rag.ledger.diff import DiffError, compare_rows
    from rag.ledger.diff_html import DiffPageError, page_inputs, render_html
    from rag.ledger.mlflow_store import LedgerError

    logged = []
    for r in rows:
        base = r.tags.get("baseline_run_id")
        if not base or base == r.run_id:
            continue
        try:
            summary = compare_rows(ledger, base, r.run_id, changed_only=True)
            page = render_html(summary, page_inputs(ledger, base, r.run_id),
                               top=DIFF_PAGE_HITS, max_lines=DIFF_PAGE_LINES,
                               max_queries=DIFF_PAGE_QUERIES)
        except (LookupError, LedgerError, DiffError, DiffPageError):
            continue
        name = diff_page_name(r.tags.get("sweep_job") or r.run_name or r.run_id)
        ledger.client.log_text(parent_id, page, name)
        logged.append(name)
    return logged


def log_sweep_summary(ledger: Any, parent_id: str, rows: list[Any], *,
                      incomplete: str | None = None) -> list[str]:
    """Log on a sweep's parent run its summary table — :data:`SUMMARY_MD` (the report's
    section for this sweep id, figures linked) and :data:`SUMMARY_CSV`
    (:func:`rag.ledger.report.sweep_table`, one line per row) — and its figures
    (:func:`rag.ledger.figures.sweep_figures`: ``figures/pareto.png``, ...) and each job's
    side-by-side page against its baseline (:func:`log_diff_pages`). Returns the artifact
    names logged.

    Args:
        rows: the sweep id's finished rows (:class:`rag.ledger.report.LedgerRow`), read after
            :func:`sweep_significance` so that they carry their deltas.
        incomplete: why the sweep is incomplete (a job failed, wrote no row): the summary
            says so; None when every job logged its row.
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
        parents = {sid: "FAILED" if incomplete else "FINISHED"}
        md = "\n".join(render_sweep(rows[0].tags.get("sweep_name", "?"), rows, parents,
                                    figures=links, why=({sid: incomplete} if incomplete
                                                        else None))) + "\n"
        ledger.client.log_text(parent_id, md, SUMMARY_MD)
        ledger.client.log_text(parent_id, sweep_table(rows).to_csv(index=False), SUMMARY_CSV)
        logged += [SUMMARY_MD, SUMMARY_CSV]
        logged += log_diff_pages(ledger, parent_id, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return logged
