"""Abstention judged as a classifier: per-signal ROC AUC, risk–coverage, thresholds chosen by a
stated rule with a target, bootstrap confidence intervals, and a learned combination.

A query is *flagged* (abstained on: weak or dropped) when its signal is below a threshold
``t``. For positives that is a false weak; for negatives, a correct abstention:

* ``false_weak_rate(t)`` = share of positives with signal < t;
* ``abstain_rate(t)``    = share of negatives with signal < t.

**The rule** (:func:`choose_threshold`): the highest ``abstain_rate`` subject to
``false_weak_rate <= target`` (``abstain.target_false_weak``, default 0.10); thresholds are
taken at midpoints between adjacent observed values, so a threshold never sits on a query's
own score. The drop floor is chosen by the same rule with the stricter
``abstain.target_dropped``. When the rule cannot abstain on a single negative, that is said
plainly (``met_target: false``) together with what the target would cost
(:func:`tradeoff`): the false-weak rate needed to abstain on 50/80/90% of negatives.

**Intervals**: the achieved rates carry Wilson score 95% intervals; the chosen threshold a
percentile-bootstrap 95% interval (the rule re-applied to resampled positives and negatives).

**Cross-validated** (:func:`cross_validated_rule`): the rule's promise measured honestly —
the threshold chosen on k-1 folds (positives and negatives split separately, stratified) and
applied to the held-out fold, the rates summed over every held-out query. In-sample rates
are optimistic (the threshold sits exactly at the target on the very queries it is scored
on); these are what the same rule would give on queries it did not see.

**Risk–coverage** (Geifman & El-Yaniv, "Selective classification for deep neural networks",
NeurIPS 2017): at each threshold, coverage = share of all queries answered, risk = share of the
answered ones that are wrong (a negative answered, or a positive answered without a relevant
unit in its top_k). AURC is the area under that curve (lower is better).

ROC AUC is scikit-learn's ``roc_auc_score`` with positives as class 1 (probability that a random
positive scores above a random negative). The learned combination is a scikit-learn logistic
regression on standardised signals; it is only ever scored on out-of-fold predictions
(``cross_val_predict`` over ``StratifiedKFold``), never on its own training queries.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rag.search.signals import SIGNALS, LearnedGate

RULE = "highest abstain_rate on negatives subject to false_weak_rate <= target"
#: the rule's targets (``abstain.target_false_weak`` / ``target_dropped``; AbstainConfig reads them)
DEFAULT_TARGET_FALSE_WEAK, DEFAULT_TARGET_DROPPED = 0.10, 0.02
TRADEOFF_LEVELS = (0.5, 0.8, 0.9)
N_BOOT = 1000


def candidate_thresholds(values: np.ndarray) -> np.ndarray:
    """``-inf``, the midpoints between adjacent distinct values, and just above the maximum."""
    u = np.unique(values[np.isfinite(values)])
    if u.size == 0:
        return np.array([-np.inf])
    mids = (u[:-1] + u[1:]) / 2.0
    return np.concatenate([[-np.inf], mids, [u[-1] + max(1e-9, abs(u[-1]) * 1e-9)]])


def rates(pos: np.ndarray, neg: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false_weak_rate, abstain_rate) at each threshold, shapes (len(thresholds),)."""
    fw = (pos[None, :] < thresholds[:, None]).mean(axis=1) if pos.size else np.zeros(thresholds.size)
    ab = (neg[None, :] < thresholds[:, None]).mean(axis=1) if neg.size else np.zeros(thresholds.size)
    return fw, ab


def choose_threshold(pos: np.ndarray, neg: np.ndarray, *, target: float) -> tuple[float, float, float]:
    """The rule: (threshold, false_weak_rate, abstain_rate) with the highest abstain_rate among
    thresholds whose false_weak_rate <= ``target``; ties go to the lower false_weak_rate, then
    to the lower threshold. ``-inf`` (flag nothing) always qualifies."""
    ts = candidate_thresholds(np.concatenate([pos, neg]))
    fw, ab = rates(pos, neg, ts)
    ok = np.flatnonzero(fw <= target + 1e-12)
    best = ok[np.lexsort((ts[ok], fw[ok], -ab[ok]))[0]]
    return float(ts[best]), float(fw[best]), float(ab[best])


CV_FOLDS = 5
#: the largest share of queries a signal may leave unmeasured and still be calibrated (the
#: rest count as its mean: :meth:`rag.search.signals.LearnedGate.probability`'s rule)
MAX_IMPUTED = 0.1


def cross_validated_rule(pos: Sequence[float], neg: Sequence[float], *, target: float,
                         folds: int = CV_FOLDS, seed: int = 0) -> dict[str, Any] | None:
    """The rule (:func:`choose_threshold`) scored out-of-fold: positives and negatives are each
    shuffled (``numpy.random.default_rng(seed)``) and dealt into ``k = min(folds, #pos,
    #neg)`` folds; for each fold the threshold is chosen on the other folds and applied to it.

    Returns:
        ``folds`` (k), ``thresholds`` (one per fold, in fold order), ``threshold_median``,
        ``false_weak_rate`` / ``abstain_rate`` (held-out positives / negatives below their
        fold's threshold, over all of them) with Wilson 95% intervals ``false_weak_ci`` /
        ``abstain_ci``, and ``target``; None when there are fewer than 2 positives or
        negatives (no fold to hold out). A threshold of ``-inf`` (flag nothing) is None.
    """
    p = np.asarray(pos, dtype=float)
    q = np.asarray(neg, dtype=float)
    k = min(folds, p.size, q.size)
    if k < 2:
        return None
    rng = np.random.default_rng(seed)
    fold_p = np.arange(p.size)[rng.permutation(p.size)] % k
    fold_q = np.arange(q.size)[rng.permutation(q.size)] % k
    thresholds: list[float | None] = []
    fw = ab = 0
    for f in range(k):
        t, _, _ = choose_threshold(p[fold_p != f], q[fold_q != f], target=target)
        fw += int((p[fold_p == f] < t).sum())
        ab += int((q[fold_q == f] < t).sum())
        thresholds.append(float(t) if math.isfinite(t) else None)
    finite = [t for t in thresholds if t is not None]
    return {"folds": k, "target": target, "thresholds": thresholds,
            "threshold_median": float(np.median(finite)) if finite else None,
            "false_weak_rate": fw / p.size, "abstain_rate": ab / q.size,
            "false_weak_ci": wilson(fw, p.size), "abstain_ci": wilson(ab, q.size)}


def tradeoff(pos: np.ndarray, neg: np.ndarray) -> dict[str, float | None]:
    """For each level L in 50/80/90%: the lowest false_weak_rate of a threshold that abstains on
    at least L of the negatives (None without negatives)."""
    ts = candidate_thresholds(np.concatenate([pos, neg]))
    fw, ab = rates(pos, neg, ts)
    out: dict[str, float | None] = {}
    for level in TRADEOFF_LEVELS:
        ok = ab >= level - 1e-12
        out[f"false_weak_at_abstain_{int(level * 100)}"] = float(fw[ok].min()) if ok.any() and neg.size else None
    return out


def risk_coverage(scores: np.ndarray, wrong_if_answered: np.ndarray) -> tuple[list[list[float]], float]:
    """Risk–coverage curve over every threshold and its area (AURC).

    Args:
        scores: signal per query, shape (n,).
        wrong_if_answered: per query, 1 if answering it is an error (a negative, or a positive
            without a relevant unit in its top_k), shape (n,).

    Returns:
        ([[coverage, risk], ...] from full coverage down, at most 101 points), AURC (the mean
        of the risks at coverage 1/n, 2/n, ..., 1 — the standard definition).
    """
    order = np.argsort(-scores, kind="stable")  # answer the most confident first
    w = wrong_if_answered[order].astype(float)
    n = w.size
    if n == 0:
        return [], float("nan")
    answered = np.arange(1, n + 1)
    cov = answered / n
    risk = np.cumsum(w) / answered
    aurc = float(risk.mean())
    idx = np.unique(np.linspace(0, n - 1, min(n, 101)).round().astype(int))[::-1]
    return [[round(float(cov[i]), 4), round(float(risk[i]), 4)] for i in idx], aurc


def wilson(k: int, n: int, z: float = 1.959964) -> list[float]:
    """Wilson score 95% interval of a proportion k/n (Wilson, JASA 1927): unlike a bootstrap or
    the normal interval it does not collapse to [0, 0] when k = 0 (0 of 24 flagged is not
    evidence of a zero rate)."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _intervals(pos: np.ndarray, neg: np.ndarray, t: float, *, target: float, n_boot: int,
               seed: int) -> dict[str, list[float]]:
    """95% intervals: Wilson for the achieved rates at ``t``; a percentile bootstrap
    (positives and negatives resampled separately) for the threshold the rule re-chooses."""
    rng = np.random.default_rng(seed)
    ts = []
    for _ in range(n_boot):
        p = pos[rng.integers(0, pos.size, pos.size)]
        q = neg[rng.integers(0, neg.size, neg.size)]
        ts.append(choose_threshold(p, q, target=target)[0])
    tv = np.asarray(ts)
    finite = tv[np.isfinite(tv)]
    return {"false_weak_ci": wilson(int((pos < t).sum()), pos.size),
            "abstain_ci": wilson(int((neg < t).sum()), neg.size),
            "threshold_ci": [float(x) for x in np.percentile(finite, [2.5, 97.5])]
            if finite.size else [None, None]}


def calibrate_signal(pos: Sequence[float], neg: Sequence[float], *, target_false_weak: float,
                     target_dropped: float, wrong_pos: Sequence[bool] | None = None,
                     n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """Calibrate one signal (see the module docstring).

    Args:
        pos, neg: the signal on each positive / negative query.
        target_false_weak: the rule's bound for the weak threshold.
        target_dropped: the rule's bound for the drop floor.
        wrong_pos: per positive, True if answering it is wrong (no relevant unit in top_k);
            default all False.

    Returns:
        JSON-ready dict: auc, overlap, min/max, ``weak`` and ``drop`` choices (threshold,
        achieved rates, CIs), ``met_target``, ``message``, ``tradeoff``, ``risk_coverage``,
        ``aurc``.

    Raises:
        ValueError: no positives or no negatives (AUC is undefined).
    """
    from sklearn.metrics import roc_auc_score

    p = np.asarray(pos, dtype=float)
    q = np.asarray(neg, dtype=float)
    if p.size == 0 or q.size == 0:
        raise ValueError("calibrating a signal needs at least one positive and one negative")
    y = np.concatenate([np.ones(p.size), np.zeros(q.size)])
    s = np.concatenate([p, q])
    out: dict[str, Any] = {
        "n_positives": int(p.size), "n_negatives": int(q.size),
        "auc": float(roc_auc_score(y, s)),
        "positive_min": float(p.min()), "positive_median": float(np.median(p)),
        "negative_max": float(q.max()), "negative_median": float(np.median(q)),
        "overlap": bool(q.max() >= p.min()),
    }
    for name, target in (("weak", target_false_weak), ("drop", target_dropped)):
        t, fw, ab = choose_threshold(p, q, target=target)
        out[name] = {"threshold": None if not math.isfinite(t) else t, "target": target,
                     "false_weak_rate": fw, "abstain_rate": ab,
                     **_intervals(p, q, t, target=target, n_boot=n_boot, seed=seed),
                     "cross_validated": cross_validated_rule(p, q, target=target, seed=seed)}
    weak = out["weak"]
    out["met_target"] = weak["abstain_rate"] > 0
    out["tradeoff"] = tradeoff(p, q)
    out["inverted"] = out["auc"] < 0.5
    if out["inverted"]:
        out["message"] = (f"AUC {out['auc']:.3f} < 0.5: on this golden set the signal is higher "
                          "on negatives than on positives; a 'below threshold' rule cannot use it"
                          + (f" (the rule's threshold {weak['threshold']:.4g} only catches "
                             f"{weak['abstain_rate']:.0%} of negatives)" if out["met_target"] else ""))
    elif not out["met_target"]:
        cost = out["tradeoff"]["false_weak_at_abstain_50"]
        out["message"] = (f"no threshold abstains on any negative while keeping false_weak_rate <= "
                          f"{target_false_weak:g}; abstaining on half the negatives would flag "
                          f"{cost:.0%} of the positives" if cost is not None else
                          f"no threshold meets false_weak_rate <= {target_false_weak:g}")
    else:
        out["message"] = (f"threshold {weak['threshold']:.4g}: abstains on {weak['abstain_rate']:.0%} "
                          f"of negatives (95% CI {weak['abstain_ci'][0]:.0%}-{weak['abstain_ci'][1]:.0%}) "
                          f"at false_weak {weak['false_weak_rate']:.0%} "
                          f"(CI {weak['false_weak_ci'][0]:.0%}-{weak['false_weak_ci'][1]:.0%})")
    wrong = np.concatenate([np.asarray(wrong_pos if wrong_pos is not None else np.zeros(p.size),
                                       dtype=bool), np.ones(q.size, dtype=bool)])
    out["risk_coverage"], out["aurc"] = risk_coverage(s, wrong)
    return out


def fit_learned_gate(features: dict[str, np.ndarray], y: np.ndarray, *, seed: int = 0,
                     max_folds: int = 5) -> tuple[LearnedGate, np.ndarray, int] | None:
    """Logistic regression on the standardised signals, with out-of-fold probabilities.

    Args:
        features: signal name -> values, each shape (n,), finite.
        y: 1 for a positive (answerable) query, 0 for a negative, shape (n,).
        seed: the fold shuffle's seed.

    Returns:
        (gate fitted on every query, out-of-fold P(answerable) shape (n,), number of folds), or
        None when a class has fewer than 2 queries (no stratified split exists).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    names = list(features)
    X = np.column_stack([features[n] for n in names])
    folds = int(min(max_folds, (y == 1).sum(), (y == 0).sum()))
    if folds < 2 or not names:
        return None
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    oof = cross_val_predict(model, X, y, cv=cv, method="predict_proba")[:, 1]
    model.fit(X, y)
    scaler, lr = model[0], model[1]
    scale = np.where(scaler.scale_ == 0, 1.0, scaler.scale_)
    gate = LearnedGate(features=names, mean=scaler.mean_, scale=scale, coef=lr.coef_[0],
                       intercept=float(lr.intercept_[0]))
    return gate, oof, folds


def calibrate_abstention(rows: Sequence[dict[str, Any]], *,
                         target_false_weak: float = DEFAULT_TARGET_FALSE_WEAK,
                         target_dropped: float = DEFAULT_TARGET_DROPPED, seed: int = 0,
                         n_boot: int = N_BOOT, bands_on_top_dense: bool = True,
                         gate_features: Sequence[str] | None = None) -> dict[str, Any]:
    """Calibrate every available signal and the learned combination from per-query rows.

    Args:
        rows: per-query dicts with ``kind`` ("positive"/"negative"), ``route``, the signal
            columns of :data:`rag.search.signals.SIGNALS` (None where not measured) and, for
            positives, ``supported`` (a relevant unit in the top_k chunks, before abstention).
        bands_on_top_dense: the run's abstention is the dense bands, which never act on a
            query routed to BM25 alone; ``top_dense`` is then calibrated as applied — such a
            query counts as never flagged — so its chosen threshold achieves the stated rates
            when used as ``weak_dense``. The learned gate's features use the raw values.
        gate_features: the signals the learned gate reads (None: every signal measured on
            every query).

    Returns:
        JSON-ready: ``rule``, targets, ``signals`` (name -> :func:`calibrate_signal`, plus
        ``learned`` scored out-of-fold), ``learned_gate`` (the model, its thresholds, folds),
        and the dense-cosine summary the report and config use (``overlap``,
        ``suggested_min_dense``, ``suggested_weak_dense``).
    """
    pos_rows = [r for r in rows if r["kind"] == "positive"]
    neg_rows = [r for r in rows if r["kind"] == "negative"]
    out: dict[str, Any] = {"rule": RULE, "target_false_weak": target_false_weak,
                           "target_dropped": target_dropped, "signals": {},
                           "n_positives": len(pos_rows), "n_negatives": len(neg_rows)}
    if not pos_rows or not neg_rows:
        out["message"] = "calibration needs both positives and negatives"
        return out
    wrong_pos = [not r.get("supported", True) for r in pos_rows]
    complete: dict[str, np.ndarray] = {}
    for name in SIGNALS:
        vals = [r.get(name) for r in (*pos_rows, *neg_rows)]
        missing = np.array([v is None or (isinstance(v, float) and not math.isfinite(v))
                            for v in vals])
        if missing.sum() > MAX_IMPUTED * len(vals):
            continue  # not measured (e.g. no reranker, no dense channel)
        arr = np.asarray([np.nan if m else v for v, m in zip(vals, missing)], dtype=float)
        if missing.any():
            # a few queries the signal cannot read (term_coverage of a query with no term)
            # count as its mean, the learned gate's own rule at search time
            arr = np.where(missing, float(np.nanmean(arr)), arr)
        complete[name] = arr
        applied = arr
        skipped = np.array([r.get("route") == "bm25" for r in (*pos_rows, *neg_rows)])
        if name == "top_dense" and bands_on_top_dense and skipped.any():
            # never flagged: above every measured value (finite, for scikit-learn's AUC)
            applied = np.where(skipped, arr.max() + 1.0, arr)
        out["signals"][name] = calibrate_signal(
            applied[:len(pos_rows)], applied[len(pos_rows):], target_false_weak=target_false_weak,
            target_dropped=target_dropped, wrong_pos=wrong_pos, n_boot=n_boot, seed=seed)
        if missing.any():
            out["signals"][name]["imputed"] = int(missing.sum())
        if applied is not arr:
            out["signals"][name]["population"] = (
                f"as the bands act: {int(skipped[:len(pos_rows)].sum())} positives and "
                f"{int(skipped[len(pos_rows):].sum())} negatives routed to BM25 alone count as "
                "never flagged")
    y = np.concatenate([np.ones(len(pos_rows)), np.zeros(len(neg_rows))])
    if gate_features is not None:
        unmeasured = [f for f in gate_features if f not in complete]
        if unmeasured:
            raise ValueError(f"gate signal(s) {unmeasured} are not measured on every query "
                             f"(measured: {sorted(complete)})")
    gate_in = complete if gate_features is None else {f: complete[f] for f in gate_features}
    fitted = fit_learned_gate(gate_in, y, seed=seed) if len(gate_in) >= 2 else None
    if fitted is not None:
        gate, oof, folds = fitted
        cal = calibrate_signal(oof[:len(pos_rows)], oof[len(pos_rows):],
                               target_false_weak=target_false_weak, target_dropped=target_dropped,
                               wrong_pos=wrong_pos, n_boot=n_boot, seed=seed)
        cal["scored_on"] = f"out-of-fold predictions, {folds}-fold stratified cross-validation"
        out["signals"]["learned"] = cal
        gate.weak_score = cal["weak"]["threshold"]
        gate.min_score = cal["drop"]["threshold"]
        out["learned_gate"] = {**gate.as_dict(), "cv_folds": folds}
        out["oof_learned"] = [float(v) for v in oof]
    dense = out["signals"].get("top_dense")
    if dense is not None:
        raw = complete["top_dense"]
        out["positive_min_top_dense"] = float(raw[:len(pos_rows)].min())
        out["negative_max_top_dense"] = float(raw[len(pos_rows):].max())
        out["overlap"] = out["negative_max_top_dense"] >= out["positive_min_top_dense"]
        out["suggested_weak_dense"] = dense["weak"]["threshold"]
        out["suggested_min_dense"] = dense["drop"]["threshold"]
    return out


def plot_calibration(cal: dict[str, Any], rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write a PNG: per signal, histograms of positives vs negatives with the chosen weak and
    drop thresholds, and one panel of every signal's risk–coverage curve.

    Uses matplotlib's object API (no pyplot, no global backend state).

    Returns:
        ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [n for n in cal.get("signals", {}) if n != "learned"]
    learned = "learned" in cal.get("signals", {})
    panels = names + (["learned"] if learned else []) + ["risk–coverage"]
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5 * cols, 3.6 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    pos_rows = [r for r in rows if r["kind"] == "positive"]
    neg_rows = [r for r in rows if r["kind"] == "negative"]
    for i, name in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        if name == "risk–coverage":
            for n, c in cal["signals"].items():
                pts = np.asarray(c["risk_coverage"])
                if pts.size:
                    ax.plot(pts[:, 0], pts[:, 1], label=f"{n} (AURC {c['aurc']:.3f})")
            ax.set_xlabel("coverage (share of queries answered)")
            ax.set_ylabel("risk (share answered wrongly)")
            ax.set_title("risk–coverage")
            ax.legend(fontsize=7)
            continue
        c = cal["signals"][name]
        if name == "learned":
            oof = np.asarray(cal.get("oof_learned", []))
            p, q = oof[:len(pos_rows)], oof[len(pos_rows):]
        else:
            p = np.asarray([r[name] for r in pos_rows], dtype=float)
            q = np.asarray([r[name] for r in neg_rows], dtype=float)
        bins = np.histogram_bin_edges(np.concatenate([p, q]), bins=20)
        ax.hist(p, bins=bins, alpha=0.6, label=f"positives ({p.size})")
        ax.hist(q, bins=bins, alpha=0.6, label=f"negatives ({q.size})")
        for key, style in (("weak", "--"), ("drop", ":")):
            t = c[key]["threshold"]
            if t is not None:
                ax.axvline(t, color="k", linestyle=style, label=f"{key} {t:.3g}")
        ax.set_title(f"{name}: AUC {c['auc']:.3f}" + ("  (overlap)" if c["overlap"] else ""))
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path
