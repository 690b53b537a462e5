"""One contract for anything that retrieves (rag/eval/retriever.py): run files and Python objects are
judged by the same evaluator as the built-in pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag.app.stages import StageCache

from conftest import run_overrides
from rag.eval.retriever import Query, RunFileRetriever, load_factory, parse_run_file

RANKING = ("recall_at_1", "recall_at_8", "recall_at_40", "hit_at_1", "hit_at_8", "mrr",
           "ndcg_at_10", "tag.prose.mrr", "tag.symbol.mrr")


def test_parse_run_file_orders_by_rank_and_names_bad_lines(tmp_path):
    f = tmp_path / "r.trec"
    # ranks out of file order and equal 6-decimal scores: the rank column decides
    f.write_text("q1 Q0 b.py 2 0.500000 t\nq1 Q0 a.py#f 1 0.500000 t\n\nq2 Q0 c.py 1 3 t\n")
    assert parse_run_file(f) == {"q1": [("a.py#f", 0.5), ("b.py", 0.5)], "q2": [("c.py", 3.0)]}
    f.write_text("q1 Q0 a.py 1 0.5\n")
    with pytest.raises(ValueError, match=r"r.trec:1: a TREC run line has 6 fields"):
        parse_run_file(f)
    f.write_text("q1 Q0 a.py one 0.5 t\n")
    with pytest.raises(ValueError, match=r"r.trec:1: rank must be an integer"):
        parse_run_file(f)


def test_run_file_retriever_hits_and_missing_queries(tmp_path):
    f = tmp_path / "r.trec"
    f.write_text("q1 Q0 a.py#f 1 0.9 t\nq1 Q0 b.py 2 0.4 t\n")
    r = RunFileRetriever(f, top_k=1)
    res = r.retrieve(Query(id="q1", text="x"), depth=40)
    assert [(h.path, h.symbol) for h in res.ranked] == [("a.py", "f"), ("b.py", None)]
    assert [h.path for h in res.hits] == ["a.py"] and res.ranked[0].scores == {"run": 0.9}
    gone = r.retrieve(Query(id="q9", text="x"), depth=40)
    assert gone.ranked == [] and gone.reason == "not in the run file" and r.missing == ["q9"]
    assert gone.unanswered == "missing" and res.unanswered is None
    with pytest.raises(FileNotFoundError, match="no run file"):
        RunFileRetriever(tmp_path / "nope")


def test_load_factory_errors():
    assert load_factory("json:dumps") is json.dumps
    for spec, why in [("json", "expected 'module:function'"), ("no_such_mod:x", "cannot import"),
                      ("json:nope", "has no 'nope'")]:
        with pytest.raises(ValueError, match=why):
            load_factory(spec)


class EchoRetriever:
    """A user's retriever for the python kind: always ranks the payments module first."""

    kind = "python"
    top_k = 8

    def __init__(self, cfg):
        self.cfg = cfg

    def retrieve(self, query, *, depth):
        from rag.search.pipeline import Hit, SearchResult

        hits = [Hit(chunk_id="p", path="src/shop/payments.py", symbol=None, start_line=1,
                    end_line=2, category="source", score=1.0, scores={"echo": 1.0})]
        return SearchResult(hits=hits, ranked=hits, route="echo", top_dense=None, dropped=0,
                            weak_match=False, timings_ms={"total": 0.1})


def make_echo(cfg):
    return EchoRetriever(cfg)


@pytest.mark.slow
def test_run_trec_fed_back_reproduces_the_ranking_metrics(tmp_path, fixture_repo, fixture_golden,
                                                          compose, embedder, monkeypatch):
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod

    stages = StageCache(embedder=embedder)
    first = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                  "search.mode=hybrid")), stages=stages)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rag-shop")
    row = client.search_runs([exp.experiment_id])[0]
    trec = client.download_artifacts(row.info.run_id, "run.trec.txt", str(tmp_path))
    again = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                  "retriever.kind=run_file",
                                                  f"retriever.path={trec}")), stages=stages)
    assert {k: again[k] for k in RANKING} == {k: first[k] for k in RANKING}
    assert again["missing_queries"] == 0.0 and again["index/chunks_embedded"] == 0
    # a run file without one positive: that query scores 0 and is counted, not hidden
    short = tmp_path / "short.trec"
    short.write_text("".join(ln for ln in Path(trec).read_text().splitlines(keepends=True)
                             if not ln.startswith("prose-voucher ")))
    partial = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                    "retriever.kind=run_file",
                                                    f"retriever.path={short}",
                                                    "tracking.enabled=false")), stages=stages)
    assert partial["missing_queries"] == 1.0 and partial["failed_queries"] == 0.0
    import pandas as pd

    pq = pd.read_csv(client.download_artifacts(row.info.run_id, "per_query.csv", str(tmp_path)))
    voucher = float(pq.set_index("query_id").loc["prose-voucher", "mrr"])
    assert partial["mrr"] == pytest.approx(first["mrr"] - voucher / 3)
    replay = [r for r in client.search_runs([exp.experiment_id]) if r.info.run_id != row.info.run_id][0]
    assert replay.data.tags["retriever"] == "run_file" and len(replay.data.tags["retriever_run_fingerprint"]) == 64
    # a user's object through retriever=python: same evaluator, its own numbers
    echo = run_mod.run_job(compose(run_overrides(
        tmp_path, fixture_repo, fixture_golden, "retriever.kind=python",
        "retriever.factory=test_retriever:make_echo", "tracking.enabled=false")), stages=stages)
    # only sym-auth-callback's file is ranked, as a path (its label names a symbol): MRR 0
    assert echo["mrr"] == 0.0 and echo["n_positives"] == 3
    with pytest.raises(run_mod.RunError, match="retriever.kind=run_file needs retriever.path"):
        run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                              "retriever.kind=run_file", "tracking.enabled=false")), stages=stages)


def test_run_file_keeps_ties_and_decodes_docnos(tmp_path):
    from rag.eval.evaluate import trec_run_lines
    from rag.eval.golden import trec_docno

    run = {"q1": {"docs/a.rst#The Salt": 0.5, "b.py": 0.5, "c.py": 0.1234567890123}}
    lines = trec_run_lines(run, "t")
    assert lines[0].split()[2] == "b.py" and "docs/a.rst#The%20Salt" in lines[1]
    assert trec_docno("x%y z") == "x%25y%20z"
    f = tmp_path / "r.trec"
    f.write_text("\n".join(lines) + "\n")
    res = RunFileRetriever(f).retrieve(Query(id="q1", text="x"), depth=40)
    # the section symbol comes back with its space; the tie stays a tie; scores are exact
    assert [(h.path, h.symbol) for h in res.ranked] == [("b.py", None), ("docs/a.rst", "The Salt"),
                                                        ("c.py", None)]
    assert [h.score for h in res.ranked] == [0.5, 0.5, 0.1234567890123]
    # scores that disagree with the ranks: the rank order decides
    f.write_text("q1 Q0 a.py 1 0.1 t\nq1 Q0 b.py 2 0.9 t\n")
    res = RunFileRetriever(f).retrieve(Query(id="q1", text="x"), depth=40)
    assert [h.path for h in res.ranked] == ["a.py", "b.py"] and res.ranked[0].score > res.ranked[1].score
