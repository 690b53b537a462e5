"""Screenshots of the MLflow UI for one sweep, and a check that its rows line up there.

``rag ledger screenshots [--tracking-uri URI] [--out reports/screenshots] [--sweep ID]`` —
used by tests/ledger/test_ledger_screenshots.py
(skipped without chromium) — starts ``mlflow server`` on 127.0.0.1 over a ledger store, opens
three pages in headless Chromium (Debian's ``chromium`` package; ``make sysdeps`` installs it)
and writes one PNG each:

* ``runs_table.png``: the experiment's runs table (``#/experiments/<id>/runs``): the sweep's
  parent run unfolded (its rows carry ``mlflow.runType=evaluation``), each row with its
  dataset (the golden set) and duration;
* ``run_page.png``: the sweep baseline's run page (``#/experiments/<id>/runs/<run id>``):
  duration, dataset, the metrics table (headline first, in logged order), params;
* ``compare.png``: the compare view of the sweep's rows (``#/compare-runs?runs=...``).

Each page is also read back as its rendered DOM (``chromium --dump-dom``) and checked
(:func:`check_pages`). The pages open in the UI's "Model training" view
(``workflowType=machine_learning``; the UI's own default is its GenAI view, which shows
traces, not runs) on the host name ``ledger.localhost``, which Chromium maps to 127.0.0.1
(``--host-resolver-rules``; the server is told to accept it): on ``localhost`` or
``127.0.0.1`` the UI opens its assistant panel over a third of every page. Nothing leaves the
machine: no proxy, loopback only. The server is stopped by its process id (its own process
group). Chromium runs with ``--virtual-time-budget``, so a page's scripts and requests settle
before the capture.

What the UI cannot be made to do: its compare view sorts metrics and params alphabetically and
renders only the rows of those tables that are scrolled into view (``mrr`` appears there as
the parallel-coordinates plot's default metric); the headline-first order shows on the run
page and in ``rag ledger export``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag.ledger.metric_groups import HEADLINE

# window size per page (pixels): tall enough for the run page's metrics table and the compare
# view's run details
WINDOWS = {"runs_table": (1600, 900), "run_page": (1600, 1400), "compare": (1600, 1800)}
BUDGET_MS = 20000  # virtual time a page gets to load and fetch
SERVER_START_S = 120.0
UI_HOST = "ledger.localhost"  # mapped to 127.0.0.1 by chromium; see the module docstring
UI_QUERY = "workflowType=machine_learning"


# requests to the local server never go through a proxy from the environment
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ScreenshotError(RuntimeError):
    """Chromium or the MLflow server is missing or failed; one line."""


def chromium_binary() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``) on PATH, else None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(uri: str, *, port: int, log: Path) -> subprocess.Popen:
    """``mlflow server`` over the store ``uri`` on 127.0.0.1:``port`` (one worker, in a
    process group of its own, accepting the Host ``ledger.localhost``), once ``/health``
    answers.

    Raises:
        ScreenshotError: it exited or did not answer within :data:`SERVER_START_S` seconds
            (the last lines of its log are in the message).
    """
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    hosts = ",".join(f"{h}:{port}" for h in (UI_HOST, "127.0.0.1", "localhost"))
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1", "--backend-store-uri", uri, "--allowed-hosts", hosts,
             "--cors-allowed-origins", f"http://{UI_HOST}:{port}"],
            stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with _LOOPBACK.open(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                # ours only while our process lives: another server on the port answers too
                if r.status == 200 and proc.poll() is None:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise ScreenshotError(f"mlflow server on port {port} did not come up: "
                                  + (" | ".join(tail) or "no output"))
        time.sleep(0.5)


def stop_server(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM the server's process group (its pid leads it), SIGKILL it if still there."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def _chromium(binary: str, url: str, *args: str, profile: Path, budget_ms: int,
              window: tuple[int, int]) -> str:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
           f"--host-resolver-rules=MAP {UI_HOST} 127.0.0.1", "--no-proxy-server",
           f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={budget_ms}",
           *args, url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_ms / 1000 + 120)
    except subprocess.TimeoutExpired:
        raise ScreenshotError(f"chromium did not finish {url} in time") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScreenshotError(f"chromium failed on {url} (exit {proc.returncode}): {last}")
    return proc.stdout


def capture(binary: str, url: str, png: Path, *, profile: Path, budget_ms: int = BUDGET_MS,
            window: tuple[int, int] = (1600, 1000)) -> str:
    """Write a screenshot of ``url`` (``window`` = width, height in pixels) to ``png`` and
    return the page's rendered DOM (HTML).

    Raises:
        ScreenshotError: chromium failed or wrote no PNG.
    """
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    _chromium(binary, url, f"--screenshot={png}", profile=profile, budget_ms=budget_ms,
              window=window)
    if not png.is_file() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise ScreenshotError(f"chromium wrote no screenshot of {url}")
    return _chromium(binary, url, "--dump-dom", profile=profile, budget_ms=budget_ms,
                     window=window)


@dataclass
class SweepPages:
    """What was captured and what the DOM check found."""

    experiment_id: str
    sweep_id: str
    run_names: list[str]
    files: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def text_of(html: str) -> str:
    """The visible text of an HTML page, tags dropped and whitespace runs made one space."""
    import html as html_mod

    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html_mod.unescape(re.sub(r"<[^>]+>", " ", body)))


_DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:ms|s|min|h)\b")  # MLflow writes 4.9s, 1.2min


def _word(name: str) -> re.Pattern:
    """``name`` as a whole token: not inside a longer name (``b`` is not in ``abc``,
    ``mrr`` not in ``tag.prose.mrr``)."""
    return re.compile(rf"(?<![\w/.=-]){re.escape(name)}(?![\w/.=-])")


def _has(text: str, name: str) -> bool:
    return _word(name).search(text) is not None


def _in_order(text: str, names: list[str]) -> bool:
    """True when every name occurs in ``text`` as a token, each after the one before."""
    pos = 0
    for n in names:
        m = _word(n).search(text, pos)
        if m is None:
            return False
        pos = m.end()
    return True


def check_pages(dom: dict[str, str], *, run_names: list[str], run_ids: list[str],
                golden: str, headline: list[str]) -> list[str]:
    """Problems found in the rendered pages (empty: every row lines up).

    Args:
        dom: page name (``runs_table``, ``run_page``, ``compare``) -> its rendered HTML.
        run_names, run_ids: the sweep's rows (same order).
        golden: the golden set's dataset as the UI writes it, ``name (digest)``.
        headline: the headline metrics the baseline row has, in :data:`HEADLINE` order.

    Checked:

    * runs table: every row's name, the golden dataset on every row, a duration per row;
    * run page: the dataset, a duration, the headline metrics first in its metrics table
      and in :data:`HEADLINE` order;
    * compare view: every row's name and run id, a duration per row, ``mrr``.
    """
    problems = []
    table, compare, page = (text_of(dom.get(k, "")) for k in ("runs_table", "compare", "run_page"))
    n = len(run_names)
    for name in run_names:
        if not _has(table, name):
            problems.append(f"runs table: row {name!r} not shown (a row logged before rows "
                            "were tagged mlflow.runType=evaluation stays folded under its "
                            "sweep's parent run)")
        if not _has(compare, name):
            problems.append(f"compare view: row {name!r} not shown")
    if table.count(golden) < n:
        problems.append(f"runs table: dataset {golden!r} shown on {table.count(golden)} of "
                        f"{n} rows")
    for where, text in (("runs table", table), ("compare view", compare)):
        if len(_DURATION.findall(text)) < n:
            problems.append(f"{where}: fewer durations than rows")
    for rid in run_ids:
        if not _has(compare, rid):
            problems.append(f"compare view: run id {rid} not shown")
    if not _has(compare, "mrr"):
        problems.append("compare view: metric mrr not shown")
    if golden not in page:
        problems.append(f"run page: dataset {golden!r} not shown")
    if not _DURATION.search(page.split("Duration", 1)[-1][:40]):
        problems.append("run page: no duration shown")
    metrics = page.split("Metric Value", 1)[-1] if "Metric Value" in page else ""
    if headline and not _in_order(metrics, headline):
        problems.append("run page: metrics table does not list " + ", ".join(headline)
                        + " in that order")
    elif headline and not re.match(rf"\s*{re.escape(headline[0])}\b", metrics):
        problems.append(f"run page: metrics table does not start with {headline[0]}")
    return problems


@dataclass
class FoundSweep:
    """One sweep's finished rows in one experiment, and its baseline row (MLflow ``Run``s)."""

    experiment_id: str
    sweep_id: str | None  # None: no sweep; the newest rows (:func:`find_newest_rows`)
    rows: list
    baseline: Any


def find_sweep(ledger: Any, *, sweep_id: str | None = None, experiment: str | None = None,
               prefix: str = "rag") -> FoundSweep:
    """The sweep ``sweep_id`` (default: the newest sweep of the ledger, or of
    ``experiment``: its name or corpus); for a suite, its rows in its first experiment.

    Raises:
        ScreenshotError: no such experiment, no finished sweep row, a quote in the id.
    """
    if sweep_id is not None and "'" in sweep_id:
        raise ScreenshotError(f"--sweep {sweep_id!r}: a sweep id holds no quote")
    exps = [e for e in ledger.experiments(prefix)
            if experiment is None or e.name in (experiment, f"{prefix}-{experiment}")]
    if experiment is not None and not exps:
        raise ScreenshotError(f"--experiment {experiment!r}: no such experiment in {ledger.uri}")
    where = f"tags.sweep_id = '{sweep_id}'" if sweep_id else "tags.sweep_id != ''"
    rows = ledger.rows([e.experiment_id for e in exps], where=where) if exps else []
    if not rows:
        raise ScreenshotError(f"no finished sweep row in {ledger.uri}"
                              + (f" for sweep {sweep_id}" if sweep_id else ""))
    sweep_id = sweep_id or max(rows, key=lambda r: r.info.start_time).data.tags["sweep_id"]
    rows = [r for r in rows if r.data.tags.get("sweep_id") == sweep_id]
    exp_id = rows[0].info.experiment_id
    rows = [r for r in rows if r.info.experiment_id == exp_id]  # a suite: its first corpus
    base = next((r for r in rows if r.data.tags.get("is_baseline") == "true"), rows[0])
    return FoundSweep(experiment_id=exp_id, sweep_id=sweep_id, rows=rows, baseline=base)


def find_newest_rows(ledger: Any, *, experiment: str | None = None, prefix: str = "rag",
                     limit: int = 10) -> FoundSweep:
    """A ledger with no sweep yet: the newest finished rows (at most ``limit``) of the
    experiment of its newest row (or of ``experiment``: its name or corpus), newest first,
    the newest as ``baseline``, ``sweep_id`` None.

    Raises:
        ScreenshotError: no such experiment, or no finished row at all.
    """
    exps = [e for e in ledger.experiments(prefix)
            if experiment is None or e.name in (experiment, f"{prefix}-{experiment}")]
    if experiment is not None and not exps:
        raise ScreenshotError(f"--experiment {experiment!r}: no such experiment in {ledger.uri}")
    rows = ledger.rows([e.experiment_id for e in exps]) if exps else []
    if not rows:
        raise ScreenshotError(f"no finished row in {ledger.uri}: `python -m rag.run` logs one")
    newest = max(rows, key=lambda r: r.info.start_time)
    rows = sorted((r for r in rows if r.info.experiment_id == newest.info.experiment_id),
                  key=lambda r: r.info.start_time, reverse=True)[:limit]
    return FoundSweep(experiment_id=newest.info.experiment_id, sweep_id=None, rows=rows,
                      baseline=newest)


def sweep_pages(uri: str, out_dir: Path, *, sweep_id: str | None = None,
                experiment: str | None = None, prefix: str = "rag",
                port: int | None = None, binary: str | None = None) -> SweepPages:
    """Start ``mlflow server`` on ``uri``, capture the three pages of one sweep into
    ``out_dir`` (``runs_table.png``, ``run_page.png``, ``compare.png``, with their DOMs as
    ``*.html`` and the server's log as ``mlflow_server.log``), stop the server, and check the
    pages (:func:`check_pages`).

    Args:
        sweep_id: the sweep (default: the newest sweep of the experiment).
        experiment: the experiment's name or corpus (default: the newest sweep's).
        port: the server's port on 127.0.0.1 (default: a free one).
        binary: the chromium executable (default: :func:`chromium_binary`).

    Raises:
        ScreenshotError: no chromium, no sweep in the ledger, the server or chromium failed.
        LedgerError: the store cannot be opened.
    """
    from rag.ledger.mlflow_store import DATASET_DIGEST_CHARS, Ledger

    binary = binary or chromium_binary()
    if binary is None:
        raise ScreenshotError("chromium is not installed (Debian: apt-get install chromium; "
                              "`make sysdeps` does it)")
    found = find_sweep(Ledger(uri, create=False), sweep_id=sweep_id, experiment=experiment,
                       prefix=prefix)
    exp_id, sweep_id, rows, base = found.experiment_id, found.sweep_id, found.rows, found.baseline
    names = [r.info.run_name for r in rows]
    datasets = base.inputs.dataset_inputs if base.inputs else []
    golden = (f"{datasets[0].dataset.name} ({datasets[0].dataset.digest})" if datasets
              else f"? ({base.data.tags.get('golden_fingerprint', '')[:DATASET_DIGEST_CHARS]})")
    headline = [m for m in HEADLINE if m in base.data.metrics]
    out_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    root = f"http://{UI_HOST}:{port}/"
    ids = json.dumps([r.info.run_id for r in rows])
    urls = {"runs_table": f"{root}#/experiments/{exp_id}/runs?{UI_QUERY}",
            "run_page": f"{root}#/experiments/{exp_id}/runs/{base.info.run_id}?{UI_QUERY}",
            "compare": (f"{root}#/compare-runs?runs={urllib.parse.quote(ids)}"
                        f"&experiments={urllib.parse.quote(json.dumps([exp_id]))}&{UI_QUERY}")}
    pages = SweepPages(experiment_id=exp_id, sweep_id=sweep_id, run_names=names)
    dom: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rag-chromium-") as profile:
        server = start_server(uri, port=port, log=out_dir / "mlflow_server.log")
        try:
            for name, url in urls.items():
                png = out_dir / f"{name}.png"
                dom[name] = capture(binary, url, png, profile=Path(profile), window=WINDOWS[name])
                (out_dir / f"{name}.html").write_text(dom[name], encoding="utf-8")
                pages.files[name] = png
        finally:
            stop_server(server)
    pages.problems = check_pages(dom, run_names=names, run_ids=[r.info.run_id for r in rows],
                                 golden=golden, headline=headline)
    return pages


def describe(pages: SweepPages) -> dict[str, Any]:
    """A JSON-ready summary (``--json``)."""
    return {"experiment_id": pages.experiment_id, "sweep_id": pages.sweep_id,
            "rows": pages.run_names, "files": {k: str(v) for k, v in pages.files.items()},
            "problems": pages.problems, "headline": list(HEADLINE)}
