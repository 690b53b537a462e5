"""Sweeps in the ledger: one sweep id for every job, a parent run, and each job's paired
significance against the sweep's baseline.

* :class:`SweepCallback` (a Hydra callback, wired in conf/config.yaml) runs once around a
  multirun: it creates the experiment and the parent run *before* any job starts (so parallel
  joblib workers never race to create them), publishes the sweep id and parent run id to the
  jobs through the environment, and at the end logs the Holm-corrected summary to the parent
  run and refreshes the report.
* :func:`baseline_comparison` computes, for one finished job, the paired randomization test
  of each per-query metric against the baseline row of the same sweep (waiting for the
  baseline row when jobs run in parallel).
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Mapping

import pandas as pd

from rag.eval.significance import holm, paired_randomization

ENV_SWEEP_ID = "RAG_SWEEP_ID"
ENV_PARENT_RUN_ID = "RAG_SWEEP_PARENT_RUN_ID"
# per-query columns of per_query.csv compared against the baseline (positives only)
SIGNIFICANCE_METRICS = ("mrr", "recall_at_8", "ndcg_at_10", "answer_support")


def new_sweep_id(name: str) -> str:
    """``<name>-<UTC timestamp>-<4 hex>``, unique per multirun."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{name}-{stamp}-{uuid.uuid4().hex[:4]}"


def per_query_frame(csv_text: str) -> pd.DataFrame:
    """The positives of a per_query.csv artifact, indexed by query id."""
    df = pd.read_csv(io.StringIO(csv_text))
    return df[df["kind"] == "positive"].set_index("query_id")


def compare_per_query(baseline: pd.DataFrame, job: pd.DataFrame, *, seed: int = 0,
                      metrics: tuple[str, ...] = SIGNIFICANCE_METRICS) -> dict[str, float]:
    """Paired test of each metric (job minus baseline) on the queries both rows share.

    Returns:
        ``{m}_delta``, ``{m}_p``, ``{m}_ci_low``, ``{m}_ci_high`` for each metric present in
        both frames, and ``paired_queries``.

    Raises:
        ValueError: the rows share no query.
    """
    common = baseline.index.intersection(job.index)
    if len(common) == 0:
        raise ValueError("baseline and job share no query id")
    out: dict[str, float] = {"paired_queries": float(len(common))}
    for m in metrics:
        if m not in baseline.columns or m not in job.columns:
            continue
        res = paired_randomization(baseline.loc[common, m].astype(float).to_numpy(),
                                   job.loc[common, m].astype(float).to_numpy(), seed=seed)
        out.update({f"{m}_delta": res.delta, f"{m}_p": res.p_value,
                    f"{m}_ci_low": res.ci_low, f"{m}_ci_high": res.ci_high})
    return out


def find_baseline(ledger: Any, experiment_id: str, sweep_id: str, *, wait_s: float = 900.0,
                  poll_s: float = 2.0) -> Any | None:
    """The finished baseline row of ``sweep_id``; polls up to ``wait_s`` seconds (parallel jobs
    can finish before the baseline does). None if it never appears."""
    deadline = time.monotonic() + wait_s
    flt = (f"tags.sweep_id = '{sweep_id}' and tags.is_baseline = 'true' "
           "and attributes.status = 'FINISHED'")
    while True:
        runs = ledger.client.search_runs([experiment_id], filter_string=flt, max_results=1)
        if runs:
            return runs[0]
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def baseline_comparison(ledger: Any, experiment_id: str, sweep_id: str, golden_fingerprint: str,
                        per_query_csv: str, *, wait_s: float = 900.0) -> tuple[dict[str, float], dict[str, str]]:
    """Metrics and tags comparing this job with its sweep's baseline row.

    Returns:
        (metrics, tags): metrics from :func:`compare_per_query`; tags ``baseline_run_id`` or a
        ``significance_skipped`` reason (baseline missing, or scored on another golden set).
    """
    base = find_baseline(ledger, experiment_id, sweep_id, wait_s=wait_s)
    if base is None:
        return {}, {"significance_skipped": "baseline row not found"}
    if base.data.tags.get("golden_fingerprint") != golden_fingerprint:
        return {}, {"baseline_run_id": base.info.run_id,
                    "significance_skipped": "baseline used another golden set"}
    base_df = per_query_frame(ledger.download_text(base.info.run_id, "per_query.csv"))
    metrics = compare_per_query(base_df, per_query_frame(per_query_csv))
    return metrics, {"baseline_run_id": base.info.run_id}


def holm_table(rows: list[Mapping[str, Any]], metrics: tuple[str, ...] = SIGNIFICANCE_METRICS) -> dict[str, dict[str, float]]:
    """Holm-adjusted p-values across the non-baseline rows of one sweep.

    Args:
        rows: dicts with ``run_id`` and the raw ``{m}_p`` values (missing ones are skipped).

    Returns:
        run_id -> {``{m}_p_holm``: adjusted p}.
    """
    out: dict[str, dict[str, float]] = {r["run_id"]: {} for r in rows}
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

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        if not config.sweep.name or not config.tracking.enabled:
            return
        from rag.config import expand_path, register_configs, tracking_uri
        from rag.ledger.mlflow_store import Ledger

        register_configs()
        sweep_id = new_sweep_id(str(config.sweep.name))
        os.environ[ENV_SWEEP_ID] = sweep_id
        t = config.tracking
        ledger = Ledger(tracking_uri(t.uri), expand_path(t.artifact_root))
        exp_id = ledger.experiment_id(f"{t.experiment_prefix}-{config.corpus.name}")
        parent = ledger.client.create_run(exp_id, run_name=f"sweep {sweep_id}", tags={
            "sweep_id": sweep_id, "sweep_name": str(config.sweep.name),
            "sweep_baseline": str(config.sweep.baseline or ""), "rag.sweep_parent": "1"})
        os.environ[ENV_PARENT_RUN_ID] = parent.info.run_id
        print(f"sweep {sweep_id}: parent run {parent.info.run_id}")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_id = os.environ.get(ENV_SWEEP_ID)
        parent_id = os.environ.get(ENV_PARENT_RUN_ID)
        if not sweep_id or not parent_id or not config.tracking.enabled:
            return
        from rag.config import expand_path, tracking_uri
        from rag.ledger.mlflow_store import Ledger
        from rag.report import write_report

        t = config.tracking
        uri = tracking_uri(t.uri)
        ledger = Ledger(uri, expand_path(t.artifact_root))
        exp_id = ledger.experiment_id(f"{t.experiment_prefix}-{config.corpus.name}")
        runs = ledger.client.search_runs(
            [exp_id], filter_string=f"tags.sweep_id = '{sweep_id}' and attributes.status = 'FINISHED'"
                                    " and tags.is_baseline = 'false'")
        rows = [{"run_id": r.info.run_id, "job": r.data.tags.get("sweep_job"),
                 **{k: v for k, v in r.data.metrics.items() if k.endswith("_p") or k.endswith("_delta")}}
                for r in runs]
        summary = {"sweep_id": sweep_id, "baseline": str(config.sweep.baseline),
                   "jobs": rows, "holm": holm_table(rows)}
        ledger.client.log_text(parent_id, json.dumps(summary, indent=2) + "\n",
                               "sweep_significance.json")
        ledger.client.set_terminated(parent_id, status="FINISHED")
        report = write_report(uri, expand_path(t.report_path), prefix=t.experiment_prefix,
                              ledger=ledger)
        print(f"sweep {sweep_id} done: {len(rows) + 1} rows; report: {report}")
        os.environ.pop(ENV_SWEEP_ID, None)
        os.environ.pop(ENV_PARENT_RUN_ID, None)
