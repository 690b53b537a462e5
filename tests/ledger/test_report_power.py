"""rag/ledger/report.py render_power: the sweep's minimum detectable effects, never printed as
an absurd number (MLflow keeps inf as the largest float)."""

from __future__ import annotations

from rag.ledger.report import LedgerRow, render_power


def _row(rid, mde_mrr, mde_r8, job):
    return LedgerRow(run_id=rid, experiment="rag-x", run_name=job, start_time_ms=0,
                     metrics={"vs_baseline/mrr_mde": mde_mrr, "vs_baseline/recall_at_8_mde": mde_r8,
                              "vs_baseline/paired_queries": 3.0},
                     tags={"sweep_job": job})


def test_an_infinite_effect_is_na_and_says_why():
    lines = render_power([_row("a" * 32, 1.7976931348623157e308, float("inf"), "bm25")], None)
    text = "\n".join(lines)
    assert "bm25: MRR n/a, Recall@8 n/a" in text and "e308" not in text
    assert "**Power unknown:** with 3 paired positives" in text
    assert len(max(lines, key=len)) < 400


def test_a_large_effect_flags_the_sweep_underpowered():
    text = "\n".join(render_power([_row("b" * 32, 0.2, 0.1, "dense")], None))
    assert "dense: MRR 0.200, Recall@8 0.100" in text and "**Underpowered:**" in text
