"""Calibration of the abstention thresholds from the top dense cosine of each query.

``positive_min_top_dense`` is the lowest top-1 cosine of any answerable query and
``negative_max_top_dense`` the highest of any unanswerable one. Put the floor
(``abstain.min_dense``) below the first and the note (``abstain.weak_dense``) between the two.
The thresholds belong to one model on one corpus: recalibrate when either changes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

FLOOR_MARGIN = 0.05


def calibrate(positive_top: Sequence[float], negative_top: Sequence[float]) -> dict[str, float | bool | None]:
    """Summarise the two distributions and suggest thresholds.

    Suggested floor = (positive_min - 0.05) rounded down to 0.01, so it clears only the tail
    below every real answer. Suggested note = midpoint of positive_min and negative_max,
    rounded to 0.01 and never below the suggested floor. ``overlap`` is True when negative_max >= positive_min: no single
    threshold then separates the sets.

    Args:
        positive_top, negative_top: top-1 dense cosine per positive / negative query.

    Returns:
        A JSON-ready dict; values are None when a set is empty.
    """
    pos = np.asarray(positive_top, dtype=float)
    neg = np.asarray(negative_top, dtype=float)
    pmin = float(pos.min()) if pos.size else None
    nmax = float(neg.max()) if neg.size else None
    # round() first: (0.6 - 0.05) * 100 is 54.99999999999999 in binary floating point
    floor = (math.floor(round((pmin - FLOOR_MARGIN) * 100, 6)) / 100) if pmin is not None else None
    note = round((pmin + nmax) / 2, 2) if pmin is not None and nmax is not None else None
    if note is not None and floor is not None:
        note = max(note, floor)  # well-separated sets: the note never sits below the floor
    return {
        "positive_min_top_dense": pmin,
        "positive_median_top_dense": float(np.median(pos)) if pos.size else None,
        "negative_max_top_dense": nmax,
        "negative_median_top_dense": float(np.median(neg)) if neg.size else None,
        "overlap": bool(nmax >= pmin) if pmin is not None and nmax is not None else None,
        "suggested_min_dense": floor,
        "suggested_weak_dense": note,
    }
