"""python -m rag.bench on tiny inputs: structure and values, never times.

The in-process sections run on the fixture repository (a replicated corpus of ~60 chunks,
1,000-vector dense matrices, 300 synthetic queries); the sections that start whole
``rag.app.run`` processes are covered through their helpers (overrides that keep the ledger out of
the project, the child-process measurement, the cold cache directory), not run here.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest


@pytest.mark.slow
def test_in_process_sections_on_fixture(fixture_repo, fixture_golden, tmp_path, monkeypatch):
    from rag.bench import main

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench.md"
    rc = main(["--quick", "--sections", "bm25,dense,build,eval,latency", "--bm25-chunks", "60",
               "--dense-sizes", "500,1000", "--eval-queries", "300", "--embed-sample", "4",
               "--no-ranx", "--out", str(out), f"corpus.path={fixture_repo}", "corpus.name=shop",
               f"eval.golden_dir={fixture_golden}"])
    assert rc == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["machine"]["cores"] >= 1 and data["versions"]["numpy"] == np.__version__

    # 1. BM25: same rankings as rank_bm25 on every golden query, on both corpora
    for key in ("default", "replicated"):
        b = data["bm25"][key]
        assert b["rankings_identical"] == b["rankings_compared"] == 4, b["rankings_differing_queries"]
        assert b["max_score_diff_relative_to_top"] < 1e-5
        for s in ("build_ours", "build_rank_bm25", "query_ours", "query_rank_bm25"):
            assert b[s]["min"] <= b[s]["median"] <= b[s]["max"]
        assert b["query_speedup_p50"] > 0
    rep = data["bm25"]["replicated"]
    assert rep["chunks"] >= 60 and rep["chunks"] % data["bm25"]["default"]["chunks"] == 0

    # 2. dense: one row per size, ratio = ours / (floor encode + floor mat-vec)
    sizes = data["dense"]["sizes"]
    assert [s["vectors"] for s in sizes] == [500, 1000]
    for s in sizes:
        assert s["ratio"] == pytest.approx(s["ours_total"]["median"] / s["floor_ms"])
        assert s["ours_embed"]["n"] == s["queries"] * s["passes"]

    # 3. build: the warm re-run embeds nothing; ours and encode() give the same vectors
    b = data["build"]
    assert b["warm"]["stats_with_chunk_store"]["chunks_embedded"] == 0
    assert b["warm"]["stats_with_chunk_store"]["corpus_read"] == 0
    assert b["warm"]["stats_without_chunk_store"]["chunks_embedded"] == 0
    assert b["embedding"]["chunks_embedded"] == b["embedding"]["sample_chunks"] == 4
    assert b["embedding"]["max_abs_diff_vs_encode"] < 1e-5

    # 4. evaluation: every per-query value equals trec_eval's exactly
    e = data["evaluation"]
    assert e["queries"] == 300 and e["all_equal_trec_eval"] is True
    assert e["max_abs_diff_trec_eval"] == 0.0
    assert all(v["equal_trec_eval"] == 300 for v in e["comparison"].values())
    assert e["ranx_note"].startswith("skipped")

    # 6. per-mode latency, late-interaction rerank included (it needs no training)
    modes = data["latency"]["modes"]
    assert {"bm25", "dense", "hybrid", "auto"} <= set(modes)
    assert any(m.startswith("rerank (late_interaction") for m in modes)
    assert modes["bm25"]["seed_p50_ms"] == 2.0

    md = out.read_text()
    for heading in ("## Targets", "## 1. BM25", "## 2. Dense", "## 3. Index build",
                    "## 4. Evaluation", "## 6. End to end"):
        assert heading in md, heading
    assert "different hardware" in md


def test_unknown_section_is_an_error():
    from rag.bench import main

    with pytest.raises(SystemExit, match="unknown section"):
        main(["--sections", "bm25,nope"])


def test_runs_log_into_the_scratch_directory_only(tmp_path):
    from rag.bench.runs import scratch_overrides

    ov = dict(o.split("=", 1) for o in scratch_overrides(tmp_path, "job"))
    assert set(ov) == {"tracking.uri", "tracking.artifact_root", "tracking.report_path",
                       "hydra.run.dir", "hydra.sweep.dir"}
    assert ov["tracking.uri"] == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert all(v.removeprefix("sqlite:///").startswith(str(tmp_path)) for v in ov.values())


def test_child_run_measures_peak_memory_and_reports_failure(tmp_path):
    from rag.bench.measure import ChildFailed, run_child

    touch = ("import time; b = bytearray(120 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
             "time.sleep(0.5)")
    run = run_child([sys.executable, "-c", touch], log=tmp_path / "ok.log")
    # the child's own peak, not this (larger) test process's forked copy
    assert run.returncode == 0 and 120 <= run.max_rss_mib < 400 and run.wall_s > 0
    with pytest.raises(ChildFailed, match="exited 3"):
        run_child([sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
                  log=tmp_path / "bad.log")


def test_cold_cache_keeps_only_the_corpus_and_optionally_the_embeddings(tmp_path):
    from rag.bench.runs import cold_cache
    from rag.index.dense import _safe_name

    src = tmp_path / "cache"
    (src / "corpora" / "flask-3.1.3" / "flask-3.1.3").mkdir(parents=True)
    (src / "corpora" / "flask-3.1.3" / ".complete").write_text("x\n")
    (src / "chunks").mkdir()
    (src / "chunks" / "store.json").write_text("{}")
    emb = src / "embeddings" / f"{_safe_name('model|v1')}.sqlite"
    emb.parent.mkdir()
    with sqlite3.connect(emb) as db:
        db.execute("CREATE TABLE emb (hash TEXT)")
        db.execute("INSERT INTO emb VALUES ('h1')")
    cfg = SimpleNamespace(paths=SimpleNamespace(cache_dir=str(src)),
                          corpus=SimpleNamespace(path=None))
    embedder = SimpleNamespace(model_id="model|v1")

    cold = tmp_path / "cold"
    what = cold_cache(cfg, embedder, cold, keep_embeddings=False)
    assert (cold / "corpora" / "flask-3.1.3" / ".complete").is_file()
    assert not (cold / "chunks").exists() and not (cold / "embeddings").exists()
    assert "corpus" in what

    what = cold_cache(cfg, embedder, cold, keep_embeddings=True)
    with sqlite3.connect(cold / "embeddings" / emb.name) as db:
        assert db.execute("SELECT hash FROM emb").fetchall() == [("h1",)]
    assert not (cold / "chunks").exists() and "embedding cache" in what


def test_synthetic_evaluation_case_is_like_for_like():
    from rag.bench.evaluation import synthetic_case

    run, qrels = synthetic_case(500)
    assert set(run) == set(qrels)
    for q, scores in run.items():
        assert len(set(scores.values())) == len(scores)  # no ties
        assert any(g > 0 for g in qrels[q].values())
    assert 0 < sum(1 for s in run.values() if not s) < 100


def test_render_marks_a_missed_target():
    from rag.bench.render import targets

    res = {"bm25": {"target_chunks": 50000,
                    "replicated": {"query_speedup_p50": 4.0, "chunks": 50304}},
           "dense": {"sizes": [{"ratio": 1.1, "vectors": 10000}, {"ratio": 1.4, "vectors": 10**6}]},
           "evaluation": {"all_equal_trec_eval": True, "queries": 10, "measures": ["mrr"],
                          "max_abs_diff_trec_eval": 0.0}}
    assert [t["met"] for t in targets(res)] == [False, False, True]


def test_dense_scores_split_into_row_blocks_equal_one_product(monkeypatch, embedder):
    import rag.index.dense as dense

    rng = np.random.default_rng(1)
    m = rng.standard_normal((3001, 384), dtype=np.float32)
    q = rng.standard_normal(384, dtype=np.float32)
    ch = dense.DenseChannel(embedder, m)
    whole = ch.scores(q)
    monkeypatch.setattr(dense, "PARALLEL_MIN_ROWS", 1000)
    monkeypatch.setattr(dense, "_cores", lambda: 3)
    split = ch.scores(q)
    assert np.array_equal(split, whole)
    assert ch.top(split, 5) == ch.top(whole, 5)
    assert [i for i, _ in ch.top(split, 5)] == list(np.argsort(-whole, kind="stable")[:5])


def test_cold_index_reads_the_chunk_count_and_renders_the_goal():
    from rag.bench.cold_index import indexed_counts, render_cold_index
    from rag.bench.render import targets

    line = ("indexed 1,204 files, 12,345 chunks (corpus read and chunked); chunks embedded: "
            "12,345, from the embedding cache: 0\n")
    assert indexed_counts("warning: x\n" + line) == (1204, 12345)
    with pytest.raises(ValueError, match="no 'indexed N files"):
        indexed_counts("error: nothing\n")
    wall = {"median": 6.0, "min": 5.5, "max": 7.0, "n": 3, "unit": "s"}
    rss = {"median": 300.0, "min": 290.0, "max": 310.0, "n": 3, "unit": "MiB"}
    r = {"reps": 3, "goal_s_per_1000_chunks": 10.0,
         "fast path (system=rag_fast)": {"wall": wall, "peak_rss_mib": rss, "files": 99,
                                         "chunks": 1500, "s_per_1000_chunks": 4.0,
                                         "command": "rag index system=rag_fast"},
         "default (MiniLM)": {"wall": {**wall, "median": 60.0}, "peak_rss_mib": rss,
                              "files": 99, "chunks": 1500, "s_per_1000_chunks": 40.0,
                              "command": "rag index"},
         "ratio_fast_to_default": 0.1, "meets_goal": True}
    md = "\n".join(render_cold_index(r))
    assert "| fast path (system=rag_fast) | 99 | 1500 | 6.0 s (5.5-7.0) | 4.0 | 300 MiB |" in md
    assert "Goal met: yes" in md
    (t,) = targets({"index_cold": r})
    assert t["met"] is True and t["measured"] == "4.0 s (6.0 s for 1,500 chunks)"


@pytest.mark.slow
def test_cold_index_section_builds_into_an_empty_cache(fixture_repo, tmp_path, monkeypatch):
    """One cold build of the fixture repository by the fast path: its chunk count is the
    index's, and the cold cache is removed after it (the configured cache keeps its models)."""
    from rag.bench.cold_index import bench_cold_index
    from rag.app.search_cli import compose_config

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    overrides = [f"corpus.path={fixture_repo}", "corpus.name=shop"]
    cfg = compose_config(overrides)
    r = bench_cold_index(cfg, overrides, tmp_path / "scratch", reps=1,
                         configs={"fast": ("system=rag_fast",)})
    fast = r["fast"]
    assert fast["files"] == 7 and fast["chunks"] == 15 and fast["wall"]["n"] == 1
    assert fast["s_per_1000_chunks"] == pytest.approx(1000 * fast["wall"]["median"] / 15)
    assert r["ratio_fast_to_default"] is None and isinstance(r["meets_goal"], bool)
    assert (tmp_path / "cache" / "models").is_dir()
    assert not list((tmp_path / "scratch").glob("index-cold-fast-*"))
