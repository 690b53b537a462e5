"""How a ledger row's metrics are grouped and ordered, in one place.

MLflow 3.17's UI (the version pinned in pyproject.toml) shows a run's metrics three ways:

* the run page's *Overview* table lists them **in the order they were logged** (the
  tracking store keeps insertion order; checked in tests/ledger/test_ledger_screenshots.py); the
  compare view sorts them alphabetically (nothing a ledger can change);
* the *Model metrics* chart tab puts a metric in the section named by everything before its
  **last** ``/`` (``abstention/top_dense/auc`` -> section ``abstention/top_dense``); names
  without ``/`` share the section "Model metrics" (the bundled UI's
  ``RunsChartsCardConfig.extractChartSectionName``);
* the runs table's column picker sorts names alphabetically.

So every row is logged in :func:`ordered` order: the **headline** metrics first
(:data:`HEADLINE`: what a reader compares rows on), then the other unprefixed ranking and
returned-set metrics, then the per-tag slices (``tag.<tag>.<metric>``,
:mod:`rag.eval.metric_names`), then each diagnostic **group** in :data:`GROUPS` order. A
group is a ``<group>/`` prefix, so the chart tab gives it a section of its own and the
headline charts are not buried among ~200 diagnostics. What MLflow's UI does not allow: the
"Model metrics" chart section (headline and per-tag charts) is always drawn after the named
sections; a sweep's significance against its baseline is therefore one section,
``vs_baseline``, not a hundred loose ``mrr_p_holm``-style charts.

Significance metrics were logged unprefixed before (``mrr_delta``, ``mrr_p_holm``, ...):
:func:`baseline_values` reads both spellings, so old rows still render.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from rag.eval.measures import flagged
from rag.eval.metric_names import TAG_PREFIX, split_tag_metric

# what a reader compares rows on, in this order (absent ones are skipped): declared with
# ``headline=`` in rag/eval/measures/
HEADLINE: tuple[str, ...] = flagged("headline")

# sweep significance of a job against its baseline row (rag.ledger.sweep.sweep_significance)
BASELINE_GROUP = "vs_baseline"

# diagnostic groups (the prefix before the first "/"), in the order they are logged; a group
# not listed here comes after these, alphabetically. Each value says what the group holds.
GROUPS: dict[str, str] = {
    BASELINE_GROUP: "paired test against the sweep's baseline row: <m>_delta, <m>_p, "
                    "<m>_p_holm, <m>_ci_low/_ci_high, <m>_mde, paired_queries",
    "lost_at": "where each positive was lost: not_in_candidates, fused_out, reranked_out, ...",
    "abstention": "per abstention signal: ROC AUC, AURC, chosen thresholds and their rates",
    "calibration": "top dense cosine summary: overlap, suggested bands",
    "rerank_gate": "per rerank-score threshold: abstain and false_weak rates (evaluated only)",
    "index": "index build: files, chunks, embeddings, skips, per-language stats, timings",
    "sweep": "a sweep's parent run: indexes prebuilt, chunks embedded",
}

# the significance statistics logged per metric m, and the one per job
_BASELINE_SUFFIXES = ("_delta", "_p", "_p_holm", "_ci_low", "_ci_high", "_mde")
_PAIRED = "paired_queries"
_AT_K = re.compile(r"^(?P<base>.+)_at_(?P<k>\d+)$")


def baseline_name(name: str) -> str:
    """The ledger name of a significance statistic: ``baseline_name("mrr_p_holm") ==
    "vs_baseline/mrr_p_holm"``."""
    return f"{BASELINE_GROUP}/{name}"


def is_baseline_stat(name: str) -> bool:
    """True for a significance statistic in its short form (``mrr_delta``, ``recall_at_8_p``,
    ``paired_queries``)."""
    return name == _PAIRED or name.endswith(_BASELINE_SUFFIXES)


def baseline_values(metrics: Mapping[str, float]) -> dict[str, float]:
    """The significance statistics of a row under their short names (``mrr_delta``,
    ``mrr_p_holm``, ``paired_queries``, ...), read from ``vs_baseline/<name>`` or, for rows
    logged before the group existed, from the bare ``<name>``; the prefixed one wins."""
    out = {k: v for k, v in metrics.items() if "/" not in k and not k.startswith(TAG_PREFIX)
           and is_baseline_stat(k)}
    pre = BASELINE_GROUP + "/"
    out.update({k[len(pre):]: v for k, v in metrics.items() if k.startswith(pre)})
    return out


def group_of(name: str) -> str:
    """``""`` for an unprefixed metric (headline or secondary), ``"tag"`` for a per-tag one
    (``tag.prose.mrr``, also ``tag.prose.lost_at/fused_out``), else the prefix before the
    first ``/``."""
    if name.startswith(TAG_PREFIX):
        return "tag"
    head, sep, _ = name.partition("/")
    return head if sep else ""


def _natural(name: str) -> tuple:
    """``recall_at_8`` before ``recall_at_10``: an ``_at_<k>`` name sorts by its base, then k."""
    m = _AT_K.match(name)
    return (m["base"], int(m["k"]), "") if m else (name, -1, name)


def sort_key(name: str) -> tuple:
    """The position of ``name`` in a row: headline (in :data:`HEADLINE` order), other
    unprefixed metrics, per-tag metrics (by tag, then metric), then the groups in
    :data:`GROUPS` order (unknown groups last, alphabetically); inside a tier, ``_at_<k>``
    names sort by k."""
    if name in HEADLINE:
        return (0, HEADLINE.index(name), ())
    group = group_of(name)
    if group == "":
        return (1, 0, _natural(name))
    if group == "tag":
        tag, metric = split_tag_metric(name) or (name, "")
        return (2, 0, (tag, *_natural(metric)))
    order = list(GROUPS)
    rank = order.index(group) if group in order else len(order)
    return (3, rank, (group, *_natural(name)))


def ordered(names: Iterable[str]) -> list[str]:
    """``names`` in the order a row logs them (:func:`sort_key`)."""
    return sorted(names, key=sort_key)
