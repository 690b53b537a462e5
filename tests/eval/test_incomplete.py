"""bpref and condensed-list metrics (rag/eval/incomplete.py) against trec_eval's own bpref
(pytrec_eval) and against values worked out by hand."""

from __future__ import annotations

import math
import random

import pytest

from rag.eval.incomplete import bpref, condensed, incomplete_metrics, ndcg, reciprocal_rank


def test_bpref_by_hand():
    # R = 2, N = 3; ranking: rel, nonrel, unjudged, rel, nonrel
    # first rel: no nonrel above -> 1; second: 1 nonrel above -> 1 - min(1,2)/min(2,3) = 0.5
    assert bpref([1, 0, None, 1, 0], 2, 3) == pytest.approx((1 + 0.5) / 2)
    assert bpref([None, None], 0, 0) == 0.0
    assert bpref([1], 1, 0) == 1.0  # no judged non-relevant: each relevant unit adds 1


def test_bpref_equals_trec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(7)
    for trial in range(200):
        docs = [f"d{i}" for i in range(12)]
        qrels = {}
        for d in docs:
            x = rng.random()
            if x < 0.25:
                qrels[d] = rng.choice([1, 2])
            elif x < 0.55:
                qrels[d] = 0
        if not any(v > 0 for v in qrels.values()):
            qrels["d0"] = 1
        ranked = rng.sample(docs, rng.randint(1, 12))
        run = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
        ref = pytrec_eval.RelevanceEvaluator({"q": qrels}, {"bpref"}).evaluate({"q": run})["q"]["bpref"]
        judgements = [qrels.get(d) for d in ranked]
        got = bpref(judgements, sum(1 for v in qrels.values() if v > 0),
                    sum(1 for v in qrels.values() if v == 0))
        assert got == pytest.approx(ref, abs=1e-6), (trial, qrels, ranked)


def test_condensed_metrics_by_hand():
    # unjudged units removed: [None, 0, 2, None, 1] -> [0, 2, 1]
    assert condensed([None, 0, 2, None, 1]) == [0, 2, 1]
    assert reciprocal_rank([0, 2, 1]) == 0.5
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg([0, 2, 1], [1, 2], 10) == pytest.approx(dcg / idcg)
    got = incomplete_metrics([None, 0, 2, None, 1], [2, 1], 1)
    assert got["condensed_mrr"] == 0.5 and got["condensed_ndcg_at_10"] == pytest.approx(dcg / idcg)
    # the uncondensed MRR of the same ranking would be 1/3: an unjudged unit costs nothing
    # bpref: the one judged non-relevant unit (N = 1) is above both relevant ones: 1 - 1/1 each
    assert got["bpref"] == 0.0


def test_recall_and_support_at_a_token_budget_by_hand():
    from types import SimpleNamespace

    from rag.eval.evaluate import token_budget_metrics

    # chunk texts stand for their sizes: "x" * n has n word pieces (+2 for [CLS]/[SEP])
    def count(texts):
        return [len(t) + 2 for t in texts]

    q = SimpleNamespace(qrels={"a.py#f": 1, "b.py": 1})
    units = [["c.py"], ["a.py#f"], ["d.py"], ["b.py"]]
    texts = ["x" * 300, "x" * 200, "x" * 1000, "x" * 400]  # running: 300, 500, 1500, 1900
    got = token_budget_metrics({"q": (units, texts, q)}, count, budgets=(256, 512, 2048))["q"]
    assert got == {
        "token_recall_at_256": 0.0, "token_support_at_256": 0.0,    # the first chunk is 300
        "token_recall_at_512": 0.5, "token_support_at_512": 1.0,    # 300 + 200: a.py#f fits
        "token_recall_at_2048": 1.0, "token_support_at_2048": 1.0}  # all four: 1900


def test_the_token_budget_curve_is_the_mean_over_positives_at_each_budget():
    from rag.eval.evaluate import token_budget_curve
    from rag.ledger.figures import token_budget

    per_query = {"q1": {"token_recall_at_256": 0.0, "token_support_at_256": 0.0,
                        "token_recall_at_512": 0.5, "token_support_at_512": 1.0},
                 "q2": {"token_recall_at_256": 1.0, "token_support_at_256": 1.0,
                        "token_recall_at_512": 1.0, "token_support_at_512": 1.0}}
    curve = token_budget_curve(per_query, budgets=(256, 512))
    assert curve == [{"budget": 256, "queries": 2, "recall": 0.5, "answer_support": 0.5},
                     {"budget": 512, "queries": 2, "recall": 0.75, "answer_support": 1.0}]
    assert token_budget_curve({}) == []
    fig = token_budget(curve)  # the artifact's figure: both curves, on a log2 axis
    ax = fig.axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[0.5, 0.75], [0.5, 1.0]]
    assert ax.get_xscale() == "log"
