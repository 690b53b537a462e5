"""``rag ledger ui``: the MLflow UI over the ledger, ready on first open.

Starts ``mlflow server`` on 127.0.0.1 (one worker, its own process group; the same start as
:mod:`rag.ledger.screenshots`) and prints links that open

* **the newest sweep's runs table with the headline columns**: MLflow's own "share view"
  mechanism — an experiment tag ``mlflow.sharedViewState.<key>`` holding the view's state as
  JSON (the search filter ``tags.sweep_id = '<id>'`` and the selected columns
  ``metrics.`<name>``` of :data:`rag.ledger.metric_groups.HEADLINE`, in that order, plus the
  golden set's dataset column), opened by ``#/experiments/<id>/runs?viewStateShareKey=<key>``
  (MLflow 3's UI reads the tag and applies it; the key is a digest of the state, so the same
  view is one tag);
* **the compare view of that sweep's rows** (``#/compare-runs?runs=[...]``): MLflow sorts its
  metric and parameter tables alphabetically and offers no way to order them, so the
  headline metrics are not first there (they are first on each run page and in
  ``rag ledger export``);
* the sweep baseline's run page.

Links use the host name ``ledger.localhost``: browsers resolve every ``*.localhost`` name to
the loopback address (RFC 6761), and on ``localhost`` / ``127.0.0.1`` MLflow's UI opens its
assistant panel over a third of the page. The server is told to accept that host and
nothing else. ``rag ledger ui`` writes one experiment tag (never a row) and serves until
Ctrl-C or SIGTERM, then stops the server by its process group.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Sequence

from rag.ledger.metric_groups import HEADLINE

#: MLflow's share-view tag prefix and URL parameter (mlflow/server/js: ``mlflow.sharedViewState.``,
#: ``viewStateShareKey``)
SHARED_VIEW_TAG, SHARE_KEY_PARAM = "mlflow.sharedViewState.", "viewStateShareKey"


def metric_column(name: str) -> str:
    """MLflow UI's column id of a metric: ``metrics.`mrr```."""
    return f"metrics.`{name}`"


def view_state(*, sweep_id: str | None, metrics: Sequence[str]) -> dict[str, Any]:
    """The runs table's state for one sweep: its rows (search filter; None: every row),
    newest first, with the dataset and the given metric columns, in order."""
    return {"searchFilter": f"tags.sweep_id = '{sweep_id}'" if sweep_id else "",
            "orderByKey": "attributes.start_time", "orderByAsc": False,
            "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [],
            "modelVersionFilter": "All Runs",
            "selectedColumns": (cols := ["attributes.`Dataset`",
                                         *(metric_column(m) for m in metrics)]),
            "columnOrder": cols}


def share_key(state: dict[str, Any]) -> str:
    """The key of a view: the first 32 hex characters of SHA-256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class UiLinks:
    """What ``rag ledger ui`` prints (``--json``: this as a dict)."""

    server: str
    sweep_id: str | None  # None: the ledger has no sweep; the links show its newest rows
    experiment_id: str
    runs_table: str
    compare: str
    baseline_run: str
    columns: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"server": self.server, "sweep_id": self.sweep_id,
                "experiment_id": self.experiment_id, "runs_table": self.runs_table,
                "compare": self.compare, "baseline_run": self.baseline_run,
                "columns": self.columns}


def prepare_links(ledger: Any, *, port: int, host: str, sweep_id: str | None = None,
                  experiment: str | None = None, prefix: str = "rag") -> UiLinks:
    """Find the sweep (:func:`rag.ledger.screenshots.find_sweep`; with no ``sweep_id`` and no
    sweep in the ledger, its newest rows: :func:`rag.ledger.screenshots.find_newest_rows`),
    write its runs-table view as an experiment tag (once: the key is the state's digest) and
    build the links.

    Raises:
        ScreenshotError: no such sweep or experiment, or no finished row at all.
        LedgerError: the tag cannot be written.
    """
    from rag.ledger.screenshots import UI_QUERY, ScreenshotError, find_newest_rows, find_sweep

    try:
        found = find_sweep(ledger, sweep_id=sweep_id, experiment=experiment, prefix=prefix)
    except ScreenshotError:
        if sweep_id is not None:
            raise
        found = find_newest_rows(ledger, experiment=experiment, prefix=prefix)
    metrics = [m for m in HEADLINE if m in found.baseline.data.metrics] or list(HEADLINE)
    state = view_state(sweep_id=found.sweep_id, metrics=metrics)
    key = share_key(state)
    tag = SHARED_VIEW_TAG + key
    from rag.ledger.mlflow_store import LedgerError

    try:
        exp = ledger.client.get_experiment(found.experiment_id)
        if exp.tags.get(tag) != json.dumps(state):
            ledger.client.set_experiment_tag(found.experiment_id, tag, json.dumps(state))
    except Exception as exc:  # noqa: BLE001 - MLflow's errors vary by store
        raise LedgerError(f"cannot write the view tag on experiment {found.experiment_id} of "
                          f"{ledger.uri}: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    root = f"http://{host}:{port}/"
    ids = json.dumps([r.info.run_id for r in found.rows])
    return UiLinks(
        server=f"http://127.0.0.1:{port}/", sweep_id=found.sweep_id,
        experiment_id=found.experiment_id,
        runs_table=(f"{root}#/experiments/{found.experiment_id}/runs?{SHARE_KEY_PARAM}={key}"
                    f"&{UI_QUERY}"),
        compare=(f"{root}#/compare-runs?runs={urllib.parse.quote(ids)}&experiments="
                 f"{urllib.parse.quote(json.dumps([found.experiment_id]))}&{UI_QUERY}"),
        baseline_run=(f"{root}#/experiments/{found.experiment_id}/runs/"
                      f"{found.baseline.info.run_id}?{UI_QUERY}"),
        columns=state["selectedColumns"])


def check_port(port: int) -> None:
    """Refuse a port that is not one (1-65535) or is taken on 127.0.0.1, before anything is
    written or started.

    Raises:
        ScreenshotError: one line naming the port.
    """
    import socket

    from rag.ledger.screenshots import ScreenshotError

    if not 1 <= port <= 65535:
        raise ScreenshotError(f"--port {port}: a port is 1-65535")
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ScreenshotError(f"--port {port}: 127.0.0.1:{port} is in use "
                                  f"({exc.strerror or exc})") from None


def serve_ui(uri: str, *, port: int, log: Any, ready: Any) -> int:
    """Start ``mlflow server`` over ``uri`` on 127.0.0.1:``port`` (log to ``log``), call
    ``ready()`` once it answers, and serve until it exits, Ctrl-C or SIGTERM; the server's
    process group is stopped on every way out. Returns 0 on Ctrl-C / SIGTERM, 2 when the
    server exits by itself.

    Raises:
        ScreenshotError: the server did not come up.
    """
    import signal

    from rag.ledger.screenshots import start_server, stop_server

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGHUP too: a closed terminal must not leave the server (its own session) running
    previous = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGHUP)}
    server = None
    try:
        server = start_server(uri, port=port, log=log)
        ready()
        code = server.wait()
        return 2 if code else 0
    except KeyboardInterrupt:
        return 0
    finally:
        if server is not None:
            stop_server(server)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
