"""Paired significance between two ledger rows on per-query values.

* :func:`paired_randomization` — two-sided paired randomization (permutation) test: under the
  null hypothesis the sign of each per-query difference is exchangeable, so the p-value is the
  share of random sign flips whose |mean difference| is at least the observed one (Smucker,
  Allan, Carterette, "A comparison of statistical significance tests for information retrieval
  evaluation", CIKM 2007). The 95% CI of the mean difference comes from a paired bootstrap
  (percentile method).
* :func:`holm` — Holm's step-down correction of a family of p-values (Holm, "A simple
  sequentially rejective multiple test procedure", Scand. J. Statistics 1979).
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
