"""Paired significance between two ledger rows on per-query values.

* :func:`paired_randomization` — two-sided paired randomization (permutation) test: under the
  null hypothesis the sign of each per-query difference is exchangeable, so the p-value is the
  share of random sign flips whose |mean difference| is at least the observed one (Smucker,
  Allan, Carterette, "A comparison of statistical significance tests for information retrieval
  evaluation", CIKM 2007). The 95% CI of the mean difference comes from a paired bootstrap
  (percentile method).
* :func:`holm` — Holm's step-down correction of a family of p-values (Holm, "A simple
  sequentially rejective multiple test procedure", Scand. J. Statistics 1979).
* :func:`compare_paired` — the comparison every consumer makes (sweeps against their baseline,
  suites, ``rag gate``): the randomization test and bootstrap interval above, plus the
  minimum detectable effect of the same pairs.
* :func:`minimum_detectable_effect` and :func:`required_queries` — power of a paired test
  (two-sided, normal-theory paired t: MDE = (t_{1-α/2,n-1} + t_{power,n-1}) · sd(d) / √n;
  Cohen, "Statistical Power Analysis for the Behavioral Sciences", 1988, ch. 2). The
  randomization test has about the power of the paired t-test on IR metrics (Smucker et al.
  2007), so these sizes apply to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class PairedTest:
    """Result of comparing system B against baseline A on the same queries.

    Attributes:
        n: number of paired queries.
        mean_a, mean_b: the two means.
        delta: mean(B - A).
        p_value: two-sided randomization p-value (add-one smoothed, never 0).
        ci_low, ci_high: 95% paired-bootstrap interval of ``delta``.
    """

    n: int
    mean_a: float
    mean_b: float
    delta: float
    p_value: float
    ci_low: float
    ci_high: float


def paired_randomization(a: Sequence[float], b: Sequence[float], *, n_resamples: int = 10_000,
                         seed: int = 0) -> PairedTest:
    """Paired two-sided randomization test and bootstrap CI for mean(b - a).

    Args:
        a, b: per-query values of the baseline and the system, same length and query order.
        n_resamples: random sign flips (and bootstrap resamples).
        seed: RNG seed, so a report is reproducible.

    Returns:
        :class:`PairedTest`. With all differences zero, p = 1 and the CI is [0, 0].

    Raises:
        ValueError: the sequences differ in length, are empty, or hold NaN/inf.
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired values need equal 1-d shapes, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("no paired values")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("paired values must be finite (a NaN would make any difference look significant)")
    d = y - x
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    if not np.any(d):
        p = 1.0
    else:
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, d.size))
        null = np.abs((signs * d).mean(axis=1))
        # add-one smoothing counts the observed assignment itself (Phipson & Smyth 2010)
        p = float((1 + np.count_nonzero(null >= observed - 1e-12)) / (n_resamples + 1))
    idx = rng.integers(0, d.size, size=(n_resamples, d.size))
    boot = d[idx].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return PairedTest(n=int(d.size), mean_a=float(x.mean()), mean_b=float(y.mean()),
                      delta=float(d.mean()), p_value=min(p, 1.0), ci_low=float(lo),
                      ci_high=float(hi))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    """
    p = np.asarray(p_values, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


ALPHA = 0.05
POWER = 0.8


def minimum_detectable_effect(sd_diff: float, n: int, *, alpha: float = ALPHA,
                              power: float = POWER) -> float:
    """Smallest true mean difference a two-sided paired test on ``n`` queries detects with
    probability ``power`` at level ``alpha``.

    Args:
        sd_diff: standard deviation (ddof=1) of the per-query differences, in metric units.
        n: paired queries (>= 2).

    Returns:
        The effect in the metric's units (e.g. ΔMRR); ``inf`` for n < 2; NaN when ``sd_diff``
        is 0 or not finite (no spread to estimate power from: not "any effect is detectable").
    """
    from scipy.stats import t as student_t

    if n < 2:
        return float("inf")
    if not (sd_diff > 0 and np.isfinite(sd_diff)):
        return float("nan")
    df = n - 1
    return float((student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)) * sd_diff / np.sqrt(n))


def effect_text(v: float | None, digits: int = 3) -> str:
    """A minimum detectable effect as reports print it: ``digits`` decimals; ``n/a`` when it
    is no effect a metric in [0, 1] could show — missing, not finite (too few pairs, no
    spread), larger than 1, or MLflow's stand-in for infinity (it stores ``inf`` as the
    largest float, 1.8e308, which once printed as a 309-digit number)."""
    import math

    if v is None or not math.isfinite(v) or abs(v) > 1:
        return "n/a"
    return f"{v:.{digits}f}"


@dataclass(frozen=True)
class PairedComparison(PairedTest):
    """A :class:`PairedTest` with the power of the same pairs.

    Attributes:
        sd_diff: sd (ddof=1) of the per-query differences, or its estimate from the baseline's
            spread when every difference is 0 (:func:`paired_sd`).
        mde: :func:`minimum_detectable_effect` of ``sd_diff`` on ``n`` pairs (α 0.05, power 0.8).
    """

    sd_diff: float = float("nan")
    mde: float = float("nan")


def compare_paired(a: Sequence[float], b: Sequence[float], *, n_resamples: int = 10_000,
                   seed: int = 0) -> PairedComparison:
    """System B against baseline A on the same queries: :func:`paired_randomization` (p and the
    95% bootstrap CI of mean(b - a)) and the minimum detectable effect of these pairs.

    Args:
        a, b: per-query values of the baseline and the system, same length and query order.
        n_resamples, seed: of the randomization test and the bootstrap.

    Raises:
        ValueError: as :func:`paired_randomization`.
    """
    test = paired_randomization(a, b, n_resamples=n_resamples, seed=seed)
    sd, _ = paired_sd(a, b)
    return PairedComparison(**vars(test), sd_diff=sd, mde=minimum_detectable_effect(sd, test.n))


def paired_sd(a: Sequence[float], b: Sequence[float], *, assumed_correlation: float = 0.5) -> tuple[float, str]:
    """(sd of the per-query differences b - a, how it was obtained).

    When every difference is zero (two identical systems) the observed sd says nothing about
    power; then sd(d) is estimated from the baseline's own spread as
    ``sd(a) * sqrt(2 (1 - rho))`` with ``rho = assumed_correlation`` between the systems'
    per-query values, and the label says so.
    """
    x = np.asarray(a, dtype=float)
    d = np.asarray(b, dtype=float) - x
    if d.size >= 2 and np.std(d, ddof=1) > 0:
        return float(np.std(d, ddof=1)), "observed differences"
    sd = float(np.std(x, ddof=1)) if x.size >= 2 else 0.0
    return sd * float(np.sqrt(2 * (1 - assumed_correlation))), \
        f"baseline spread, assumed correlation {assumed_correlation:g}"


def required_queries(sd_diff: float, effect: float, *, alpha: float = ALPHA, power: float = POWER,
                     max_n: int = 1_000_000) -> int:
    """Smallest n with :func:`minimum_detectable_effect` (sd_diff, n) <= ``effect``.

    Raises:
        ValueError: ``effect`` <= 0.
    """
    if not (effect > 0 and np.isfinite(effect)):
        raise ValueError(f"effect must be a finite number > 0, got {effect}")
    if not np.isfinite(sd_diff):
        raise ValueError(f"sd_diff must be finite, got {sd_diff}")
    if sd_diff <= 0:
        return 2
    lo, hi = 2, 2
    while minimum_detectable_effect(sd_diff, hi, alpha=alpha, power=power) > effect:
        lo, hi = hi, hi * 2
        if hi > max_n:
            return max_n
    while lo < hi:  # the MDE falls monotonically with n
        mid = (lo + hi) // 2
        if minimum_detectable_effect(sd_diff, mid, alpha=alpha, power=power) <= effect:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class ConfidenceSequence:
    """A time-uniform confidence sequence for the mean of bounded values, one interval per
    prefix: ``lower[t-1] <= mean <= upper[t-1]`` holds for every t at once with probability
    at least 1 - ``alpha`` (so it may be read after every query and stopped at will).

    Attributes:
        lower, upper: shape (n,), the running intersection of the intervals after 1..n values.
        alpha: the error level.
    """

    lower: np.ndarray
    upper: np.ndarray
    alpha: float


def betting_confidence_sequence(x: Sequence[float], *, alpha: float = ALPHA, lo: float = -1.0,
                                hi: float = 1.0, grid: int = 1000,
                                truncation: float = 0.5) -> ConfidenceSequence:
    """The hedged betting confidence sequence of Waudby-Smith & Ramdas ("Estimating means of
    bounded random variables by betting", JRSS B 86(1), 2024, Theorem 3 and §5.1, the
    predictable plug-in bets): values are mapped to [0, 1]; for each candidate mean m on a
    grid of ``grid`` points a gambler bets on x > m and one on x < m with predictable bets
    lambda_t = sqrt(2 log(2/alpha) / (sigma^2_{t-1} t log(t+1))), truncated to
    ``truncation``/m and ``truncation``/(1-m); m leaves the sequence once the hedged capital
    K+/2 + K-/2 (a nonnegative martingale under m, at least the theorem's max(K+/2, K-/2))
    reaches 1/alpha (Ville's inequality). Valid for i.i.d. values (or any bounded sequence
    whose conditional mean is constant), at every t at once.

    Args:
        x: the values in order (e.g. per-query paired differences), each in [lo, hi].
        alpha: the error level; lo, hi: the values' bounds (differences of [0, 1] metrics:
            -1, 1).

    Raises:
        ValueError: no value, a value outside [lo, hi] or not finite, lo >= hi, alpha not
            in (0, 1).
    """
    v = np.asarray(x, dtype=float)
    if v.size == 0:
        raise ValueError("a confidence sequence needs at least one value")
    if not (0 < alpha < 1) or not lo < hi:
        raise ValueError(f"need 0 < alpha < 1 and lo < hi, got alpha={alpha}, [{lo}, {hi}]")
    if not np.all(np.isfinite(v)) or v.min() < lo - 1e-12 or v.max() > hi + 1e-12:
        raise ValueError(f"every value must be a finite number in [{lo}, {hi}]")
    z = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
    n = z.size
    t = np.arange(1, n + 1)
    # predictable estimates: after t-1 values (the t-th bet may not see x_t)
    mu = (0.5 + np.concatenate([[0.0], np.cumsum(z)[:-1]])) / t
    mu_hat = (0.5 + np.cumsum(z)) / (t + 1)                      # after t values
    sq = np.concatenate([[0.0], np.cumsum((z - mu_hat) ** 2)[:-1]])
    sigma2 = (0.25 + sq) / t
    lam = np.sqrt(2 * np.log(2 / alpha) / (sigma2 * t * np.log(t + 1)))
    del mu  # the plug-in bet depends on the variance alone (WSR §5.1)
    m = (np.arange(grid) + 0.5) / grid                            # candidate means
    lam_up = np.minimum(lam[:, None], truncation / m[None, :])
    lam_dn = np.minimum(lam[:, None], truncation / (1 - m)[None, :])
    with np.errstate(divide="ignore"):
        log_up = np.cumsum(np.log1p(lam_up * (z[:, None] - m[None, :])), axis=0)
        log_dn = np.cumsum(np.log1p(-lam_dn * (z[:, None] - m[None, :])), axis=0)
    hedged = np.logaddexp(log_up, log_dn) - np.log(2)            # log(K+/2 + K-/2) >= log max
    rejected = np.maximum.accumulate(hedged >= np.log(1 / alpha), axis=0)  # running intersection
    lower = np.empty(n)
    upper = np.empty(n)
    for i in range(n):
        kept = m[~rejected[i]]
        if kept.size:
            lower[i], upper[i] = kept.min() - 0.5 / grid, kept.max() + 0.5 / grid
        else:  # every grid point rejected (possible only at a grid edge): the nearest point
            j = int(np.argmin(hedged[i]))
            lower[i] = upper[i] = m[j]
    scale = hi - lo
    return ConfidenceSequence(lower=lo + np.clip(lower, 0, 1) * scale,
                              upper=lo + np.clip(upper, 0, 1) * scale, alpha=alpha)


#: the allowed move the wrong way, absolute in the metric's units (``rag gate --margin``'s
#: default, and the margin of the sweep tables' verdict column)
DEFAULT_MARGIN = 0.01

# the verdicts of one gated comparison (rag gate's checks, the sweep tables' verdict column)
REGRESSION, IMPROVEMENT = "regression", "improvement"
DROP_NOT_SIGNIFICANT, RISE_NOT_SIGNIFICANT = "drop_not_significant", "rise_not_significant"
WITHIN_MARGIN, INCONCLUSIVE = "within_margin", "inconclusive"


def three_valued_verdict(delta: float, *, margin: float, p_holm: float | None,
                         ci_low: float | None = None, ci_high: float | None = None,
                         alpha: float = ALPHA, lower_is_better: bool = False,
                         superiority: bool = False) -> str:
    """The verdict of one comparison (``rag gate``'s rule, docs/cli.md), with ``gain`` =
    ``delta`` (``-delta`` when lower is better):

    * regression: gain < -margin and p (Holm) < alpha (or no test: the margin alone);
    * improvement: gain > margin and p (Holm) < alpha;
    * non-inferiority (default): a check that is no regression but whose 95% CI of the gain
      reaches below -margin is inconclusive; otherwise drop_not_significant /
      rise_not_significant / within_margin by the point estimate;
    * superiority: anything but a regression or an improvement is inconclusive.
    """
    gain = -delta if lower_is_better else delta
    significant = p_holm is None or p_holm < alpha
    if gain < -margin - 1e-12:
        verdict = REGRESSION if significant else DROP_NOT_SIGNIFICANT
    elif gain > margin + 1e-12:
        verdict = IMPROVEMENT if significant else RISE_NOT_SIGNIFICANT
    else:
        verdict = WITHIN_MARGIN
    if superiority:
        return verdict if verdict in (REGRESSION, IMPROVEMENT) else INCONCLUSIVE
    if verdict not in (REGRESSION, IMPROVEMENT) and ci_low is not None and ci_high is not None:
        low = -ci_high if lower_is_better else ci_low
        if low < -margin - 1e-12:
            return INCONCLUSIVE
    return verdict
