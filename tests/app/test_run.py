"""End to end: python -m rag.run on a fixture repository with its own golden set."""

from __future__ import annotations

import re

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag.app.stages import StageCache
import yaml

from conftest import PROJECT, run_overrides, write_tree


def _mlflow_runs(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return con.execute("SELECT run_uuid, status FROM runs").fetchall()


def _rag_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "rag.run", *args, f"hydra.run.dir={cwd / 'out'}"],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_run_logs_one_row_with_artifacts_and_report(tmp_path, fixture_repo, fixture_golden,
                                                    compose, embedder, monkeypatch):
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod
    from rag.eval.golden import load_golden

    # share the session's model so the test does not load it twice
    stages = StageCache(embedder=embedder)
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    metrics = run_mod.run_job(cfg, stages=stages)

    # gitignored build/ and *.log are not indexed; the rest are
    assert metrics["index/files_indexed"] == 7
    assert metrics["index/files_skipped_gitignored"] == 2
    assert metrics["n_positives"] == 3 and metrics["n_negatives"] == 1
    for k in ("recall_at_8", "mrr", "ndcg_at_10", "abstain_rate", "false_weak_rate",
              "tag.prose.recall_at_8", "tag.symbol.mrr", "hit_at_1"):
        assert 0.0 <= metrics[k] <= 1.0, k
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rag-shop")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    # every composed key is a param, as composed (the default: hybrid + the ranking stage)
    assert run.data.params["search.mode"] == cfg.search.mode.value == "hybrid"
    assert run.data.params["ranking.enabled"] == "true"
    assert run.data.params["corpus.path"] == str(fixture_repo)
    for tag in ("git_commit", "corpus_fingerprint", "golden_fingerprint", "model_id"):
        assert run.data.tags[tag], tag
    golden = load_golden(fixture_golden)
    assert run.data.tags["golden_fingerprint"] == golden.fingerprint
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    # run file and qrels named .txt: the MLflow UI previews them
    assert names == ["calibration.json", "config.yaml", "figures", "per_query.csv",
                     "qrels.txt", "run.chunks.jsonl", "run.chunks.trec.txt", "run.trec.txt",
                     "token_budget.csv"]
    figures = sorted(a.path for a in client.list_artifacts(run.info.run_id, "figures"))
    assert figures == ["figures/risk_coverage.png", "figures/score_histograms.png",
                       "figures/token_budget.png"]
    # the token-budget curve: one line per budget, recall never falling as the budget grows,
    # and its 2,048-token point the row's own metric
    import csv

    curve = list(csv.DictReader(open(client.download_artifacts(
        run.info.run_id, "token_budget.csv", str(tmp_path)))))
    assert [int(c["budget"]) for c in curve] == [2 ** k for k in range(7, 15)]
    recall = [float(c["recall"]) for c in curve]
    assert recall == sorted(recall)
    at_2k = next(float(c["recall"]) for c in curve if c["budget"] == "2048")
    assert at_2k == pytest.approx(run.data.metrics["token_recall_at_2048"], abs=1e-6)
    for name in figures:
        png = Path(client.download_artifacts(run.info.run_id, name, str(tmp_path)))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the MLflow UI: the run lasts the evaluation (not the ~0.3 s of logging), the golden set
    # is its input dataset (digest = golden fingerprint), params spelled as the config spells
    # them, headline metrics logged first
    assert run.info.end_time - run.info.start_time >= 1000 * metrics["wall_s"] - 1
    assert run.info.start_time <= run.info.end_time
    [ds] = run.inputs.dataset_inputs
    assert ds.dataset.name == fixture_golden.name
    assert ds.dataset.digest == run.data.tags["golden_fingerprint"][:36]
    assert {t.key: t.value for t in ds.tags} == {"mlflow.data.context": "eval"}
    assert json.loads(ds.dataset.profile) == {"positives": 3, "negatives": 1,
                                              "tags": ["docs", "prose", "symbol"]}
    assert run.data.params["tracking.enabled"] == "true"
    assert run.data.params["eval.check_links"] == "false"
    assert run.data.params["corpus.url_template"] == "null"
    assert run.data.params["search.fuse"] == "[dense, bm25]"
    assert "True" not in run.data.params.values() and "None" not in run.data.params.values()
    from rag.ledger.metric_groups import HEADLINE

    with sqlite3.connect(tmp_path / "mlflow.db") as con:  # the store keeps the logging order
        logged = [k for (k,) in con.execute(
            "SELECT key FROM latest_metrics WHERE run_uuid = ? ORDER BY rowid",
            (run.info.run_id,))]
    assert logged[:3] == ["mrr", "recall_at_8", "ndcg_at_10"]
    assert not any("/" in k and k.split("/")[0] in ("prose", "symbol", "config") for k in logged)
    assert {"tag.prose.recall_at_8", "tag.symbol.mrr"} <= set(logged)
    head = [k for k in logged if k in HEADLINE]
    assert logged[:len(head)] == head
    local = Path(client.download_artifacts(run.info.run_id, "calibration.json", str(tmp_path)))
    cal = json.loads(local.read_text())
    per_query = Path(client.download_artifacts(run.info.run_id, "per_query.csv", str(tmp_path)))
    import pandas as pd
    table = pd.read_csv(per_query)
    pos = table[table.kind == "positive"]
    neg = table[table.kind == "negative"]
    assert cal["positive_min_top_dense"] == pytest.approx(pos.top_dense.min())
    assert cal["negative_max_top_dense"] == pytest.approx(neg.top_dense.max())
    assert metrics["mrr"] == pytest.approx(pos.mrr.mean())
    assert table.set_index("query_id").loc["sym-auth-callback", "first_relevant_rank"] == 1
    trec = Path(client.download_artifacts(run.info.run_id, "run.trec.txt", str(tmp_path))).read_text()
    first = [ln.split() for ln in trec.splitlines() if ln.startswith("sym-auth-callback ")][0]
    assert first[:4] == ["sym-auth-callback", "Q0", "src/shop/payments.py#handleAuthCallback", "1"]
    report = (tmp_path / "ledger.md").read_text()
    assert run.info.run_id[:8] in report and "GENERATED FILE" in report
    # the report embeds the row's pictures, copied beside it
    for name, title in (("score_histograms", "Scores of positives and negatives"),
                        ("risk_coverage", "Risk–coverage")):
        link = f"figures/{run.info.run_id[:12]}/{name}.png"
        assert f"![{title}]({link})" in report
        assert (tmp_path / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # second run: everything comes from the embedding cache
    stages.clear()
    again = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                  "search.mode=dense")), stages=stages)
    assert again["index/chunks_embedded"] == 0
    assert again["index/chunks_from_cache"] == metrics["index/chunks"]
    # a BM25-only run needs no dense channel: it embeds nothing, not even from the cache
    stages.clear()
    lexical = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                    "search.mode=bm25")), stages=stages)
    assert lexical["index/chunks_embedded"] == 0 and lexical["index/chunks_from_cache"] == 0
    assert lexical["mrr"] > 0 and "abstention/top_dense/auc" not in lexical
    assert len(client.search_runs([exp.experiment_id])) == 3
    assert len(re.findall(r"^\| `[0-9a-f]{8}`", (tmp_path / "ledger.md").read_text(), flags=re.M)) == 3


@pytest.mark.slow
def test_missing_label_path_fails_and_writes_no_row(tmp_path, fixture_repo, fixture_golden):
    q = fixture_golden / "queries.yaml"
    q.write_text(q.read_text().replace("path: docs/guide.md", "path: docs/missing.md")
                 .replace("symbol: apply_discount_code", "symbol: no_such_function"))
    proc = _rag_run(run_overrides(tmp_path, fixture_repo, fixture_golden), tmp_path)
    assert proc.returncode != 0
    assert "docs/missing.md" in proc.stderr and "no_such_function" in proc.stderr
    assert "prose-deploy" in proc.stderr and "prose-voucher" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _mlflow_runs(tmp_path / "mlflow.db") == []


@pytest.mark.slow
def test_empty_corpus_is_a_clear_error(tmp_path, fixture_golden):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _rag_run(run_overrides(tmp_path, empty, fixture_golden), tmp_path)
    assert proc.returncode == 2
    assert "no indexable text file" in proc.stderr and "Traceback" not in proc.stderr
    assert _mlflow_runs(tmp_path / "mlflow.db") == []


def test_unknown_config_key_is_rejected(tmp_path, fixture_repo, fixture_golden):
    proc = _rag_run([*run_overrides(tmp_path, fixture_repo, fixture_golden), "search.topk=3"],
                    tmp_path)
    assert proc.returncode != 0
    assert "topk" in proc.stderr
    assert _mlflow_runs(tmp_path / "mlflow.db") == []


def test_embedding_cache_embeds_nothing_the_second_time(tmp_path, fixture_repo, embedder):
    from rag.index.build import build_index

    first = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    second = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    assert first.stats["chunks_embedded"] == len(first.chunks) > 0
    assert second.stats["chunks_embedded"] == 0
    np.testing.assert_array_equal(first.dense.matrix, second.dense.matrix)
    norms = np.linalg.norm(first.dense.matrix, axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    # a changed file re-embeds only its own chunks
    p = fixture_repo / "src/shop/payments.py"
    p.write_text(p.read_text() + "\n\ndef new_function():\n    return 1\n")
    third = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    changed = {c.content_hash for c in third.chunks} - {c.content_hash for c in first.chunks}
    assert third.stats["chunks_embedded"] == len(changed) >= 1


def test_dense_exact_cosine_matches_numpy(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index

    index = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    q = index.dense.embed_query("refund a cancelled order")
    scores = index.dense.scores(q)
    ref = np.array([float(np.dot(v, q)) for v in index.dense.matrix])
    np.testing.assert_allclose(scores, ref, rtol=1e-5, atol=1e-6)
    top = index.dense.top(scores, 3)
    assert [i for i, _ in top] == list(np.argsort(-ref, kind="stable")[:3])
    assert index.chunks[top[0][0]].symbol == "refund_order"


@pytest.mark.slow
def test_logs_never_contain_the_query_text(tmp_path, fixture_repo, fixture_golden):
    marker = "zanzibar quokka marmalade"
    q = fixture_golden / "queries.yaml"
    q.write_text(q.read_text().replace("how do customers use a voucher to pay less", marker))
    n = fixture_golden / "negatives.yaml"
    n.write_text(n.read_text().replace("who won the football world cup in 1998",
                                       "xylophone " + marker))
    proc = _rag_run(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                  "tracking.enabled=false"), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = [p.read_text() for p in (tmp_path / "out").rglob("*.log")]
    assert logs, "hydra wrote no job log"
    for text in (proc.stdout, proc.stderr, *logs):
        assert "quokka" not in text and "xylophone" not in text


@pytest.mark.slow
def test_every_sweep_file_composes_and_validates(compose, tmp_path):
    """No sweep file rots: every job of every sweep composes against the schema and passes
    validation (a dry run of each job's config), and the baseline is the first job. A sweep of
    ``dataset.*`` keys (run under ``+suite=semble``) is composed under a semble dataset."""
    import itertools

    from semble_dataset import make_dataset

    semble = ["dataset=semble", f"dataset.path={make_dataset(tmp_path / 'semble')}",
              "dataset.repo=chi"]

    from rag.app.config import validate

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from rag.app.config import register_resolvers

    register_resolvers()
    parser = OverridesParser.create()

    def resolved(value) -> str:
        return str(OmegaConf.create({"v": str(value)}).v)

    def values(override: str) -> list[str]:
        ov = parser.parse_override(override)
        if ov.is_sweep_override():
            return list(ov.sweep_string_iterator())
        return [ov.get_value_element_as_str()]

    sweeps = sorted((PROJECT / "conf/sweep").glob("*.yaml"))
    assert {p.stem for p in sweeps} >= {"routing", "prose_mode", "topk", "thresholds", "rrf_k",
                                         "bm25_backend", "embedder"}
    for path in sweeps:
        text = path.read_text()
        assert text.startswith("# @package _global_"), path.name
        assert f"+sweep={path.stem}" in text.splitlines()[1], path.name
        raw = yaml.safe_load(text)
        assert raw["hydra"]["mode"] == "MULTIRUN"
        # a value may come from a resolver (${rag_ranking_ablations:}); Hydra's own parser
        # splits the sweep (lists hold commas)
        swept = {k: values(f"{k}={resolved(v)}") for k, v in raw["hydra"]["sweeper"]["params"].items()}
        baseline = dict(o.split("=", 1) for o in resolved(raw["sweep"]["baseline"]).split())
        for key, value in baseline.items():
            assert swept[key][0] == values(f"{key}={value}")[0], (path.name, key)
        jobs = list(itertools.product(*[[f"{k}={v}" for v in vals] for k, vals in swept.items()]))
        assert len(jobs) >= 2
        for job in jobs:
            under = semble if any(o.startswith("dataset.") for o in job) else []
            cfg = compose([f"+sweep={path.stem}", *under, *job])
            assert cfg.sweep.name == path.stem
            validate(cfg)



def test_chunk_store_skips_reading_an_unchanged_corpus(tmp_path, fixture_repo):
    from rag.index.build import build_index

    kw = dict(embedder=None, cache_dir=None, progress=False, chunk_store=tmp_path / "store")
    first = build_index(fixture_repo, **kw)
    second = build_index(fixture_repo, **kw)
    assert (first.stats["corpus_read"], second.stats["corpus_read"]) == (1, 0)
    assert second.chunks == first.chunks
    assert second.corpus_fingerprint == first.corpus_fingerprint
    assert second.stats["files_indexed"] == first.stats["files_indexed"]
    # a changed file (new size) invalidates the store
    p = fixture_repo / "docs/guide.md"
    p.write_text(p.read_text() + "\n## Shipping\n\nParcels leave within two days.\n")
    third = build_index(fixture_repo, **kw)
    assert third.stats["corpus_read"] == 1
    assert "Shipping" in {c.symbol for c in third.chunks}
    # only the changed file was chunked again; the others kept their chunks
    assert third.stats["files_rechunked"] == 1 and third.stats["files_changed"] == 1
    assert third.stats["files_added"] == 0 and third.stats["files_removed"] == 0
    assert third.corpus_fingerprint != first.corpus_fingerprint
    # other chunker settings are a different store
    fourth = build_index(fixture_repo, **{**kw, "window_lines": 30})
    assert fourth.stats["corpus_read"] == 1


@pytest.mark.slow
def test_abstention_never_moves_ranking_metrics(tmp_path, fixture_repo, fixture_golden, compose,
                                                 embedder, monkeypatch):
    """Issue 11: only abstain.* changes -> every ranking metric bit-identical, the returned
    half differs (one positive's top cosine is below the raised floor)."""
    import rag.app.run as run_mod

    stages = StageCache(embedder=embedder)
    base = run_overrides(tmp_path, fixture_repo, fixture_golden, "search.mode=dense",
                         "tracking.enabled=false")
    low = run_mod.run_job(compose(base + ["abstain.min_dense=0", "abstain.weak_dense=0"]), stages=stages)
    pos_min = low["calibration/positive_min_top_dense"]
    high = run_mod.run_job(compose(base + [f"abstain.min_dense={pos_min + 1e-4:.6f}",
                                           "abstain.weak_dense=0.99",
                                           "abstain.trust_definitions=false"]), stages=stages)
    ranking = [k for k in low if k.startswith(("recall_at_", "hit_at_", "ndcg_at_", "mrr",
                                               "tag.prose.", "tag.symbol.", "tag.docs."))
               and "lost_at/" not in k]  # where a positive was lost: abstention is a stage
    assert "mrr" in ranking and "recall_at_8" in ranking and "ndcg_at_10" in ranking
    assert {k: low[k] for k in ranking} == {k: high[k] for k in ranking}
    # every positive returned under the open bands is lost at abstention under the closed ones
    assert low["lost_at/abstained"] == 0 and low["lost_at/returned"] > 0
    assert high["lost_at/abstained"] == low["lost_at/returned"] and high["lost_at/returned"] == 0
    assert low["dropped_rate"] == 0.0 and high["dropped_rate"] == pytest.approx(1 / 3)
    assert low["abstain_rate"] == 0.0 and high["abstain_rate"] == 1.0
    assert high["answer_support_rate"] == pytest.approx(low["answer_support_rate"] - 1 / 3)


def test_the_row_says_what_abstention_reads_and_where_it_cuts():
    from omegaconf import OmegaConf

    from rag.app.run import abstention_text

    cfg = OmegaConf.create({"abstain": {"min_dense": None, "weak_dense": None}})
    gate = {"abstain_signal": "learned", "abstain_min": "0.5269", "abstain_weak": "0.9009",
            "abstain_gate_features": "top_dense,term_coverage"}
    assert abstention_text(gate, cfg, "hybrid") == (
        "learned gate P(answerable) from top_dense, term_coverage: dropped < 0.5269, "
        "weak < 0.9009")
    bands = {"abstain_signal": "top_dense", "abstain_min": "0.3094", "abstain_weak": "0.4067"}
    assert abstention_text(bands, cfg, "bm25") == (
        "top dense cosine: dropped < 0.3094, weak < 0.4067 (never acts: search.mode=bm25 runs "
        "no dense channel)")


def test_the_printed_row_names_a_non_default_content_and_file_saturation(compose, tmp_path):
    """The header line of a row says when the index holds code only and the ranking stage
    saturates files (what dataset=semble sets), and says nothing of them by default."""
    import io

    from rag.app.run import print_row

    def header(overrides):
        out = io.StringIO()
        print_row(None, compose(overrides), {"n_positives": 1, "n_negatives": 0}, {}, out=out)
        return next(ln for ln in out.getvalue().splitlines() if ln.startswith("  corpus "))

    plain = header(["corpus.name=shop"])
    assert plain.startswith("  corpus shop  mode=") and "content=" not in plain
    assert "file_saturation" not in plain and "ranking=off" not in plain
    task = header(["corpus.name=shop", "corpus.content=code", "ranking.file_saturation=0.5"])
    assert task.startswith("  corpus shop (content=code)  mode=")
    assert " fusion=wsum norm=min-max file_saturation=0.5 rerank=" in task
    assert " fusion=wsum norm=min-max ranking=off rerank=" in header(["corpus.name=shop",
                                                                       "ranking.enabled=false"])
    # rrf_k is printed where it is read
    assert " fusion=rrf rrf_k=60 rerank=" in header(["corpus.name=shop", "fusion=rrf"])
