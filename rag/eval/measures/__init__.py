"""One declaration per metric (DESIGN.md §8, "one measures registry"): which direction is
better, which per-query column a row metric is the mean of, and whether sweeps test it
against their baseline, ``rag golden expected`` pins its per-query column, and ``rag gate``
may gate it. The sweep significance (rag/ledger/sweep.py), the gate (rag/app/gate.py) and the
expected-score pinning (rag/eval/expected.py) read these flags instead of keeping lists of
their own.

A :class:`Measure` names one metric (``mrr``) or a family cut at k (``recall_at_``: every
``recall_at_<k>``). Lookups go through :func:`measure_of`.

A new ranking metric is one file in this folder (``rag/eval/measures/<name>.py``) defining
``MEASURES = (Measure(..., compute=fn),)`` plus its test: :func:`registered` imports every
module here, and the evaluator (:func:`rag.eval.metrics.ranking_metrics`) computes every
measure with a ``compute`` on the whole run's rankings at once (``fn(rankings)`` -> one value
per query, numpy over :class:`rag.eval.ranked.Rankings`), so the metric lands in per_query.csv and on
the row, and the sweep, the gate and ``rag golden expected`` read its flags
(``average_precision.py`` is one: MAP). The built-in metrics are declared below and computed
in rag/eval/metrics.py.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from rag.eval.ranked import Rankings

#: a computed measure: (every query's ranking, a :class:`rag.eval.ranked.Rankings`) -> one
#: float per query (an array of shape (n,)); a family's also gets the cut-off k
Compute = Callable[..., "np.ndarray"]


@dataclass(frozen=True)
class Measure:
    """One metric, or one family of metrics at a cut-off k.

    Attributes:
        name: the ledger name (``mrr``), or a family's prefix ending in ``_at_``.
        lower_is_better: a smaller value is better (rates of failure, latencies, costs).
        per_query: the per-query column (per_query.csv) the row metric is the mean of; ``""``
            when it is the metric's own name; None when it has no per-query column.
        significance: sweeps test it per query against their baseline.
        pinned: ``rag golden expected`` pins its per-query column in expected_per_query.csv.
        source: where the formula is defined (a paper or a module).
        compute: for a measure computed on the rankings (not one of metrics.py's built-ins):
            ``compute(rankings)`` -> float64 (n,), one value per query of a
            :class:`rag.eval.ranked.Rankings`, or ``compute(rankings, k)`` for a family; None
            for the built-ins and for measures computed elsewhere.
        cutoffs: a computed family's cut-offs (``ndcg_at_`` style names ``<name><k>``).
        headline: the names of this measure a reader compares rows on, as suffixes of
            ``name`` (``ONE`` for the measure itself, ``("8",)`` for ``recall_at_8``,
            ``("_p50_ms",)`` for ``latency_p50_ms``): logged first on every row, the first
            columns of a sweep's summary and of the MLflow screenshots
            (rag.ledger.metric_groups.HEADLINE = :func:`flagged` ``("headline")``).
        gated: the names ``rag gate`` compares by default, as suffixes as in ``headline``
            (rag.app.gate.GateOptions.metrics = :func:`flagged` ``("gated")``).
        over: the queries the metric is a mean over: ``positive`` (answerable, the default)
            or ``negative`` (unanswerable: abstention).
    """

    name: str
    lower_is_better: bool = False
    per_query: str | None = ""
    significance: bool = False
    pinned: bool = False
    source: str = ""
    compute: Compute | None = None
    cutoffs: tuple[int, ...] = ()
    headline: tuple[str, ...] = ()
    gated: tuple[str, ...] = ()
    over: str = "positive"

    def values(self, rankings: "Rankings") -> dict[str, np.ndarray]:
        """This computed measure on every query of ``rankings``: metric name -> float64 (n,).

        Raises:
            ValueError: the measure has no ``compute``, a family has no ``cutoffs``, or
                ``compute`` returns other than one value per query.
        """
        if self.compute is None:
            raise ValueError(f"measure {self.name!r} is not computed by the registry")
        if self.family and not self.cutoffs:
            raise ValueError(f"measure family {self.name!r} declares no cutoffs")
        calls = ({f"{self.name}{k}": (k,) for k in self.cutoffs} if self.family
                 else {self.name: ()})
        out = {}
        for name, extra in calls.items():
            v = np.asarray(self.compute(rankings, *extra), dtype=np.float64)
            if v.shape != (rankings.n,):
                raise ValueError(f"measure {name!r} returned shape {v.shape}, not one value "
                                 f"per query ({rankings.n},)")
            out[name] = v
        return out

    @property
    def family(self) -> bool:
        """Whether this names every ``<name><k>`` (a prefix ending in ``_at_``)."""
        return self.name.endswith("_at_")

    def column(self, metric: str) -> str | None:
        """The per-query column of ``metric`` (one of this measure's names)."""
        return None if self.per_query is None else (self.per_query or metric)


#: ``headline=ONE`` / ``gated=ONE``: the measure's own name (no suffix)
ONE: tuple[str, ...] = ("",)

#: in the order rows log their headline metrics and ``rag gate`` lists its default metrics
BUILTIN: tuple[Measure, ...] = (
    Measure("mrr", significance=True, pinned=True, source="rag/eval/metrics.py",
            headline=ONE, gated=ONE),
    Measure("recall_at_", significance=True, pinned=True,
            source="trec_eval recall (rag/eval/metrics.py)", headline=("8",), gated=("8",)),
    Measure("ndcg_at_", significance=True, pinned=True,
            source="Järvelin & Kekäläinen 2002 (rag/eval/metrics.py)",
            headline=("10",), gated=("10",)),
    Measure("answer_support_rate", per_query="answer_support", significance=True,
            headline=ONE, gated=ONE),
    Measure("abstain_rate", per_query="abstained", headline=ONE, gated=ONE, over="negative"),
    Measure("false_weak_rate", lower_is_better=True, per_query="false_weak", headline=ONE),
    Measure("dropped_rate", lower_is_better=True, per_query=None, headline=ONE),
    Measure("latency", lower_is_better=True, per_query=None,  # latency_*: every latency
            headline=("_p50_ms", "_p95_ms")),
    Measure("hit_at_", pinned=True, source="rag/eval/metrics.py"),
    Measure("judged_at_", pinned=True, source="ir_measures Judged@k (rag/eval/evaluate.py)"),
    Measure("token_recall_at_", source="recall within a context budget of k tokens "
            "(rag/eval/evaluate.py token_budget_metrics)"),
    Measure("token_support_at_", source="answer support within a context budget of k tokens "
            "(rag/eval/evaluate.py token_budget_metrics)"),
    Measure("bpref", source="Buckley & Voorhees 2004, trec_eval bpref (rag/eval/incomplete.py)"),
    Measure("condensed_ndcg_at_", source="Sakai 2007 condensed lists (rag/eval/incomplete.py)"),
    Measure("condensed_mrr", source="Sakai 2007 condensed lists (rag/eval/incomplete.py)"),
    Measure("semble_ndcg_at_", significance=True,
            source="MinishLab/semble benchmarks/metrics.py (rag/eval/chunk_metrics.py)"),
    Measure("candidate_pool_recall", per_query="candidate_hit"),
    Measure("missing_queries", lower_is_better=True, per_query=None),
    Measure("failed_queries", lower_is_better=True, per_query=None),
    Measure("filter_false_negative_rate", lower_is_better=True, per_query=None),
    Measure("context_chars_mean", lower_is_better=True, per_query=None),
    Measure("context_tokens_mean", lower_is_better=True, per_query=None),
)


@functools.cache
def registered() -> tuple[Measure, ...]:
    """Every declared measure: :data:`BUILTIN`, then the ``MEASURES`` of each module of this
    package, by module name.

    Raises:
        ValueError: two declarations of one name (the modules are named).
    """
    found: list[tuple[Measure, str]] = [(m, __name__) for m in BUILTIN]
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [(m, module.__name__) for m in getattr(module, "MEASURES", ())]
    seen: dict[str, str] = {}
    for m, where in found:
        if m.name in seen:
            raise ValueError(f"measure {m.name!r} is declared twice: in {seen[m.name]} and {where}")
        seen[m.name] = where
    return tuple(m for m, _ in found)


@functools.cache
def computed() -> tuple[Measure, ...]:
    """The registered measures the evaluator computes on each query's ranking."""
    return tuple(m for m in registered() if m.compute is not None)


@functools.cache
def _lookup() -> tuple[dict[str, Measure], list[Measure]]:
    ms = registered()
    exact = {m.name: m for m in ms if not m.family and m.name != "latency"}
    return exact, sorted((m for m in ms if m.family), key=lambda m: -len(m.name))


@functools.cache
def flagged(flag: str) -> tuple[str, ...]:
    """The metric names a measure flag selects, in registration order: each measure's
    ``name`` followed by each suffix it lists under ``flag`` (``"headline"`` or ``"gated"``).

    Raises:
        ValueError: ``flag`` is not one of those fields, or a name it makes is not declared
            (a suffix that does not complete a family's ``<name><k>``).
    """
    if flag not in ("headline", "gated"):
        raise ValueError(f"no measure flag {flag!r} (headline, gated)")
    names = tuple(m.name + s for m in registered() for s in getattr(m, flag))
    bad = [n for n in names if measure_of(n) is None]
    if bad:
        raise ValueError(f"{flag}: {', '.join(bad)} name no declared metric")
    return names


def measure_of(metric: str) -> Measure | None:
    """The :class:`Measure` declaring ``metric`` (an exact name, a ``<family><k>`` name or a
    ``latency*`` name), or None for an undeclared metric."""
    exact, families = _lookup()
    if metric in exact:
        return exact[metric]
    for m in families:  # longest prefix first: semble_ndcg_at_ before ndcg_at_
        rest = metric[len(m.name):]
        if metric.startswith(m.name) and rest.isdigit():
            return m
    if metric.startswith("latency"):
        return next(m for m in BUILTIN if m.name == "latency")
    return None


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is better (undeclared metrics: higher is better)."""
    m = measure_of(metric)
    return bool(m and m.lower_is_better)


def over_negatives(metric: str) -> bool:
    """Whether ``metric`` is a mean over the negatives (``Measure.over``)."""
    m = measure_of(metric)
    return m is not None and m.over == "negative"


def per_query_column(metric: str) -> str | None:
    """The per-query column ``metric`` is the mean of, or None."""
    m = measure_of(metric)
    return m.column(metric) if m else None


def significance_metric(column: str) -> bool:
    """Whether a per-query column is one sweeps test against their baseline: the column of a
    measure declared with ``significance`` (its own name, or the column it names)."""
    m = measure_of(column)
    if m is not None and m.significance and m.per_query == "":
        return True
    return any(m.significance and m.per_query == column for m in registered())


def pinned_column(column: str) -> bool:
    """Whether ``rag golden expected`` pins a per-query metric column."""
    m = measure_of(column)
    return bool(m and m.pinned and m.per_query == "")
