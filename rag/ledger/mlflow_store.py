"""All MLflow access lives here: create the experiment, log one ledger row, read rows back.

A ledger row is one MLflow run: params = the flattened resolved config, metrics = the
evaluation, tags = fingerprints (git commit, corpus, golden set, model), artifacts = the
resolved config, the per-query table, the calibration JSON and the TREC run file. Rows are
only ever added; nothing here edits or deletes one.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

PARAM_MAX_CHARS = 500


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def params_from_config(cfg: Mapping[str, Any]) -> dict[str, str]:
    """Flattened config as MLflow params; a value longer than 500 characters is left to the
    config artifact (its param says so)."""
    out = {}
    for k, v in flatten(cfg).items():
        s = "null" if v is None else (json.dumps(v) if isinstance(v, (list, dict)) else str(v))
        out[k] = s if len(s) <= PARAM_MAX_CHARS else "<see config.yaml artifact>"
    return out


def git_commit(root: Path) -> str:
    """``git rev-parse HEAD`` of ``root`` (suffix ``-dirty`` if the tree has changes), or ``unknown``."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        # generated files (reports/) do not make a checkout dirty
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no", "--", ".", ":(exclude)reports"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _is_lock_error(exc: BaseException) -> bool:
    return "database is locked" in str(exc) or "database is busy" in str(exc)


def with_lock_retry(fn, *args, attempts: int = 20, delay_s: float = 0.25, **kwargs):
    """Call ``fn``, retrying with exponential backoff (capped at 5 s per wait) while SQLite
    reports "database is locked" — parallel sweep workers share one ledger file."""
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - MLflow wraps the sqlite error in several types
            if not _is_lock_error(exc) or i == attempts - 1:
                raise
            time.sleep(min(delay_s * (2 ** i), 5.0))
    raise AssertionError("unreachable")


class Ledger:
    """A handle on one MLflow tracking store.

    Args:
        uri: tracking URI (absolute, e.g. ``sqlite:////abs/mlflow.db``).
        artifact_root: directory under which each new experiment stores its artifacts.
    """

    def __init__(self, uri: str, artifact_root: Path | None = None) -> None:
        import logging

        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # "Creating initial MLflow database tables..."
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = uri
        self.artifact_root = artifact_root
        self.client = MlflowClient(tracking_uri=uri)

    def experiment_id(self, name: str) -> str:
        """Id of experiment ``name``, created (with an absolute artifact location) if absent.

        Creating races with a parallel job are resolved by reading the winner's id; an
        experiment deleted in the UI is restored (a ledger never loses rows).
        """
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":  # deleted in the UI: bring it back, keep its rows
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        location = None
        if self.artifact_root is not None:
            location = (Path(self.artifact_root) / name).resolve().as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except Exception:  # noqa: BLE001 - another process created it first
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def log_row(self, *, experiment: str, run_name: str | None, params: Mapping[str, str],
                metrics: Mapping[str, float], tags: Mapping[str, str],
                artifacts: Mapping[str, str]) -> str:
        """Log one finished ledger row and return its run id.

        Metrics that are NaN are skipped (MLflow stores them, but reports cannot compare them).
        If logging fails part-way the run is marked FAILED, so reports (which read FINISHED
        runs only) never show a half-written row.
        """
        from mlflow.entities import Metric, Param, RunTag

        c = self.client
        exp_id = with_lock_retry(self.experiment_id, experiment)
        run = with_lock_retry(c.create_run, exp_id, run_name=run_name, tags=dict(tags))
        rid = run.info.run_id
        try:
            now = int(time.time() * 1000)
            ms = [Metric(k, float(v), now, 0) for k, v in metrics.items()
                  if v is not None and not math.isnan(float(v))]
            ps = [Param(k, v) for k, v in params.items()]
            # MLflow caps one log_batch at 1000 metrics and 100 params
            with_lock_retry(c.log_batch, rid, tags=[RunTag("rag.ledger", "1")])
            for i in range(0, len(ms), 900):
                with_lock_retry(c.log_batch, rid, metrics=ms[i:i + 900])
            for i in range(0, len(ps), 90):
                with_lock_retry(c.log_batch, rid, params=ps[i:i + 90])
            for name, text in artifacts.items():
                c.log_text(rid, text, name)
        except BaseException:
            with_lock_retry(c.set_terminated, rid, status="FAILED")
            raise
        with_lock_retry(c.set_terminated, rid, status="FINISHED")
        return rid

    def experiments(self, prefix: str) -> list[Any]:
        """Experiments whose name starts with ``prefix + '-'``."""
        return [e for e in self.client.search_experiments()
                if e.name.startswith(prefix + "-")]

    def rows(self, experiment_ids: Iterable[str]) -> list[Any]:
        """Finished ledger rows of the experiments, oldest first (all pages); sweep parent
        runs are not rows."""
        ids = list(experiment_ids)
        if not ids:
            return []
        out, token = [], None
        while True:
            page = self.client.search_runs(ids, filter_string="attributes.status = 'FINISHED'",
                                           order_by=["attributes.start_time ASC"],
                                           max_results=1000, page_token=token)
            out.extend(r for r in page if r.data.tags.get("rag.sweep_parent") != "1")
            token = page.token
            if not token:
                break
        return out

    def sweep_parents(self, experiment_ids: Iterable[str]) -> dict[str, str]:
        """sweep id -> status (RUNNING, FINISHED, FAILED) of each sweep's parent run."""
        ids = list(experiment_ids)
        if not ids:
            return {}
        runs = self.client.search_runs(ids, filter_string="tags.`rag.sweep_parent` = '1'",
                                       max_results=1000)
        return {r.data.tags.get("sweep_id", ""): r.info.status for r in runs}

    def resolve_run_id(self, ref: str) -> str:
        """A full run id from a full id or a unique prefix (as shown in reports).

        Raises:
            LookupError: no row, or several rows, match ``ref``.
        """
        ids = [r.info.run_id for e in self.client.search_experiments()
               for r in self.rows([e.experiment_id]) if r.info.run_id.startswith(ref)]
        if len(ids) == 1:
            return ids[0]
        raise LookupError(f"no ledger row matches run id {ref!r}" if not ids
                          else f"run id prefix {ref!r} is ambiguous: {', '.join(i[:12] for i in ids)}")

    def download_text(self, run_id: str, name: str) -> str:
        """The text of one artifact of a run."""
        import os

        import mlflow.artifacts

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name,
                                                        tracking_uri=self.uri)).read_text()
