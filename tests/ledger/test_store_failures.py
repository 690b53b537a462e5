"""A sweep never reports results it could not record (issue 27, item 1): a tracking server
that answers 503 fails the sweep before its first job, in one line, with no row; requests to a
server keep to a retry budget counted in attempts; a row whose logging fails is marked FAILED
when the store still answers; a sweep with a missing parent or job is shown incomplete and is
never compared with a row that is not its baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import run_overrides
from linkserver import loopback


def _always(status: int, seen: list[str]):
    """A handler answering every request ``status`` (empty body), recording its paths."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *args) -> None:  # quiet
            pass

    return Handler


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_HTTP_REQUEST_")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}


@pytest.mark.slow
def test_a_sweep_against_a_503_tracking_server_fails_before_its_first_job(
        tmp_path, fixture_repo, fixture_golden):
    """The issue's drill: Hydra used to turn the callback's error into a warning and run the
    four jobs as four one-row sweeps with a mislabelled baseline, exit 0."""
    seen: list[str] = []
    with loopback(_always(503, seen)) as base:
        overrides = [o for o in run_overrides(tmp_path, fixture_repo, fixture_golden)
                     if not o.startswith("tracking.uri=")]
        proc = subprocess.run(
            [sys.executable, "-m", "rag.run", "+sweep=routing", *overrides,
             f"tracking.uri={base}", "tracking.server_retries=1",
             f"hydra.sweep.dir={tmp_path / 'multirun'}"],
            capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert f"cannot reach the tracking server at {base}: it answered HTTP 503" in lines[0]
    assert "no job was run" in lines[0]
    assert "ledger row" not in proc.stdout
    # one probe (search experiments), retried once: 2 requests, and nothing was written
    assert seen == ["/api/2.0/mlflow/experiments/search"] * 2
    assert not (tmp_path / "multirun" / "sweep.json").exists()


@pytest.mark.parametrize("retries", [0, 1, pytest.param(2, marks=pytest.mark.slow)])
def test_requests_to_a_tracking_server_keep_to_the_retry_budget(retries):
    from rag.ledger.mlflow_store import Ledger, LedgerError

    seen: list[str] = []
    with loopback(_always(503, seen)) as base:
        with pytest.raises(LedgerError, match="answered HTTP 503"):
            Ledger(base, retries=retries)
    assert len(seen) == retries + 1


def test_the_retry_budget_comes_from_the_environment_and_defaults_to_2(monkeypatch):
    from rag.ledger.mlflow_store import (SERVER_RETRIES, SERVER_RETRIES_ENV, Ledger, LedgerError,
                                         server_retries)

    assert SERVER_RETRIES == 2 and server_retries() == 2
    monkeypatch.setenv(SERVER_RETRIES_ENV, "0")
    seen: list[str] = []
    with loopback(_always(500, seen)) as base:
        with pytest.raises(LedgerError, match=f"cannot reach the tracking server at {base}"):
            Ledger(base)
    assert len(seen) == 1
    monkeypatch.setenv(SERVER_RETRIES_ENV, "eleven")
    with pytest.raises(LedgerError, match=r"\$RAG_TRACKING_SERVER_RETRIES='eleven'.*0 to 10"):
        server_retries()
    with pytest.raises(LedgerError, match=r"tracking.server_retries=11"):
        server_retries(11)
    # nothing of the budget is left in the environment afterwards
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    # rag's retries win over MLflow's variable (one setting), which is restored afterwards
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    seen.clear()
    with loopback(_always(502, seen)) as base:
        with pytest.raises(LedgerError, match="answered HTTP 502"):
            Ledger(base, retries=1)
    assert len(seen) == 2 and os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7"


@pytest.mark.slow
def test_a_run_against_a_503_server_fails_in_one_line_with_its_budget(
        tmp_path, fixture_repo, fixture_golden):
    seen: list[str] = []
    with loopback(_always(503, seen)) as base:
        overrides = [o for o in run_overrides(tmp_path, fixture_repo, fixture_golden)
                     if not o.startswith("tracking.uri=")]
        proc = subprocess.run(
            [sys.executable, "-m", "rag.run", *overrides, f"tracking.uri={base}",
             "tracking.server_retries=0"],
            capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "answered HTTP 503" in lines[0], proc.stderr[-2000:]
    assert len(seen) == 1


def test_a_row_whose_logging_fails_is_marked_failed_or_said_to_be_left_running(tmp_path):
    from mlflow.exceptions import MlflowException

    from conftest import empty_mlflow_store
    from rag.ledger.mlflow_store import Ledger, LedgerError

    import shutil

    shutil.copyfile(empty_mlflow_store(), tmp_path / "mlflow.db")
    ledger = Ledger(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art")
    real = ledger.client

    class Broken:
        """The client, with metrics that cannot be logged (and, when asked, no way to end a
        run either): a store that stopped answering after the row was created."""

        def __init__(self, *, terminate: bool) -> None:
            self.terminate = terminate

        def __getattr__(self, name):
            if name == "log_batch":
                def fail(*a, **k):
                    raise MlflowException("API request to http://x failed: too many 503 "
                                          "error responses")
                return fail
            if name == "set_terminated" and not self.terminate:
                def cannot(*a, **k):
                    raise MlflowException("connection refused")
                return cannot
            return getattr(real, name)

    row = dict(experiment="rag-x", run_name="r", params={"a": "1"}, metrics={"mrr": 0.5},
               tags={}, artifacts={})
    ledger.client = Broken(terminate=True)
    with pytest.raises(LedgerError, match=r"; row [0-9a-f]{8} marked FAILED$"):
        ledger.log_row(**row)
    ledger.client = Broken(terminate=False)
    with pytest.raises(LedgerError, match=r"left RUNNING \(`python -m rag.report "
                                          r"--mark-killed-after-h 0`"):
        ledger.log_row(**row)
    exp = real.get_experiment_by_name("rag-x")
    statuses = sorted(r.info.status for r in real.search_runs([exp.experiment_id]))
    assert statuses == ["FAILED", "RUNNING"]


@pytest.mark.slow
def test_a_multirun_whose_jobs_cannot_run_exits_2_and_marks_the_sweep_incomplete(
        tmp_path, fixture_repo, fixture_golden):
    """Both jobs fail validation (top_k above candidates): each says so in one line, no row is
    written, the parent run ends FAILED with the reason, and the command exits 2 — with no
    Hydra traceback."""
    from mlflow.tracking import MlflowClient

    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "-m", "sweep.name=tk", "search.top_k=10,20",
         "search.candidates=9", "+hydra.callbacks.sweep.prebuild=false",
         *run_overrides(tmp_path, fixture_repo, fixture_golden),
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 3, proc.stderr[-3000:]
    assert "search.candidates (9) must be >= search.top_k (10)" in errors[0]
    assert "2 job(s) failed" in errors[-1] and "marked incomplete" in errors[-1]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])
    assert [r.data.tags.get("rag.sweep_parent") for r in runs] == ["1"]
    assert runs[0].info.status == "FAILED"
    assert runs[0].data.tags["sweep_jobs_planned"] == "2"
    assert "2 job(s) failed" in runs[0].data.tags["sweep_incomplete"]
    summary = json.loads(Path(client.download_artifacts(runs[0].info.run_id,
                                                        "sweep_significance.json",
                                                        str(tmp_path / "dl"))).read_text())
    assert summary["planned_jobs"] == 2 and summary["rows"] == 0
    assert summary["incomplete"].startswith("2 job(s) failed: job 0: ")
    outcomes = sorted((tmp_path / "multirun" / ".rag-jobs").glob("*.json"))
    assert [json.loads(f.read_text())["outcome"] for f in outcomes] == ["failed", "failed"]


@pytest.mark.slow
def test_a_job_of_a_sweep_that_was_never_opened_writes_no_row(tmp_path, fixture_repo,
                                                             fixture_golden):
    """Without the sweep callback (removed) there is no parent run: the job refuses, and the
    entry point exits 2 although no callback said so."""
    from conftest import ledger_is_empty

    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "-m", "sweep.name=tk", "search.top_k=3",
         "~hydra.callbacks.sweep", *run_overrides(tmp_path, fixture_repo, fixture_golden),
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "sweep.json is missing" in proc.stderr and "no row written" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: 1 job(s) of the multirun failed")
    assert ledger_is_empty(tmp_path / "mlflow.db")


def _row(rid: str, job: str, *, baseline: bool, sweep_id: str = "routing-1", **metrics):
    from rag.ledger.report import LedgerRow

    return LedgerRow(run_id=rid * 32, experiment="rag-x", run_name=job, start_time_ms=1,
                     params={"search.mode": job.split("=")[1]},
                     metrics={"mrr": 0.5, **metrics},
                     tags={"sweep_name": "routing", "sweep_id": sweep_id, "sweep_job": job,
                           "sweep_baseline": "search.mode=dense",
                           "is_baseline": str(baseline).lower(),
                           "hydra_overrides": json.dumps([job, "+sweep=routing"])})


def test_a_sweep_without_parent_or_with_a_failed_parent_is_shown_incomplete():
    from rag.ledger.report import render_ledger

    rows = [_row("a", "search.mode=dense", baseline=True),
            _row("b", "search.mode=bm25", baseline=False, sweep_id="routing-2")]
    text = render_ledger(rows, source="s", parents={"routing-2": "FAILED"})
    first, second = text.split("### routing-1")[1].split("### routing-2")
    assert "**Incomplete sweep:** it has no parent run" in first
    assert "**Incomplete sweep:** its parent run is FAILED" in second
    ok = render_ledger(rows[:1], source="s", parents={"routing-1": "FINISHED"})
    assert "Incomplete" not in ok and "(row `aaaaaaaa`)" in ok


def test_a_row_tagged_baseline_with_other_values_is_never_the_baseline(tmp_path):
    """The issue's mislabelled baseline: with no sweep.json every job was "(defaults)" and so
    tagged the baseline; the bm25 row was called the search.mode=dense baseline."""
    from rag.ledger.report import render_ledger
    from rag.ledger.sweep import baseline_mismatch

    bm25 = _row("b", "search.mode=bm25", baseline=True)
    assert baseline_mismatch(bm25.tags, bm25.params) == \
        "it has search.mode=bm25, not search.mode=dense"
    dense = _row("a", "search.mode=dense", baseline=True)
    assert baseline_mismatch(dense.tags, dense.params) is None
    # a key not overridden by the job: its logged param decides
    assert baseline_mismatch({"sweep_baseline": "search.mode=dense"},
                             {"search.mode": "hybrid"}) == \
        "it has search.mode=hybrid, not search.mode=dense"
    text = render_ledger([bm25], source="s", parents={"routing-1": "FINISHED"})
    assert "(no baseline row)" in text
    assert "**Not the baseline:** row `bbbbbbbb` is tagged as the baseline but it has " \
           "search.mode=bm25" in text
    assert "| baseline |" not in text


def test_sweep_significance_skips_a_mislabelled_baseline(tmp_path):
    import shutil

    from conftest import empty_mlflow_store
    from rag.ledger.mlflow_store import Ledger
    from rag.ledger.sweep import sweep_significance

    shutil.copyfile(empty_mlflow_store(), tmp_path / "mlflow.db")
    ledger = Ledger(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art")
    csv = "query_id,kind,mrr\nq1,positive,1.0\nq2,positive,0.5\n"
    ids = {}
    for job, is_base in (("search.mode=bm25", "true"), ("search.mode=hybrid", "false")):
        ids[job] = ledger.log_row(
            experiment="rag-x", run_name=job, params={"search.mode": job.split("=")[1]},
            metrics={"mrr": 0.75}, artifacts={"per_query.csv": csv},
            tags={"sweep_id": "s-1", "sweep_job": job, "sweep_baseline": "search.mode=dense",
                  "sweep_baseline_job": "search.mode=dense", "is_baseline": is_base,
                  "golden_fingerprint": "g", "hydra_overrides": json.dumps([job])})
    exp = ledger.experiment_id("rag-x")
    sig = sweep_significance(ledger, exp, "s-1")
    assert sig["jobs"] == []
    assert sig["skipped"] == {
        ids["search.mode=bm25"]: "tagged the baseline but not search.mode=dense: it has "
                                 "search.mode=bm25, not search.mode=dense",
        ids["search.mode=hybrid"]: "no finished baseline row 'search.mode=dense'"}


def test_planned_jobs_counts_the_basic_sweepers_product(compose):
    from hydra.core.global_hydra import GlobalHydra  # noqa: F401 - compose() initialises it

    from rag.app.sweep_callback import planned_jobs

    cfg = compose(["+sweep=routing"])
    from omegaconf import OmegaConf, open_dict

    with open_dict(cfg):
        cfg.hydra = OmegaConf.create({
            "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                        "params": {"search.mode": "dense,bm25,hybrid,auto"}},
            "overrides": {"task": ["search.top_k=3,5", "corpus.name=shop"]}})
    assert planned_jobs(cfg) == 8
    with open_dict(cfg):
        cfg.hydra.sweeper._target_ = "hydra_plugins.other.Sweeper"
    assert planned_jobs(cfg) is None


def test_rag_ledger_export_says_which_rows_belong_to_an_incomplete_sweep(tmp_path):
    import shutil

    from conftest import empty_mlflow_store
    from rag.ledger.export import ledger_table
    from rag.ledger.mlflow_store import Ledger

    shutil.copyfile(empty_mlflow_store(), tmp_path / "mlflow.db")
    ledger = Ledger(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art")
    row = dict(experiment="rag-x", run_name="r", params={}, metrics={"mrr": 0.5}, artifacts={})
    ledger.log_row(**row, tags={"sweep_id": "orphan-1", "sweep_name": "routing"})
    ledger.log_row(**row, tags={})
    exp = ledger.experiment_id("rag-x")
    parent = ledger.client.create_run(exp, tags={"sweep_id": "done-1", "rag.sweep_parent": "1"})
    ledger.client.set_terminated(parent.info.run_id, status="FINISHED")
    ledger.log_row(**row, tags={"sweep_id": "done-1", "sweep_name": "routing"})
    df = ledger_table(ledger, prefix="rag")
    got = dict(zip(df["tags.sweep_id"].fillna(""), df["sweep_incomplete"].fillna("")))
    assert got[""] == "" and got["done-1"] == ""
    assert got["orphan-1"].startswith("it has no parent run")


def test_the_baseline_check_compares_values_not_spellings():
    from rag.ledger.sweep import baseline_mismatch

    def tags(baseline: str, *overrides: str) -> dict[str, str]:
        return {"sweep_baseline": baseline, "hydra_overrides": json.dumps(list(overrides))}

    assert baseline_mismatch(tags("ranking.file_saturation=1.0"), {"ranking.file_saturation": "1"}) is None
    assert baseline_mismatch(tags("bm25.path_field=false"), {"bm25.path_field": "False"}) is None
    assert baseline_mismatch(tags("search.fuse=[dense,bm25]"), {"search.fuse": "[dense, bm25]"}) is None
    assert baseline_mismatch(tags("search.top_k=8", "search.top_k='8'"), {}) is None
    # an interpolated baseline value cannot be compared here: not held against the row
    assert baseline_mismatch(tags("ranking.features=${rag_ranking_ablations:baseline}"),
                             {"ranking.features": "[a, b]"}) is None
    # a group choice is read from the row's own overrides
    assert baseline_mismatch(tags("embedder=minilm", "embedder=model2vec"), {}) == \
        "it has embedder=model2vec, not embedder=minilm"


def test_a_job_is_tagged_baseline_only_with_the_baselines_values(compose):
    """Without sweep.json (no varying keys known) every job's label is "(defaults)", the
    baseline's too: the label alone once made every job of the sweep its baseline."""
    from rag.app.run import baseline_values_differ, sweep_tags

    for mode, expected in (("bm25", "false"), ("dense", "true")):
        cfg = compose(["+sweep=routing", f"search.mode={mode}"])
        tags = sweep_tags(cfg, {"overrides": [f"search.mode={mode}"], "file": None})
        assert tags["sweep_job"] == "(defaults)" == tags["sweep_baseline_job"]
        assert tags["is_baseline"] == expected, mode
    cfg = compose(["+sweep=routing"])  # search.mode left at its default, hybrid
    assert baseline_values_differ(cfg, []) == "it has search.mode=hybrid, not search.mode=dense"


def test_a_store_that_reads_but_refuses_writes_fails_the_write_check():
    """A tracking server that lists experiments but answers 403 to every write (a read-only
    token, say): the sweep's check before its first job says so in one line."""
    from rag.ledger.mlflow_store import Ledger, LedgerError

    seen: list[tuple[str, str]] = []

    class ReadOnly(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            seen.append((self.command, self.path.split("?")[0]))
            if self.path.startswith("/api/2.0/mlflow/experiments/search"):
                status, body = 200, {"experiments": []}
            elif self.path.startswith("/api/2.0/mlflow/experiments/get-by-name"):
                status, body = 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "none"}
            else:
                status, body = 403, {"error_code": "PERMISSION_DENIED", "message": "read-only"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    with loopback(ReadOnly) as base:
        ledger = Ledger(base, retries=0)
        with pytest.raises(LedgerError) as err:
            ledger.check_writable("rag-x")
    msg = str(err.value)
    assert msg.startswith(f"cannot write experiment 'rag-x' in the ledger at {base}: ")
    assert "PERMISSION_DENIED" in msg and "\n" not in msg
    assert ("POST", "/api/2.0/mlflow/experiments/create") in seen


@pytest.mark.slow
def test_a_server_that_fails_after_the_row_is_created_ends_the_run_in_one_line(
        tmp_path, fixture_repo, fixture_golden):
    """The issue's "tracking server down": the row is created, then every request answers
    503 — MLflow's own retries once hung the run 507 s and left chained tracebacks. Within a
    budget of 1 retry: two attempts at logging, two at marking the row FAILED, one line."""
    seen: list[tuple[str, str]] = []
    run = {"info": {"run_id": "f" * 32, "run_uuid": "f" * 32, "experiment_id": "1",
                    "status": "RUNNING", "start_time": 1, "lifecycle_stage": "active",
                    "artifact_uri": "mlflow-artifacts:/1/" + "f" * 32 + "/artifacts",
                    "run_name": "r"}, "data": {}}
    answers = {"/api/2.0/mlflow/experiments/search": (200, {"experiments": []}),
               "/api/2.0/mlflow/experiments/get-by-name": (
                   404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "none"}),
               "/api/2.0/mlflow/experiments/create": (200, {"experiment_id": "1"}),
               "/api/2.0/mlflow/runs/create": (200, {"run": run})}

    class Dying(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.split("?")[0]
            seen.append((self.command, path))
            status, body = answers.get(path, (503, None))
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    with loopback(Dying) as base:
        overrides = [o for o in run_overrides(tmp_path, fixture_repo, fixture_golden)
                     if not o.startswith("tracking.uri=")]
        proc = subprocess.run(
            [sys.executable, "-m", "rag.run", *overrides, "search.mode=bm25",
             f"tracking.uri={base}", "tracking.server_retries=1"],
            capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: cannot reach the tracking server at {base}: it answered HTTP "
                      "503 (is `mlflow server` running there?); row ffffffff left RUNNING "
                      "(`python -m rag.report --mark-killed-after-h 0` marks it once the store "
                      "answers)"], proc.stderr[-3000:]
    # two calls fail, each after 2 attempts: logging the row's tags, then ending it FAILED
    # (MLflow's set_terminated reads the run first, to print its URL: that read is refused)
    failing = [(m, p) for m, p in seen if p not in answers]
    assert failing == [("POST", "/api/2.0/mlflow/runs/log-batch")] * 2 + \
        [("GET", "/api/2.0/mlflow/runs/get")] * 2
