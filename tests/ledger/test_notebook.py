"""notebooks/ledger.ipynb runs headless (nbclient) on a small fixture ledger and renders its
figures inline (image/png outputs); the Pareto front helper is checked by hand."""

from __future__ import annotations

import pytest

import csv
import io
import os

import pandas as pd

from conftest import PROJECT


def _per_query(pos_top: list[float], neg_top: list[float]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["query_id", "kind", "top_dense", "mrr"])
    w.writeheader()
    for i, v in enumerate(pos_top):
        w.writerow({"query_id": f"p{i}", "kind": "positive", "top_dense": v, "mrr": 1.0})
    for i, v in enumerate(neg_top):
        w.writerow({"query_id": f"n{i}", "kind": "negative", "top_dense": v, "mrr": ""})
    return buf.getvalue()


def _fixture_ledger(tmp_path) -> str:
    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    for mode, mrr, p50 in (("bm25", 0.60, 1.0), ("dense", 0.55, 25.0), ("hybrid", 0.59, 30.0),
                           ("auto", 0.62, 20.0)):
        base = mode == "auto"
        ledger.log_row(experiment="rag-fixture", run_name=mode,
                       params={"search.mode": mode, "abstain.min_dense": "0.45",
                               "abstain.weak_dense": "0.55"},
                       metrics={"mrr": mrr, "latency_p50_ms": p50, "recall_at_8": 0.7,
                                **({} if base else {"vs_baseline/mrr_delta": mrr - 0.62,
                                                    "vs_baseline/mrr_ci_low": mrr - 0.70,
                                                    "vs_baseline/mrr_ci_high": mrr - 0.55,
                                                    "vs_baseline/mrr_p_holm": 0.2})},
                       tags={"sweep_name": "routing", "sweep_job": f"search.mode={mode}",
                             "sweep_id": "routing-1", "is_baseline": str(base).lower(),
                             "golden_fingerprint": "g1", "corpus_fingerprint": "c1"},
                       artifacts={"per_query.csv": _per_query([0.6, 0.7, 0.5], [0.3, 0.4])})
    return uri


def test_pareto_front_by_hand():
    from rag.ledger.frame import pareto_front

    df = pd.DataFrame({"latency_p50_ms": [1.0, 25.0, 30.0, 20.0, float("nan")],
                       "mrr": [0.60, 0.55, 0.59, 0.62, 0.9]})
    # bm25 (1 ms, .60) and auto (20 ms, .62) are undominated; dense and hybrid are dominated
    # by auto (faster and better); the NaN row never counts
    assert pareto_front(df).tolist() == [True, False, False, True, False]


def test_ledger_frame_reads_rows(tmp_path):
    from rag.ledger.frame import ledger_frame

    df = ledger_frame(_fixture_ledger(tmp_path))
    assert df["search.mode"].tolist() == ["bm25", "dense", "hybrid", "auto"]
    assert df.mrr.tolist() == [0.60, 0.55, 0.59, 0.62]


@pytest.mark.slow
def test_notebook_executes_headless(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    uri = _fixture_ledger(tmp_path)
    monkeypatch.setenv("RAG_LEDGER_URI", uri)
    nb = nbformat.read(PROJECT / "notebooks/ledger.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                      for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "4 ledger rows" in outputs and "4 share the newest row's corpus and golden set" in outputs
    import re
    # fixture: positives' top dense 0.6, 0.7, 0.5 -> min 0.5; negatives 0.3, 0.4 -> max 0.4
    assert re.search(r"'positive_min_top_dense': (np\.float64\()?0\.5\b", outputs), outputs
    assert re.search(r"'negative_max_top_dense': (np\.float64\()?0\.4\b", outputs), outputs
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "sweep routing-1: 3 job(s) besides the baseline" in outputs
    # every point of the Pareto plot carries its row's label
    assert ("Pareto plot: 4 points, each labelled: search.mode=auto, search.mode=bm25, "
            "search.mode=dense, search.mode=hybrid") in outputs
    # every figure renders inline: the Pareto plot, the score histogram, the ΔMRR plot
    images = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert len(images) == 3, images
    sources = [nb.cells[i].source for i in images]
    assert "pareto(" in sources[0] and "threshold_histogram(" in sources[1] \
        and "delta_mrr(" in sources[2]
    import base64

    for i in images:
        png = next(o["data"]["image/png"] for o in nb.cells[i].outputs
                   if "image/png" in o.get("data", {}))
        assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"


def test_pareto_plot_labels_every_point():
    from rag.ledger.figures import pareto

    df = pd.DataFrame({"latency_p50_ms": [1.0, 25.0, 30.0, 20.0, float("nan")],
                       "mrr": [0.60, 0.55, 0.59, 0.62, 0.9],
                       "label": ["bm25", "dense", "hybrid", "auto", "broken"]})
    fig = pareto(df)
    ax = fig.axes[0]
    # four rows with both values: four labels, one per point; the NaN row is left out (said so)
    assert sorted(t.get_text() for t in ax.texts) == ["auto", "bm25", "dense", "hybrid"]
    assert "1 without values left out" in ax.get_title()
    # the front (bm25, auto) is the line; the dominated two are the scatter
    line = ax.lines[0]
    assert list(line.get_xdata()) == [1.0, 20.0] and list(line.get_ydata()) == [0.60, 0.62]
    assert len(ax.collections[0].get_offsets()) == 2
    assert ax.get_xscale() == "log"  # 1 .. 30 ms spans more than a factor of 10


def test_pareto_labels_of_crowded_points_do_not_overlap():
    """Three rows at almost the same place (a routing sweep's dense, hybrid and auto jobs)
    and one far away: four labels, none over another, all inside the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from rag.ledger.figures import pareto

    df = pd.DataFrame({"latency_p50_ms": [0.3, 105.0, 49.0, 108.0],
                       "mrr": [0.5, 1.0, 1.0, 1.0],
                       "label": ["search.mode=bm25", "search.mode=dense", "search.mode=hybrid",
                                 "search.mode=auto"]})
    fig = pareto(df)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert sorted(boxes) == sorted(df.label)
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not boxes[a].overlaps(boxes[b]), (a, b)
    inside = ax.get_window_extent(renderer)
    for name, box in boxes.items():
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, name
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1, name
    # each label starts or ends 5 points from its own point
    for t in ax.texts:
        assert abs(t.xyann[0]) == 5 and t.xy in {(x, y) for x, y in zip(df.latency_p50_ms, df.mrr)}
