"""rag diff: per-query first-relevant ranks, wins/losses/ties, movers — by hand."""

from __future__ import annotations

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
