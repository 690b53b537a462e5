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


def test_rerank_sweep_shows_pool_recall_and_gate_table():
    base = _row("a" * 32, 1, sweep="rerank", job="search.mode=auto rerank=disabled", baseline=True,
                abstain_rate=0.4, false_weak_rate=0.1, n_negatives=25.0, n_positives=104.0,
                candidate_pool_recall=0.9)
    base.params.update({"abstain.min_dense": "0.45", "abstain.weak_dense": "0.55",
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
