"""``rag ledger ui``: the shared view that opens the newest sweep's runs table with the headline
columns (checked by hand, and rendered by headless Chromium against a real ``mlflow server``
on 127.0.0.1, started by the command and stopped by it on SIGHUP)."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import urllib.request

import pytest

from rag.ledger.screenshots import capture, chromium_binary, free_port, text_of
from rag.ledger.ui import SHARED_VIEW_TAG, prepare_links, share_key, view_state

from test_ledger_screenshots import JOBS, _sweep_ledger


def test_the_view_state_is_the_sweeps_rows_with_the_headline_columns_in_order():
    state = view_state(sweep_id="routing-1", metrics=["mrr", "recall_at_8"])
    assert state["searchFilter"] == "tags.sweep_id = 'routing-1'"
    assert state["selectedColumns"] == state["columnOrder"] == [
        "attributes.`Dataset`", "metrics.`mrr`", "metrics.`recall_at_8`"]
    want = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:32]
    assert share_key(state) == want


def test_links_write_one_tag_and_name_the_sweep(tmp_path):
    from rag.ledger.mlflow_store import Ledger

    uri, ids = _sweep_ledger(tmp_path)
    ledger = Ledger(uri, create=False)
    links = prepare_links(ledger, port=5999, host="ledger.localhost")
    exp = ledger.client.get_experiment(links.experiment_id)
    tags = {k: v for k, v in exp.tags.items() if k.startswith(SHARED_VIEW_TAG)}
    (key, value), = tags.items()
    state = json.loads(value)
    # the metrics the baseline has, in headline order (rag/ledger/metric_groups.py)
    assert state["selectedColumns"][1:] == ["metrics.`mrr`", "metrics.`recall_at_8`",
                                           "metrics.`latency_p95_ms`"]
    assert links.runs_table == (f"http://ledger.localhost:5999/#/experiments/"
                                f"{links.experiment_id}/runs?viewStateShareKey="
                                f"{key[len(SHARED_VIEW_TAG):]}&workflowType=machine_learning")
    assert all(i in links.compare for i in ids) and ids[0] in links.baseline_run
    # again: the same view, no second tag
    prepare_links(ledger, port=5999, host="ledger.localhost")
    exp = ledger.client.get_experiment(links.experiment_id)
    assert sum(k.startswith(SHARED_VIEW_TAG) for k in exp.tags) == 1


def test_an_empty_ledger_is_one_error_line(tmp_path, capsys):
    from rag.app.cli import main
    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    Ledger(uri, tmp_path / "art")
    assert main(["ledger", "ui", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: no finished row in ")
    # a sweep asked for by id that is not there is named as such
    assert main(["ledger", "ui", "--tracking-uri", uri, "--sweep", "routing-9"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no finished sweep row in " in err[0] and "routing-9" in err[0]


def test_a_ledger_of_single_runs_opens_on_its_newest_rows(tmp_path):
    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    ids = [ledger.log_row(experiment="rag-shop", run_name=f"r{i}", params={},
                          metrics={"mrr": 0.5, "recall_at_8": 0.6}, tags={}, artifacts={},
                          start_time_ms=1_000 * (i + 1)) for i in range(3)]
    links = prepare_links(Ledger(uri, create=False), port=5999, host="ledger.localhost")
    assert links.sweep_id is None
    exp = ledger.client.get_experiment(links.experiment_id)
    (value,) = [v for k, v in exp.tags.items() if k.startswith(SHARED_VIEW_TAG)]
    state = json.loads(value)
    # every row of the experiment (no sweep filter), the headline columns the rows have
    assert state["searchFilter"] == "" and state["selectedColumns"][1:] == [
        "metrics.`mrr`", "metrics.`recall_at_8`"]
    assert all(i in links.compare for i in ids) and ids[-1] in links.baseline_run


@pytest.mark.skipif(chromium_binary() is None,
                    reason="Debian's chromium is not installed (make sysdeps)")
@pytest.mark.slow
def test_the_printed_link_opens_the_runs_table_with_the_headline_columns(tmp_path):
    uri, ids = _sweep_ledger(tmp_path)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rag", "ledger", "ui", "--tracking-uri", uri,
                             "--port", str(port), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        assert ready, "rag ledger ui printed nothing in 180 s"
        links = json.loads(proc.stdout.readline())
        png = tmp_path / "runs_table.png"
        dom = capture(chromium_binary(), links["runs_table"], png, profile=tmp_path / "profile",
                      window=(1600, 900))
        assert png.stat().st_size > 20_000
        text = text_of(dom)
        assert "You're viewing a shared view" in text
        assert "tags.sweep_id = 'routing-1'" in dom
        # every job of the sweep
        # the headline columns, in the ledger's order: the grid places its header cells by
        # aria-colindex (their DOM order is not their visual order)
        import re

        where = {m: int(i) for i, m in re.findall(
            r'aria-colindex="(\d+)" col-id="metrics\.`([^`]+)`"', dom)}
        assert where["mrr"] < where["recall_at_8"] < where["latency_p95_ms"], where
        assert all(job[:14] in text for job, _, _ in JOBS)
        # a closed terminal (SIGHUP; Ctrl-C and SIGTERM take the same way out) stops the
        # server too, though it runs in a session of its own
        os.kill(proc.pid, signal.SIGHUP)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:  # a failed check: let the command stop its server first
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    # the server went with it
    with pytest.raises(OSError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://127.0.0.1:{port}/health", timeout=2)


def test_a_taken_or_impossible_port_is_one_error_line_before_anything_is_written(tmp_path,
                                                                                capsys):
    import socket

    from rag.app.cli import main
    from rag.ledger.mlflow_store import Ledger

    uri, _ = _sweep_ledger(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["ledger", "ui", "--tracking-uri", uri, "--port", str(port)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"127.0.0.1:{port} is in use" in err[0]
    assert main(["ledger", "ui", "--tracking-uri", uri, "--port", "70000"]) == 2
    assert capsys.readouterr().err.strip() == "error: --port 70000: a port is 1-65535"
    exp = Ledger(uri, create=False).client.get_experiment_by_name("rag-shop")
    assert not any(k.startswith(SHARED_VIEW_TAG) for k in exp.tags)  # nothing written
