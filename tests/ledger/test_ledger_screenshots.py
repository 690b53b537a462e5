"""``rag ledger screenshots``: the MLflow UI (an ``mlflow server`` on 127.0.0.1) captured with
headless Chromium for one sweep, and the check that its rows line up there. The end-to-end
test is skipped where Debian's chromium is absent (``make sysdeps`` installs it); the page
check itself is tested on hand-written pages."""

from __future__ import annotations

import json

import pytest

from rag.app.cli import main as rag_cli
from rag.ledger.screenshots import check_pages, chromium_binary

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms
GOLDEN = "f" * 64
# (job, MRR, evaluation ms): each row starts after the one before, as a sweep's jobs do
JOBS = (("search.mode=dense", 0.80, 14_000), ("search.mode=bm25", 0.55, 8_000),
        ("search.mode=hybrid", 0.85, 3_000))


def _sweep_ledger(tmp_path) -> tuple[str, list[str]]:
    """A sweep as rag.app.run logs it: a parent run and three rows (golden set as the input
    dataset, real start and end times), without evaluating anything."""
    from rag.ledger.mlflow_store import Ledger, golden_input

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    exp = ledger.experiment_id("rag-shop")
    parent = ledger.client.create_run(exp, run_name="sweep routing-1", start_time=T0,
                                      tags={"rag.sweep_parent": "1", "sweep_id": "routing-1",
                                            "sweep_name": "routing"}).info.run_id
    ids = []
    for i, (job, mrr, ms) in enumerate(JOBS):
        # the row's start: its evaluation's; it ends when logged (now), so make it recent
        import time

        start = int(time.time() * 1000) - ms
        ids.append(ledger.log_row(
            experiment="rag-shop", run_name=job, params={"search.mode": job.split("=")[1]},
            metrics={"latency_p95_ms": 9.0, "mrr": mrr, "recall_at_8": mrr + 0.05,
                     "tag.prose.mrr": mrr, "abstention/top_dense/auc": 0.9},
            tags={"sweep_id": "routing-1", "sweep_name": "routing", "sweep_job": job,
                  "is_baseline": str(i == 0).lower(), "mlflow.parentRunId": parent,
                  "golden_fingerprint": GOLDEN},
            artifacts={}, start_time_ms=start,
            inputs=[golden_input(name="shop", fingerprint=GOLDEN, source=str(tmp_path))]))
    ledger.client.set_terminated(parent, status="FINISHED")
    return uri, ids


@pytest.mark.skipif(chromium_binary() is None,
                    reason="Debian's chromium is not installed (make sysdeps)")
@pytest.mark.slow
def test_screenshots_show_every_row_of_the_sweep(tmp_path, capsys):
    uri, ids = _sweep_ledger(tmp_path)
    out = tmp_path / "shots"
    code = rag_cli(["ledger", "screenshots", "--tracking-uri", uri, "--out", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["problems"] == [] and code == 0, summary
    assert summary["sweep_id"] == "routing-1"
    assert summary["rows"] == [job for job, _, _ in JOBS]
    for name in ("runs_table", "run_page", "compare"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 20_000  # a rendered page, not a blank one
    from rag.ledger.screenshots import text_of

    table = text_of((out / "runs_table.html").read_text())
    # the parent run is unfolded: every row with its dataset (name and golden digest)
    assert "sweep routing-1" in table
    assert table.count(f"shop ({GOLDEN[:36]})") == 3
    page = text_of((out / "run_page.html").read_text())
    # the baseline's metrics table starts with the headline metrics, in the ledger's order
    metrics = page.split("Metric Value", 1)[1].split()
    assert metrics[:8:2] == ["mrr", "recall_at_8", "latency_p95_ms", "tag.prose.mrr"]
    import re

    # the baseline's real duration: its evaluation (14 s) plus the logging
    assert "search.mode=dense" in page and re.search(r"Duration 1[4-9]\.\ds", page), page[:500]
    compare = text_of((out / "compare.html").read_text())
    assert all(i in compare for i in ids)


def test_the_page_check_names_what_is_missing():
    golden = "shop (abc)"
    good = {
        "runs_table": "Run Name Dataset Duration sweep x - 9s a shop (abc) 1.0s b shop (abc) 2.0s",
        "run_page": "b Duration 2.0s Datasets shop (abc) Eval Metrics (3) Metric Value mrr 1 "
                    "recall_at_8 1 index/chunks 7",
        "compare": "Run ID: 111 222 Run Name: a b Duration: 1.0s 2.0s Metrics: mrr"}
    kw = dict(run_names=["a", "b"], run_ids=["111", "222"], golden=golden,
              headline=["mrr", "recall_at_8"])
    assert check_pages({k: f"<p>{v}</p>" for k, v in good.items()}, **kw) == []
    bad = dict(good, runs_table="sweep x - 9s a shop (abc) 1.0s",
               run_page="b Duration 2.0s Metric Value index/chunks 7 recall_at_8 1 mrr 1",
               compare="Run ID: 111 Run Name: a b Duration: 1.0s 2.0s")
    problems = check_pages(bad, **kw)
    assert problems == [
        "runs table: row 'b' not shown (a row logged before rows were tagged "
        "mlflow.runType=evaluation stays folded under its sweep's parent run)",
        "runs table: dataset 'shop (abc)' shown on 1 of 2 rows",
        "compare view: run id 222 not shown",
        "compare view: metric mrr not shown",
        "run page: dataset 'shop (abc)' not shown",
        "run page: metrics table does not list mrr, recall_at_8 in that order"]


def test_without_chromium_it_is_one_error_line(tmp_path, monkeypatch, capsys):
    import rag.ledger.screenshots as shots

    monkeypatch.setattr(shots, "chromium_binary", lambda: None)
    assert rag_cli(["ledger", "screenshots", "--tracking-uri",
                    f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: chromium is not installed (Debian: apt-get install chromium; `make sysdeps` "
        "does it)")
