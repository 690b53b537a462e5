"""``rag gate``: pass or fail a change against a baseline, for CI.

Compares a candidate ledger row (or a fresh run, ``--fresh``) with a baseline: another row, or
a pinned expectation (``golden/<corpus>/expected.yaml``, rag/eval/expected.py). A check
(one metric, or one metric on one tag's queries with ``--per-tag``) **fails** only when

1. the metric moved the wrong way by more than its margin (absolute, in the metric's units;
   ``--margin``, default :attr:`GateOptions.margin`), **and**
2. the paired test says the move is significant after Holm's correction across every check
   of the gate (headline and per-tag together): the sweep's test, a two-sided paired
   randomization (sign-flip) test on per-query values with a paired-bootstrap 95% CI
   (:func:`rag.eval.significance.paired_randomization`; Smucker, Allan, Carterette, CIKM
   2007), and :func:`rag.eval.significance.holm` (Holm 1979).

Improvements are reported the same way. A paired check that is no regression but whose 95%
CI of the difference reaches past the margin the wrong way is **inconclusive**: a regression
is not ruled out; it says about how many paired queries would decide it
(:func:`queries_needed`). That is a non-inferiority test; metrics in
:attr:`GateOptions.superior` are gated for superiority instead (pass only when shown better
by more than the margin, else inconclusive). The per-query guard fails the gate when more
than ``max_severe_drops`` queries lose ``severe_drop`` of their reciprocal rank; the coverage
guard (:func:`coverage_lost`) when the candidate lacks a query, a judgement, a tag or a gated
metric the baseline has — two golden sets are paired on the queries whose per-query
``judgement_digest`` (:func:`rag.eval.golden.judgement_digest`) agrees; the abstention
guard (:func:`abstention_stopped`) when the candidate abstains on none of the shared
negatives the baseline abstained on. Exit codes
(:data:`EXIT_PASS`, :data:`EXIT_REGRESSION`, :data:`EXIT_CANNOT_COMPARE`,
:data:`EXIT_INCONCLUSIVE`): 0 pass, 1 a regression (a check or the guard), 4 inconclusive,
2 could not compare (a missing or ambiguous row, another corpus, another golden set
fingerprint without per-query digests, an unreadable per-query table, a gated metric absent
from the baseline).

**Against an expectation.** A paired test needs per-query values on both sides, which a
metric's mean cannot give. An expected.yaml may therefore pin the source row's per-query
table beside it (``per_query:`` with its SHA-256; written by
:func:`rag.eval.expected.write_expected_from_row`): the gate then runs the same paired test
as against a row. An expected.yaml without one is still gated, on the margin alone, and the
output says so: a metric that dropped by more than its margin fails without a test. (Chosen
over refusing to gate: an old expectation stays usable, and the message says how to pin.)

Output: a markdown summary (stdout, or ``--markdown FILE``), JUnit XML (``--junit FILE``, one
test case per check), ``--json``; every form also says where the positives were lost in each
row (``lost_at``, rag/eval/attribution.py) and at which stage the changed queries changed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rag.eval.measures import flagged

from rag.core.exit_codes import ExitCode

# the gate's outcomes, as rag/core/exit_codes.py numbers them
EXIT_PASS = int(ExitCode.OK)
EXIT_REGRESSION = int(ExitCode.FINDINGS)
EXIT_CANNOT_COMPARE = int(ExitCode.ERROR)
EXIT_INCONCLUSIVE = int(ExitCode.INCONCLUSIVE)

# which direction is better and which per-query column a row metric is the mean of are
# declared once, in rag/eval/measures/
# verdicts of one check: one rule for the gate and the sweep tables (rag/eval/significance.py)
from rag.eval.significance import (DROP_NOT_SIGNIFICANT, IMPROVEMENT,  # noqa: E402
                                   INCONCLUSIVE, REGRESSION, RISE_NOT_SIGNIFICANT,
                                   WITHIN_MARGIN, DEFAULT_MARGIN, three_valued_verdict)


class GateError(ValueError):
    """The two sides cannot be compared (exit 2); the message is one line."""


@dataclass(frozen=True)
class GateOptions:
    """Every setting of the gate, with its default (the single place they are defined; the
    CLI's defaults are read from here).

    Attributes:
        metrics: row metric names gated (by default those declared ``gated=`` in
            rag/eval/measures/; ``tag.<tag>.`` forms are added by ``per_tag``).
        margin: allowed move in the wrong direction, absolute, in the metric's units.
        margins: per-metric margins (metric name -> margin) that replace ``margin``.
        alpha: the family-wise significance level for Holm's correction.
        per_tag: also gate every metric on each tag's queries.
        tags: with ``per_tag``, only these tags (empty: every tag of the golden set).
        n_resamples, seed: of the randomization test and bootstrap (the sweep's values).
        severe_drop: a query whose reciprocal rank falls by at least this much (baseline RR
            minus candidate RR; 0.9: rank 1 to beyond rank 10, or lost) is a severe drop.
        max_severe_drops: more severe drops than this fail the gate, by name, whatever the
            means say (the per-query guard; negative: off).
        superior: metrics gated for **superiority** (the candidate must be shown better by
            more than the margin, else the check is inconclusive); every other gated metric
            is gated for **non-inferiority** (module docstring).
        coverage: the coverage guard: a query (or its judgement), a tag or a gated metric
            that the baseline has and the candidate lacks fails the gate, by name.
        abstention_guard: the abstention guard (:func:`abstention_stopped`), when
            ``abstain_rate`` is gated: a candidate that abstains on none of the shared
            negatives, where the baseline abstained on at least one, fails the gate.
        sequential: decide each paired check by an anytime-valid confidence sequence of
            the per-query differences (:func:`rag.eval.significance.
            betting_confidence_sequence`, at ``alpha`` / the number of checks: Bonferroni)
            read in a seeded random order, instead of the fixed-n test and CI; each check
            says after how many queries it was decided (``decided_at``), so a run evaluated
            in that order could have stopped there.
    """

    metrics: tuple[str, ...] = flagged("gated")
    margin: float = DEFAULT_MARGIN
    margins: tuple[tuple[str, float], ...] = ()
    alpha: float = 0.05
    per_tag: bool = False
    tags: tuple[str, ...] = ()
    n_resamples: int = 10_000
    seed: int = 0
    severe_drop: float = 0.9
    max_severe_drops: int = 0
    superior: tuple[str, ...] = ()
    coverage: bool = True
    abstention_guard: bool = True
    sequential: bool = False

    def margin_for(self, metric: str) -> float:
        """The margin of ``metric`` (a ``tag.<tag>.<m>`` name takes ``m``'s)."""
        from rag.eval.metric_names import split_tag_metric

        base = (split_tag_metric(metric) or (None, metric))[1]
        return dict(self.margins).get(metric, dict(self.margins).get(base, self.margin))

    def is_superiority(self, metric: str) -> bool:
        """Whether ``metric`` (or, for ``tag.<tag>.<m>``, ``m``) is gated for superiority."""
        from rag.eval.metric_names import split_tag_metric

        base = (split_tag_metric(metric) or (None, metric))[1]
        return metric in self.superior or base in self.superior


def describe_test(options: GateOptions, n_checks: int) -> str:
    """The test used, in words, for every output form."""
    if options.sequential:
        return (f"sequential: an anytime-valid betting confidence sequence of the per-query "
                f"differences (Waudby-Smith & Ramdas, JRSS B 2024), read in an order seeded "
                f"{options.seed}, at {options.alpha:g} / {n_checks} per check (Bonferroni); a "
                "check passes once it rules out a drop beyond its margin, fails once it rules "
                "out anything better, and is inconclusive until then")
    return (f"two-sided paired randomization (sign-flip) test on per-query values, "
            f"{options.n_resamples:,} resamples, seed {options.seed}, with a 95% paired-"
            f"bootstrap CI — the sweep's test (rag/eval/significance.py; Smucker et al., CIKM "
            f"2007) — Holm-corrected across the {n_checks} paired checks (Holm 1979); a check "
            f"fails when its metric moves the wrong way by more than its margin and p (Holm) "
            f"< {options.alpha:g}")


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of ``metric`` (or of its per-tag form) are better."""
    from rag.eval.metric_names import split_tag_metric

    from rag.eval.measures import lower_is_better as declared_lower

    base = (split_tag_metric(metric) or (None, metric))[1]
    return declared_lower(base)


def per_query_values(frame: Any, metric: str, *, where: str = "the per-query table") -> Any:
    """The per-query values whose mean over positives is row metric ``metric`` (a pandas
    Series of floats indexed by query id), or None when the table has no such column.

    ``answer_support_rate`` is the mean of ``answer_support``, ``false_weak_rate`` of
    ``false_weak``, ``candidate_pool_recall`` of ``candidate_hit``, ``dropped_rate`` of
    ``returned_as == "dropped"``; ranking metrics (``mrr``, ``recall_at_<k>``, ...) are their
    own columns. Booleans written as ``True``/``False`` count 1/0.

    Raises:
        GateError: a cell of the column that is not a number, or (for every metric but a
            latency) a value outside [0, 1] — naming ``where``, the column and the query.
    """
    if metric == "dropped_rate":
        if "returned_as" not in frame.columns:
            return None
        return (frame["returned_as"].astype(str) == "dropped").astype(float)
    from rag.eval.measures import per_query_column

    col = per_query_column(metric)
    if col is None or col not in frame.columns:
        return None
    series = frame[col].map(lambda v: {"True": 1.0, "False": 0.0}.get(v, v) if isinstance(v, str)
                            else v)
    import pandas as pd

    values = pd.to_numeric(series, errors="coerce")
    bad = values.isna() & series.notna()
    if bad.any():
        q = bad[bad].index[0]
        raise GateError(f"{where}: column {col!r} of query {q!r} holds {series[q]!r}, not a "
                        "number (an unreadable per-query table)")
    share = not (col.endswith("_ms") or metric.endswith("_ms"))
    out = values.astype(float)
    if share and ((out < -1e-9) | (out > 1 + 1e-9)).any():
        q = out[(out < -1e-9) | (out > 1 + 1e-9)].index[0]
        raise GateError(f"{where}: column {col!r} of query {q!r} is {out[q]:g}, outside [0, 1] "
                        "(an unreadable per-query table)")
    return out


@dataclass
class Side:
    """One side of the comparison.

    Attributes:
        label: how outputs name it (``row 1a2b3c4d`` or the expected.yaml path).
        kind: ``row`` or ``expected``.
        ref: the full run id, or the expected.yaml path.
        corpus, golden_fingerprint, corpus_fingerprint: what it was measured on (None:
            not recorded).
        overrides: the Hydra overrides of its condition (what ``--fresh`` re-runs).
        metrics: row metric name -> value (an expectation's pinned values).
        per_query: its positives' per-query table indexed by query id, or None (an
            expectation that pins none).
        negatives: its negatives' per-query table (None: no table, or no negative).
        mode: the row's ``search.mode`` param (None: an expectation, or not logged).
    """

    label: str
    kind: str
    ref: str
    corpus: str | None
    golden_fingerprint: str | None
    corpus_fingerprint: str | None
    overrides: list[str]
    metrics: dict[str, float]
    per_query: Any = None
    negatives: Any = None
    mode: str | None = None

    def table(self, metric: str) -> Any:
        """The per-query table ``metric`` is a mean over: the negatives' for an abstention
        metric (:func:`rag.eval.measures.over_negatives`), else the positives'."""
        from rag.eval.measures import over_negatives

        return self.negatives if over_negatives(metric) else self.per_query

    def describe(self) -> dict[str, Any]:
        """JSON-ready identity (no tables)."""
        return {"label": self.label, "kind": self.kind, "ref": self.ref, "corpus": self.corpus,
                "golden_fingerprint": self.golden_fingerprint,
                "corpus_fingerprint": self.corpus_fingerprint, "overrides": self.overrides,
                "per_query": self.per_query is not None}


def _negatives(csv_text: str, where: str) -> Any:
    """The negatives of a per-query table (None when it has none)."""
    from rag.ledger.sweep import per_query_frame

    try:
        frame = per_query_frame(csv_text, kind="negative")
    except (KeyError, ValueError) as exc:
        raise GateError(f"{where} is not a per-query table ({exc})") from None
    if frame.index.duplicated().any():
        raise GateError(f"{where} lists negative {frame.index[frame.index.duplicated()][0]!r} "
                        "more than once (an unreadable per-query table)")
    return None if frame.empty else frame


def _frame(csv_text: str, where: str) -> Any:
    from rag.ledger.sweep import per_query_frame

    try:
        frame = per_query_frame(csv_text)
    except (KeyError, ValueError) as exc:
        raise GateError(f"{where} is not a per-query table "
                        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if frame.empty:
        raise GateError(f"{where} holds no positive query")
    dup = frame.index[frame.index.duplicated()]
    if len(dup):
        raise GateError(f"{where} lists query {dup[0]!r} more than once (an unreadable "
                        "per-query table)")
    return frame


def expected_side(path: Path) -> Side:
    """An expected.yaml (or a directory holding one) as a :class:`Side`.

    Raises:
        GateError: an unreadable file, or a pinned table missing or not matching its SHA-256.
    """
    from rag.eval.expected import (EXPECTED_FILE, ExpectedError, load_expected,
                                   load_pinned_per_query)

    path = Path(path)
    if path.is_dir():
        if not (path / EXPECTED_FILE).is_file():
            raise GateError(f"{path}: a directory without an {EXPECTED_FILE} (a baseline is a "
                            f"run id, an {EXPECTED_FILE}, or the golden directory holding one; "
                            f"write one with rag golden expected --run RUN_ID --out "
                            f"{path / EXPECTED_FILE})")
        path = path / EXPECTED_FILE
    try:
        header, expectations = load_expected(path)
        pinned = load_pinned_per_query(path, header)
    except ExpectedError as exc:
        raise GateError(str(exc)) from None
    frame = _frame(pinned, f"{path}: per_query: {header.get('per_query')}") \
        if pinned is not None else None
    known = lambda v: None if v in (None, "", "?") else str(v)  # noqa: E731
    return Side(label=str(path), kind="expected", ref=str(path), corpus=known(header.get("corpus")),
                golden_fingerprint=known(header.get("golden_fingerprint")),
                corpus_fingerprint=known(header.get("corpus_fingerprint")),
                overrides=[str(o) for o in header.get("overrides") or []],
                metrics={e.metric: e.value for e in expectations}, per_query=frame,
                negatives=(_negatives(pinned, f"{path}: per_query: {header.get('per_query')}")
                           if pinned is not None else None))


def row_side(ledger: Any, ref: str) -> Side:
    """A finished ledger row as a :class:`Side`.

    Raises:
        GateError: no row or several match ``ref``, the row never finished, or its
            per_query.csv is missing or not a per-query table.
    """
    from rag.ledger.mlflow_store import LedgerError

    try:
        run_id = ledger.resolve_run_id(ref)
        run = ledger.client.get_run(run_id)
        text = ledger.download_text(run_id, "per_query.csv")
    except (LookupError, LedgerError) as exc:
        raise GateError(str(exc)) from None
    tags = dict(run.data.tags)
    try:
        overrides = [str(o) for o in json.loads(tags.get("hydra_overrides", "[]"))]
    except ValueError:
        overrides = []
    return Side(label=f"row {run_id[:8]}", kind="row", ref=run_id, corpus=tags.get("corpus"),
                golden_fingerprint=tags.get("golden_fingerprint"),
                corpus_fingerprint=tags.get("corpus_fingerprint"), overrides=overrides,
                metrics={k: float(v) for k, v in run.data.metrics.items()},
                per_query=_frame(text, f"per_query.csv of row {run_id[:8]}"),
                negatives=_negatives(text, f"per_query.csv of row {run_id[:8]}"),
                mode=run.data.params.get("search.mode"))


def is_expectation(ref: str) -> bool:
    """Whether a reference names an expected.yaml rather than a ledger row: a ``.yaml``/``.yml``
    path, a path with a folder in it, a directory, or a file that exists and is not named
    like a run id (hex). A directory or a file that holds no expectation is then refused
    as such (:func:`expected_side`), not looked up as a run id."""
    p = Path(ref)
    return (ref.endswith((".yaml", ".yml")) or "/" in ref or os.sep in ref or p.is_dir()
            or (p.is_file() and not _RUN_ID.fullmatch(ref)))


#: what a run id (or a prefix of one) looks like: a file of that name in the working
#: directory does not make it a path
_RUN_ID = re.compile(r"[0-9a-fA-F]{4,32}")


def check_comparable(base: Side, cand: Side) -> list[str]:
    """Refuse two sides measured on different corpora or golden sets; notes for the rest.

    Raises:
        GateError: the corpora differ, the golden set fingerprints differ, or one side does
            not record its golden fingerprint (naming both sides).
    """
    if base.corpus and cand.corpus and base.corpus != cand.corpus:
        raise GateError(f"cannot compare: {base.label} is corpus {base.corpus!r}, "
                        f"{cand.label} corpus {cand.corpus!r}")
    for side in (base, cand):
        if not side.golden_fingerprint:
            raise GateError(f"cannot compare: {side.label} does not record its golden set "
                            "fingerprint")
    notes = []
    if base.golden_fingerprint != cand.golden_fingerprint:
        differ = (f"the golden sets differ ({base.label}: {base.golden_fingerprint[:12]}, "
                  f"{cand.label}: {cand.golden_fingerprint[:12]})")
        if _digests(base) is None or _digests(cand) is None:
            raise GateError(f"cannot compare: {differ} and a side has no per-query judgement "
                            f"digests ({DIGEST_COLUMN}; rows logged before it existed) to pair "
                            "the queries by; re-pin the expectation or compare rows of one "
                            "golden set")
        notes.append(f"{differ}: queries are paired where their judgements agree "
                     f"({DIGEST_COLUMN}); the coverage guard names what the candidate lacks")
    if (base.corpus_fingerprint and cand.corpus_fingerprint
            and base.corpus_fingerprint != cand.corpus_fingerprint):
        notes.append(f"the indexed files differ (corpus fingerprint {base.corpus_fingerprint[:12]}"
                     f" vs {cand.corpus_fingerprint[:12]}): the candidate walked the corpus "
                     "differently, or the corpus changed")
    return notes


DIGEST_COLUMN = "judgement_digest"  # rag.eval.golden.judgement_digest, per query


def _digests(side: Side) -> Any:
    """The side's per-query judgement digests (a Series by query id), or None."""
    if side.per_query is None or DIGEST_COLUMN not in side.per_query.columns:
        return None
    return side.per_query[DIGEST_COLUMN].astype(str)


def paired_ids(base: Side, cand: Side) -> Any:
    """The positives both per-query tables hold *as the same judgement*: ids in both whose
    judgement digests agree (when both record them), else ids in both; None when a side has
    no per-query table."""
    if base.per_query is None or cand.per_query is None:
        return None
    common = base.per_query.index.intersection(cand.per_query.index)
    da, db = _digests(base), _digests(cand)
    if da is None or db is None:
        return common
    return common[(da.loc[common].to_numpy() == db.loc[common].to_numpy())]


def paired_negatives(base: Side, cand: Side) -> Any:
    """The negatives both sides hold as the same query (ids in both whose judgement digests
    agree, when both record them); None when a side has no negative."""
    a, b = base.negatives, cand.negatives
    if a is None or b is None:
        return None
    common = a.index.intersection(b.index)
    if DIGEST_COLUMN in a.columns and DIGEST_COLUMN in b.columns:
        same = (a.loc[common, DIGEST_COLUMN].astype(str).to_numpy()
                == b.loc[common, DIGEST_COLUMN].astype(str).to_numpy())
        common = common[same]
    return common


def coverage_lost(base: Side, cand: Side, options: GateOptions) -> list[dict[str, str]]:
    """What the baseline measured and the candidate does not (the coverage guard), in order:
    ``{"kind": "query", "name": id, "why": "missing" | "relabelled"}`` for each baseline
    positive absent from the candidate or judged differently there (another judgement
    digest), ``{"kind": "tag", ...}`` for each tag of the baseline's positives that no
    candidate positive has, ``{"kind": "metric", ...}`` for each gated metric the baseline
    has (per-query values or the row metric) and the candidate has not. Queries and tags are
    compared only when both sides have per-query tables."""
    lost: list[dict[str, str]] = []
    if base.per_query is not None and cand.per_query is not None:
        common = base.per_query.index.intersection(cand.per_query.index)
        same = set(paired_ids(base, cand))
        for q in base.per_query.index:
            if q not in common:
                lost.append({"kind": "query", "name": str(q), "why": "missing"})
            elif q not in same:
                lost.append({"kind": "query", "name": str(q), "why": "relabelled"})
        have = set(_tags_of(cand.per_query))
        lost += [{"kind": "tag", "name": t, "why": "missing"}
                 for t in _tags_of(base.per_query) if t not in have]

    def has(side: Side, m: str) -> bool:
        table = side.table(m)
        return m in side.metrics or (table is not None
                                     and per_query_values(table, m) is not None)

    lost += [{"kind": "metric", "name": m, "why": "missing"} for m in options.metrics
             if has(base, m) and not has(cand, m)]
    return lost


def coverage_text(lost: Sequence[dict[str, str]], limit: int = 10) -> str:
    """``3 queries (q1, q2 relabelled, q3), 1 tag (api)``: the coverage guard's findings."""
    parts = []
    for kind in ("query", "tag", "metric"):
        items = [f"{d['name']}" + (" relabelled" if d["why"] == "relabelled" else "")
                 for d in lost if d["kind"] == kind]
        if items:
            word = {"query": "queries", "tag": "tags", "metric": "metrics"}[kind] \
                if len(items) != 1 else kind
            parts.append(f"{len(items)} {word} ({', '.join(items[:limit])}"
                         f"{', …' if len(items) > limit else ''})")
    return ", ".join(parts)


@dataclass
class Check:
    """One gated comparison.

    Attributes:
        metric: the row metric name (``mrr``, ``tag.prose.mrr``).
        tag: the tag for a per-tag check, else None.
        baseline, candidate: the two values (per-query means when paired).
        delta: candidate - baseline.
        margin: the allowed move in the wrong direction.
        lower_is_better: the metric's direction.
        n: paired queries (None: margin only).
        p, p_holm, ci_low, ci_high: the paired test (None: margin only).
        mde: the minimum detectable effect of the pairs (α 0.05, power 0.8; None: margin
            only) — :func:`rag.eval.significance.compare_paired`, as sweeps log it.
        verdict: regression, improvement, inconclusive, drop_not_significant,
            rise_not_significant, within_margin.
        mode: ``non_inferiority`` or ``superiority`` (:attr:`GateOptions.superior`).
        cs_low, cs_high: with ``sequential``, the confidence sequence of Δ after every
            paired query; decided_at: how many queries it took to decide (None: undecided).
        queries_needed: for an inconclusive check, about how many paired queries would
            decide it (module docstring); None otherwise, or when the observed move sits on
            the margin itself.
    """

    metric: str
    tag: str | None
    baseline: float
    candidate: float
    delta: float
    margin: float
    lower_is_better: bool
    n: int | None = None
    p: float | None = None
    p_holm: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mde: float | None = None
    verdict: str = WITHIN_MARGIN
    queries_needed: int | None = None
    mode: str = "non_inferiority"
    cs_low: float | None = None
    cs_high: float | None = None
    decided_at: int | None = None

    @property
    def paired(self) -> bool:
        return self.p is not None


def _tags_of(frame: Any) -> list[str]:
    from rag.eval.attribution import split_tags

    return sorted({t for v in frame["tags"] for t in split_tags(v)}) if "tags" in frame.columns else []


def build_checks(base: Side, cand: Side, options: GateOptions) -> tuple[list[Check], list[str]]:
    """The checks of the gate, with their paired tests (unadjusted p), and notes.

    Raises:
        GateError: a gated headline metric is on neither the per-query tables nor both rows.
    """
    from rag.eval.metric_names import split_tag_metric, tag_metric
    from rag.eval.significance import compare_paired

    notes: list[str] = []
    common = paired_ids(base, cand)
    if common is not None:
        if len(common) == 0:
            raise GateError(f"cannot compare: {base.label} and {cand.label} share no positive "
                            "query judged the same way")
        if len(common) != len(base.per_query) or len(common) != len(cand.per_query):
            notes.append(f"{len(common)} positives paired ({len(base.per_query)} in "
                         f"{base.label}, {len(cand.per_query)} in {cand.label})")
    else:
        missing = base if base.per_query is None else cand
        notes.append(f"margin only: {missing.label} has no per-query table, so no paired test "
                     "is possible; a drop beyond the margin fails without one (pin the table "
                     "with `rag golden expected --run RUN_ID`)")
    targets: list[tuple[str, str | None]] = [(m, None) for m in options.metrics]
    if options.per_tag:
        if common is not None:
            tags = _tags_of(base.per_query.loc[common])
        else:
            tags = sorted({t for m in (*base.metrics, *cand.metrics)
                           if (st := split_tag_metric(m)) and st[1] == "n_queries"
                           for t in [st[0]]})
        if options.tags:
            unknown = [t for t in options.tags if t not in tags]
            if unknown:
                raise GateError(f"no positive query has tag(s) {', '.join(unknown)} "
                                f"(tags: {', '.join(tags) or 'none'})")
            tags = list(options.tags)
        targets += [(tag_metric(t, m), t) for t in tags for m in options.metrics]
    from rag.eval.measures import over_negatives

    checks = []
    for name, tag in targets:
        base_metric = (split_tag_metric(name) or (None, name))[1]
        negative = over_negatives(base_metric)  # abstention: paired over the negatives
        if negative and tag is not None:
            continue  # tags are the positives'
        common_ids = common
        if negative:
            common_ids = paired_negatives(base, cand)
            if common_ids is not None and len(common_ids) == 0:
                notes.append(f"{name}: not gated ({base.label} and {cand.label} share no "
                             "negative query judged the same way)")
                continue
        elif common is not None and tag is not None:
            from rag.eval.attribution import split_tags

            tagged = base.per_query.loc[common, "tags"].map(lambda v: tag in split_tags(v))
            common_ids = common[tagged.to_numpy()]
        va = (per_query_values(base.table(base_metric), base_metric, where=base.label)
              if common_ids is not None else None)
        vb = (per_query_values(cand.table(base_metric), base_metric, where=cand.label)
              if common_ids is not None else None)
        kw = dict(metric=name, tag=tag, margin=options.margin_for(name),
                  lower_is_better=lower_is_better(name),
                  mode="superiority" if options.is_superiority(name) else "non_inferiority")
        if va is not None and vb is not None:
            if len(common_ids) == 0:
                continue
            a = va.loc[common_ids].to_numpy()
            b = vb.loc[common_ids].to_numpy()
            try:
                t = compare_paired(a, b, n_resamples=options.n_resamples, seed=options.seed)
            except ValueError as exc:
                raise GateError(f"{name}: {exc}") from None
            seq = (sequential_bounds(b - a, options=options, n_checks=len(targets), **kw)
                   if options.sequential else {})
            checks.append(Check(baseline=t.mean_a, candidate=t.mean_b, delta=t.delta, n=t.n,
                                p=t.p_value, ci_low=t.ci_low, ci_high=t.ci_high,
                                mde=t.mde, **kw, **seq))
            continue
        if name in base.metrics and name in cand.metrics:
            if common is not None:
                notes.append(f"{name}: no per-query values in the tables; margin only")
            a_val, b_val = float(base.metrics[name]), float(cand.metrics[name])
            checks.append(Check(baseline=a_val, candidate=b_val, delta=b_val - a_val, **kw))
        elif tag is None and options.coverage and (name in base.metrics or va is not None):
            continue  # the candidate lacks it: the coverage guard fails the gate by name
        elif negative:
            where = base.label if name not in base.metrics else cand.label
            notes.append(f"{name}: not gated ({where} has no negative query)")
        elif tag is None:
            where = base.label if name not in base.metrics else cand.label
            raise GateError(f"cannot compare: {where} has no metric {name!r} (and no "
                            "per-query values for it)")
        else:  # a per-tag check one side cannot give (e.g. an expectation pins no tags)
            where = base.label if name not in base.metrics else cand.label
            notes.append(f"{name}: not gated ({where} has neither per-query values nor the "
                         "metric)")
    return checks, notes


def _sequential_verdict(low: float, high: float, *, margin: float, mode: str) -> str | None:
    """The verdict a confidence interval of the *gain* decides, or None (undecided)."""
    if high < -margin - 1e-12:
        return REGRESSION
    if mode == "superiority":
        return IMPROVEMENT if low > margin + 1e-12 else None
    if low > -margin + 1e-12:
        return IMPROVEMENT if low > margin + 1e-12 else WITHIN_MARGIN
    return None


def sequential_bounds(diff: Any, *, options: GateOptions, n_checks: int, margin: float,
                      lower_is_better: bool, mode: str, **_: Any) -> dict[str, Any]:
    """``cs_low``, ``cs_high`` (of Δ after all the pairs) and ``decided_at`` of one check: the
    betting confidence sequence of the per-query differences ``diff`` (candidate - baseline,
    in [-1, 1]) read in a random order seeded by ``options.seed``, at level
    ``options.alpha / n_checks``.

    Raises:
        GateError: a difference outside [-1, 1] (a metric that is not a share).
    """
    import numpy as np

    from rag.eval.significance import betting_confidence_sequence

    d = np.asarray(diff, dtype=float)
    order = np.random.default_rng(options.seed).permutation(d.size)
    try:
        cs = betting_confidence_sequence(d[order], alpha=options.alpha / max(n_checks, 1))
    except ValueError as exc:
        raise GateError(f"--sequential needs per-query values in [0, 1]: {exc}") from None
    decided = None
    for t in range(d.size):
        low, high = ((-cs.upper[t], -cs.lower[t]) if lower_is_better
                     else (cs.lower[t], cs.upper[t]))
        if _sequential_verdict(low, high, margin=margin, mode=mode) is not None:
            decided = t + 1
            break
    return {"cs_low": float(cs.lower[-1]), "cs_high": float(cs.upper[-1]), "decided_at": decided}


def judge(checks: list[Check], options: GateOptions) -> list[Check]:
    """Holm-adjust the paired checks' p-values together and give every check its verdict
    (see the module docstring); returns new Check objects."""
    from rag.eval.significance import holm

    paired = [i for i, c in enumerate(checks) if c.paired]
    adjusted = dict(zip(paired, holm([checks[i].p for i in paired])))
    out = []
    for i, c in enumerate(checks):
        p_holm = adjusted.get(i)
        if options.sequential and c.cs_low is not None:
            low, high = ((-c.cs_high, -c.cs_low) if c.lower_is_better else (c.cs_low, c.cs_high))
            verdict = _sequential_verdict(low, high, margin=c.margin, mode=c.mode) or INCONCLUSIVE
            out.append(replace(c, p_holm=p_holm, verdict=verdict))
            continue
        gain = -c.delta if c.lower_is_better else c.delta
        superiority = c.mode == "superiority"
        # margin only (no paired test): the margin decides, no CI
        verdict = three_valued_verdict(
            c.delta, margin=c.margin, p_holm=p_holm, alpha=options.alpha,
            ci_low=c.ci_low if c.paired else None, ci_high=c.ci_high if c.paired else None,
            lower_is_better=c.lower_is_better, superiority=superiority)
        needed = None
        half = ((c.ci_high - c.ci_low) / 2 if c.ci_low is not None and c.ci_high is not None
                else None)
        if verdict == INCONCLUSIVE and c.paired and half is not None:
            # superiority: more queries decide it only when the observed gain is past the
            # margin; non-inferiority: when the CI's reach past -margin would shrink away
            needed = ((queries_needed(c.n, gain, -c.margin, half)
                       if gain > c.margin + 1e-12 else None) if superiority
                      else None if ((-c.ci_low if c.lower_is_better else c.ci_high)
                          < -c.margin - 1e-12)  # wholly past: no CI-based count
            else queries_needed(c.n, gain, c.margin, half))
        out.append(replace(c, p_holm=p_holm, verdict=verdict, queries_needed=needed))
    return out


def queries_needed(n: int | None, gain: float, margin: float, half_width: float) -> int | None:
    """About how many paired queries would make the 95% CI of ``gain`` clear the bound
    ``-margin`` on the side the observed gain is on (non-inferiority: ``margin`` the allowed
    drop; superiority: ``-margin``, so the bound is ``+margin``): the CI's half-width shrinks
    as 1/sqrt(n), so n * (half_width / |gain + margin|)^2, rounded up (the normal
    approximation of a paired-test sample size, e.g. Cohen 1988, with the spread the
    bootstrap CI observed). None when ``n`` is unknown or the gain sits on the bound."""
    dist = abs(gain + margin)
    if not n or dist < 1e-12:
        return None
    return max(n + 1, math.ceil(n * (half_width / dist) ** 2))


@dataclass
class GateResult:
    """The outcome: ``exit_code`` 0 (pass) or 1 (regression), the checks, the stage counts of
    each side (``lost_at``: stage -> positives; None when a side has none), the changed
    queries with the stage that changed each, and notes."""

    baseline: Side
    candidate: Side
    options: GateOptions
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    lost_at_baseline: dict[str, int] | None = None
    lost_at_candidate: dict[str, int] | None = None
    changed: list[dict[str, Any]] = field(default_factory=list)
    # the per-query guard: {query_id, rr_baseline, rr_candidate} of each severe drop; None
    # when it could not run (no per-query reciprocal ranks on a side)
    severe_drops: list[dict[str, Any]] | None = None
    # the coverage guard: what the baseline measured and the candidate lacks (coverage_lost)
    coverage_lost: list[dict[str, str]] = field(default_factory=list)
    # the abstention guard: the shared negatives the baseline abstained on when the candidate
    # abstains on none of the shared negatives (it stopped abstaining); [] when it did not
    # stop; None when the guard did not run (off, abstain_rate not gated, no shared negative)
    abstention_stopped: list[str] | None = None

    @property
    def abstention_failed(self) -> bool:
        """The candidate stopped abstaining: it abstains on none of the shared negatives,
        and the baseline abstained on at least one (named in :attr:`abstention_stopped`)."""
        return bool(self.abstention_stopped)

    @property
    def coverage_failed(self) -> bool:
        """The coverage guard is on and the candidate lacks something the baseline has."""
        return self.options.coverage and bool(self.coverage_lost)

    @property
    def guard_failed(self) -> bool:
        """More severe drops than ``options.max_severe_drops`` (when the guard is on)."""
        return (self.severe_drops is not None and self.options.max_severe_drops >= 0
                and len(self.severe_drops) > self.options.max_severe_drops)

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == REGRESSION]

    @property
    def improvements(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == IMPROVEMENT]

    @property
    def inconclusive(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == INCONCLUSIVE]

    @property
    def exit_code(self) -> int:
        if self.regressions or self.guard_failed or self.coverage_failed \
                or self.abstention_failed:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive else EXIT_PASS

    @property
    def verdict(self) -> str:
        return {EXIT_REGRESSION: "regression", EXIT_INCONCLUSIVE: "inconclusive"}.get(
            self.exit_code, "pass")

    @property
    def test(self) -> str:
        n = sum(c.paired for c in self.checks)
        return describe_test(self.options, n) if n else \
            "margin only (no per-query table on one side: no paired test)"

    def as_json(self) -> dict[str, Any]:
        """JSON-ready (lists, never joined strings)."""
        return {"verdict": self.verdict, "exit_code": self.exit_code,
                "baseline": self.baseline.describe(), "candidate": self.candidate.describe(),
                "test": self.test, "alpha": self.options.alpha,
                "checks": [asdict(c) | {"paired": c.paired} for c in self.checks],
                "regressions": [c.metric for c in self.regressions],
                "inconclusive": [{"metric": c.metric, "queries_needed": c.queries_needed}
                                 for c in self.inconclusive],
                "improvements": [c.metric for c in self.improvements],
                "lost_at": {"baseline": self.lost_at_baseline,
                            "candidate": self.lost_at_candidate},
                "severe_drops": self.severe_drops, "guard_failed": self.guard_failed,
                "coverage_lost": self.coverage_lost, "coverage_failed": self.coverage_failed,
                "abstention_stopped": self.abstention_stopped,
                "abstention_failed": self.abstention_failed,
                "changed_queries": self.changed, "notes": self.notes}


def _stage_counts(side: Side, ids: Any) -> dict[str, int] | None:
    """``lost_at`` counts over ``ids`` from the per-query table, else the row's
    ``lost_at/<stage>`` metrics, else None."""
    from rag.eval.attribution import LOST_AT_COLUMN, STAGES, count_stages, lost_at_metric

    if side.per_query is not None and LOST_AT_COLUMN in side.per_query.columns:
        rows = side.per_query.loc[ids] if ids is not None else side.per_query
        return count_stages(str(v) for v in rows[LOST_AT_COLUMN])
    if all(lost_at_metric(s) in side.metrics for s in STAGES):
        return {s: int(side.metrics[lost_at_metric(s)]) for s in STAGES}
    return None


def compare(base: Side, cand: Side, options: GateOptions = GateOptions()) -> GateResult:
    """Gate ``cand`` against ``base`` (see the module docstring).

    Raises:
        GateError: the sides cannot be compared (exit 2).
    """
    from rag.eval.attribution import LOST_AT_COLUMN
    from rag.ledger.diff import diff_per_query

    notes = check_comparable(base, cand)
    checks, more = build_checks(base, cand, options)
    if not checks:
        raise GateError("nothing to gate: no metric could be compared")
    result = GateResult(baseline=base, candidate=cand, options=options,
                        checks=judge(checks, options), notes=notes + more)
    ids = paired_ids(base, cand)
    result.coverage_lost = coverage_lost(base, cand, options)
    if ids is not None:
        if LOST_AT_COLUMN in base.per_query.columns and LOST_AT_COLUMN in cand.per_query.columns:
            result.changed = [
                {"query_id": d.query_id, "tags": d.tags, "rank_baseline": d.rank_a,
                 "rank_candidate": d.rank_b, "lost_at_baseline": d.lost_at_a,
                 "lost_at_candidate": d.lost_at_b, "stage": d.stage, "change": d.change}
                for d in diff_per_query(base.per_query.loc[ids], cand.per_query.loc[ids])
                if d.changed]
    result.lost_at_baseline = _stage_counts(base, ids)
    result.lost_at_candidate = _stage_counts(cand, ids)
    result.severe_drops = severe_drops(base, cand, options.severe_drop)
    if options.abstention_guard and any(c.metric == "abstain_rate" for c in result.checks):
        result.abstention_stopped = abstention_stopped(base, cand)
    if result.severe_drops is None and options.max_severe_drops >= 0:
        result.notes.append("the per-query guard could not run: a side has no per-query "
                            "reciprocal ranks (mrr)")
    return result


def abstention_stopped(base: Side, cand: Side) -> list[str] | None:
    """When the candidate abstains on none of the negatives both sides hold
    (:func:`paired_negatives`) and the baseline abstained on at least one — it stopped
    abstaining, which fails the gate however few negatives there are (a paired test on three
    negatives can never be significant) — the ones the baseline abstained on, sorted. []
    when it did not stop; None when it cannot tell (no shared negative, or a side without
    per-negative abstention)."""
    ids = paired_negatives(base, cand)
    if ids is None or len(ids) == 0:
        return None
    a = per_query_values(base.table("abstain_rate"), "abstain_rate", where=base.label)
    b = per_query_values(cand.table("abstain_rate"), "abstain_rate", where=cand.label)
    if a is None or b is None:
        return None
    kept = [str(q) for q in ids if float(a[q]) > 0]
    if kept and not any(float(b[q]) > 0 for q in ids):
        return sorted(kept)
    return []


def severe_drops(base: Side, cand: Side, drop: float) -> list[dict[str, Any]] | None:
    """The queries both sides rank whose reciprocal rank (per-query ``mrr``) falls by at
    least ``drop`` from baseline to candidate, worst first; None when a side has no
    per-query reciprocal ranks (an expectation pinned without them)."""
    if base.per_query is None or cand.per_query is None:
        return None
    a = per_query_values(base.per_query, "mrr", where=base.label)
    b = per_query_values(cand.per_query, "mrr", where=cand.label)
    if a is None or b is None:
        return None
    ids = paired_ids(base, cand)
    out = [{"query_id": str(q), "rr_baseline": float(a[q]), "rr_candidate": float(b[q])}
           for q in ids if float(a[q]) - float(b[q]) >= drop - 1e-12]
    return sorted(out, key=lambda d: (d["rr_candidate"] - d["rr_baseline"], d["query_id"]))


# --- rendering ---------------------------------------------------------------------------

def _num(v: float | None, digits: int = 4) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _p(v: float | None) -> str:
    return "—" if v is None else (f"{v:.4f}" if v >= 1e-4 else f"{v:.1e}")


VERDICT_TEXT = {REGRESSION: "**REGRESSION**", IMPROVEMENT: "improvement",
                DROP_NOT_SIGNIFICANT: "drop, not significant",
                RISE_NOT_SIGNIFICANT: "rise, not significant", WITHIN_MARGIN: "within margin",
                INCONCLUSIVE: "*inconclusive*"}


def inconclusive_text(c: Check) -> str:
    """One line for an inconclusive check: its CI against the margin, and the queries that
    would decide it."""
    more = (f"about {c.queries_needed - c.n} more paired queries ({c.queries_needed} in all) "
            "would decide it" if c.queries_needed and c.n else "more queries would decide it")
    ci = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if c.ci_low is not None else "?"
    if c.mode != "superiority" and c.ci_low is not None and c.ci_high is not None:
        high = -c.ci_low if c.lower_is_better else c.ci_high
        if high < -c.margin - 1e-12:  # the CI is wholly past the margin; the test is not
            return (f"`{c.metric}` Δ {c.delta:+.4f}, 95% CI {ci} lies past the margin "
                    f"{c.margin:g} but the paired test is not significant (p (Holm) "
                    f"{_p(c.p_holm)}): more queries would decide it (at this size the "
                    "bootstrap CI and the randomization test disagree)")
    if c.mode == "superiority":
        if not c.queries_needed:
            more = ("the observed change is not past the margin: more queries would not show "
                    "it better")
        return (f"`{c.metric}` Δ {c.delta:+.4f}, 95% CI {ci}: not shown better by more than "
                f"the margin {c.margin:g} (superiority): {more}")
    return (f"`{c.metric}` Δ {c.delta:+.4f}, 95% CI {ci} reaches past the margin {c.margin:g} "
            f"the wrong way: {more}")


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")


def _printable(text: str) -> str:
    """``text`` with every control character but tab and line breaks as ``?``: what XML 1.0
    cannot hold, and what a terminal would obey (a query id holding ``\\x1b[31m``)."""
    return _CONTROL.sub("?", text)


def abstention_notes(baseline: Side, candidate: Side) -> list[str]:
    """A note (and a blank line) when one side's abstention never acts and the other's may
    (:func:`rag.ledger.diff.never_acting_abstention`)."""
    from rag.ledger.diff import never_acting_abstention

    note = never_acting_abstention(("the baseline", baseline.mode),
                                   ("the candidate", candidate.mode))
    return [f"Note: {note}.", ""] if note else []


def render_markdown(result: GateResult) -> str:
    """The markdown summary (GitHub renders it, e.g. in ``$GITHUB_STEP_SUMMARY``)."""
    from rag.eval.attribution import STAGE_HELP, STAGES

    r = result
    head = {EXIT_PASS: "PASS", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}.get(r.exit_code, "REGRESSION")
    lines = [f"## rag gate: {head}", "",
             f"- baseline: {r.baseline.label} (corpus {r.baseline.corpus or '?'}, golden set "
             f"{(r.baseline.golden_fingerprint or '?')[:12]})",
             f"- candidate: {r.candidate.label} (corpus {r.candidate.corpus or '?'})"
             + (" — **the same row as the baseline**: this gate compares nothing"
                if r.candidate.kind == "row" and r.candidate.ref == r.baseline.ref else ""),
             f"- test: {r.test}", ""]
    lines += abstention_notes(r.baseline, r.candidate)
    if r.regressions:
        lines.append("Regressions: " + ", ".join(
            f"`{c.metric}` {c.delta:+.4f}" for c in r.regressions))
    if r.improvements:
        lines.append("Improvements: " + ", ".join(
            f"`{c.metric}` {c.delta:+.4f}" for c in r.improvements))
    if r.guard_failed:
        n = len(r.severe_drops)
        lines.append(f"Severe drops: {n} {'query' if n == 1 else 'queries'} lost "
                     f"{'its' if n == 1 else 'their'} reciprocal rank "
                     f"by >= {r.options.severe_drop:g} (at most {r.options.max_severe_drops} "
                     "allowed): " + ", ".join(
                         f"`{d['query_id']}` {d['rr_baseline']:.3f} -> {d['rr_candidate']:.3f}"
                         for d in r.severe_drops[:10])
                     + (", …" if len(r.severe_drops) > 10 else ""))
    if r.abstention_failed:
        n = len(r.abstention_stopped)
        lines.append(f"Abstention stopped: the candidate abstains on none of the shared "
                     f"negatives; the baseline abstained on {n}: "
                     + ", ".join(f"`{q}`" for q in r.abstention_stopped[:10])
                     + (", …" if n > 10 else ""))
    if r.coverage_failed:
        lines.append("Coverage lost: the candidate lacks what the baseline measured: "
                     + coverage_text(r.coverage_lost))
    elif r.coverage_lost:
        lines.append("Coverage (not gated, --no-coverage-guard): the candidate lacks what the "
                     "baseline measured: " + coverage_text(r.coverage_lost))
    if r.options.sequential:
        lines.append("Sequential: " + "; ".join(
            f"`{c.metric}` " + (f"decided after {c.decided_at} of {c.n} queries"
                                if c.decided_at else f"undecided after all {c.n} queries")
            + f" (confidence sequence of Δ [{c.cs_low:+.4f}, {c.cs_high:+.4f}])"
            for c in r.checks if c.cs_low is not None))
    if r.inconclusive and not r.options.sequential:
        what = ("neither a regression nor ruled out" if all(
            c.mode != "superiority" for c in r.inconclusive) else
            "not shown better" if all(c.mode == "superiority" for c in r.inconclusive) else
            "neither decided: a regression not ruled out, or a gain not shown")
        lines.append(f"Inconclusive ({what}): " + "; ".join(
            inconclusive_text(c) for c in r.inconclusive))
    if r.regressions or r.improvements or r.guard_failed or r.inconclusive or r.coverage_failed \
            or r.abstention_failed:
        lines.append("")
    lines += ["| check | baseline | candidate | Δ | margin | p | p (Holm) | 95% CI of Δ | n | verdict |",
              "|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for c in r.checks:
        ci = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if c.ci_low is not None else "—"
        arrow = (" (lower is better)" if c.lower_is_better else "") + \
            (" (superiority)" if c.mode == "superiority" else "")
        lines.append(f"| `{c.metric}`{arrow} | {_num(c.baseline)} | {_num(c.candidate)} | "
                     f"{c.delta:+.4f} | {c.margin:g} | {_p(c.p)} | {_p(c.p_holm)} | {ci} | "
                     f"{c.n if c.n is not None else '—'} | {VERDICT_TEXT[c.verdict]} |")
    if r.lost_at_baseline or r.lost_at_candidate:
        b, c = r.lost_at_baseline or {}, r.lost_at_candidate or {}
        lines += ["", "### Where the positives were lost", "",
                  "| stage | meaning | baseline | candidate | Δ |", "|---|---|---:|---:|---:|"]
        for s in STAGES:
            vb, vc = b.get(s), c.get(s)
            d = f"{vc - vb:+d}" if vb is not None and vc is not None else "—"
            lines.append(f"| {s} | {STAGE_HELP[s]} | {'—' if vb is None else vb} | "
                         f"{'—' if vc is None else vc} | {d} |")
    if r.changed:
        worse: dict[str, list[str]] = {}
        better: dict[str, list[str]] = {}
        for q in r.changed:
            (worse if q["change"] == "worse" else better if q["change"] == "better" else {}
             ).setdefault(q["stage"], []).append(q["query_id"])
        lines += ["", f"{len(r.changed)} positives changed (rank, stage or answer)."]
        if worse:
            lines.append("Worse, by the stage that lost them: " + "; ".join(
                f"{s} {len(v)} ({', '.join(v[:5])}{', …' if len(v) > 5 else ''})"
                for s, v in worse.items()))
        if better:
            lines.append("Better, by the stage they now pass: " + "; ".join(
                f"{s} {len(v)} ({', '.join(v[:5])}{', …' if len(v) > 5 else ''})"
                for s, v in better.items()))
    if r.notes:
        lines += ["", *[f"- note: {n}" for n in r.notes]]
    return _printable("\n".join(lines)) + "\n"


def render_junit(result: GateResult | None, *, error: str | None = None,
                 baseline: str = "", candidate: str = "") -> str:
    """JUnit XML: one ``testcase`` per check (a regression is a ``failure``); when the sides
    could not be compared, one ``testcase`` ``compare`` with an ``error``."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="rag gate")
    if result is None:
        suite = ET.SubElement(root, "testsuite", name=f"rag gate {candidate} vs {baseline}",
                              tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="rag.gate", name="compare", time="0")
        ET.SubElement(case, "error", message=error or "", type="cannot_compare").text = error
        root.set("tests", "1"); root.set("failures", "0"); root.set("errors", "1")  # noqa: E702
        return _printable(ET.tostring(root, encoding="unicode", xml_declaration=True)) + "\n"
    r = result
    guard = r.severe_drops is not None and r.options.max_severe_drops >= 0
    fails = (len(r.regressions) + int(r.guard_failed) + int(r.coverage_failed)
             + int(r.abstention_failed))
    coverage_case = r.options.coverage or bool(r.coverage_lost)
    abstention_case = r.abstention_stopped is not None
    n_tests = len(r.checks) + int(guard) + int(coverage_case) + int(abstention_case)
    suite = ET.SubElement(root, "testsuite",
                          name=f"rag gate {r.candidate.label} vs {r.baseline.label}",
                          tests=str(n_tests), failures=str(fails), errors="0", skipped=str(len(r.inconclusive)))
    props = ET.SubElement(suite, "properties")
    for k, v in (("baseline", r.baseline.ref), ("candidate", r.candidate.ref),
                 ("corpus", r.candidate.corpus or ""), ("test", r.test),
                 ("alpha", f"{r.options.alpha:g}")):
        ET.SubElement(props, "property", name=k, value=v)
    for c in r.checks:
        case = ET.SubElement(suite, "testcase", classname="rag.gate", name=c.metric, time="0")
        detail = (f"{c.metric}: baseline {_num(c.baseline)}, candidate {_num(c.candidate)}, "
                  f"delta {c.delta:+.4f}, margin {c.margin:g}, p {_p(c.p)}, p (Holm) "
                  f"{_p(c.p_holm)}, n {c.n if c.n is not None else '-'}: {c.verdict}")
        if c.verdict == REGRESSION:
            ET.SubElement(case, "failure", message=detail, type=REGRESSION).text = detail
        elif c.verdict == INCONCLUSIVE:  # not a failure, not a pass: skipped, with the reason
            ET.SubElement(case, "skipped", message=inconclusive_text(c))
        ET.SubElement(case, "system-out").text = detail
    if guard:  # the per-query guard: its own test case
        case = ET.SubElement(suite, "testcase", classname="rag.gate", name="severe_drops", time="0")
        detail = (f"{len(r.severe_drops)} queries lost >= {r.options.severe_drop:g} of their "
                  f"reciprocal rank (at most {r.options.max_severe_drops} allowed)"
                  + (": " + ", ".join(d["query_id"] for d in r.severe_drops)
                     if r.severe_drops else ""))
        if r.guard_failed:
            ET.SubElement(case, "failure", message=detail, type="severe_drops").text = detail
        ET.SubElement(case, "system-out").text = detail
    if abstention_case:  # the abstention guard: its own test case whenever it ran
        case = ET.SubElement(suite, "testcase", classname="rag.gate", name="abstention_stopped",
                             time="0")
        detail = ("the candidate abstains on none of the shared negatives; the baseline "
                  "abstained on: " + ", ".join(r.abstention_stopped)) if r.abstention_failed \
            else "the candidate still abstains on a shared negative (or the baseline on none)"
        if r.abstention_failed:
            ET.SubElement(case, "failure", message=detail, type="abstention_stopped").text = detail
        ET.SubElement(case, "system-out").text = detail
    if coverage_case:  # the coverage guard: its own test case (listed when it is off)
        case = ET.SubElement(suite, "testcase", classname="rag.gate", name="coverage", time="0")
        detail = ("the candidate lacks what the baseline measured: "
                  + coverage_text(r.coverage_lost, limit=1000)) if r.coverage_lost else \
            "the candidate measures every query, tag and gated metric the baseline does"
        if r.coverage_failed:
            ET.SubElement(case, "failure", message=detail, type="coverage").text = detail
        ET.SubElement(case, "system-out").text = detail
    root.set("tests", str(n_tests)); root.set("failures", str(fails)); root.set("errors", "0")  # noqa: E702
    return _printable(ET.tostring(root, encoding="unicode", xml_declaration=True)) + "\n"


# --- command line ------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    """Register ``gate`` on the ``rag`` subparsers."""
    d = GateOptions()
    p = sub.add_parser(
        "gate", help="pass/fail a candidate row (or a fresh run) against a baseline row or a "
                     "pinned expected.yaml; exit 0 pass, 1 regression, 4 inconclusive, 2 "
                     "could not compare",
        description=(
            "Compare CANDIDATE (a ledger row; with --fresh, a run made now) with BASELINE (a "
            "ledger row, or an expected.yaml / the golden directory holding one). A check "
            "fails only when its metric moves the wrong way by more than its margin AND the "
            "paired randomization test (the sweep's; rag/eval/significance.py) finds the move "
            "significant after Holm's correction across all checks; a check whose 95% CI "
            "reaches past its margin without a significant drop is inconclusive, with the "
            "queries that would decide it. Improvements are reported too. Exit 0 pass, 1 "
            "regression, 4 inconclusive, 2 could not compare (missing row, "
            "another corpus or golden set fingerprint, unreadable per-query table). Against "
            "an expected.yaml without a pinned per-query table the check is on the margin "
            "alone, and the output says so."),
        epilog="Example: rag gate golden/flask/expected.yaml --fresh --junit gate.xml "
               "--markdown gate.md")
    p.add_argument("baseline", help="baseline: a run id (or unique prefix), or an expected.yaml "
                                    "(or the golden directory holding one)")
    p.add_argument("candidate", nargs="*", metavar="CANDIDATE",
                   help="the candidate run id (or unique prefix); with --fresh: KEY=VALUE "
                        "overrides added to the baseline's condition")
    p.add_argument("--fresh", action="store_true",
                   help="run the baseline's condition (its overrides, plus the KEY=VALUE "
                        "given) now with python -m rag.run and gate the row it logs")
    p.add_argument("--metrics", action="append", default=None, metavar="M[,M...]",
                   help="row metrics to gate (repeatable or comma-separated; default "
                        f"{','.join(d.metrics)})")
    p.add_argument("--margin", action="append", default=None, metavar="[METRIC=]X",
                   help=f"allowed drop, absolute (default {d.margin:g}); METRIC=X for one "
                        "metric (repeatable)")
    p.add_argument("--alpha", type=float, default=d.alpha,
                   help=f"significance level after Holm (default {d.alpha:g})")
    p.add_argument("--per-tag", action="store_true",
                   help="also gate every metric on each tag's queries (one Holm family)")
    p.add_argument("--tags", default=None, metavar="T[,T...]",
                   help="with --per-tag: only these tags (implies --per-tag)")
    p.add_argument("--severe-drop", type=float, default=d.severe_drop, metavar="X",
                   help="a query whose reciprocal rank falls by at least X is a severe drop "
                        f"(default {d.severe_drop:g}: rank 1 to beyond rank 10, or lost)")
    p.add_argument("--max-severe-drops", type=int, default=d.max_severe_drops, metavar="N",
                   help="fail when more than N queries drop severely, whatever the means say "
                        f"(default {d.max_severe_drops}; -1: no per-query guard)")
    p.add_argument("--superior", action="append", default=None, metavar="M[,M...]",
                   help="gate these metrics for superiority: the candidate must be shown "
                        "better by more than the margin, else the check is inconclusive "
                        "(repeatable; the other metrics are gated for non-inferiority)")
    p.add_argument("--mode", choices=("non-inferiority", "superiority"), default=None,
                   help="superiority: every gated metric as --superior (default: "
                        "non-inferiority: pass unless a drop beyond the margin is not ruled out)")
    p.add_argument("--sequential", action="store_true",
                   help="decide each check by an anytime-valid confidence sequence (valid "
                        "whenever it is read), saying after how many queries it was decided")
    p.add_argument("--no-abstention-guard", dest="abstention_guard", action="store_false",
                   help="do not fail when the candidate abstains on none of the shared "
                        "negatives the baseline abstained on (abstain_rate is still gated)")
    p.add_argument("--no-coverage-guard", dest="coverage", action="store_false",
                   help="do not fail when the candidate lacks queries, tags or gated metrics "
                        "the baseline has (they are still listed)")
    p.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML here")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="write the markdown summary here (default: print it)")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(p)


def options_from_args(args: argparse.Namespace) -> GateOptions:
    """:class:`GateOptions` from parsed arguments.

    Raises:
        GateError: a bad margin, alpha or metric list (one line).
    """
    from rag.eval.metric_names import TAG_PREFIX, split_tag_metric

    d = GateOptions()
    # de-duplicated, in order: a metric (or tag) named twice would enlarge the Holm family
    metrics = tuple(dict.fromkeys(m.strip() for v in (args.metrics or []) for m in v.split(",")
                                  if m.strip())) or d.metrics
    for m in metrics:
        if m.startswith(TAG_PREFIX):
            tag = (split_tag_metric(m) or ("TAG", m))[0]
            base = (split_tag_metric(m) or (None, "METRIC"))[1]
            raise GateError(f"--metrics {m!r}: a per-tag metric is not gated by name; give "
                            f"--metrics {base} --tags {tag} (or --per-tag for every tag)")
    margin, margins = d.margin, {}
    for v in args.margin or []:
        key, sep, value = v.rpartition("=")
        try:
            x = float(value)
        except ValueError:
            raise GateError(f"--margin {v!r}: expected X or METRIC=X with a number X") from None
        if not (math.isfinite(x) and x >= 0):
            raise GateError(f"--margin {v!r}: the margin must be a finite number >= 0")
        if sep:
            key = key.strip()
            known = key in metrics or (
                (st := split_tag_metric(key)) is not None and st[1] in metrics)
            if not known:
                raise GateError(f"--margin {v!r}: {key or '(empty)'!s} is not a gated metric "
                                f"(gated: {', '.join(metrics)})")
            margins[key] = x
        else:
            margin = x
    if not (0 < args.alpha < 1):
        raise GateError(f"--alpha must be between 0 and 1, got {args.alpha}")
    tags = tuple(dict.fromkeys(t.strip() for t in (args.tags or "").split(",") if t.strip()))
    if args.junit and args.markdown and Path(args.junit).resolve() == Path(args.markdown).resolve():
        raise GateError(f"--junit and --markdown name the same file ({args.junit})")
    max_drops = getattr(args, "max_severe_drops", d.max_severe_drops)
    if max_drops < -1:
        raise GateError(f"--max-severe-drops must be >= 0, or -1 for no per-query guard, got "
                        f"{max_drops}")
    drop = getattr(args, "severe_drop", d.severe_drop)
    if not (math.isfinite(drop) and 0 < drop <= 1):
        raise GateError(f"--severe-drop must be in (0, 1], got {drop}")
    superior = tuple(dict.fromkeys(m.strip() for v in (getattr(args, "superior", None) or [])
                                   for m in v.split(",") if m.strip()))
    unknown = [m for m in superior if m not in metrics]
    if unknown:
        raise GateError(f"--superior {unknown[0]!r} is not a gated metric (gated: "
                        f"{', '.join(metrics)})")
    if getattr(args, "mode", None) == "superiority":
        superior = metrics
    return GateOptions(metrics=metrics, margin=margin, margins=tuple(sorted(margins.items())),
                       superior=superior, coverage=getattr(args, "coverage", d.coverage),
                       abstention_guard=getattr(args, "abstention_guard", d.abstention_guard),
                       sequential=bool(getattr(args, "sequential", False)),
                       alpha=args.alpha, per_tag=bool(args.per_tag or tags), tags=tags,
                       severe_drop=drop,
                       max_severe_drops=getattr(args, "max_severe_drops", d.max_severe_drops))


# the keys a fresh run's command line gets from the gate itself (where and under which name
# it logs); a baseline's own values say where *it* was logged, not its condition
FRESH_OWN_KEYS = ("tracking.uri", "tracking.run_name", "tracking.enabled")


def _override_key(o: str) -> str:
    return o.lstrip("+~").split("=", 1)[0]


def merge_overrides(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """The baseline's overrides with ``extra`` applied: an extra override of a key the
    baseline sets replaces it (Hydra refuses a key given twice), others are appended; the
    baseline's :data:`FRESH_OWN_KEYS` (where it was logged: a row run with
    ``tracking.uri=...`` records it) are dropped, the fresh run's are the gate's.
    ``merge_overrides(["search.mode=bm25", "x=1", "tracking.uri=sqlite:///a.db"],
    ["search.mode=dense"])`` is ``["x=1", "search.mode=dense"]``."""
    mine = {_override_key(o) for o in extra}
    return [o for o in base if _override_key(o) not in mine
            and _override_key(o) not in FRESH_OWN_KEYS] + list(extra)


def run_fresh(overrides: Sequence[str], *, tracking_uri: str) -> str:
    """Run ``python -m rag.run OVERRIDES`` into ``tracking_uri`` under a unique run name (its
    output goes to stderr) and return the run name.

    Raises:
        GateError: an override sets ``tracking.*`` the gate sets itself, or the run failed.
    """
    import subprocess

    own = [o for o in overrides if _override_key(o) in FRESH_OWN_KEYS]
    if own:
        raise GateError(f"--fresh sets {', '.join(own)} itself (use --tracking-uri)")
    name = f"gate-{uuid.uuid4().hex[:12]}"
    cmd = [sys.executable, "-m", "rag.run", *overrides, f"tracking.uri={tracking_uri}",
           f"tracking.run_name={name}"]
    print("fresh run: " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    code = subprocess.call(cmd, stdout=sys.stderr)
    if code != 0:
        raise GateError(f"the fresh run failed (python -m rag.run exited {code}); no row to gate")
    return name


def row_by_name(ledger: Any, name: str) -> str:
    """The run id of the finished row named ``name`` (a fresh run's).

    Raises:
        GateError: none (or several) found.
    """
    ids = [e.experiment_id for e in ledger.client.search_experiments()]
    rows = ledger.rows(ids, where=f"tags.`mlflow.runName` = '{name}'") if ids else []
    if len(rows) != 1:
        raise GateError(f"the fresh run {name} logged {len(rows)} finished rows in "
                        f"{ledger.uri}, not 1")
    return rows[0].info.run_id


def check_writable(path: str | None) -> None:
    """Refuse an output file (``--junit`` / ``--markdown``) that cannot be written, before the
    gate runs: a directory, a parent that is not a directory or cannot be made, a path without
    write permission. Creates missing parent directories (as writing would).

    Raises:
        GateError: ``cannot write FILE: reason`` (one line).
    """
    import os

    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise GateError(f"cannot write {path}: it is a directory")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GateError(f"cannot write {path}: {exc.strerror or exc}") from None
    if not p.parent.is_dir():
        raise GateError(f"cannot write {path}: {p.parent} is not a directory")
    if not os.access(p if p.exists() else p.parent, os.W_OK):
        raise GateError(f"cannot write {path}: permission denied")


def _write_all(files: Sequence[tuple[str | None, str]]) -> None:
    """Write every (path, text) with a path.

    Raises:
        GateError: ``cannot write FILE: reason`` (an OSError while writing).
    """
    for path, text in files:
        if not path:
            continue
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise GateError(f"cannot write {path}: {exc.strerror or exc}") from None


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, inf) replaced by None: JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(_finite(value), indent=2, allow_nan=False)


def run(args: argparse.Namespace, rest: Sequence[str] = (),
        parser: argparse.ArgumentParser | None = None,
        fresh: Callable[..., str] = run_fresh) -> int:
    """``rag gate``: exit 0 pass, 1 regression, 2 could not compare (one ``error:`` line; the
    JUnit and markdown files, when asked for, say so too)."""
    from rag.app.config import default_tracking_uri
    from rag.ledger.mlflow_store import Ledger, LedgerError

    extra = list(args.candidate) + [t for t in rest]
    bad = [t for t in extra if t.startswith("-")]
    if bad and parser is not None:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")
    uri = default_tracking_uri(args.tracking_uri)
    ledger: Ledger | None = None

    def open_ledger() -> Ledger:
        nonlocal ledger
        if ledger is None:
            try:
                ledger = Ledger(uri, create=bool(args.fresh))
            except LedgerError as exc:
                raise GateError(str(exc)) from None
        return ledger

    cand_label = "fresh run" if args.fresh else (extra[0] if extra else "?")
    try:  # before anything runs: no file is written when either cannot be
        for path in (args.junit, args.markdown):
            check_writable(path)
    except GateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    try:
        options = options_from_args(args)
        if args.fresh:
            not_kv = [t for t in extra if "=" not in t]
            if not_kv:
                raise GateError(f"with --fresh, every argument after the baseline is a "
                                f"KEY=VALUE override, not {not_kv[0]!r}")
            own = [t for t in extra if _override_key(t) in FRESH_OWN_KEYS]
            if own:
                raise GateError(f"--fresh sets {', '.join(own)} itself (use --tracking-uri)")
        elif len(extra) != 1:
            raise GateError("give one candidate row (or --fresh)" if not extra else
                            f"one candidate row expected, got {len(extra)}: {' '.join(extra)}")
        base = (expected_side(Path(args.baseline)) if is_expectation(args.baseline)
                else row_side(open_ledger(), args.baseline))
        if args.fresh:
            name = fresh(merge_overrides(base.overrides, extra), tracking_uri=uri)
            cand_ref = row_by_name(open_ledger(), name)
        else:
            cand_ref = extra[0]
        cand = (expected_side(Path(cand_ref)) if is_expectation(cand_ref)
                else row_side(open_ledger(), cand_ref))
        result = compare(base, cand, options)
    except GateError as exc:
        msg = str(exc)
        try:
            _write_all([(args.junit, render_junit(None, error=msg, baseline=args.baseline,
                                                  candidate=cand_label)),
                        (args.markdown, f"## rag gate: COULD NOT COMPARE\n\n{msg}\n")])
        except GateError as write_exc:
            msg = f"{msg}; and {write_exc}"
        print(f"error: {msg}", file=sys.stderr)
        if args.json:
            print(_json({"verdict": "cannot_compare", "exit_code": EXIT_CANNOT_COMPARE,
                         "error": msg}))
        return EXIT_CANNOT_COMPARE
    md = render_markdown(result)
    try:
        _write_all([(args.junit, render_junit(result)), (args.markdown, md)])
    except GateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    # a closed stdout (`rag gate ... | head`) raises BrokenPipeError: rag.core.exit_codes.guarded
    # makes it exit 141 without a traceback
    if args.json:
        print(_json(result.as_json()))
    elif args.markdown:
        print(f"rag gate: {result.verdict} ({len(result.regressions)} regression(s), "
              f"{len(result.improvements)} improvement(s)"
              + (f", {len(result.inconclusive)} inconclusive" if result.inconclusive else "")
              + (f", {len(result.severe_drops)} severe drop(s)" if result.guard_failed else "")
              + (", abstention stopped" if result.abstention_failed else "")
              + (f", coverage lost: {coverage_text(result.coverage_lost, limit=3)}"
                 if result.coverage_failed else "")
              + f"); summary in {args.markdown}")
    else:
        print(md, end="")
    return result.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rag.gate ARGS`` = ``rag gate ARGS``, without the rest of the CLI: exit codes
    as :func:`run`; a closed stdout exits 141 (:func:`rag.core.exit_codes.guarded`)."""
    from rag.core.exit_codes import guarded

    parser = argparse.ArgumentParser(prog="rag")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    gate_parser = sub.choices["gate"]

    def go() -> int:
        args, rest = parser.parse_known_args(["gate", *(sys.argv[1:] if argv is None else argv)])
        return run(args, rest, gate_parser)

    return guarded(go)


if __name__ == "__main__":
    raise SystemExit(main())
