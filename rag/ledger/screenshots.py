"""Screenshots of the MLflow UI for one sweep, and a check that its rows line up there.

``rag ledger screenshots [--tracking-uri URI] [--out reports/screenshots] [--sweep ID]``, the
same as ``python -m rag.ledger.screenshots`` (and tests/test_ledger_screenshots.py, skipped
without chromium), starts ``mlflow server`` on 127.0.0.1 over a ledger store, opens three pages in headless Chromium (Debian's ``chromium``
package; ``make sysdeps`` installs it) and writes one PNG each:

* ``runs_table.png``: the experiment's runs table (``#/experiments/<id>``),
* ``run_page.png``: the sweep baseline's run page (``#/experiments/<id>/runs/<run id>``),
* ``compare.png``: the compare view of the sweep's rows (``#/compare-runs?runs=...``).

Each page is also read back as its rendered DOM (``chromium --dump-dom``) and checked: every
row of the sweep is named in the runs table and the compare view, the compare view lists the
headline metrics, and the run page shows the golden set's dataset and the row's real
duration. The server is stopped by its process id (its own process group). Chromium runs with
``--virtual-time-budget``, so a page's scripts and requests settle before the capture.
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

WINDOW = (1600, 1000)  # pixels
BUDGET_MS = 20000  # virtual time a page gets to load and fetch
SERVER_START_S = 120.0


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
    process group of its own), once ``/health`` answers.

    Raises:
        ScreenshotError: it exited or did not answer within :data:`SERVER_START_S` seconds
            (the last lines of its log are in the message).
    """
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1", "--backend-store-uri", uri],
            stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
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


def _chromium(binary: str, url: str, *args: str, profile: Path, budget_ms: int) -> str:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
           f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--virtual-time-budget={budget_ms}",
           *args, url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_ms / 1000 + 120)
    except subprocess.TimeoutExpired:
        raise ScreenshotError(f"chromium did not finish {url} in time") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScreenshotError(f"chromium failed on {url} (exit {proc.returncode}): {last}")
    return proc.stdout


def capture(binary: str, url: str, png: Path, *, profile: Path,
            budget_ms: int = BUDGET_MS) -> str:
    """Write a screenshot of ``url`` to ``png`` and return the page's rendered DOM (HTML).

    Raises:
        ScreenshotError: chromium failed or wrote no PNG.
    """
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    _chromium(binary, url, f"--screenshot={png}", profile=profile, budget_ms=budget_ms)
    if not png.is_file() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise ScreenshotError(f"chromium wrote no screenshot of {url}")
    return _chromium(binary, url, "--dump-dom", profile=profile, budget_ms=budget_ms)


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


def check_pages(dom: dict[str, str], *, run_names: list[str], golden_name: str,
                duration_s: float) -> list[str]:
    """Problems found in the rendered pages (empty: every row lines up).

    * runs table: every sweep row's name;
    * compare view: every row's name and each headline metric present in the rows;
    * run page: the golden set's dataset name and a duration (MLflow writes ``1.2s``,
      ``3.4min``).
    """
    problems = []
    table, compare, page = (text_of(dom.get(k, "")) for k in ("runs_table", "compare", "run_page"))
    for name in run_names:
        if name not in table:
            problems.append(f"runs table: row {name!r} not shown")
        if name not in compare:
            problems.append(f"compare view: row {name!r} not shown")
    for m in ("mrr", "recall_at_8"):
        if m not in compare:
            problems.append(f"compare view: metric {m} not listed")
    if golden_name not in page:
        problems.append(f"run page: dataset {golden_name!r} not shown")
    if duration_s >= 1 and not re.search(r"\b\d+(\.\d+)?\s?(s|sec|min|m)\b", page):
        problems.append("run page: no duration shown")
    return problems


def sweep_pages(uri: str, out_dir: Path, *, sweep_id: str | None = None,
                experiment: str | None = None, prefix: str = "rag",
                port: int | None = None, binary: str | None = None) -> SweepPages:
    """Start ``mlflow server`` on ``uri``, capture the three pages of one sweep into
    ``out_dir`` (``runs_table.png``, ``run_page.png``, ``compare.png``, with their DOMs as
    ``*.html``), stop the server, and check the pages (:func:`check_pages`).

    Args:
        sweep_id: the sweep (default: the newest sweep of the experiment).
        experiment: the experiment's name or corpus (default: the newest sweep's).

    Raises:
        ScreenshotError: no chromium, no sweep in the ledger, the server or chromium failed.
        LedgerError: the store cannot be opened.
    """
    from rag.ledger.mlflow_store import Ledger

    binary = binary or chromium_binary()
    if binary is None:
        raise ScreenshotError("chromium is not installed (Debian: apt-get install chromium; "
                              "`make sysdeps` does it)")
    ledger = Ledger(uri, create=False)
    exps = [e for e in ledger.experiments(prefix)
            if experiment is None or e.name in (experiment, f"{prefix}-{experiment}")]
    where = f"tags.sweep_id = '{sweep_id}'" if sweep_id else "tags.sweep_id != ''"
    rows = ledger.rows([e.experiment_id for e in exps], where=where) if exps else []
    if not rows:
        raise ScreenshotError(f"no finished sweep row in {uri}"
                              + (f" for sweep {sweep_id}" if sweep_id else ""))
    sweep_id = sweep_id or max(rows, key=lambda r: r.info.start_time).data.tags["sweep_id"]
    rows = [r for r in rows if r.data.tags.get("sweep_id") == sweep_id]
    exp_id = rows[0].info.experiment_id
    base = next((r for r in rows if r.data.tags.get("is_baseline") == "true"), rows[0])
    names = [r.info.run_name for r in rows]
    golden = next((d.dataset.name for d in (base.inputs.dataset_inputs if base.inputs else [])), "")
    duration = ((base.info.end_time or 0) - (base.info.start_time or 0)) / 1000
    out_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    root = f"http://127.0.0.1:{port}/"
    ids = json.dumps([r.info.run_id for r in rows])
    urls = {"runs_table": f"{root}#/experiments/{exp_id}",
            "run_page": f"{root}#/experiments/{exp_id}/runs/{base.info.run_id}",
            "compare": (f"{root}#/compare-runs?runs={urllib.parse.quote(ids)}"
                        f"&experiments={urllib.parse.quote(json.dumps([exp_id]))}")}
    pages = SweepPages(experiment_id=exp_id, sweep_id=sweep_id, run_names=names)
    dom: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rag-chromium-") as profile:
        server = start_server(uri, port=port, log=out_dir / "mlflow_server.log")
        try:
            for name, url in urls.items():
                png = out_dir / f"{name}.png"
                dom[name] = capture(binary, url, png, profile=Path(profile))
                (out_dir / f"{name}.html").write_text(dom[name], encoding="utf-8")
                pages.files[name] = png
        finally:
            stop_server(server)
    pages.problems = check_pages(dom, run_names=names, golden_name=golden, duration_s=duration)
    return pages


def describe(pages: SweepPages) -> dict[str, Any]:
    """A JSON-ready summary (``--json``)."""
    return {"experiment_id": pages.experiment_id, "sweep_id": pages.sweep_id,
            "rows": pages.run_names, "files": {k: str(v) for k, v in pages.files.items()},
            "problems": pages.problems, "headline": list(HEADLINE)}


def main(argv: list[str] | None = None) -> int:
    """``python -m rag.ledger.screenshots`` (= ``rag ledger screenshots``): exit 0 when every
    row lines up, 1 when a page misses something, 2 when it could not run."""
    import argparse

    from rag.exit_codes import guarded
    from rag.ledger_cli import (SCREENSHOTS_DESCRIPTION, add_screenshot_arguments,
                                screenshots_command)

    parser = argparse.ArgumentParser(prog="python -m rag.ledger.screenshots",
                                     description=SCREENSHOTS_DESCRIPTION)
    add_screenshot_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: screenshots_command(args))


if __name__ == "__main__":
    raise SystemExit(main())
