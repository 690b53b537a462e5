"""A suite: the same configuration on two corpora in one multirun (one row per corpus,
significance per corpus, a suite summary in the report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURE_FILES, write_tree


def test_suite_summary_by_hand():
    from rag.ledger.report import LedgerRow
    from rag.ledger.sweep import suite_summary

    def row(exp, job, mrr, **extra):
        return LedgerRow(run_id=f"{exp}{job}", experiment=exp, run_name="", start_time_ms=0,
                         metrics={"mrr": mrr, "recall_at_8": mrr / 2, **extra},
                         tags={"sweep_job": job, "suite": "s"})

    rows = [row("rag-a", "corpus=a search.mode=dense", 0.5),
            row("rag-b", "corpus=b search.mode=dense", 0.3),
            row("rag-a", "corpus=a search.mode=bm25", 0.7, mrr_delta=0.2, mrr_p_holm=0.01),
            row("rag-b", "corpus=b search.mode=bm25", 0.2, mrr_delta=-0.1, mrr_p_holm=0.2)]
    table = suite_summary(rows)
    assert [g["config"] for g in table] == ["search.mode=dense", "search.mode=bm25"]
    assert table[0]["macro"]["mrr"] == pytest.approx(0.4)
    assert table[1]["macro"]["mrr"] == pytest.approx(0.45)
    assert table[1]["macro"]["recall_at_8"] == pytest.approx(0.225)
    assert table[1]["corpora"]["rag-b"]["mrr_delta"] == -0.1


@pytest.mark.slow
def test_suite_multirun_rows_per_corpus_and_summary(tmp_path):
    """Two corpus configs found on hydra.searchpath, a suite over them combined with the
    routing sweep: 2 corpora x 2 modes = 4 rows, baselines paired within each corpus, one
    parent run per corpus experiment, and the report's suite table."""
    from mlflow.tracking import MlflowClient

    files_b = {k: v for k, v in FIXTURE_FILES.items() if not k.startswith("docs/")}
    repo_a = write_tree(tmp_path / "a", FIXTURE_FILES)
    repo_b = write_tree(tmp_path / "b", files_b)
    golden = tmp_path / "golden"
    for name in ("shop-a", "shop-b"):
        write_tree(golden / name, {
            "queries.yaml": f"corpus: {name}\nqueries:\n"
                            "  - id: q-refund\n    query: refund a cancelled order\n"
                            "    relevant:\n      - path: src/shop/payments.py\n"
                            "  - id: q-cart\n    query: add an item to the cart\n"
                            "    relevant:\n      - path: src/shop/cart.py\n",
            "negatives.yaml": "negatives:\n  - id: n1\n    query: weather in Paris\n"})
    conf = tmp_path / "conf"
    for name, repo in (("shop_a", repo_a), ("shop_b", repo_b)):
        write_tree(conf / "corpus", {f"{name}.yaml": f"name: {name.replace('_', '-')}\n"
                                     f"path: {repo}\nsdist: null\n"
                                     f"golden_dir: {golden / name.replace('_', '-')}\n"})
    write_tree(conf / "suite", {"two.yaml": "# @package _global_\nsuite:\n  name: two\n"
                                "hydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n"
                                "      corpus: shop_a,shop_b\n"})
    write_tree(conf / "sweep", {"modes.yaml": "# @package _global_\nsweep:\n  name: modes\n"
                                "  baseline: search.mode=dense\nhydra:\n  sweeper:\n"
                                "    params:\n      search.mode: dense,bm25\n"})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", f"hydra.searchpath=[file://{conf}]", "+suite=two",
         "+sweep=modes", f"paths.cache_dir={tmp_path / 'cache'}", f"tracking.uri=sqlite:///{db}",
         f"tracking.artifact_root={tmp_path / 'mlartifacts'}",
         f"tracking.report_path={tmp_path / 'ledger.md'}", f"hydra.sweep.dir={tmp_path / 'multi'}"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    for name in ("shop-a", "shop-b"):
        exp = client.get_experiment_by_name(f"rag-{name}")
        runs = client.search_runs([exp.experiment_id])
        parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
        rows = [r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        assert len(rows) == 2 and all(r.data.tags["suite"] == "two" for r in rows)
        assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in rows)
        base = next(r for r in rows if r.data.tags["is_baseline"] == "true")
        job = next(r for r in rows if r.data.tags["is_baseline"] != "true")
        # paired with the baseline of its own corpus
        assert job.data.tags["baseline_run_id"] == base.info.run_id
        assert job.data.metrics["vs_baseline/mrr_delta"] == pytest.approx(
            job.data.metrics["mrr"] - base.data.metrics["mrr"])
        summary = json.loads(open(client.download_artifacts(
            parents[0].info.run_id, "suite_summary.json", str(tmp_path / name))).read())
        dense = next(g for g in summary if g["config"] == "search.mode=dense")
        assert set(dense["corpora"]) == {"rag-shop-a", "rag-shop-b"}
        assert dense["macro"]["mrr"] == pytest.approx(
            sum(v["mrr"] for v in dense["corpora"].values()) / 2)
    report = (tmp_path / "ledger.md").read_text()
    assert "# Suites" in report and "## Suite `two`" in report
    assert "| `search.mode=bm25` |" in report and "MRR rag-shop-a" in report


def test_suite_macro_is_absent_when_a_corpus_has_no_row():
    from rag.ledger.report import LedgerRow, render_suites
    from rag.ledger.sweep import suite_summary

    def row(exp, job, mrr, t, **extra):
        return LedgerRow(run_id=exp + job, experiment=exp, run_name="", start_time_ms=t,
                         metrics={"mrr": mrr, "recall_at_8": mrr / 2, **extra},
                         tags={"sweep_job": job, "suite": "s", "sweep_id": "S1",
                               "sweep_name": "routing", "sweep_baseline": "search.mode=dense"})

    rows = [row("rag-a", "corpus=a search.mode=dense", 0.6, 1),
            row("rag-b", "corpus=b search.mode=dense", 0.3, 2),
            row("rag-a", "corpus=a search.mode=bm25", 0.7, 3, mrr_delta=0.1, mrr_p_holm=0.01)]
    table = suite_summary(rows)
    assert table[0]["macro"]["mrr"] == pytest.approx(0.45)
    assert "mrr" not in table[1]["macro"] and table[1]["corpora_with_rows"] == "1/2"
    text = "\n".join(render_suites(rows))
    # rag gate's verdict beside a paired comparison: +0.1 past the margin, p (Holm) 0.01
    assert ("| `search.mode=bm25` | 0.700 (+0.100, p 0.010*) improvement | — | n/a (1/2 "
            "corpora) |") in text
    drop = [*rows[:2], row("rag-a", "corpus=a search.mode=bm25", 0.55, 3, mrr_delta=-0.05,
                           mrr_p_holm=0.3, mrr_ci_low=-0.12, mrr_ci_high=0.02)]
    assert "0.550 (-0.050, p 0.300) inconclusive |" in "\n".join(render_suites(drop))


def test_tsv_topics_mentioning_topic_tags_stay_tsv(tmp_path):
    from rag.datasets.trec import read_topics

    f = tmp_path / "t.tsv"
    f.write_text("q1\thow do I render the page\nq2\twhat is <topic> in DITA\n")
    assert [(t.id, t.text) for t in read_topics(f)] == [
        ("q1", "how do I render the page"), ("q2", "what is <topic> in DITA")]


def test_suite_corpora_read_hydra_sweep_syntax(tmp_path):
    from omegaconf import OmegaConf

    from rag.app.config import PathsConfig
    from rag.app.sweep_callback import suite_corpora

    conf = tmp_path / "conf"
    for name in ("a", "b"):
        write_tree(conf / "corpus", {f"{name}.yaml": f"path: /src/{name}\nname: corpus-{name}\n"})

    def cfg(params, task=()):
        return OmegaConf.create({
            "suite": {"name": "s"}, "paths": OmegaConf.structured(PathsConfig),
            "dataset": {"format": "none", "name": None},
            "hydra": {"sweeper": {"params": {"corpus": params}},
                      "overrides": {"task": list(task)},
                      "runtime": {"config_sources": [{"path": str(conf), "schema": "file"}]}}})

    assert suite_corpora(cfg("a,b")) == {"a": "corpus-a", "b": "corpus-b"}
    assert suite_corpora(cfg("choice(a,b)")) == {"a": "corpus-a", "b": "corpus-b"}
    assert suite_corpora(cfg("a,b", ["corpus=b"])) == {"b": "corpus-b"}
    with pytest.raises(ValueError, match="list the corpora"):
        suite_corpora(cfg("glob(*)"))
    with pytest.raises(ValueError, match="corpus 'c' has no config"):
        suite_corpora(cfg("a,c"))
