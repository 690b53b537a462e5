"""A real sweep on the fixture repository (one process, Hydra multirun), read back from an
``mlflow server`` started on 127.0.0.1 by the test, then the report's sweep section."""

from __future__ import annotations

import re

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port, post_json, run_overrides


_free_port, _post = free_port, post_json  # shared loopback helpers (conftest)


@pytest.fixture
def routing_sweep(tmp_path, fixture_repo, fixture_golden):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "+sweep=routing",
         *run_overrides(tmp_path, fixture_repo, fixture_golden),
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # stderr is a pipe: neither the prebuild nor the jobs draw progress frames (\r)
    assert "\r" not in proc.stderr, proc.stderr[-3000:]
    return tmp_path, proc.stdout, proc.stderr


@pytest.mark.slow
def test_routing_sweep_rows_over_mlflow_rest(routing_sweep):
    tmp_path, stdout, stderr = routing_sweep
    assert stdout.count("ledger row ") == 4
    # one progress line per job, in a log as on a terminal: k of n, elapsed, time left
    progress = [ln for ln in stderr.splitlines() if ln.startswith("sweep routing: job ")]
    assert [ln.split(" (")[0] for ln in progress] == [
        f"sweep routing: job {k} of 4" for k in range(1, 5)]
    assert "elapsed" in progress[0] and "left" not in progress[0]
    assert all(re.search(r", \d+:\d\d elapsed, about \d+:\d\d left$", ln) for ln in progress[1:])
    # jobs 2-4 reuse the first job's index: nothing embedded, nothing rebuilt
    assert stdout.count("chunks embedded: 0") >= 3
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--default-artifact-root", str(tmp_path / "mlartifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not come up")
                time.sleep(0.5)
        exp = json.loads(urllib.request.urlopen(
            f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=rag-shop",
            timeout=30).read())["experiment"]
        runs = _post(f"{base}/api/2.0/mlflow/runs/search", {
            "experiment_ids": [exp["experiment_id"]], "max_results": 100,
            "filter": "tags.sweep_name = 'routing' and attributes.status = 'FINISHED'"})["runs"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    tags = [{t["key"]: t["value"] for t in r["data"]["tags"]} for r in runs]
    rows = [(r, t) for r, t in zip(runs, tags) if t.get("rag.sweep_parent") != "1"]
    parents = [t for t in tags if t.get("rag.sweep_parent") == "1"]
    assert len(rows) == 4 and len(parents) == 1
    sweep_ids = {t["sweep_id"] for _, t in rows}
    assert sweep_ids == {parents[0]["sweep_id"]}
    parent_id = [r["info"]["run_id"] for r, t in zip(runs, tags) if t.get("rag.sweep_parent") == "1"][0]
    assert all(t["mlflow.parentRunId"] == parent_id for _, t in rows)
    baseline = [r for r, t in rows if t["is_baseline"] == "true"]
    assert len(baseline) == 1
    assert {t["sweep_job"] for _, t in rows} == {f"search.mode={m}" for m in ("dense", "bm25", "hybrid", "auto")}
    base_id = baseline[0]["info"]["run_id"]
    for r, t in rows:
        if t["is_baseline"] == "false":
            assert t["baseline_run_id"] == base_id
            keys = {m["key"] for m in r["data"]["metrics"]}
            # (mrr_mde is absent here: every fixture query ties, no spread to estimate power);
            # one "vs_baseline" group, so the UI's chart tab gives them a section of their own
            assert {f"vs_baseline/{k}" for k in ("mrr_delta", "mrr_p", "mrr_ci_low",
                                                 "mrr_ci_high", "recall_at_8_p",
                                                 "mrr_p_holm")} <= keys
            assert not {"mrr_delta", "mrr_p"} & keys
    # the Holm-adjusted p logged on each job at the sweep's end is holm() of the raw p's
    from rag.eval.significance import holm
    from rag.ledger.metric_groups import baseline_values

    jobs = [baseline_values({m["key"]: m["value"] for m in r["data"]["metrics"]})
            for r, t in rows if t["is_baseline"] == "false"]
    assert [j["mrr_p_holm"] for j in jobs] == pytest.approx(holm([j["mrr_p"] for j in jobs]))
    # each job's run lasts its whole evaluation (wall_s), not just the logging at its end
    for r, _ in rows:
        wall_s = next(m["value"] for m in r["data"]["metrics"] if m["key"] == "wall_s")
        assert int(r["info"]["end_time"]) - int(r["info"]["start_time"]) >= 1000 * wall_s - 1
    # the parent run carries the sweep's summary table and figures
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(parent_id)}
    assert {"sweep_summary.md", "sweep_summary.csv", "sweep_significance.json",
            "figures"} <= names, names
    assert {a.path for a in client.list_artifacts(parent_id, "figures")} == {
        "figures/pareto.png", "figures/rank_vs_baseline.png", "figures/delta_mrr.png"}
    # and each job's side-by-side page against the baseline (rag diff --html), self-contained
    jobs = {t["sweep_job"] for _, t in rows if t["is_baseline"] == "false"}
    assert {a.path for a in client.list_artifacts(parent_id, "diff")} == {
        f"diff/{j}.html" for j in jobs}
    page = Path(client.download_artifacts(parent_id, f"diff/{sorted(jobs)[0]}.html",
                                          str(tmp_path / "dl"))).read_text()
    # every fixture query ties (the routes rank alike here): the page says nothing changed
    assert page.startswith("<!doctype html>") and f"A = row {base_id[:8]}" in page
    assert 'id="none"' in page or '<section class="query' in page
    import pandas as pd

    summary = pd.read_csv(client.download_artifacts(parent_id, "sweep_summary.csv",
                                                    str(tmp_path / "dl")))
    assert len(summary) == 4  # one line per row
    md = Path(client.download_artifacts(parent_id, "sweep_summary.md", str(tmp_path / "dl")))
    assert "Sweep `routing`" in md.read_text()
    # the report's routing section shows deltas and p-values against the baseline
    section = subprocess.run(
        [sys.executable, "-m", "rag.report", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--sweep", "routing", "--out", str(tmp_path / "routing.md")], capture_output=True, text=True)
    assert section.returncode == 0, section.stderr
    text = (tmp_path / "routing.md").read_text()
    assert "Sweep `routing`" in text and "baseline" in text and "(p " in text
    # the section embeds the sweep's pictures, drawn beside the report
    links = re.findall(r"!\[[^]]+\]\((figures/sweep-[^)]+\.png)\)", text)
    assert sorted(Path(p).name for p in links) == ["delta_mrr.png", "pareto.png",
                                                   "rank_vs_baseline.png"]
    assert all((tmp_path / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in links)
    assert len(re.findall(r"^\| `[0-9a-f]{8}`", text, flags=re.M)) == 4  # one line per row


@pytest.mark.slow
def test_a_failing_job_leaves_a_flagged_incomplete_sweep(tmp_path, fixture_repo, fixture_golden):
    """top_k 10 and 20 fail validation (candidates=9 < top_k): the other jobs are still logged
    and compared, the parent run ends FAILED, and the report says the sweep is incomplete."""
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "+sweep=topk", "search.candidates=9",
         *run_overrides(tmp_path, fixture_repo, fixture_golden),
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode != 0
    assert "search.candidates (9) must be >= search.top_k (10)" in proc.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rag-shop")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
    rows = [r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"]
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert sorted(r.data.tags["sweep_job"] for r in rows) == \
        ["search.top_k=3", "search.top_k=5", "search.top_k=8"]
    base = [r for r in rows if r.data.tags["is_baseline"] == "true"]
    assert len(base) == 1
    for r in rows:
        if r is not base[0]:
            assert r.data.tags["baseline_run_id"] == base[0].info.run_id
            assert "vs_baseline/answer_support_p" in r.data.metrics
    report = subprocess.run(
        [sys.executable, "-m", "rag.report", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--sweep", "topk", "--out", str(tmp_path / "topk.md")], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert "Incomplete sweep" in (tmp_path / "topk.md").read_text()
