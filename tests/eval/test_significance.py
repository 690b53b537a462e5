"""Paired randomization test, bootstrap CI and Holm correction against hand and scipy values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from rag.eval.significance import holm, paired_randomization


def test_randomization_matches_exact_enumeration():
    a = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3, 0.0, 1.0])
    b = np.array([0.4, 0.5, 0.3, 1.0, 0.2, 0.6, 0.5, 1.0])
    d = b - a
    # exact two-sided permutation p over all 2^8 sign assignments
    obs = abs(d.mean())
    exact = np.mean([abs((np.array(s) * d).mean()) >= obs - 1e-12
                     for s in itertools.product([-1, 1], repeat=d.size)])
    res = paired_randomization(a, b, n_resamples=40_000, seed=1)
    assert res.delta == pytest.approx(d.mean())
    assert res.mean_a == pytest.approx(a.mean()) and res.mean_b == pytest.approx(b.mean())
    assert res.p_value == pytest.approx(exact, abs=0.01)
    assert res.ci_low <= res.delta <= res.ci_high


def test_randomization_agrees_with_scipy_permutation_test():
    rng = np.random.default_rng(7)
    a = rng.random(60)
    b = a + rng.normal(0.05, 0.2, 60)
    ref = stats.permutation_test((a, b), lambda x, y: np.mean(y - x), permutation_type="samples",
                                 n_resamples=20_000, alternative="two-sided", random_state=3)
    res = paired_randomization(a, b, n_resamples=20_000, seed=3)
    assert res.p_value == pytest.approx(ref.pvalue, abs=0.02)


def test_identical_systems_and_errors():
    res = paired_randomization([0.5, 0.1], [0.5, 0.1])
    assert res.p_value == 1.0 and res.delta == 0.0 and (res.ci_low, res.ci_high) == (0.0, 0.0)
    with pytest.raises(ValueError):
        paired_randomization([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_randomization([], [])


def test_holm_by_hand():
    # sorted p: 0.01, 0.02, 0.04 (m=3) -> 0.03, max(0.03, 0.04)=0.04, max(0.04, 0.04)=0.04
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # capped at 1 and monotone: 0.5*2=1.0 -> 1.0; 0.6*1=0.6 -> max(1.0, 0.6) = 1.0
    assert holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_lock_retry_retries_only_lock_errors():
    from rag.ledger.mlflow_store import with_lock_retry

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert with_lock_retry(flaky, delay_s=0.001) == "ok" and len(calls) == 3

    def broken():
        calls.append(1)
        raise ValueError("something else")

    calls.clear()
    with pytest.raises(ValueError):
        with_lock_retry(broken, delay_s=0.001)
    assert len(calls) == 1


def test_minimum_detectable_effect_by_hand():
    from rag.eval.significance import minimum_detectable_effect, paired_sd, required_queries

    # t_{0.975, 29} = 2.0452, t_{0.80, 29} = 0.8542 (Student's t table): (2.0452 + 0.8542) / sqrt(30)
    assert minimum_detectable_effect(1.0, 30) == pytest.approx(2.8994 / 30 ** 0.5, abs=2e-4)
    assert np.isnan(minimum_detectable_effect(0.0, 30))  # no spread: power not estimable
    assert minimum_detectable_effect(1.0, 1) == float("inf")
    n = required_queries(0.3, 0.05)
    # normal approximation ((1.96 + 0.8416) * 0.3 / 0.05)^2 = 282.6; Student's t needs a little more
    assert 283 <= n <= 290
    assert minimum_detectable_effect(0.3, n) <= 0.05 < minimum_detectable_effect(0.3, n - 1)
    with pytest.raises(ValueError, match="effect must be a finite number > 0"):
        required_queries(0.3, 0.0)
    # identical systems: the spread comes from the baseline, stated
    sd, how = paired_sd([0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0])
    assert sd == pytest.approx(np.std([0, 1, 0, 1], ddof=1)) and "assumed correlation 0.5" in how
    sd, how = paired_sd([0.0, 0.0, 1.0], [1.0, 0.0, 1.0])
    assert sd == pytest.approx(np.std([1, 0, 0], ddof=1)) and how == "observed differences"


def test_compare_paired_is_the_randomization_test_plus_the_mde_of_the_same_pairs():
    import numpy as np
    from scipy.stats import t as student_t

    from rag.eval.significance import compare_paired, paired_randomization

    a = [1.0, 0.5, 0.0, 0.333, 1.0, 0.25, 0.0, 1.0]
    b = [1.0, 1.0, 0.5, 0.333, 0.5, 1.0, 0.2, 1.0]
    c = compare_paired(a, b, n_resamples=2000, seed=3)
    t = paired_randomization(a, b, n_resamples=2000, seed=3)
    assert (c.n, c.delta, c.p_value, c.ci_low, c.ci_high) == (t.n, t.delta, t.p_value, t.ci_low,
                                                               t.ci_high)
    d = np.array(b) - np.array(a)
    sd = float(np.std(d, ddof=1))
    n = len(d)
    by_hand = (student_t.ppf(0.975, n - 1) + student_t.ppf(0.8, n - 1)) * sd / np.sqrt(n)
    assert c.sd_diff == pytest.approx(sd) and c.mde == pytest.approx(by_hand)


def test_effect_text_never_prints_an_absurd_effect():
    from rag.eval.significance import effect_text

    assert effect_text(0.04321) == "0.043" and effect_text(0.04321, 4) == "0.0432"
    # MLflow stores inf as the largest float: it printed as a 309-digit number
    for v in (float("inf"), float("nan"), 1.7976931348623157e308, 1.5, None):
        assert effect_text(v) == "n/a"


def test_the_betting_confidence_sequence_is_anytime_valid_where_peeking_is_not():
    """Simulation (seeded): 200 sequences of 200 paired differences of two Bernoulli(0.6)
    metrics (true mean 0). The confidence sequence may be read after every query; the share
    of sequences that ever exclude the true mean must stay within alpha (plus 3 standard
    errors of the simulation). A fixed-n 95% t-interval read after every query from the 10th
    on — peeking — is shown to exceed it, so the check can fail."""
    from rag.eval.significance import betting_confidence_sequence

    rng = np.random.default_rng(7)
    reps, n, alpha = 200, 200, 0.05
    cs_miss = peek_miss = 0
    k = np.arange(1, n + 1)
    for _ in range(reps):
        d = (rng.random(n) < 0.6).astype(float) - (rng.random(n) < 0.6).astype(float)
        cs = betting_confidence_sequence(d, alpha=alpha, grid=500)
        cs_miss += bool(np.any((cs.lower > 0) | (cs.upper < 0)))
        mean = np.cumsum(d) / k
        sd = np.array([d[:i].std(ddof=1) for i in range(2, n + 1)])
        half = 1.96 * sd / np.sqrt(k[1:])
        peek_miss += bool(np.any(((mean[1:] - half > 0) | (mean[1:] + half < 0))[8:]))
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert cs_miss / reps <= bound
    assert peek_miss / reps > bound
    # the sequence only narrows, and holds the sample mean of a constant sequence
    cs = betting_confidence_sequence([-0.5] * 60)
    assert np.all(np.diff(cs.lower) >= 0) and np.all(np.diff(cs.upper) <= 0)
    assert cs.lower[-1] <= -0.5 <= cs.upper[-1] and cs.upper[-1] < 0
    with pytest.raises(ValueError, match="in \\[-1.0, 1.0\\]"):
        betting_confidence_sequence([2.0])
