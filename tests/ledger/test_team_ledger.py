"""A team ledger: ``tracking.uri`` names an ``mlflow server`` whose backend store is PostgreSQL.

The integration test starts a throw-away PostgreSQL (``initdb -A trust``; the server listens on
a unix socket in a temporary directory only, no TCP port), an ``mlflow server`` on it bound to
127.0.0.1, runs a *parallel* routing sweep (joblib, 2 workers) on the fixture repository into
that server, reads the rows back over MLflow's REST API and stops both servers by process
group. The PostgreSQL server binaries come from Debian's ``postgresql`` (``make sysdeps``);
without them the test is skipped. PostgreSQL refuses to run as root: as root the servers run
as the ``postgres`` user (created by that package), else as ``nobody``.

The second test: a run whose tracking server does not answer fails in seconds, before any
evaluation, in one ``error:`` line naming the URI, and writes nothing.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port, post_json, run_overrides

DB = "ragledger"
SUPERUSER = "rag"  # initdb -U: the role the ledger connects as (trust: no password)
LOCK_ERRORS = ("database is locked", "database is busy", "deadlock detected",
               "could not obtain lock", "lock timeout")


_free_port, _post = free_port, post_json  # shared loopback helpers (conftest)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _pg_bin() -> Path | None:
    """The directory of the newest installed PostgreSQL server binaries (Debian keeps them
    off PATH, under /usr/lib/postgresql/<version>/bin), else the one ``initdb`` is in."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found.sort(key=lambda d: [int(x) for x in d.parent.name.split(".") if x.isdigit()])
    if not found and shutil.which("initdb"):
        found = [Path(shutil.which("initdb")).parent]
    for d in reversed(found):
        if (d / "postgres").is_file():
            return d
    return None


def _server_user() -> pwd.struct_passwd | None:
    """Whom PostgreSQL runs as: ourselves (None) unless we are root, then ``postgres`` or
    ``nobody``. Skips the test when root has neither."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip("running as root and there is no 'postgres' or 'nobody' user for PostgreSQL "
                "(which refuses to run as root)")


def _as(user: pwd.struct_passwd | None) -> dict:
    """Popen keywords that run a child as ``user`` (no shell wrapper: its pid is the server's)."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    if not Path("/proc/self/stat").exists():  # not Linux: is anyone left in the group?
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except ProcessLookupError:
            return []
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(d.name))
    return out


def _listening(pids: list[int]) -> list[str]:
    """``addr:port`` of the TCP sockets that the processes ``pids`` listen on (Linux /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A = LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            if v6:  # four little-endian 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            out.append(f"{addr}:{int(hexport, 16)}")
    return out


def _stop(proc: subprocess.Popen, sig: int, timeout: float = 60) -> list[int]:
    """Send ``sig`` to ``proc`` (the leader of its own process group), wait, kill the group if
    it has not ended; return the pids of the group still alive after that (should be none)."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
            proc.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    deadline = time.monotonic() + 15  # the leader's children see it gone and end
    while _group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_pids(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(1)
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    return _group_pids(pgid)


def _start_postgres(pg_bin: Path, user, base: Path, log) -> subprocess.Popen:
    """initdb into ``base/data`` and start postgres on the unix socket ``base/.s.PGSQL.5432``
    only (``listen_addresses=''``); return once it accepts connections, with the database
    ``DB`` created."""
    import psycopg

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C",
           "HOME": str(base)}
    init = subprocess.run(
        [str(pg_bin / "initdb"), "-D", str(base / "data"), "-A", "trust", "-U", SUPERUSER,
         "-E", "UTF8", "--no-sync"],
        cwd=base, env=env, capture_output=True, text=True, timeout=180, **_as(user))
    assert init.returncode == 0, init.stdout[-2000:] + init.stderr[-2000:]
    proc = subprocess.Popen(
        [str(pg_bin / "postgres"), "-D", str(base / "data"), "-k", str(base),
         "-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off"],
        cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        **_as(user))
    deadline = time.monotonic() + 60
    while True:
        try:
            con = psycopg.connect(host=str(base), user=SUPERUSER, dbname="postgres",
                                  autocommit=True, connect_timeout=5)
            break
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc, signal.SIGINT)
                raise AssertionError("postgres did not start: " + _tail(log.name))
            time.sleep(0.2)
    try:
        con.execute(f"CREATE DATABASE {DB}")
    finally:
        con.close()
    return proc


def _tail(path: str | Path, n: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


@pytest.mark.integration
def test_parallel_sweep_into_mlflow_server_on_postgresql(tmp_path, fixture_repo, fixture_golden):
    # SQLAlchemy 2.1 maps postgresql:// to psycopg 3 (psycopg2 would need postgresql+psycopg2://)
    pytest.importorskip("psycopg", reason="psycopg (a project dependency) is missing: "
                        "pip install -e .")
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): "
                    "`make sysdeps` installs Debian's postgresql; it needs apt-get and root")
    user = _server_user()
    t0 = time.monotonic()
    # PostgreSQL's user must reach its directories (pytest's tmp_path is private to us) and a
    # unix socket path is short (107 bytes): a directory of its own in /tmp
    base = Path(tempfile.mkdtemp(prefix="rag-pg-", dir="/tmp" if Path("/tmp").is_dir() else None))
    if user is not None:
        os.chown(base, user.pw_uid, user.pw_gid)
    pg_log = open(tmp_path / "postgres.log", "w")
    ml_log = open(tmp_path / "mlflow-server.log", "w")
    server_artifacts = tmp_path / "server-artifacts"
    leftovers: dict[str, list[int]] = {}
    pg = None
    try:
        pg = _start_postgres(pg_bin, user, base, pg_log)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        ml = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server",
             "--backend-store-uri", f"postgresql://{SUPERUSER}@/{DB}?host={base}",
             "--artifacts-destination", str(server_artifacts),
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            cwd=tmp_path, env=env, stdout=ml_log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if ml.poll() is not None or time.monotonic() > deadline:
                        pytest.fail("mlflow server did not come up: "
                                    + _tail(tmp_path / "mlflow-server.log"))
                    time.sleep(0.5)
            t_up = time.monotonic() - t0
            # nothing listens beyond loopback: postgres on no TCP port at all, mlflow on 127.0.0.1
            assert _listening(_group_pids(pg.pid)) == []
            ml_listen = _listening(_group_pids(ml.pid))
            assert ml_listen and all(a.startswith("127.0.0.1:") for a in ml_listen), ml_listen

            overrides = [o for o in run_overrides(tmp_path, fixture_repo, fixture_golden)
                         if not o.startswith("tracking.uri=")]
            run_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            run_env.pop("MLFLOW_TRACKING_URI", None)
            sweep = subprocess.run(
                [sys.executable, "-m", "rag.run", "+sweep=routing", "hydra/launcher=joblib",
                 "hydra.launcher.n_jobs=2", *overrides, f"tracking.uri={url}",
                 f"hydra.sweep.dir={tmp_path / 'multirun'}"],
                capture_output=True, text=True, env=run_env, timeout=600)
            t_sweep = time.monotonic() - t0 - t_up
            out = sweep.stdout + sweep.stderr
            assert sweep.returncode == 0, out[-4000:]
            assert out.count("ledger row ") == 4, out[-4000:]
            # two jobs at a time: Hydra's joblib launcher started jobs 0 and 1 together
            assert "n_jobs=2" in out
            started = [(tmp_path / "multirun" / str(i) / ".hydra" / "config.yaml")
                       .stat().st_mtime for i in (0, 1)]
            assert abs(started[0] - started[1]) < 20, started

            exp = _get(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=rag-shop")
            exp_id = exp["experiment"]["experiment_id"]
            # every run of the experiment, whatever its status: nothing lost, nothing left over
            runs = _post(f"{url}/api/2.0/mlflow/runs/search", {
                "experiment_ids": [exp_id], "max_results": 1000,
                "run_view_type": "ALL"})["runs"]
        finally:
            leftovers["mlflow"] = _stop(ml, signal.SIGTERM)
    finally:
        if pg is not None:
            leftovers["postgres"] = _stop(pg, signal.SIGINT)  # fast shutdown
        pg_log.close()
        ml_log.close()
        shutil.rmtree(base, ignore_errors=True)
    assert leftovers == {"mlflow": [], "postgres": []}, f"processes left: {leftovers}"

    for name, text in (("sweep", out), ("mlflow server", _tail(tmp_path / "mlflow-server.log",
                                                                10**7)),
                       ("postgres", _tail(tmp_path / "postgres.log", 10**7))):
        low = text.lower()
        assert not [e for e in LOCK_ERRORS if e in low], f"lock error in the {name} output"
    assert [r["info"]["status"] for r in runs] == ["FINISHED"] * 5
    tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
    rows = [(r, t) for r, t in zip(runs, tags) if t.get("rag.sweep_parent") != "1"]
    parents = [(r, t) for r, t in zip(runs, tags) if t.get("rag.sweep_parent") == "1"]
    assert len(rows) == 4 and len(parents) == 1
    parent_run, parent_tags = parents[0]
    assert {t["sweep_id"] for _, t in rows} == {parent_tags["sweep_id"]}
    assert all(t["mlflow.parentRunId"] == parent_run["info"]["run_id"] for _, t in rows)
    assert sorted(t["sweep_job"] for _, t in rows) == sorted(
        f"search.mode={m}" for m in ("dense", "bm25", "hybrid", "auto"))
    baseline = [r for r, t in rows if t["is_baseline"] == "true"]
    assert len(baseline) == 1
    others = [(r, t) for r, t in rows if t["is_baseline"] == "false"]
    assert len(others) == 3
    for r, t in others:
        assert t["baseline_run_id"] == baseline[0]["info"]["run_id"]
        keys = {m["key"] for m in r["data"]["metrics"]}
        assert {f"vs_baseline/{k}" for k in ("mrr_delta", "mrr_p", "mrr_ci_low", "mrr_ci_high",
                                             "mrr_p_holm")} <= keys, keys
    # the artifacts went through the server into its --artifacts-destination, not into the
    # client's tracking.artifact_root
    assert all(r["info"]["artifact_uri"].startswith("mlflow-artifacts:") for r, _ in rows)
    assert len(list(server_artifacts.rglob("per_query.csv"))) == 4
    assert not (tmp_path / "mlartifacts").exists()
    assert (tmp_path / "ledger.md").is_file()
    print(f"\nteam ledger: servers up {t_up:.1f} s, parallel sweep {t_sweep:.1f} s, "
          f"total {time.monotonic() - t0:.1f} s")


@pytest.mark.slow
def test_unreachable_tracking_server_fails_fast_before_evaluating(tmp_path, fixture_repo,
                                                                 fixture_golden):
    port = _free_port()  # bound and closed again: nothing listens there
    uri = f"http://127.0.0.1:{port}"
    overrides = [o for o in run_overrides(tmp_path, fixture_repo, fixture_golden)
                 if not o.startswith("tracking.uri=")]
    (tmp_path / "mlflow.db").unlink()  # run_overrides' empty local store: none may appear
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT",
              "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        env.pop(k, None)  # MLflow's defaults: minutes of retries, unless the probe shortens them
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rag.run", *overrides, f"tracking.uri={uri}",
                           f"paths.output_dir={tmp_path / 'out'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and uri in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "Retrying" not in proc.stderr, proc.stderr
    assert elapsed < 60, f"took {elapsed:.0f} s"
    # failed before evaluating: nothing indexed (no cache), no row, no artifacts, no report
    for p in ("cache", "mlartifacts", "ledger.md", "mlflow.db"):
        assert not (tmp_path / p).exists(), p
    assert "ledger row" not in proc.stdout
