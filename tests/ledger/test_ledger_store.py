"""Opening the MLflow store: safe under concurrent first use, and a store that cannot be
opened fails a run before any work, in one line."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import PROJECT, run_overrides

# N processes started together on one new store. The modules are imported once, then N
# children are forked (separate processes, each with its own SQLite connections, as N
# `python -m rag.run` would be); they block on a pipe until all exist, then each opens the
# store and logs one row. Prints one run id per successful child and the children's exit codes.
STARTER = textwrap.dedent("""\
    import os, sys, traceback
    from pathlib import Path
    import mlflow.entities, mlflow.store.tracking.sqlalchemy_store, mlflow.tracking  # noqa
    from rag.ledger.mlflow_store import Ledger, golden_input
    db, n = Path(sys.argv[1]), int(sys.argv[2])
    r, w = os.pipe()
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(w)
                os.read(r, 1)  # the start signal
                ledger = Ledger(f"sqlite:///{db}", db.parent / "artifacts")
                # every job logs the same golden set: its first insert is a race too
                golden = golden_input(name="race", fingerprint="ab" * 32, source=str(db.parent))
                rid = ledger.log_row(experiment="rag-race", run_name=f"job-{i}",
                                     params={"job": str(i)}, metrics={"mrr": i / 10},
                                     tags={"corpus": "race"},
                                     artifacts={"per_query.csv": f"query_id,kind\\nq{i},positive\\n"},
                                     inputs=[golden])
                print(rid, flush=True)
                code = 0
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(code)
        pids.append(pid)
    assert not db.exists(), "the store existed before the start signal"
    os.write(w, b"x" * n)  # all children start now
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    print("exit codes", *codes, flush=True)
    sys.exit(0 if not any(codes) else 1)
""")


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4, 8])
def test_processes_started_together_on_a_new_store_all_log_their_row(tmp_path, n):
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    proc = subprocess.run([sys.executable, "-c", STARTER, str(db), str(n)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split()
    assert lines[-(n + 2):-n] == ["exit", "codes"] and lines[-n:] == ["0"] * n
    ids = lines[:-(n + 2)]
    with sqlite3.connect(db) as con:
        runs = con.execute("SELECT run_uuid, status FROM runs").fetchall()
        jobs = con.execute("SELECT value FROM params WHERE key = 'job'").fetchall()
        exps = con.execute("SELECT name FROM experiments WHERE name = 'rag-race'").fetchall()
        datasets = con.execute("SELECT name, digest FROM datasets").fetchall()
        inputs = con.execute("SELECT destination_id FROM inputs "
                             "WHERE destination_type = 'RUN'").fetchall()
    assert len(set(ids)) == n and sorted(ids) == sorted(r for r, _ in runs)
    assert [s for _, s in runs] == ["FINISHED"] * n
    assert sorted(int(v) for (v,) in jobs) == list(range(n))
    assert exps == [("rag-race",)]  # one experiment, created once
    # one dataset row, inserted once, and every run linked to it
    assert datasets == [("race", ("ab" * 32)[:len(datasets[0][1])])]
    assert sorted(d for (d,) in inputs) == sorted(ids)
    for rid in ids:  # every row's artifact was written
        assert len(list((tmp_path / "artifacts").glob(f"*/{rid}/artifacts/per_query.csv"))) == 1


def test_transient_store_errors_are_told_from_real_ones():
    from rag.ledger.mlflow_store import is_transient_store_error

    migration = RuntimeError("Online migration expected to match one row when updating "
                             "'90e64c465722' to '181f10493468' in 'alembic_version'; 0 found")
    wrapped = RuntimeError("could not create the store")
    wrapped.__cause__ = Exception("(sqlite3.OperationalError) table _alembic_tmp_metrics already exists")
    assert is_transient_store_error(migration) and is_transient_store_error(wrapped)
    assert is_transient_store_error(Exception("(sqlite3.OperationalError) database is locked"))
    assert not is_transient_store_error(Exception("(sqlite3.DatabaseError) file is not a database"))
    assert not is_transient_store_error(Exception("unable to open database file"))


@pytest.mark.parametrize("kind", ["text", "parent_is_a_file", "directory", "bare_path"])
def test_a_store_that_cannot_be_opened_is_one_ledger_error(tmp_path, kind):
    from rag.ledger.mlflow_store import Ledger, LedgerError

    if kind == "bare_path":  # MLflow would make it a file store: refused before it does
        db = tmp_path / "notes.txt"
        db.write_text("my notes\n")
        with pytest.raises(LedgerError) as err:
            Ledger(str(db))
        assert str(err.value) == (f"cannot open the ledger at {db}: a path, not a tracking URI "
                                  f"(a ledger is an SQLite database, sqlite:///{db}, or a "
                                  "tracking server, http://HOST:PORT)")
        assert db.read_text() == "my notes\n" and sorted(tmp_path.iterdir()) == [db]
        return
    if kind == "text":
        db = tmp_path / "notes.db"
        db.write_text("these are my notes, not a database\n")
        reason = f"{db} is not an SQLite database"
    elif kind == "parent_is_a_file":
        (tmp_path / "afile").write_text("x")
        db = tmp_path / "afile" / "mlflow.db"
        reason = f"cannot create the directory {db.parent}"
    else:
        db = tmp_path / "adir"
        db.mkdir()
        reason = f"{db} is a directory"
    uri = f"sqlite:///{db}"
    with pytest.raises(LedgerError) as err:
        Ledger(uri)
    msg = str(err.value)
    assert msg.startswith(f"cannot open the ledger at {uri}: ") and reason in msg, msg
    assert "\n" not in msg
    if kind == "text":
        assert db.read_text() == "these are my notes, not a database\n"  # left as it was


def test_a_reader_never_creates_or_converts_a_store(tmp_path):
    from rag.ledger.mlflow_store import Ledger, LedgerError

    missing = tmp_path / "missing.db"
    with pytest.raises(LedgerError, match="no such file"):
        Ledger(f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE notes (x)")
    with pytest.raises(LedgerError, match="is an SQLite database but not an MLflow store"):
        Ledger(f"sqlite:///{other}", create=False)
    with sqlite3.connect(other) as con:  # no MLflow table was added
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert names == {"notes"}


def test_run_fails_before_any_work_when_the_store_cannot_be_opened(tmp_path, fixture_repo,
                                                                   fixture_golden, compose,
                                                                   monkeypatch):
    import rag.app.run as run_mod

    from rag.app.stages import StageCache

    class Never(StageCache):
        def embedder(self, cfg):
            raise AssertionError("the run got past opening the ledger")

        index = reranker = embedder

    store = tmp_path / "mlflow.db"
    store.write_text("not a database\n")
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    with pytest.raises(run_mod.RunError) as err:
        run_mod.run_job(cfg, stages=Never())
    assert str(err.value) == (f"cannot open the ledger at sqlite:///{store}: "
                              f"{store} is not an SQLite database")
    assert store.read_text() == "not a database\n"
    assert not (tmp_path / "mlartifacts").exists() and not (tmp_path / "ledger.md").exists()
    # tracking disabled: the store is never opened
    off = compose(run_overrides(tmp_path, fixture_repo, fixture_golden, "tracking.enabled=false"))
    with pytest.raises(AssertionError, match="got past opening the ledger"):
        run_mod.run_job(off, stages=Never())


@pytest.mark.slow
def test_rag_run_on_a_store_that_is_not_a_database_prints_one_error_line(tmp_path, fixture_repo,
                                                                         fixture_golden):
    store = tmp_path / "mlflow.db"
    store.write_text("not a database\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "rag.run",
                           *run_overrides(tmp_path, fixture_repo, fixture_golden),
                           f"hydra.run.dir={tmp_path / 'out'}"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert errors == [f"error: cannot open the ledger at sqlite:///{store}: "
                      f"{store} is not an SQLite database"], proc.stderr
    assert "ledger row" not in proc.stdout  # nothing was evaluated
    assert store.read_text() == "not a database\n"


def test_the_init_lock_excludes_other_holders_and_times_out_in_one_line(tmp_path):
    import fcntl

    from rag.ledger.mlflow_store import LedgerError, _init_lock

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    with _init_lock(db, uri):
        assert (tmp_path / "mlflow.db-init.lock").exists()
        fd = os.open(tmp_path / "mlflow.db-init.lock", os.O_RDWR)
        try:  # held: another holder cannot take it
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        with pytest.raises(LedgerError) as err:
            with _init_lock(db, uri, timeout_s=0.2):
                pass
        assert str(err.value) == (f"cannot open the ledger at {uri}: another process held "
                                  f"{db}-init.lock for 0 s")
    with _init_lock(db, uri, timeout_s=0.2):  # released on exit
        pass


def test_rows_read_every_page_of_search_runs():
    """More than one page of runs (MLflow returns at most 1,000 per call): every page is read,
    sweep parents are left out, the extra filter is ANDed on."""
    from types import SimpleNamespace

    from rag.ledger.mlflow_store import Ledger

    class Page(list):
        def __init__(self, runs, token):
            super().__init__(runs)
            self.token = token

    def run(i, parent=False):
        return SimpleNamespace(info=SimpleNamespace(run_id=f"r{i}"),
                               data=SimpleNamespace(tags={"rag.sweep_parent": "1"} if parent else {}))

    calls = []

    class Client:
        def search_runs(self, ids, filter_string, order_by, max_results, page_token):
            calls.append((filter_string, page_token))
            start = int(page_token or 0)
            runs = [run(i, parent=(i == 1500)) for i in range(start, min(start + max_results, 2500))]
            return Page(runs, str(start + max_results) if start + max_results < 2500 else None)

    ledger = object.__new__(Ledger)
    ledger.client = Client()
    rows = ledger.rows(["0"], where="tags.sweep_id = 'abc'")
    assert len(rows) == 2499 and rows[0].info.run_id == "r0" and rows[-1].info.run_id == "r2499"
    assert calls == [("attributes.status = 'FINISHED' and tags.sweep_id = 'abc'", t)
                     for t in (None, "1000", "2000")]


def test_a_first_insert_race_on_the_golden_dataset_is_retried_and_nothing_else_is():
    """The error CI saw when two Ray jobs logged one golden set at once (SQLite), and
    PostgreSQL's wording of the same race, are retried by the get-or-create retry; a plain
    lock retry still raises them, and an unrelated error is not retried."""
    from mlflow.exceptions import MlflowException

    from rag.ledger.mlflow_store import with_insert_race_retry, with_lock_retry

    sqlite_race = MlflowException(
        "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
        "datasets.name, datasets.digest\n[SQL: INSERT INTO datasets ...]")
    pg_race = MlflowException('(psycopg2.errors.UniqueViolation) duplicate key value violates '
                              'unique constraint "dataset_pk"')
    for race in (sqlite_race, pg_race):
        calls = []

        def log_inputs():
            calls.append(1)
            if len(calls) == 1:
                raise race
            return "logged"

        assert with_insert_race_retry(log_inputs, delay_s=0.001) == "logged" and len(calls) == 2
        calls.clear()
        with pytest.raises(MlflowException):
            with_lock_retry(log_inputs, delay_s=0.001)
        assert len(calls) == 1

    calls = []

    def broken():
        calls.append(1)
        raise MlflowException("(sqlite3.DatabaseError) file is not a database")

    with pytest.raises(MlflowException):
        with_insert_race_retry(broken, delay_s=0.001)
    assert len(calls) == 1
