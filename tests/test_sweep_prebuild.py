"""A sweep's indexes are built once, on the driver, before any job (rag/ledger/prebuild.py):
every job, in any worker process, embeds nothing, and a parallel sweep's rows equal the
one-process sweep's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import run_overrides


def test_job_overrides_follow_the_basic_sweeper():
    from rag.ledger.prebuild import BASIC_SWEEPER, sweep_job_overrides

    def cfg(target, task=()):
        return OmegaConf.create({"hydra": {
            "sweeper": {"_target_": target, "params": {"search.mode": "dense,bm25"}},
            "overrides": {"task": list(task)}}})

    assert sweep_job_overrides(cfg(BASIC_SWEEPER, ["search.top_k=5", "fusion.rrf_k=10,30"])) == [
        ["search.mode=dense", "search.top_k=5", "fusion.rrf_k=10"],
        ["search.mode=dense", "search.top_k=5", "fusion.rrf_k=30"],
        ["search.mode=bm25", "search.top_k=5", "fusion.rrf_k=10"],
        ["search.mode=bm25", "search.top_k=5", "fusion.rrf_k=30"]]
    # another sweeper (optuna, ...) decides its jobs as it goes: not listed in advance
    assert sweep_job_overrides(cfg("hydra_plugins.optuna.OptunaSweeper")) is None


def test_prebuild_builds_each_distinct_index_once(tmp_path, fixture_repo, fixture_golden,
                                                  compose, embedder):
    from rag.ledger.prebuild import prebuild_indexes
    from rag.stages import StageCache

    base = run_overrides(tmp_path, fixture_repo, fixture_golden)
    jobs = [([f"search.mode={m}"], compose([*base, f"search.mode={m}"]))
            for m in ("dense", "bm25", "hybrid", "auto")]
    bad = ["search.top_k=10", "search.candidates=9"]  # fails validation: left to its job
    jobs.append((bad, compose([*base, *bad])))
    notes: list[str] = []
    pre = prebuild_indexes(jobs, stages=StageCache(embedder=embedder), progress=False,
                           log=notes.append)
    # dense, hybrid and auto embed the same chunks: one build; bm25 reads the chunk store only
    assert [(b["job"], b["dense"]) for b in pre.builds] == [
        ("search.mode=dense", True), ("search.mode=bm25", False)]
    chunks = pre.builds[0]["chunks"]
    assert pre.chunks_embedded() == chunks > 0 and pre.indexes("shop") == 2
    assert list(pre.skipped) == ["search.top_k=10 search.candidates=9"]
    assert "search.candidates (9) must be >= search.top_k (10)" in notes[0]
    # the caches are on disk: a second prebuild (another process, say) embeds nothing, and
    # neither does a job's own build
    again = prebuild_indexes(jobs[:1], stages=StageCache(embedder=embedder), progress=False,
                             log=notes.append)
    assert again.chunks_embedded() == 0
    index = StageCache(embedder=embedder).index(jobs[2][1], fixture_repo, embedder,
                                                progress=False)
    assert index.stats["chunks_embedded"] == 0 and index.stats["corpus_read"] == 0


def _sweep(tmp_path, repo, golden, *launcher):
    tmp_path.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "+sweep=routing", *launcher,
         *run_overrides(tmp_path, repo, golden), f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    rows = {r.data.tags["sweep_job"]: r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"}
    assert all(r.data.tags["sweep_id"] == parents[0].data.tags["sweep_id"] for r in rows.values())
    return parents[0], rows, proc.stdout


@pytest.mark.integration
def test_parallel_sweep_embeds_nothing_and_equals_the_one_process_sweep(
        tmp_path, fixture_repo, fixture_golden):
    """The routing sweep with Hydra's basic launcher (one process) and with the joblib launcher
    (2 worker processes), each into its own ledger and its own (empty) cache directory."""
    basic = _sweep(tmp_path / "basic", fixture_repo, fixture_golden)
    joblib = _sweep(tmp_path / "joblib", fixture_repo, fixture_golden,
                    "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    labels = {f"search.mode={m}" for m in ("dense", "bm25", "hybrid", "auto")}
    for parent, rows, stdout in (basic, joblib):
        assert set(rows) == labels
        # the driver embedded each chunk once; no job, in any worker, embedded one
        chunks = rows["search.mode=dense"].data.metrics["index/chunks"]
        assert parent.data.metrics["sweep/chunks_embedded"] == chunks > 0
        assert parent.data.metrics["sweep/indexes_prebuilt"] == 2  # with and without dense
        assert sum(r.data.metrics["index/chunks_embedded"] for r in rows.values()) == 0
        assert all(r.data.metrics["index/corpus_read"] == 0 for r in rows.values())
        assert "sweep prebuild: 2 index(es) built before the jobs" in stdout
    assert "n_jobs=2" in joblib[2]  # the jobs did run in joblib's workers
    (_, a, _), (_, b, _) = basic, joblib
    assert a["search.mode=dense"].data.tags["is_baseline"] == "true"
    assert b["search.mode=dense"].data.tags["is_baseline"] == "true"
    quality = ("mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate")
    significance = [f"{m}_{s}" for m in ("mrr", "recall_at_8", "ndcg_at_10")
                    for s in ("delta", "p", "p_holm")]
    for label in labels:
        ma, mb = a[label].data.metrics, b[label].data.metrics
        for k in quality:
            assert mb[k] == pytest.approx(ma[k]), (label, k)
        if label != "search.mode=dense":
            for k in significance:
                assert mb[k] == pytest.approx(ma[k]), (label, k)
