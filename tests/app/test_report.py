"""Markdown ledger rendering: single runs, sweep sections, Holm-corrected marks."""

from __future__ import annotations

import re

from rag.ledger.report import LedgerRow, render_ledger


def _row(rid, t, *, sweep=None, job=None, baseline=False, sweep_baseline="search.mode=dense",
         **metrics):
    tags = {"model_id": "m|x"}
    if sweep:
        tags.update(sweep_name=sweep, sweep_id=f"{sweep}-1", sweep_job=job,
                    sweep_baseline=sweep_baseline, is_baseline=str(baseline).lower())
    return LedgerRow(run_id=rid, experiment="rag-x", run_name=job or "", start_time_ms=t,
                     params={"search.mode": (job or "auto").split("=")[-1]},
                     metrics={"mrr": 0.5, "recall_at_8": 0.6, **metrics}, tags=tags)


def test_sweep_section_with_holm_marks():
    rows = [
        _row("a" * 32, 1, sweep="routing", job="search.mode=dense", baseline=True),
        _row("b" * 32, 2, sweep="routing", job="search.mode=bm25", mrr_delta=0.1, mrr_p=0.01,
             recall_at_8_delta=0.05, recall_at_8_p=0.03),
        _row("c" * 32, 3, sweep="routing", job="search.mode=auto", mrr_delta=-0.02, mrr_p=0.04,
             recall_at_8_delta=0.0, recall_at_8_p=0.9),
        _row("d" * 32, 0),
    ]
    text = render_ledger(rows, source="sqlite:///x")
    assert "## Single runs" in text and "`dddddddd`" in text
    assert "## Sweep `routing`" in text and "(row `aaaaaaaa`)" in text
    # Holm over MRR p = [0.01, 0.04]: 0.01*2 = 0.02 (*), max(0.02, 0.04*1) = 0.04 (*)
    assert "+0.100 (p 0.020*)" in text and "-0.020 (p 0.040*)" in text
    # Holm over Recall@8 p = [0.03, 0.9]: 0.06 (no mark), 0.9
    assert "+0.050 (p 0.060)" in text and "+0.000 (p 0.900)" in text
    only = render_ledger(rows, source="sqlite:///x", sweep="routing")
    assert "Single runs" not in only and len(re.findall(r"^\| `[0-9a-f]{8}`", only, flags=re.M)) == 3
    assert "No rows for sweep `topk`" in render_ledger(rows, source="s", sweep="topk")
    # the id a sweep prints at its end selects the same rows as its name
    assert render_ledger(rows, source="sqlite:///x", sweep="routing-1").replace(
        "sweep `routing-1`", "sweep `routing`") \
        == only


def test_rerank_sweep_shows_pool_recall_and_gate_table():
    base = _row("a" * 32, 1, sweep="rerank", job="search.mode=auto rerank=disabled", baseline=True,
                sweep_baseline="search.mode=auto rerank=disabled",
                abstain_rate=0.4, false_weak_rate=0.1, n_negatives=25.0, n_positives=104.0,
                candidate_pool_recall=0.9)
    base.params.update({"search.mode": "auto", "abstain.min_dense": "0.45", "abstain.weak_dense": "0.55",
                        "rerank.enabled": "False", "rerank.candidates": "40"})
    ce = _row("b" * 32, 2, sweep="rerank", job="search.mode=auto rerank=cross_encoder",
              candidate_pool_recall=0.9, latency_rerank_p50_ms=812.5,
              **{"rerank_gate/0.05/abstain_rate": 0.96, "rerank_gate/0.05/false_weak_rate": 0.3,
                 "rerank_gate/0.5/abstain_rate": 1.0, "rerank_gate/0.5/false_weak_rate": 0.6})
    ce.params.update({"rerank.enabled": "True", "rerank.kind": "cross_encoder"})
    text = render_ledger([base, ce], source="s", sweep="rerank")
    assert "Recall@40 of the candidate pool" in text
    assert "| off |" in text and "| cross_encoder |" in text
    assert "| `search.mode=auto rerank=disabled`: dense floor 0.45 + note 0.55 | 0.400 | 0.100 | 0 |" in text
    assert ("| `search.mode=auto rerank=cross_encoder`: cross_encoder score < 0.05 | 0.960 | "
            "0.300 | +812.5 |") in text
    assert "cross_encoder score < 0.5 | 1.000 | 0.600 | +812.5 |" in text
    assert "abstain (25 negatives)" in text and "false_weak (104 positives)" in text
    # another sweep gets neither the pool column nor a gate table
    other = render_ledger([_row("c" * 32, 1, sweep="routing", job="search.mode=bm25", baseline=True,
                                candidate_pool_recall=0.5)], source="s")
    assert "candidate pool" not in other and "Abstention gate" not in other


def test_unfinished_rows_are_listed_with_their_start_time_and_state():
    h = 3_600_000
    running = LedgerRow(run_id="e" * 32, experiment="rag-x", run_name="", start_time_ms=0,
                        tags={"sweep_name": "routing", "sweep_job": "search.mode=bm25"},
                        status="RUNNING")
    killed = LedgerRow(run_id="f" * 32, experiment="rag-x", run_name="old", start_time_ms=h,
                       status="KILLED")
    failed = LedgerRow(run_id="0" * 32, experiment="rag-y", run_name="bad", start_time_ms=2 * h,
                       status="FAILED")
    done = _row("d" * 32, 0)
    text = render_ledger([done], source="s", unfinished=[failed, killed, running],
                         now_ms=int(2.5 * h))
    assert "## Unfinished rows" in text and "3 ledger rows never finished" in text
    table = text[text.index("| run | experiment |"):text.index("# rag-x")]
    assert table.splitlines()[2:5] == [
        "| `eeeeeeee` | rag-x | search.mode=bm25 | 1970-01-01 00:00 | interrupted: RUNNING for 2.5 h |",
        "| `ffffffff` | rag-x | old | 1970-01-01 01:00 | interrupted: marked KILLED |",
        "| `00000000` | rag-y | bad | 1970-01-01 02:00 | failed while logging |"]
    assert "`dddddddd`" in text[text.index("## Single runs"):]  # the finished row, in its table
    # a sweep's section lists only that sweep's unfinished rows, even with no finished row
    only = render_ledger([], source="s", sweep="routing", unfinished=[running, killed],
                         now_ms=int(2.5 * h))
    assert "1 ledger row never finished" in only and "`eeeeeeee`" in only
    assert "`ffffffff`" not in only and "No rows for sweep `routing`" in only
    assert "Unfinished rows" not in render_ledger([done], source="s")


def _ledger_with_interrupted_rows(tmp_path):
    """A store with one finished row, one RUNNING for 30 h and one RUNNING since now."""
    import time

    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    done = ledger.log_row(experiment="rag-shop", run_name="done", params={"search.mode": "bm25"},
                          metrics={"mrr": 0.5}, tags={"corpus": "shop"}, artifacts={})
    exp = ledger.experiment_id("rag-shop")
    now = int(time.time() * 1000)
    old = ledger.client.create_run(exp, start_time=now - 30 * 3_600_000, run_name="killed-job",
                                   tags={"corpus": "shop"}).info.run_id
    fresh = ledger.client.create_run(exp, run_name="just-started",
                                     tags={"corpus": "shop"}).info.run_id
    return uri, ledger, done, old, fresh


def test_report_shows_interrupted_rows_and_marks_them_killed_after_the_grace_period(tmp_path,
                                                                                   capsys):
    import datetime as dt

    from rag.app.report import main

    uri, ledger, done, old, fresh = _ledger_with_interrupted_rows(tmp_path)
    out = tmp_path / "ledger.md"
    assert main(["--tracking-uri", uri, "--out", str(out)]) == 0
    text = out.read_text()
    started = dt.datetime.fromtimestamp(ledger.client.get_run(old).info.start_time / 1000,
                                        tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    assert f"| `{old[:8]}` | rag-shop | killed-job | {started} | interrupted: RUNNING for 30.0 h |" in text
    assert f"`{fresh[:8]}`" in text and f"`{done[:8]}` done" in text
    assert ledger.client.get_run(old).info.status == "RUNNING"  # a report alone edits nothing

    # default grace period (24 h): only the row RUNNING for 30 h is marked
    assert main(["--tracking-uri", uri, "--out", str(out), "--mark-killed-after-h"]) == 0
    assert f"marked 1 run(s) RUNNING for more than 24 h as KILLED: {old[:8]}" in capsys.readouterr().out
    statuses = {r: ledger.client.get_run(r).info.status for r in (done, old, fresh)}
    assert statuses == {done: "FINISHED", old: "KILLED", fresh: "RUNNING"}
    text = out.read_text()
    assert f"| `{old[:8]}` | rag-shop | killed-job | {started} | interrupted: marked KILLED |" in text
    assert "2 ledger rows never finished" in text

    assert main(["--tracking-uri", uri, "--out", str(out), "--mark-killed-after-h", "0"]) == 0
    assert ledger.client.get_run(fresh).info.status == "KILLED"


def test_report_on_a_store_that_is_not_a_database_is_one_error_line(tmp_path, capsys):
    from rag.app.cli import main as rag_main
    from rag.app.report import main

    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    out = tmp_path / "ledger.md"
    for run in (lambda a: main(a), lambda a: rag_main(["report", *a])):
        assert run(["--tracking-uri", f"sqlite:///{notes}", "--out", str(out)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: cannot open the ledger at sqlite:///{notes}: {notes} is not an "
                       "SQLite database"]
    missing = tmp_path / "missing.db"
    assert main(["--tracking-uri", f"sqlite:///{missing}", "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not out.exists() and not missing.exists()
    assert notes.read_text() == "not a database\n"


def test_a_sweep_names_its_own_columns():
    base = _row("a" * 32, 1, sweep="indexing", job="embedder=minilm", baseline=True,
                **{"index/embed_s": 73.46, "index/tokens_embedded": 250_000.0})
    short = _row("b" * 32, 2, sweep="indexing", job="embedder=minilm_seq128",
                 **{"index/embed_s": 40.04, "index/tokens_embedded": 150_000.0})
    for r in (base, short):
        r.params["sweep.columns"] = "[index/embed_s, index/tokens_embedded]"
    text = render_ledger([base, short], source="s", sweep="indexing")
    header = next(line for line in text.splitlines() if line.startswith("| job |"))
    assert header.endswith("| embed s | word pieces embedded |")
    assert "| 73.5 | 250000 |" in text and "| 40.0 | 150000 |" in text
    # a sweep that names none has no such columns
    plain = render_ledger([_row("c" * 32, 1, sweep="routing", job="search.mode=bm25",
                                baseline=True, **{"index/embed_s": 1.0})], source="s")
    assert "embed s" not in plain


def test_the_sweep_verdict_column_is_the_gates_rule():
    from rag.ledger.report import LedgerRow, _verdict_cell

    def job(delta, p, lo, hi):
        return LedgerRow(run_id="r", experiment="rag-x", run_name="j", start_time_ms=0,
                         metrics={"vs_baseline/mrr_delta": delta, "vs_baseline/mrr_p": p,
                                  "vs_baseline/mrr_ci_low": lo, "vs_baseline/mrr_ci_high": hi})

    # margin 0.01: a significant drop past it; a CI reaching past it; a narrow CI inside it;
    # a significant rise past it (Holm p from the sweep's table wins over the row's own p)
    assert _verdict_cell(job(-0.05, 0.001, -0.08, -0.02), "mrr", {}) == "**regression**"
    assert _verdict_cell(job(-0.05, 0.001, -0.08, -0.02), "mrr",
                         {"mrr_p_holm": 0.2}) == "inconclusive"
    assert _verdict_cell(job(0.0, 1.0, -0.04, 0.04), "mrr", {}) == "inconclusive"
    assert _verdict_cell(job(0.0, 1.0, -0.005, 0.005), "mrr", {}) == "pass"
    assert _verdict_cell(job(0.05, 0.001, 0.02, 0.08), "mrr", {}) == "improvement"
    assert _verdict_cell(LedgerRow(run_id="b", experiment="rag-x", run_name="b",
                                   start_time_ms=0), "mrr", {}) == "—"


def test_no_report_cell_prints_a_non_finite_or_absurd_number():
    """MLflow stores an infinite metric as ±1.797e308; a report must never print it as a
    309-digit number, nor inf or nan."""
    import re
    import sys

    from rag.ledger.report import LedgerRow, fmt, render_ledger

    assert fmt(sys.float_info.max) == fmt(float("inf")) == fmt(-1.7976931348623157e308) == "n/a"
    assert fmt(float("nan")) == "—" and fmt(0.1234) == "0.123" and fmt(12.34, "x_ms") == "12.3"
    from rag.ledger.report import _extra_cell

    assert _extra_cell(sys.float_info.max, "context_chars_mean") == "n/a"
    assert _extra_cell(1234.6, "context_chars_mean") == "1235"
    assert _extra_cell(0.51234, "filter_false_negative_rate") == "0.512"
    odd = LedgerRow(run_id="a" * 32, experiment="rag-shop", run_name="odd", start_time_ms=0,
                    params={"search.mode": "bm25"},
                    metrics={"mrr": float("inf"), "recall_at_8": sys.float_info.max,
                             "latency_p50_ms": -sys.float_info.max, "false_weak_rate": 0.5},
                    tags={"corpus": "shop"})
    text = render_ledger([odd], source="sqlite:///x")
    assert "odd" in text and "0.500" in text
    assert not re.search(r"\d{20,}", text) and not re.search(r"\b(inf|nan)\b", text, re.I)


def test_the_abstention_cell_says_off_where_the_route_scores_no_dense_cosine():
    from rag.ledger.report import abstention_cell

    def row(mode):
        return LedgerRow(run_id="a" * 32, experiment="rag-x", run_name="", start_time_ms=0,
                         params={"search.mode": mode, "abstain.min_dense": "0.3094",
                                 "abstain.weak_dense": "0.4067"})

    assert abstention_cell(row("hybrid")) == "top_dense [0.309, 0.407]"
    assert abstention_cell(row("dense")) == "top_dense [0.309, 0.407]"
    assert abstention_cell(row("bm25")) == "off (search.mode=bm25 runs no dense channel)"
    assert abstention_cell(row("grep")) == "off (search.mode=grep runs no dense channel)"
    # a learned gate acts on a BM25 route unless it reads a dense signal
    lexical = row("bm25")
    lexical.tags.update(abstain_signal="learned", abstain_gate_features="bm25_top_z,term_coverage",
                        abstain_min="0.5", abstain_weak="0.9")
    assert abstention_cell(lexical) == "learned [0.5, 0.9]"
    lexical.tags["abstain_gate_features"] = "top_dense,term_coverage"
    assert abstention_cell(lexical).startswith("off (search.mode=bm25")
