"""rag diff: per-query first-relevant ranks, wins/losses/ties, movers — by hand."""

from __future__ import annotations

import pytest

import json

import pandas as pd

from rag.ledger.diff import diff_per_query, render_text, summarize


def _frame(ranks: dict[str, float | None]) -> pd.DataFrame:
    return pd.DataFrame({"query_id": list(ranks), "tags": "prose",
                         "first_relevant_rank": [float("nan") if r is None else r for r in ranks.values()],
                         "top_hits": [f"hit-{q}" for q in ranks]}).set_index("query_id")


def test_wins_losses_ties_and_movers():
    a = _frame({"q1": 1, "q2": 3, "q3": None, "q4": 2, "q5": None, "only_a": 1})
    b = _frame({"q1": 1, "q2": 1, "q3": 4, "q4": 5, "q5": None, "only_b": 1})
    diffs = {d.query_id: d for d in diff_per_query(a, b)}
    assert set(diffs) == {"q1", "q2", "q3", "q4", "q5"}
    assert [diffs[q].outcome for q in ("q1", "q2", "q3", "q4", "q5")] == \
        ["tie", "win", "win", "loss", "tie"]
    s = summarize(list(diffs.values()), run_a="A", run_b="B", top=2)
    assert (s["wins_b"], s["losses_b"], s["ties"], s["queries"]) == (2, 1, 2, 5)
    # reciprocal-rank change: q2 |1/3 - 1| = 0.667, q3 |0 - 1/4| = 0.25, q4 |1/2 - 1/5| = 0.3
    assert [d["query_id"] for d in s["moved_most"]] == ["q2", "q4"]
    assert s["moved_most"][0]["rr_change"] == round(2 / 3, 4)
    json.dumps(s)  # JSON-ready
    text = render_text(s)
    assert "B wins 2, loses 1, ties 2" in text and "q2: A 3 -> B 1" in text


def test_rows_of_different_corpora_are_refused_naming_both():
    import pytest

    from rag.ledger.diff import DiffError, check_comparable

    shop = {"corpus": "shop", "corpus_root": "/src/shop", "golden_dir": "/g/shop",
            "golden_fingerprint": "aaaa"}
    flask = {"corpus": "flask", "corpus_root": "/src/flask", "golden_dir": "/g/flask",
             "golden_fingerprint": "bbbb"}
    with pytest.raises(DiffError) as err:
        check_comparable("1" * 32, shop, "2" * 32, flask)
    assert str(err.value) == (
        "rows 11111111 and 22222222 are from different corpora: 11111111 evaluated corpus "
        "'shop' (/src/shop) with golden set /g/shop [aaaa], 22222222 corpus 'flask' "
        "(/src/flask) with golden set /g/flask [bbbb]; a per-query comparison needs two rows "
        "of one corpus")
    assert check_comparable("1" * 32, shop, "2" * 32, dict(shop)) == []
    notes = check_comparable("1" * 32, shop, "2" * 32, {**shop, "golden_fingerprint": "cccc"})
    assert len(notes) == 1 and "golden sets differ" in notes[0] and "[cccc]" in notes[0]


PER_QUERY = ("query_id,kind,tags,first_relevant_rank,top_hits\n"
             "q1,positive,prose,1,a.py\nq2,positive,symbol,3,b.py\nn1,negative,off_topic,,\n")


def _store(tmp_path):
    """A store with two rows of corpus shop, one of corpus flask, one without artifacts and
    one left RUNNING."""
    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")

    def row(corpus, per_query, golden="g1"):
        return ledger.log_row(experiment=f"rag-{corpus}", run_name=corpus, params={},
                              metrics={"mrr": 0.5},
                              tags={"corpus": corpus, "golden_dir": f"/golden/{corpus}",
                                    "golden_fingerprint": golden},
                              artifacts={"per_query.csv": per_query} if per_query else {})

    ids = {"a": row("shop", PER_QUERY), "b": row("shop", PER_QUERY.replace("q2,positive,symbol,3",
                                                                            "q2,positive,symbol,1")),
           "flask": row("flask", PER_QUERY), "bare": row("shop", None),
           "disjoint": row("shop", PER_QUERY.replace("q1,", "x1,").replace("q2,", "x2,"),
                            golden="g2")}
    ids["running"] = ledger.client.create_run(ledger.experiment_id("rag-shop"),
                                              tags={"corpus": "shop"}).info.run_id
    return uri, ids


def test_rag_diff_maps_every_bad_input_to_one_error_line_and_exit_2(tmp_path, capsys):
    from rag.app.cli import main

    uri, ids = _store(tmp_path)

    def diff(a, b, store=uri):
        code = main(["diff", ids.get(a, a), ids.get(b, b), "--tracking-uri", store])
        out, err = capsys.readouterr()
        return code, out, err.splitlines()

    code, out, err = diff("a", "b")
    assert code == 0 and err == []
    assert "2 shared positive queries: B wins 1, loses 0, ties 1" in out

    code, _, err = diff("a", "flask")
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"error: rows {ids['a'][:8]} and {ids['flask'][:8]} are from "
                             "different corpora") and "'shop'" in err[0] and "'flask'" in err[0]

    code, _, err = diff("a", "bare")
    assert (code, err) == (2, [f"error: ledger row {ids['bare'][:8]} has no readable artifact "
                               f"per_query.csv (" + err[0].split(" (", 1)[1]])

    code, _, err = diff("a", "disjoint")
    assert code == 2 and err == [f"error: rows {ids['a'][:8]} and {ids['disjoint'][:8]} share no "
                                 "positive query (2 and 2 positives; golden sets /golden/shop "
                                 "and /golden/shop)"]

    code, _, err = diff("a", "running")
    assert code == 2 and err == [f"error: ledger row {ids['running'][:8]} never finished (status "
                                 "RUNNING: its process was interrupted); it has no results"]

    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    code, _, err = diff("a", "b", store=f"sqlite:///{notes}")
    assert code == 2 and err == [f"error: cannot open the ledger at sqlite:///{notes}: {notes} "
                                 "is not an SQLite database"]
    code, _, err = diff("a", "b", store=f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 2 and len(err) == 1 and "no such file" in err[0]
    assert not (tmp_path / "none.db").exists()


def test_python_m_rag_ledger_diff_points_at_rag_diff():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rag.ledger.diff", "a", "b"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "error: run `rag diff RUN_A RUN_B` (python -m rag.ledger.diff is not a command)"]


def test_diff_says_why_a_query_returned_nothing():
    a = _frame({"q1": 2, "q2": None, "q3": 1})
    b = _frame({"q1": 2, "q2": None, "q3": 1})
    a["returned_as"] = ["dropped", "empty", "returned"]
    b["returned_as"] = ["returned", "empty", "weak"]
    diffs = {d.query_id: d for d in diff_per_query(a, b)}
    # the ranking before abstention is the same: ties, yet A dropped q1 and B flagged q3 weak
    assert [diffs[q].outcome for q in ("q1", "q2", "q3")] == ["tie", "tie", "tie"]
    assert (diffs["q1"].returned_a, diffs["q1"].returned_b) == ("dropped", "returned")
    text = render_text(summarize(list(diffs.values()), run_a="A", run_b="B"))
    row = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln.startswith("q")}
    # query, tags, A, B, outcome, A stage, B stage, changed: these rows were logged before
    # per-stage attribution (stage '?'), what the caller got is beside it
    assert row["q1"] == ["prose", "2", "2", "tie", "?", "(dropped)", "?", "changed", "at", "unknown"]
    assert row["q2"] == ["prose", "-", "-", "tie", "?", "(empty)", "?", "(empty)"]
    assert row["q3"] == ["prose", "1", "1", "tie", "?", "?", "(weak)", "changed", "at", "unknown"]
    # nothing attributed on either side: no table of zeros per stage
    assert "where the positives were lost" not in text


def test_negatives_whose_abstention_changed_are_listed():
    from rag.ledger.diff import negatives_changed

    head = "query_id,kind,returned_as\n"
    a = head + "p1,positive,returned\nn1,negative,weak\nn2,negative,returned\nn3,negative,dropped\n"
    b = head + "p1,positive,returned\nn1,negative,weak\nn2,negative,dropped\nn3,negative,returned\n"
    got = negatives_changed(a, b)
    assert (got["negatives"], got["negatives_abstained_a"], got["negatives_abstained_b"]) == (3, 2, 2)
    assert got["negatives_changed"] == [
        {"query_id": "n2", "returned_a": "returned", "returned_b": "dropped"},
        {"query_id": "n3", "returned_a": "dropped", "returned_b": "returned"}]
    old = negatives_changed("query_id,kind\nn1,negative\n", b)  # a row from before the column
    assert old["negatives"] == 0 and old["negatives_changed"] == []
    text = render_text(summarize([], run_a="A", run_b="B") | got)
    assert "3 shared negatives: A abstained on 2, B on 2" in text and "n2: A returned -> B dropped" in text


@pytest.mark.slow
def test_rag_diff_to_a_closed_stdout_exits_141_silently(tmp_path):
    from conftest import run_rag

    uri, ids = _store(tmp_path)
    for extra in ([], ["--json"]):
        proc = run_rag("diff", ids["a"], ids["b"], "--tracking-uri", uri, *extra,
                       closed_stdout=True, timeout=300)
        assert proc.returncode == 141 and proc.stderr == "", (extra, proc.stderr[-2000:])


def test_paired_tests_are_the_sweeps_engine_with_holm_across_metrics():
    from rag.eval.significance import compare_paired, holm
    from rag.ledger.diff import paired_tests

    a = _frame({f"q{i}": 1 for i in range(12)})
    b = _frame({f"q{i}": 1 for i in range(12)})
    # mrr: B better on 8 of 12 queries by 0.5; ndcg_at_10: equal; q-extra only in B
    a["mrr"], b["mrr"] = [0.5] * 12, [1.0] * 8 + [0.5] * 4
    a["ndcg_at_10"] = b["ndcg_at_10"] = [0.25 * (i % 4) for i in range(12)]
    a["top_hits"] = "x"  # a column that is no metric: not tested
    got = {r["metric"]: r for r in paired_tests(a, b)}
    assert list(got) == ["mrr", "ndcg_at_10"]
    assert got["mrr"]["delta"] == pytest.approx(8 * 0.5 / 12) and got["mrr"]["queries"] == 12
    ref = compare_paired(a["mrr"].to_numpy(float), b["mrr"].to_numpy(float))
    assert (got["mrr"]["p"], got["mrr"]["ci_low"], got["mrr"]["mde"]) == \
        (ref.p_value, ref.ci_low, ref.mde)
    assert got["ndcg_at_10"]["delta"] == 0.0 and got["ndcg_at_10"]["p"] == 1.0
    assert [got[m]["p_holm"] for m in got] == holm([got[m]["p"] for m in got])
    text = render_text(summarize(diff_per_query(a, b), run_a="A", run_b="B")
                       | {"paired": list(got.values())})
    line = next(ln for ln in text.splitlines() if ln.startswith("mrr"))
    assert line.split()[1] == f"{8 * 0.5 / 12:+.4f}"
    assert paired_tests(a, _frame({"other": 1})) == []


def test_a_whole_run_id_resolves_by_one_lookup_as_a_prefix_would(tmp_path):
    """A whole id (what sweeps pass) is looked up directly; only a finished, active row that is
    no sweep parent resolves, exactly as the prefix scan decides."""
    from mlflow.tracking import MlflowClient

    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("rag-shop", artifact_location=str(tmp_path / "art"))
    done, running, deleted, parent = (client.create_run(exp).info.run_id for _ in range(4))
    for rid in (done, deleted, parent):
        client.set_terminated(rid, "FINISHED")
    client.delete_run(deleted)
    client.set_tag(parent, "rag.sweep_parent", "1")
    client.set_tag(parent, "sweep_id", "routing-1")
    client.set_tag(done, "sweep_id", "routing-1")
    ledger = Ledger(uri)
    assert ledger.resolve_run_id(done) == done == ledger.resolve_run_id(done[:10])
    # an id as a person types it: any case, stray spaces
    assert ledger.resolve_run_id(f" {done[:10].upper()} ") == done
    with pytest.raises(LookupError, match="never finished"):
        ledger.resolve_run_id(running)
    with pytest.raises(LookupError, match="no ledger row matches"):
        ledger.resolve_run_id(deleted)
    # a sweep's parent is named as one, with its rows
    with pytest.raises(LookupError, match=rf"'{parent[:8]}' is the parent run of sweep "
                                          rf"'routing-1', not a ledger row; its rows: {done[:8]}"):
        ledger.resolve_run_id(parent[:8])
    with pytest.raises(LookupError, match="empty run id"):
        ledger.resolve_run_id("  ")


def test_a_row_whose_abstention_never_acts_is_named():
    from rag.ledger.diff import never_acting_abstention

    note = never_acting_abstention(("row a", "hybrid"), ("row b", "bm25"))
    assert note.startswith("row b's abstention never acts (search.mode=bm25 runs no dense "
                           "channel): ") and "'abstained' stage" in note
    assert never_acting_abstention(("row a", "grep"), ("row b", "auto")).startswith("row a's")
    for a, b in (("hybrid", "dense"), ("bm25", "bm25"), (None, "bm25"), ("bm25", None)):
        assert never_acting_abstention(("row a", a), ("row b", b)) is None
