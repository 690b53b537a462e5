"""Abstention as a classifier (rag/eval/abstention.py, rag/search/signals.py): values computed
by hand on tiny inputs, or by scikit-learn as the reference."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rag.eval.abstention import (calibrate_abstention, calibrate_signal, choose_threshold,
                                 fit_learned_gate, plot_calibration, risk_coverage, tradeoff)
from rag.search.signals import LearnedGate, compute_signals

POS = np.array([0.9, 0.8, 0.7, 0.3])
NEG = np.array([0.2, 0.4, 0.5])


def test_rule_picks_most_abstention_within_target():
    # midpoints: -inf .25 .35 .45 .6 .75 .85 ~.9; at .25 one negative (0.2) is flagged, no positive
    assert choose_threshold(POS, NEG, target=0.10) == pytest.approx((0.25, 0.0, 1 / 3))
    # allowing one positive in four (0.3) flags every negative at the midpoint .6
    assert choose_threshold(POS, NEG, target=0.25) == pytest.approx((0.6, 0.25, 1.0))
    # nothing separable: only "flag nothing" qualifies
    t, fw, ab = choose_threshold(np.array([0.1, 0.2]), np.array([0.9]), target=0.1)
    assert t == -math.inf and fw == 0.0 and ab == 0.0


def test_tradeoff_says_what_abstention_costs():
    assert tradeoff(POS, NEG) == {"false_weak_at_abstain_50": 0.25, "false_weak_at_abstain_80": 0.25,
                                  "false_weak_at_abstain_90": 0.25}


def test_risk_coverage_by_hand():
    s = np.concatenate([POS, NEG])
    wrong = np.array([0, 0, 0, 0, 1, 1, 1])
    curve, aurc = risk_coverage(s, wrong)
    # answered in order .9 .8 .7 .5(n) .4(n) .3 .2(n): risk 0 0 0 1/4 2/5 2/6 3/7
    assert curve[0] == [1.0, round(3 / 7, 4)]
    assert curve[-1] == [round(1 / 7, 4), 0.0]
    risks = [0, 0, 0, 1 / 4, 2 / 5, 2 / 6, 3 / 7]
    assert aurc == pytest.approx(sum(risks) / 7)  # the mean risk over the 7 coverage levels


def test_calibrate_signal_auc_overlap_and_message():
    c = calibrate_signal(POS, NEG, target_false_weak=0.10, target_dropped=0.0, n_boot=200)
    assert c["auc"] == pytest.approx(10 / 12)  # 10 of 12 (pos, neg) pairs ordered right
    assert c["overlap"] is True and c["positive_min"] == 0.3 and c["negative_max"] == 0.5
    assert c["weak"]["threshold"] == pytest.approx(0.25) and c["met_target"]
    lo, hi = c["weak"]["abstain_ci"]
    assert 0.0 <= lo <= 1 / 3 <= hi <= 1.0
    bad = calibrate_signal([0.5, 0.9], [0.6, 0.55], target_false_weak=0.1, target_dropped=0.0,
                           n_boot=50)
    assert bad["auc"] == 0.5 and not bad["inverted"]
    assert not bad["met_target"] and bad["weak"]["threshold"] is None
    # flagging one negative (0.55) means flagging the positive at 0.5: half the positives
    assert "no threshold abstains on any negative" in bad["message"] and "50%" in bad["message"]
    inverted = calibrate_signal([0.1, 0.2], [0.9, 0.95], target_false_weak=0.1,
                                target_dropped=0.0, n_boot=50)
    assert inverted["auc"] == 0.0 and inverted["inverted"] and "AUC 0.000 < 0.5" in inverted["message"]
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        calibrate_signal([0.5], [], target_false_weak=0.1, target_dropped=0.0)


def test_compute_signals_by_hand():
    dense = np.array([0.9, 0.85, 0.5, -np.inf], dtype=np.float32)
    bm25 = np.array([0.0, 2.0, 1.0, 0.0])
    s = compute_signals(dense_scores=dense, bm25_scores=bm25, chunk_paths=["a", "a", "b", "c"],
                        top_rerank=None)
    assert s["top_dense"] == pytest.approx(0.9)
    assert s["dense_margin"] == pytest.approx(0.4)  # the best chunk of another file is 0.5
    # standardised over the matching chunks only: (2 - 1.5) / 0.5
    assert s["bm25_top_z"] == pytest.approx(1.0)
    assert s["channel_agreement"] == pytest.approx(2 / 10)  # {a, b} in both top 10s
    assert s["top_rerank"] is None
    none = compute_signals(dense_scores=None, bm25_scores=np.zeros(4), chunk_paths=list("abcd"))
    assert none["top_dense"] is None and none["bm25_top_z"] == 0.0 and none["channel_agreement"] is None


def test_learned_gate_matches_sklearn_and_is_scored_out_of_fold():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(3)
    y = np.array([1] * 30 + [0] * 12)
    a = np.where(y == 1, rng.normal(0.6, 0.1, y.size), rng.normal(0.4, 0.1, y.size))
    b = np.where(y == 1, rng.normal(2.0, 1.0, y.size), rng.normal(1.0, 1.0, y.size))
    gate, oof, folds = fit_learned_gate({"top_dense": a, "bm25_top_z": b}, y, seed=0)
    assert folds == 5
    X = np.column_stack([a, b])
    ref = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    assert oof == pytest.approx(cross_val_predict(ref, X, y, cv=cv, method="predict_proba")[:, 1])
    ref.fit(X, y)
    mine = [gate.probability({"top_dense": x0, "bm25_top_z": x1}) for x0, x1 in X]
    assert mine == pytest.approx(ref.predict_proba(X)[:, 1])
    again = LearnedGate.from_dict(json.loads(json.dumps(gate.as_dict())))
    assert again.probability({"top_dense": 0.5, "bm25_top_z": 1.5}) == pytest.approx(
        gate.probability({"top_dense": 0.5, "bm25_top_z": 1.5}))
    with pytest.raises(ValueError, match="differ in length"):
        LearnedGate.from_dict({**gate.as_dict(), "coef": [1.0]})
    assert fit_learned_gate({"top_dense": a[:3]}, np.array([1, 1, 0])) is None  # one negative


def test_calibrate_abstention_rows_and_plot(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"kind": "positive", "top_dense": float(v), "dense_margin": float(m),
             "bm25_top_z": 1.0, "channel_agreement": 0.3, "top_rerank": None, "supported": True}
            for v, m in zip(rng.uniform(0.4, 0.9, 20), rng.uniform(0, 0.2, 20))]
    rows += [{"kind": "negative", "top_dense": float(v), "dense_margin": 0.01,
              "bm25_top_z": 0.5, "channel_agreement": 0.0, "top_rerank": None}
             for v in rng.uniform(0.1, 0.5, 8)]
    cal = calibrate_abstention(rows, target_false_weak=0.1, target_dropped=0.0, n_boot=100)
    assert set(cal["signals"]) == {"top_dense", "dense_margin", "bm25_top_z",
                                   "channel_agreement", "learned"}  # top_rerank never measured
    assert cal["signals"]["learned"]["scored_on"].startswith("out-of-fold")
    assert cal["overlap"] == (max(r["top_dense"] for r in rows[20:]) >= min(r["top_dense"] for r in rows[:20]))
    assert cal["suggested_weak_dense"] == cal["signals"]["top_dense"]["weak"]["threshold"]
    gate = LearnedGate.from_dict(cal["learned_gate"])
    assert gate.weak_score == cal["signals"]["learned"]["weak"]["threshold"]
    png = plot_calibration(cal, rows, tmp_path / "cal.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_wilson_interval_by_hand():
    from rag.eval.abstention import wilson

    # 0 of 24: centre z^2/(2n)/(1+z^2/n), half the same -> [0, z^2/n / (1 + z^2/n)] = [0, 0.1380]
    lo, hi = wilson(0, 24)
    assert lo == 0.0 and hi == pytest.approx(3.8415 / 24 / (1 + 3.8415 / 24), abs=1e-4)
    # 5 of 10: symmetric around 0.5, Wilson's tabled [0.2366, 0.7634]
    assert wilson(5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    assert wilson(0, 0) == [0.0, 1.0]


def test_top_dense_is_calibrated_on_the_queries_the_bands_act_on():
    # two positives routed to BM25 have low cosines, but the bands never flag them
    rows = [{"kind": "positive", "route": "dense", "top_dense": v, "supported": True}
            for v in (0.6, 0.7, 0.8)]
    rows += [{"kind": "positive", "route": "bm25", "top_dense": v, "supported": True}
             for v in (0.1, 0.2)]
    rows += [{"kind": "negative", "route": "dense", "top_dense": v} for v in (0.3, 0.4)]
    cal = calibrate_abstention(rows, target_false_weak=0.0, target_dropped=0.0, n_boot=20)
    c = cal["signals"]["top_dense"]
    # as applied: every negative is flagged below (0.4 + 0.6) / 2 and no positive
    assert c["weak"]["threshold"] == pytest.approx(0.5)
    assert (c["weak"]["abstain_rate"], c["weak"]["false_weak_rate"]) == (1.0, 0.0)
    assert "2 positives and 0 negatives routed to BM25" in c["population"]
    assert cal["positive_min_top_dense"] == 0.1 and cal["overlap"] is True  # raw values
    raw = calibrate_abstention(rows, target_false_weak=0.0, target_dropped=0.0, n_boot=20,
                               bands_on_top_dense=False)["signals"]["top_dense"]
    assert raw["weak"]["abstain_rate"] == 0.0  # on raw cosines 0.1 < 0.3: nothing can be flagged


def test_cross_validated_rule_scores_each_fold_with_the_others_threshold():
    from rag.eval.abstention import cross_validated_rule, wilson

    # separable: every fold's threshold is the midpoint 0.5; nothing held out is misjudged
    cv = cross_validated_rule([0.9] * 4, [0.1] * 4, target=0.0, folds=2)
    assert (cv["folds"], cv["thresholds"], cv["false_weak_rate"], cv["abstain_rate"]) == \
        (2, [0.5, 0.5], 0.0, 1.0)
    # in-sample the rule abstains on every negative at false_weak 0.2 (threshold 0.55, the
    # 0.2 positive flagged). Out of fold (5 folds: one positive and one negative each), only
    # the fold holding the 0.2 positive is fitted on four 0.8s and gets 0.55; every other
    # fold's training set holds the 0.2, where flagging it alone is 1/4 > 0.2, so nothing is
    # flagged (-inf). Held out: 1 false weak of 5, 1 abstention of 5
    pos, neg = [0.2, 0.8, 0.8, 0.8, 0.8], [0.3] * 5
    assert choose_threshold(np.array(pos), np.array(neg), target=0.2)[1:] == (0.2, 1.0)
    cv = cross_validated_rule(pos, neg, target=0.2, folds=5, seed=3)
    assert sorted(cv["thresholds"], key=lambda t: t is None) == [0.55, None, None, None, None]
    assert (cv["false_weak_rate"], cv["abstain_rate"], cv["threshold_median"]) == (0.2, 0.2, 0.55)
    assert cv["abstain_ci"] == wilson(1, 5)
    assert cross_validated_rule([0.5], [0.1, 0.2], target=0.1) is None  # nothing to hold out
