"""Markdown ledger rendering: single runs, sweep sections, Holm-corrected marks."""

from __future__ import annotations

from rag.ledger.report import LedgerRow, render_ledger


def _row(rid, t, *, sweep=None, job=None, baseline=False, **metrics):
    tags = {"model_id": "m|x"}
    if sweep:
        tags.update(sweep_name=sweep, sweep_id=f"{sweep}-1", sweep_job=job,
                    sweep_baseline="search.mode=dense", is_baseline=str(baseline).lower())
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
    assert "Single runs" not in only and only.count("| `") == 3
    assert "No rows for sweep `topk`" in render_ledger(rows, source="s", sweep="topk")
