"""The measures registry (rag/eval/measures/): one declaration per metric, read by the gate,
the sweep significance and the expected-score pinning."""

from __future__ import annotations

import pandas as pd
import pytest

from rag.eval.expected import pin_per_query
from rag.eval.measures import (lower_is_better, measure_of, per_query_column, pinned_column,
                               significance_metric)
from rag.ledger.sweep import significance_columns
from rag.eval.measures import BUILTIN, Measure, computed, over_negatives, registered
from rag.eval.measures.average_precision import average_precision
from rag.eval.metrics import query_metrics
from rag.eval.ranked import rank_all


def _rankings(run, qrels):
    return rank_all(run, qrels)[1]


def test_average_precision_by_hand():
    # q1: relevant b (rank 2), d (rank 4), e (not retrieved): (1/2 + 2/4) / 3
    # q2: b, d, e at ranks 1-3: (1/1 + 2/2 + 3/3) / 3; q3: nothing relevant; q4: no run
    rel = {"b": 1, "d": 2, "e": 1, "c": 0}
    ap = average_precision(_rankings(
        {"q1": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}, "q2": {"b": 3.0, "d": 2.0, "e": 1.0},
         "q3": {"a": 1.0}},
        {"q1": rel, "q2": rel, "q3": {"a": 0}, "q4": rel}))
    assert ap.tolist() == [1 / 3, 1.0, 0.0, 0.0]


def test_a_measure_file_is_found_and_computed_on_every_query():
    names = [m.name for m in registered()]
    assert names[:len(BUILTIN)] == [m.name for m in BUILTIN] and "map" in names
    assert [m.name for m in computed()] == ["map"]
    out = query_metrics({"a": 3.0, "b": 2.0, "d": 1.0}, {"b": 1, "d": 1}, recall_ks=(1,))
    assert out["map"] == (1 / 2 + 2 / 3) / 2 and out["mrr"] == 0.5
    assert measure_of("map").source.startswith("trec_eval map")


def test_a_computed_family_is_cut_at_its_cutoffs():
    def precision(r, k):
        return r.per_query_sum(r.relevant.astype(float), r.relevant & (r.rank <= k)) / k

    p = Measure("precision_at_", compute=precision, cutoffs=(1, 2))
    got = p.values(_rankings({"q": {"a": 2.0, "b": 1.0}}, {"q": {"b": 1}}))
    assert {k: v.tolist() for k, v in got.items()} == {"precision_at_1": [0.0],
                                                       "precision_at_2": [0.5]}
    with pytest.raises(ValueError, match="no cutoffs"):
        Measure("x_at_", compute=precision).values(_rankings({}, {}))
    with pytest.raises(ValueError, match="one value per query"):
        Measure("scalar", compute=lambda r: 1.0).values(_rankings({}, {"q": {}}))


def test_families_and_exact_names_are_found_longest_prefix_first():
    assert measure_of("ndcg_at_10").name == "ndcg_at_"
    assert measure_of("semble_ndcg_at_10").name == "semble_ndcg_at_"
    assert measure_of("recall_at_x") is None and measure_of("tag.prose.mrr") is None
    assert measure_of("latency_bm25_p50_ms").name == "latency"


def test_directions_and_per_query_columns():
    lower = {"dropped_rate", "false_weak_rate", "missing_queries", "failed_queries",
             "filter_false_negative_rate", "context_chars_mean", "context_tokens_mean",
             "latency_p50_ms"}
    assert all(lower_is_better(m) for m in lower)
    assert not any(lower_is_better(m) for m in ("mrr", "recall_at_8", "abstain_rate",
                                                "answer_support_rate", "semble_ndcg_at_10"))
    assert per_query_column("answer_support_rate") == "answer_support"
    assert per_query_column("candidate_pool_recall") == "candidate_hit"
    assert per_query_column("semble_ndcg_at_5") == "semble_ndcg_at_5"
    # abstain_rate is a mean over the negatives' abstained column
    assert per_query_column("abstain_rate") == "abstained" and over_negatives("abstain_rate")
    assert not over_negatives("mrr") and per_query_column("dropped_rate") is None


def test_sweep_tests_and_pinned_columns_are_the_declared_ones():
    cols = ["query_id", "recall_at_8", "hit_at_8", "ndcg_at_10", "mrr", "semble_ndcg_at_10",
            "semble_ndcg_at_5", "answer_support", "judged_at_8", "recall_at_40", "latency_ms"]
    assert significance_columns(pd.DataFrame(columns=cols)) == (
        "mrr", "answer_support", "ndcg_at_10", "recall_at_8", "recall_at_40",
        "semble_ndcg_at_5", "semble_ndcg_at_10")
    assert significance_metric("answer_support") and not significance_metric("hit_at_8")
    assert [c for c in cols if pinned_column(c)] == [
        "recall_at_8", "hit_at_8", "ndcg_at_10", "mrr", "judged_at_8", "recall_at_40"]
    table = "query_id,kind,mrr,semble_ndcg_at_10,recall_at_8,latency_ms\nq1,positive,0.5,0.3,1.0,2.0\n"
    assert pin_per_query(table).splitlines()[0] == "query_id,kind,mrr,recall_at_8"


def test_headline_and_gated_names_come_from_the_declarations():
    from rag.app.gate import GateOptions
    from rag.eval.measures import flagged
    from rag.ledger.metric_groups import HEADLINE

    # the lists these replaced (rag/ledger/metric_groups.py and rag/gate.py at e7f5c46)
    assert HEADLINE == ("mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate",
                        "abstain_rate", "false_weak_rate", "dropped_rate", "latency_p50_ms",
                        "latency_p95_ms")
    assert GateOptions().metrics == flagged("gated") == (
        "mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate", "abstain_rate")
    assert all(not lower_is_better(m) for m in flagged("gated"))
    with pytest.raises(ValueError, match="no measure flag 'shown'"):
        flagged("shown")


def test_every_list_of_metric_names_in_the_code_names_declared_metrics():
    """The display choices that remain lists (a report's columns, a table's metrics) may only
    name metrics the registry declares: a renamed or forgotten metric fails here, not silently
    as an empty column."""
    from rag.app.golden_cli import POWER_METRICS
    from rag.bench.launchers import QUALITY
    from rag.eval.expected import DEFAULT_METRICS
    from rag.eval.metric_names import split_tag_metric
    from rag.ledger import frame, report, suite_tables

    lists = {
        "rag/ledger/frame.py COLUMNS": frame.COLUMNS,
        "rag/ledger/report.py COLUMNS": [k for _, kind, k in report.COLUMNS if kind == "metric"],
        "rag/ledger/suite_tables.py METRICS": suite_tables.METRICS,
        "rag/app/golden_cli.py POWER_METRICS": POWER_METRICS,
        "rag/eval/expected.py DEFAULT_METRICS": DEFAULT_METRICS,
        "rag/bench/launchers.py QUALITY": QUALITY,
    }
    undeclared = {where: [m for m in names
                          if measure_of((split_tag_metric(m) or ("", m))[1]) is None]
                  for where, names in lists.items()}
    assert all(len(names) > 0 for names in lists.values())
    assert {k: v for k, v in undeclared.items() if v} == {}
    assert measure_of("recall_at_eight") is None  # the check can fail
