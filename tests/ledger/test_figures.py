"""rag/ledger/figures.py: what each picture draws, read back from the matplotlib objects
(values worked out by hand), and that rendering writes a PNG without a global backend."""

from __future__ import annotations

import pytest

import numpy as np
import pandas as pd

from rag.ledger import figures

PNG = b"\x89PNG\r\n\x1a\n"


def _per_query() -> pd.DataFrame:
    return pd.DataFrame({
        "query_id": ["p1", "p2", "p3", "n1", "n2"],
        "kind": ["positive"] * 3 + ["negative"] * 2,
        "top_dense": [0.7, 0.6, 0.5, 0.3, 0.4],
        "first_relevant_rank": [1, 3, None, None, None]})


CAL = {"signals": {
    "top_dense": {"auc": 1.0, "overlap": False, "aurc": 0.1,
                  "weak": {"threshold": 0.45}, "drop": {"threshold": 0.35},
                  "risk_coverage": [[1.0, 0.4], [0.6, 0.0]]},
    "learned": {"auc": 0.5, "overlap": True, "aurc": 0.3, "weak": {}, "drop": {},
                "risk_coverage": [[1.0, 0.4], [0.5, 0.2]]}},
    "oof_learned": [0.9, 0.8, 0.2, 0.1, 0.6]}


def _vlines(ax) -> dict[str, float]:
    return {ln.get_label(): float(ln.get_xdata()[0]) for ln in ax.lines}


def test_score_histograms_draw_both_classes_and_every_threshold():
    fig = figures.score_histograms(_per_query(), CAL, in_force=("top_dense", 0.45, 0.55))
    top, learned = fig.axes
    assert top.get_title() == "top_dense: ROC AUC 1.000"
    assert learned.get_title() == "learned: ROC AUC 0.500  (overlap)"
    assert _vlines(top) == {"chosen weak 0.45": 0.45, "chosen drop 0.35": 0.35,
                            "in force min 0.45": 0.45, "in force weak 0.55": 0.55}
    assert _vlines(learned) == {}  # no threshold chosen, none in force on this signal
    # the bars count 3 positives and 2 negatives on each panel (learned: oof, positives first)
    for ax in (top, learned):
        pos, neg = ax.containers
        assert sum(p.get_height() for p in pos) == 3 and sum(p.get_height() for p in neg) == 2
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    assert "positives (3)" in labels and "negatives (2)" in labels


def test_risk_coverage_plots_each_signal_with_its_aurc():
    ax = figures.risk_coverage(CAL).axes[0]
    assert [ln.get_label() for ln in ax.lines] == ["top_dense (AURC 0.100)",
                                                   "learned (AURC 0.300)"]
    assert list(ax.lines[1].get_xdata()) == [1.0, 0.5]
    assert list(ax.lines[1].get_ydata()) == [0.4, 0.2]
    # a row without calibration says so instead of drawing nothing
    empty = figures.risk_coverage({}).axes[0]
    assert [t.get_text() for t in empty.texts] == ["no abstention calibration in this row"]


@pytest.mark.slow
def test_row_figures_are_the_two_artifacts_and_render_to_png(tmp_path):
    out = figures.row_figures(_per_query(), CAL)
    assert list(out) == ["figures/score_histograms.png", "figures/risk_coverage.png"]
    path = figures.save_png(out["figures/risk_coverage.png"], tmp_path / "a" / "rc.png")
    assert path.read_bytes()[:8] == PNG
    assert not list((tmp_path / "a").glob(".rc.*"))  # written under a temporary name, renamed
    # drawing and saving never import pyplot (which would pick a global backend and leave
    # the figures open): a notebook keeps its own inline backend
    import subprocess
    import sys

    code = ("import sys, pathlib; from rag.ledger import figures as f; "
            f"f.save_png(f.risk_coverage({{}}), pathlib.Path({str(tmp_path / 'b.png')!r})); "
            "print('matplotlib.pyplot' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr
    assert (tmp_path / "b.png").read_bytes()[:8] == PNG


def test_rank_vs_baseline_counts_better_same_worse_and_draws_misses_past_the_depth():
    base = pd.DataFrame({"query_id": ["a", "b", "c", "d", "n"],
                         "kind": ["positive"] * 4 + ["negative"],
                         "first_relevant_rank": [1, 2, 5, None, None]})
    job = pd.DataFrame({"query_id": ["a", "b", "c", "d", "n"],
                        "kind": ["positive"] * 4 + ["negative"],
                        "first_relevant_rank": [2, 2, 1, 3, None]})
    fig = figures.rank_vs_baseline(base, {"bm25": job}, depth=10, baseline_label="dense")
    ax = fig.axes[0]
    # a: 1 -> 2 worse; b: same; c: 5 -> 1 better; d: not found (11) -> 3 better
    assert ax.get_title() == "bm25\n2 better, 1 same, 1 worse"
    pts = ax.collections[0].get_offsets()
    assert len(pts) == 4  # positives only
    # jitter is at most ±6% on the log scale: the "not found" point sits at depth + 1 = 11
    assert np.exp(np.abs(np.log(pts[:, 0] / np.array([1, 2, 5, 11])))).max() < 1.07
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "none"
    assert ax.get_xlabel() == "rank in dense"


def test_delta_mrr_fills_only_significant_jobs():
    fig = figures.delta_mrr([
        {"label": "bm25", "mrr_delta": -0.2, "mrr_ci_low": -0.3, "mrr_ci_high": -0.1,
         "mrr_p_holm": 0.01},
        {"label": "hybrid", "mrr_delta": 0.05, "mrr_ci_low": -0.02, "mrr_ci_high": 0.1,
         "mrr_p_holm": 0.3},
        {"label": "baseline-less"}])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bm25", "hybrid"]
    markers = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [float(m.get_xdata()[0]) for m in markers] == [-0.2, 0.05]
    assert markers[0].get_markerfacecolor() != "white" and markers[1].get_markerfacecolor() == "white"
    intervals = [ln for ln in ax.lines if ln.get_linewidth() == 2]
    assert [list(ln.get_xdata()) for ln in intervals] == [[-0.3, -0.1], [-0.02, 0.1]]
    assert [list(ln.get_ydata()) for ln in intervals] == [[0, 0], [1, 1]]


def test_sweep_figures_read_significance_in_either_spelling():
    from rag.ledger.report import LedgerRow

    def row(rid, job, base, **metrics):
        return LedgerRow(run_id=rid, experiment="rag-x", run_name=job, start_time_ms=0,
                         status="FINISHED", metrics={"mrr": 0.5, "latency_p50_ms": 2.0, **metrics},
                         params={"eval.depth": "10"},
                         tags={"sweep_job": job, "sweep_name": "s", "sweep_id": "s-1",
                               "is_baseline": str(base).lower()})

    rows = [row("a" * 32, "dense", True),
            row("b" * 32, "bm25", False, **{"vs_baseline/mrr_delta": -0.1,
                                             "vs_baseline/mrr_p_holm": 0.02}),
            row("c" * 32, "old", False, mrr_delta=0.1, mrr_p=0.5)]  # logged before the group
    table = _per_query()
    out = figures.sweep_figures(rows, {r.run_id: table for r in rows})
    assert list(out) == list(figures.SWEEP_FIGURES)
    ax = out["figures/delta_mrr.png"].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bm25", "old"]
    pareto_ax = out["figures/pareto.png"].axes[0]
    assert sorted(t.get_text() for t in pareto_ax.texts) == ["bm25", "dense", "old"]
    assert out["figures/rank_vs_baseline.png"].axes[0].get_title().startswith("bm25\n")


def test_empty_inputs_draw_a_note_not_an_error():
    assert [t.get_text() for t in figures.score_histograms(_per_query(), {}).axes[0].texts] == \
        ["no abstention calibration in this row"]
    fig = figures.rank_vs_baseline(_per_query(), {})
    assert [t.get_text() for t in fig.axes[0].texts] == ["no job besides the baseline"]
    fig = figures.pareto(pd.DataFrame({"latency_p50_ms": [None], "mrr": [0.5], "label": ["x"]}))
    assert [t.get_text() for t in fig.axes[0].texts] == ["no row has both mrr and latency_p50_ms"]
