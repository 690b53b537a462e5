"""Sweeps in the ledger: one sweep id for every job, a parent run, and each job's paired
significance against the sweep's baseline.

* :class:`SweepCallback` (a Hydra callback, wired in conf/config.yaml) runs once around a
  multirun: it creates the experiment and the parent run *before* any job starts (so parallel
  joblib workers never race to create them) and writes ``sweep.json`` (sweep id, parent run,
  the keys that vary, start time) into the multirun directory, where every job — also in a
  reused joblib worker — reads it. At the end it logs the Holm-corrected summary to the parent
  run and closes it; if the multirun dies first, an ``atexit`` hook marks the parent FAILED,
  and the report flags the sweep as incomplete.
* :func:`baseline_comparison` computes, for one finished job, the paired randomization test
  of each per-query metric against the baseline row of the same sweep (waiting for the
  baseline row when jobs run in parallel).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from rag.eval.significance import holm, minimum_detectable_effect, paired_randomization, paired_sd

SWEEP_FILE = "sweep.json"
BASELINE_FAILED_FILE = "baseline_failed"


def significance_columns(df: pd.DataFrame) -> tuple[str, ...]:
    """The per-query metric columns of a per_query table that are tested against a baseline."""
    cols = [c for c in ("mrr", "answer_support") if c in df.columns]
    cols += sorted((c for c in df.columns if c.startswith(("recall_at_", "ndcg_at_"))),
                   key=lambda c: (c.split("_at_")[0], int(c.split("_at_")[1])))
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


def find_baseline(ledger: Any, experiment_id: str, sweep_id: str, label: str, *,
                  deadline: float | None = None, failed_marker: Path | None = None,
                  poll_s: float = 2.0) -> Any | None:
    """The finished baseline row of ``sweep_id`` whose job label is ``label``.

    Polls until ``deadline`` (a ``time.time()`` value shared by the whole sweep; None: look
    once) — jobs run in parallel can finish before their baseline — and stops early when the
    baseline job left ``failed_marker``. None if no such row appears.
    """
    flt = (f"tags.sweep_id = '{sweep_id}' and tags.is_baseline = 'true' "
           f"and tags.sweep_job = '{label}' and attributes.status = 'FINISHED'")
    while True:
        runs = ledger.client.search_runs([experiment_id], filter_string=flt, max_results=2)
        if runs:
            return runs[0]
        if deadline is None or time.time() >= deadline or (
                failed_marker is not None and failed_marker.exists()):
            return None
        time.sleep(poll_s)


def baseline_comparison(ledger: Any, experiment_id: str, sweep_id: str, label: str,
                        golden_fingerprint: str, per_query_csv: str, *,
                        deadline: float | None = None,
                        failed_marker: Path | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Metrics and tags comparing this job with its baseline row (see :func:`find_baseline`).

    Returns:
        (metrics, tags): metrics from :func:`compare_per_query`; tags ``baseline_run_id`` or a
        ``significance_skipped`` reason (baseline missing or failed, or another golden set).
    """
    base = find_baseline(ledger, experiment_id, sweep_id, label, deadline=deadline,
                         failed_marker=failed_marker)
    if base is None:
        return {}, {"significance_skipped": f"no finished baseline row '{label}'"}
    if base.data.tags.get("golden_fingerprint") != golden_fingerprint:
        return {}, {"baseline_run_id": base.info.run_id,
                    "significance_skipped": "baseline used another golden set"}
    base_df = per_query_frame(ledger.download_text(base.info.run_id, "per_query.csv"))
    metrics = compare_per_query(base_df, per_query_frame(per_query_csv))
    return metrics, {"baseline_run_id": base.info.run_id}


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


class SweepCallback(Callback):  # type: ignore[misc]
    """Hydra callback: sweep id, experiment and parent run before the jobs; summary after."""

    def __init__(self) -> None:
        self._open: tuple[str, str, str] | None = None  # (uri, parent run id, sweep id)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        if not config.sweep.name or not config.tracking.enabled:
            return
        import atexit

        from rag.config import ledger_uri, output_path, register_configs
        from rag.ledger.mlflow_store import Ledger

        register_configs()
        sweep_id = new_sweep_id(str(config.sweep.name))
        t = config.tracking
        uri = ledger_uri(config)
        ledger = Ledger(uri, output_path(config, t.artifact_root))
        exp_id = ledger.experiment_id(f"{t.experiment_prefix}-{config.corpus.name}")
        # keys that vary: the sweep file's multi-valued params and any "k=a,b" on the command line
        varying = {str(k) for k, v in (config.hydra.sweeper.get("params") or {}).items()
                   if "," in str(v)}
        varying |= {o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task
                    if "=" in o and "," in o.split("=", 1)[1]}
        parent = ledger.client.create_run(exp_id, run_name=f"sweep {sweep_id}", tags={
            "sweep_id": sweep_id, "sweep_name": str(config.sweep.name),
            "sweep_baseline": str(config.sweep.baseline or ""), "rag.sweep_parent": "1",
            "sweep_varying": " ".join(sorted(varying))})
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / SWEEP_FILE).write_text(json.dumps({
            "sweep_id": sweep_id, "parent_run_id": parent.info.run_id,
            "varying": sorted(varying), "started_at": time.time()}))
        self._open = (uri, parent.info.run_id, sweep_id)
        atexit.register(self._close_if_open)
        print(f"sweep {sweep_id}: parent run {parent.info.run_id}")

    def _close_if_open(self) -> None:
        """atexit: the multirun died before on_multirun_end — mark the parent FAILED."""
        if self._open is None:
            return
        uri, parent_id, _ = self._open
        self._open = None
        try:
            from rag.ledger.mlflow_store import Ledger

            Ledger(uri).client.set_terminated(parent_id, status="FAILED")
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self._open is None or not config.sweep.name:
            return
        uri, parent_id, sweep_id = self._open
        from rag.config import output_path
        from rag.ledger.mlflow_store import Ledger
        from rag.report import write_report

        t = config.tracking
        ledger = Ledger(uri, output_path(config, t.artifact_root))
        exp_id = ledger.experiment_id(f"{t.experiment_prefix}-{config.corpus.name}")
        runs = ledger.client.search_runs(
            [exp_id], filter_string=f"tags.sweep_id = '{sweep_id}' and attributes.status = 'FINISHED'")
        jobs = [r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"]
        rows = [{"run_id": r.info.run_id, "job": r.data.tags.get("sweep_job"),
                 **{k: v for k, v in r.data.metrics.items() if k.endswith("_p") or k.endswith("_delta")}}
                for r in jobs if r.data.tags.get("is_baseline") != "true"]
        table = holm_table(rows)
        summary = {"sweep_id": sweep_id, "baseline": str(config.sweep.baseline),
                   "rows": len(jobs), "jobs": rows, "holm": table}
        # the UI and the report show the same Holm-adjusted p (raw p stays as logged)
        for run_id, adjusted in table.items():
            if adjusted:
                from mlflow.entities import Metric

                now = int(time.time() * 1000)
                ledger.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0)
                                                         for k, v in adjusted.items()])
        ledger.client.log_text(parent_id, json.dumps(summary, indent=2) + "\n",
                               "sweep_significance.json")
        ledger.client.set_tag(parent_id, "sweep_rows", str(len(jobs)))
        ledger.client.set_terminated(parent_id, status="FINISHED")
        self._open = None
        report = write_report(uri, output_path(config, t.report_path), prefix=t.experiment_prefix,
                              ledger=ledger)
        print(f"sweep {sweep_id} done: {len(jobs)} rows; report: {report}")
