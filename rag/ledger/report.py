"""Render the markdown ledger (reports/ledger.md) from ledger rows read back from MLflow."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

BANNER = ("<!-- GENERATED FILE: written by `python -m rag.report` from the MLflow ledger. "
          "Do not edit by hand; re-run the command instead. -->")

# (header, kind, key): kind "param" reads run params, "metric" run metrics, "rerank" the
# reranker kind when rerank.enabled (else "off").
COLUMNS: list[tuple[str, str, str]] = [
    ("mode", "param", "search.mode"),
    ("prose mode", "param", "search.prose_mode"),
    ("rerank", "rerank", "rerank.kind"),
    ("abstention", "abstain", "abstain.signal"),
    ("Recall@8", "metric", "recall_at_8"),
    # beside top-k: what a 2,048-token context buys (rag/eval/evaluate.py TOKEN_BUDGETS)
    ("Recall@2k tokens", "metric", "token_recall_at_2048"),
    ("MRR", "metric", "mrr"),
    ("prose Recall@8", "metric", "tag.prose.recall_at_8"),
    ("p50 ms", "metric", "latency_p50_ms"),
    ("abstain", "metric", "abstain_rate"),
    ("false_weak", "metric", "false_weak_rate"),
    ("dropped", "metric", "dropped_rate"),
]
DEFAULT_MIN_EFFECT = 0.05  # sweep.min_effect: a sweep whose MDE on MRR exceeds it is underpowered



@dataclass
class LedgerRow:
    """The parts of one MLflow run a report needs."""

    run_id: str
    experiment: str
    run_name: str
    start_time_ms: int
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"  # MLflow run status: FINISHED, RUNNING, KILLED or FAILED

    @classmethod
    def from_mlflow(cls, run: Any, experiment: str) -> "LedgerRow":
        """From an ``mlflow.entities.Run``."""
        return cls(run_id=run.info.run_id, experiment=experiment,
                   run_name=run.info.run_name or "", start_time_ms=run.info.start_time or 0,
                   params=dict(run.data.params), metrics=dict(run.data.metrics),
                   tags=dict(run.data.tags), status=run.info.status or "FINISHED")


def cell(value: Any) -> str:
    """``value`` made safe for one markdown table cell: ``|`` escaped (``\\|``), line breaks
    and tabs as spaces, so a run name, a job label or a hand-logged param can never add or
    split a column."""
    text = "" if value is None else str(value)
    return " ".join(text.replace("|", "\\|").split())


def code(value: Any) -> str:
    """``value`` as inline code in a table cell (:func:`cell`; a backtick inside would end the
    code span, so it becomes ')."""
    return "`" + cell(value).replace("`", "'") + "`"


def fmt(value: Any, key: str = "") -> str:
    """A metric or param for a table cell: 3 decimals for rates, 1 for milliseconds."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if not math.isfinite(value) or abs(value) >= ABSURD:
            return "n/a"  # MLflow stores infinity as ±1.8e308: never 309 digits in a cell
        return f"{value:.1f}" if key.endswith("_ms") else f"{value:.3f}"
    return str(value)


def _extra_cell(value: Any, key: str) -> str:
    """A sweep table's extra column: 3 decimals for rates and recalls, 1 for seconds, none
    for counts (context chars, tokens); non-finite or absurd values as :func:`fmt` says."""
    if value is None:
        return "—"
    v = float(value)
    if math.isnan(v) or not math.isfinite(v) or abs(v) >= ABSURD:
        return fmt(v)
    if key.endswith(("_rate", "_recall", "_recall_at_10")):
        return f"{v:.3f}"
    return f"{v:.1f}" if key.endswith("_s") else f"{v:.0f}"


#: a metric at or beyond this magnitude is MLflow's stand-in for infinity (±1.797e308), or no
#: measurement a report could show: printed as n/a
ABSURD = 1e300


def abstention_cell(row: LedgerRow) -> str:
    """``top_dense [0.45, 0.55]``: the signal and the (drop, weak) thresholds applied, with
    ``transferred`` when they came from another row's calibration; ``off (...)`` for a row
    whose route runs no dense channel (:func:`rag.search.abstain.never_acts`)."""
    t, p = row.tags, row.params
    signal = t.get("abstain_signal", p.get("abstain.signal", "top_dense"))
    lo = t.get("abstain_min", p.get("abstain.min_dense", "?"))
    hi = t.get("abstain_weak", p.get("abstain.weak_dense", "?"))

    def num(v: str) -> str:
        try:
            return f"{float(v):.3g}"
        except ValueError:
            return v
    moved = " transferred" if t.get("abstain_thresholds_source") == "transferred" else ""
    from rag.search.abstain import never_acts

    mode = p.get("search.mode")
    raw = t.get("abstain_gate_features")
    features = [f.strip() for f in raw.split(",") if f.strip()] \
        if signal == "learned" and raw else None
    if mode and never_acts(mode, features):  # a BM25 / grep route scores no dense cosine
        return f"off (search.mode={mode} runs no dense channel)"
    return f"{signal} [{num(lo)}, {num(hi)}]{moved}"


def _cell(row: LedgerRow, kind: str, key: str) -> str:
    return cell(_raw_cell(row, kind, key))


def _raw_cell(row: LedgerRow, kind: str, key: str) -> str:
    if kind == "abstain":
        return abstention_cell(row)
    if kind == "rerank":
        from rag.ledger.mlflow_store import is_true

        if not is_true(row.params.get("rerank.enabled")):  # "true" (now) or "True" (older rows)
            return "off"
        return row.params.get(key, "late_interaction")  # rows older than rerank.kind
    return fmt(row.params.get(key) if kind == "param" else row.metrics.get(key), key)


def render_gates(rows: list[LedgerRow], base: LedgerRow | None) -> list[str]:
    """Abstention gated on the rerank score (evaluated thresholds) next to the baseline's
    dense-cosine bands: abstain_rate over negatives, false_weak_rate over positives, and the
    latency the reranker adds (its stage's p50). Empty when no row evaluated a gate."""
    gated = [r for r in rows if any(k.startswith("rerank_gate/") for k in r.metrics)]
    if not gated:
        return []
    n_neg = int((base or gated[0]).metrics.get("n_negatives", 0))
    n_pos = int((base or gated[0]).metrics.get("n_positives", 0))
    out = ["Abstention gate: the baseline's cosine bands against flagging a query when its top "
           "rerank score is below t (evaluated on each reranker row, not applied to its ranking). "
           "abstain = negatives flagged (higher is better), false_weak = positives flagged "
           "(lower is better); added latency = the rerank stage's p50.", "",
           f"| gate | abstain ({n_neg} negatives) | false_weak ({n_pos} positives) | added latency ms |",
           "|---|---|---|---|"]
    if base is not None:
        out.append(f"| {code(base.tags.get('sweep_job', base.run_name))}: dense floor "
                   f"{cell(base.params.get('abstain.min_dense', '?'))} + note "
                   f"{cell(base.params.get('abstain.weak_dense', '?'))} | "
                   f"{fmt(base.metrics.get('abstain_rate'))} | "
                   f"{fmt(base.metrics.get('false_weak_rate'))} | 0 |")
    for r in gated:
        ts = sorted({k.split("/")[1] for k in r.metrics if k.startswith("rerank_gate/")}, key=float)
        for t in ts:
            out.append(f"| {code(r.tags.get('sweep_job', r.run_name))}: "
                       f"{cell(r.params.get('rerank.kind', 'rerank'))} score < {cell(t)} | "
                       f"{fmt(r.metrics.get(f'rerank_gate/{t}/abstain_rate'))} | "
                       f"{fmt(r.metrics.get(f'rerank_gate/{t}/false_weak_rate'))} | "
                       f"+{fmt(r.metrics.get('latency_rerank_p50_ms'), '_ms')} |")
    return out + [""]


def render_table(rows: list[LedgerRow]) -> list[str]:
    """Markdown table, one line per row in the given order; with a ``corpus`` column when the
    rows are of more than one corpus (an experiment such as ``rag-semble`` holds several)."""
    corpora = len({r.tags.get("corpus") for r in rows}) > 1
    head = ["run", "started (UTC)", *(["corpus"] if corpora else []), *[c[0] for c in COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        started = dt.datetime.fromtimestamp(r.start_time_ms / 1000, tz=dt.timezone.utc)
        cells = [f"`{r.run_id[:8]}` {cell(r.run_name)}".strip(), started.strftime("%Y-%m-%d %H:%M"),
                 *([cell(r.tags.get("corpus") or "—")] if corpora else []),
                 *[_cell(r, kind, key) for _, kind, key in COLUMNS]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_figures(links: dict[str, str] | None) -> list[str]:
    """Markdown images for figure name -> relative path (:mod:`rag.ledger.figures`); empty
    when there are none."""
    from rag.ledger.figures import TITLES

    if not links:
        return []
    return ["", *[f"![{TITLES.get(name, name)}]({path})" for name, path in links.items()], ""]


def render_calibration(row: LedgerRow, which: str = "the newest row",
                       figures: dict[str, str] | None = None) -> list[str]:
    """The abstention block of one row: where its thresholds came from, whether the top dense
    cosines of positives and negatives overlap, and per signal its ROC AUC, the threshold the
    rule chose and the rates it achieves with 95% CIs (rag/eval/abstention.py); then the
    row's figures (``figures``: name -> relative path) when given."""
    m = row.metrics
    source = row.tags.get("abstain_thresholds_source", "config")
    origin = row.tags.get("abstain_calibration_from")
    lines = [f"Abstention of {which} (`{row.run_id[:8]}`, model "
             f"`{row.tags.get('model_id', '?').split('|')[0]}`): signal "
             f"`{row.tags.get('abstain_signal', 'top_dense')}`, thresholds in force "
             f"[{row.tags.get('abstain_min', row.params.get('abstain.min_dense', '?'))}, "
             f"{row.tags.get('abstain_weak', row.params.get('abstain.weak_dense', '?'))}] "
             f"({source}{' from ' + origin if origin else ''}).", ""]
    overlap = m.get("calibration/overlap")
    if overlap is not None:
        pmin, nmax = m.get("calibration/positive_min_top_dense"), m.get("calibration/negative_max_top_dense")
        lines.append(
            f"**overlap: {'yes' if overlap else 'no'}** — lowest top dense cosine of a positive "
            f"{pmin:.3f}, highest of a negative {nmax:.3f}. "
            + ("No single threshold separates the two sets; every threshold trades abstention "
               "on negatives against false weak flags on positives, as the table shows."
               if overlap else "A threshold between the two separates the sets on this golden set."))
        lines.append("")
    signals = sorted({k.split("/")[1] for k in m if k.startswith("abstention/") and k.endswith("/auc")})
    if not signals:
        return lines + ["(no abstention calibration in this row)"] + render_figures(figures)
    target = row.params.get("abstain.target_false_weak", "0.1")
    lines += [f"Rule: the highest abstain_rate on negatives subject to false_weak_rate <= "
              f"{target} (`abstain.target_false_weak`); `learned` is a logistic regression on "
              "the other signals, scored out-of-fold.", "",
              "| signal | ROC AUC | AURC | overlap | weak threshold | abstain_rate [95% CI] | "
              "false_weak_rate [95% CI] |", "|---|---:|---:|---|---:|---|---|"]
    for s in signals:
        g = lambda k: m.get(f"abstention/{s}/{k}")  # noqa: E731
        if not g("met_target"):
            cells = ["—", "no threshold meets the target", "—"]
        else:
            cells = [f"{g('weak_threshold'):.4g}",
                     f"{g('abstain_rate'):.3f} [{g('abstain_ci_low'):.2f}, {g('abstain_ci_high'):.2f}]",
                     f"{g('false_weak_rate'):.3f} [{g('false_weak_ci_low'):.2f}, {g('false_weak_ci_high'):.2f}]"]
        lines.append(f"| {code(s)} | {g('auc'):.3f} | {g('aurc'):.3f} | "
                     f"{'yes' if g('overlap') else 'no'} | " + " | ".join(cells) + " |")
    lines += ["", "Thresholds belong to one model on one corpus: test them elsewhere with "
              "`abstain.calibration=<this run id>`; the histograms and risk–coverage curves are "
              "the row's `figures/` artifacts (`calibration.png` in rows logged before)."]
    return lines + render_figures(figures)


def _sig_cell(row: LedgerRow, metric: str, holm_p: dict[str, float]) -> str:
    """``+0.012 (p 0.034*)``: delta vs the sweep baseline, Holm-adjusted p, * when < 0.05."""
    from rag.ledger.metric_groups import baseline_values
    from rag.ledger.sweep import baseline_mismatch

    sig = baseline_values(row.metrics)
    delta = sig.get(f"{metric}_delta")
    if delta is None:
        return ("baseline" if row.tags.get("is_baseline") == "true"
                and baseline_mismatch(row.tags, row.params) is None else "—")
    p = holm_p.get(f"{metric}_p_holm", sig.get(f"{metric}_p"))
    mark = "*" if p is not None and p < 0.05 else ""
    if p is None:
        return f"{delta:+.3f}"
    shown = "<0.001" if p < 0.001 else f"{p:.3f}"
    return f"{delta:+.3f} (p {shown}{mark})"


#: the sweep tables' verdict column, in words (rag gate's verdicts, rag/eval/significance.py)
VERDICT_WORDS = {"regression": "**regression**", "improvement": "improvement",
                 "inconclusive": "inconclusive", "drop_not_significant": "pass",
                 "rise_not_significant": "pass", "within_margin": "pass"}


def _verdict_cell(row: LedgerRow, metric: str, holm_p: dict[str, float]) -> str:
    """The job's three-valued verdict on ``metric`` against the sweep baseline — ``rag
    gate``'s rule (non-inferiority, margin :data:`rag.eval.significance.DEFAULT_MARGIN`, Holm
    p across the sweep's jobs, the paired-bootstrap 95% CI): pass, regression, improvement or
    inconclusive; ``—`` without a paired comparison."""
    from rag.eval.significance import DEFAULT_MARGIN, three_valued_verdict
    from rag.ledger.metric_groups import baseline_values

    from rag.ledger.sweep import baseline_mismatch

    sig = baseline_values(row.metrics)
    delta = sig.get(f"{metric}_delta")
    if delta is None:
        return ("baseline" if row.tags.get("is_baseline") == "true"
                and baseline_mismatch(row.tags, row.params) is None else "—")
    p = holm_p.get(f"{metric}_p_holm", sig.get(f"{metric}_p"))
    return VERDICT_WORDS[three_valued_verdict(
        delta, margin=DEFAULT_MARGIN, p_holm=p, ci_low=sig.get(f"{metric}_ci_low"),
        ci_high=sig.get(f"{metric}_ci_high"))]


def render_sweep(name: str, rows: list[LedgerRow],
                 parents: dict[str, str] | None = None,
                 figures: dict[str, dict[str, str]] | None = None,
                 why: dict[str, str] | None = None) -> list[str]:
    """One sweep name's section: a table per sweep id (oldest first) with deltas against its
    baseline and Holm-corrected p-values across the sweep's jobs, the sweep's figures, then
    the baseline's calibration block. A sweep that is incomplete
    (:func:`rag.ledger.sweep.incomplete_reason`: no parent run, or a parent that did not
    finish) says so first; a row tagged baseline whose values are not the baseline's
    (:func:`rag.ledger.sweep.baseline_mismatch`) is never shown as the baseline.

    Args:
        parents: sweep id -> parent run status (None: unknown, nothing flagged).
        figures: sweep id or run id -> figure name -> relative path
            (:func:`rag.ledger.figures.write_report_figures`); absent ones are not shown.
        why: sweep id -> why it is incomplete, said in place of the generic reason.
    """
    from rag.ledger.metric_groups import baseline_values
    from rag.ledger.sweep import baseline_mismatch, holm_table, incomplete_reason

    out = [f"## Sweep {code(name)}", ""]
    ids = list(dict.fromkeys(r.tags.get("sweep_id", "") for r in rows))
    for sid in ids:
        srows = [r for r in rows if r.tags.get("sweep_id", "") == sid]
        base = next((r for r in srows if r.tags.get("is_baseline") == "true"
                     and baseline_mismatch(r.tags, r.params) is None), None)
        wrong = [r for r in srows if r.tags.get("is_baseline") == "true" and r is not base]
        incomplete = (why or {}).get(sid) or incomplete_reason(sid, parents)
        holm = holm_table([{"run_id": r.run_id, **baseline_values(r.metrics)} for r in srows
                           if r.tags.get("is_baseline") != "true"])
        out += [f"### {cell(sid)}", "",
                (f"Baseline: {code(srows[0].tags['sweep_baseline'])}"
                 if srows[0].tags.get("sweep_baseline") else "No baseline (a suite alone)")
                + (f" (row `{base.run_id[:8]}`)" if base else
                   " (no baseline row)" if srows[0].tags.get("sweep_baseline") else "")
                + f"; {len(srows)} rows. Deltas are job minus baseline on the same positives; "
                "p is a two-sided paired randomization test (10,000 sign flips), Holm-corrected "
                "across this sweep's jobs; * marks p < 0.05. The verdict is `rag gate`'s on "
                "MRR (margin 0.01): a regression is a significant drop beyond the margin, "
                "inconclusive a 95% CI that reaches past it, pass anything else.", ""]
        if incomplete:
            out += [f"**Incomplete sweep:** {incomplete}.", ""]
        for r in wrong:
            out += [f"**Not the baseline:** row `{r.run_id[:8]}` is tagged as the baseline but "
                    f"{baseline_mismatch(r.tags, r.params)}; nothing is compared with it.", ""]
        head = ["job", *[c[0] for c in COLUMNS], "answer support", "ΔMRR", "verdict (MRR)",
                "ΔRecall@8", "Δanswer support"]
        names = {"context_chars_mean": "context chars", "context_tokens_mean": "context tokens",
                 "filter_false_negative_rate": "filter false negatives",
                 # dense.index=hnsw|ivf rows (the ann sweep): ANN top-10 against exact's
                 "ann_recall_at_10": "ANN recall@10",
                 "candidate_pool_recall": "Recall@" + (base or srows[-1]).params.get(
                     "rerank.candidates", "40") + " of the candidate pool"}
        if name != "rerank":
            names.pop("candidate_pool_recall")
        extra = [c for c in names if any(c in r.metrics for r in srows)]
        # the sweep's own columns (sweep.columns, e.g. index/embed_s)
        extra += [c for c in sweep_columns(base or srows[-1]) if c not in extra]
        names.update({"index/embed_s": "embed s", "index/tokens_embedded": "word pieces embedded",
                      "index/chunks_embedded": "chunks embedded"})
        head += [names.get(c, c) for c in extra]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in srows:
            h = holm.get(r.run_id, {})
            cells = [f"`{r.run_id[:8]}` {cell(r.tags.get('sweep_job', r.run_name))}",
                     *[_cell(r, kind, key) for _, kind, key in COLUMNS],
                     fmt(r.metrics.get("answer_support_rate")),
                     _sig_cell(r, "mrr", h), _verdict_cell(r, "mrr", h),
                     _sig_cell(r, "recall_at_8", h),
                     _sig_cell(r, "answer_support", h),
                     *[_extra_cell(r.metrics.get(c), c) for c in extra]]
            out.append("| " + " | ".join(cells) + " |")
        out += [""]
        out += render_figures((figures or {}).get(sid))
        out += render_power(srows, base)
        out += render_gates(srows, base)
        shown = base or srows[-1]
        out += render_calibration(shown, "the baseline" if base else "the newest row",
                                  (figures or {}).get(shown.run_id))
        out += [""]
    return out


def sweep_columns(row: LedgerRow) -> list[str]:
    """The metric keys a sweep asks its table to show (param ``sweep.columns``, a flow-style
    YAML list as :func:`rag.ledger.mlflow_store.param_value` spells it); [] when absent."""
    import yaml

    raw = row.params.get("sweep.columns")
    if not raw:
        return []
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def sweep_table(rows: list[LedgerRow]) -> Any:
    """One sweep's rows as a pandas DataFrame, one line per row in the given order: run_id,
    job, is_baseline, start_time (UTC, ISO 8601), the headline metrics
    (:data:`rag.ledger.metric_groups.HEADLINE`) and, against the baseline, Δ and Holm p of
    MRR, Recall@8 and answer support (empty where absent) — the parent run's
    ``sweep_summary.csv``."""
    import pandas as pd

    from rag.ledger.metric_groups import HEADLINE, baseline_values

    sig_cols = [f"{m}_{s}" for m in ("mrr", "recall_at_8", "answer_support")
                for s in ("delta", "p_holm")]
    recs = []
    for r in rows:
        sig = baseline_values(r.metrics)
        recs.append({"run_id": r.run_id, "job": r.tags.get("sweep_job", r.run_name),
                     "is_baseline": r.tags.get("is_baseline") == "true",
                     "start_time": dt.datetime.fromtimestamp(r.start_time_ms / 1000,
                                                             tz=dt.timezone.utc).isoformat(),
                     **{m: r.metrics.get(m) for m in HEADLINE},
                     **{c: sig.get(c) for c in sig_cols}})
    return pd.DataFrame.from_records(recs, columns=["run_id", "job", "is_baseline", "start_time",
                                                    *HEADLINE, *sig_cols])


def render_power(srows: list[LedgerRow], base: LedgerRow | None) -> list[str]:
    """The sweep's statistical power: the minimum detectable effect (paired, α 0.05, power
    0.8) on MRR and Recall@8 of each job against the baseline, and a flag when the largest
    exceeds ``sweep.min_effect`` (default 0.05): the sweep could not have seen such an effect."""
    from rag.eval.significance import effect_text
    from rag.ledger.metric_groups import baseline_values

    sig = {r.run_id: baseline_values(r.metrics) for r in srows}
    jobs = [r for r in srows if "mrr_mde" in sig[r.run_id]]
    if not jobs:
        return []
    n = int(sig[jobs[0].run_id].get("paired_queries", 0))
    min_effect = float((base or jobs[0]).params.get("sweep.min_effect", DEFAULT_MIN_EFFECT))
    worst = {m: max(sig[r.run_id].get(f"{m}_mde", 0.0) for r in jobs) for m in ("mrr", "recall_at_8")}
    per_job = "; ".join(f"{r.tags.get('sweep_job', r.run_id[:8])}: MRR "
                        f"{effect_text(sig[r.run_id]['mrr_mde'])}, Recall@8 "
                        f"{effect_text(sig[r.run_id].get('recall_at_8_mde'))}"
                        for r in jobs)
    out = [f"Minimum detectable effect (paired test on {n} positives, α 0.05, power 0.8, from "
           f"each job's per-query differences): {per_job}."]
    if effect_text(worst["mrr"]) == "n/a":
        out += ["", f"**Power unknown:** with {n} paired positives no minimum detectable effect "
                "could be sized (too few pairs, or no spread in the per-query differences)."]
    elif worst["mrr"] > min_effect:
        ref = f"`rag golden power --run {base.run_id[:8]} --effect {min_effect:g}`" if base else \
            "`rag golden power --run <baseline row> --effect 0.05`"
        out += ["", f"**Underpowered:** with {n} positives this sweep could miss a true ΔMRR as "
                f"large as {worst['mrr']:.3f} (above sweep.min_effect = {min_effect:g}); a "
                f"difference that is not significant here is not evidence of no difference. {ref} "
                "says how many positives would detect it."]
    return out + [""]


def _started(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def render_unfinished(rows: list[LedgerRow], *, now_ms: int) -> list[str]:
    """The rows that never finished (status RUNNING, KILLED or FAILED), oldest first: run,
    experiment, job, start time (UTC) and what happened (a RUNNING row's age in hours). Empty
    when there are none."""
    from rag.ledger.mlflow_store import STALE_RUNNING_H

    if not rows:
        return []
    out = ["## Unfinished rows", "",
           f"{len(rows)} ledger row{'s' if len(rows) != 1 else ''} never finished and "
           f"{'are' if len(rows) != 1 else 'is'} not in the tables below. RUNNING: the process "
           "was interrupted (killed) while logging the row, or is logging it right now; KILLED: "
           "interrupted, marked so later; FAILED: logging failed part-way. Rows RUNNING for more "
           f"than H hours are marked KILLED by `python -m rag.report --mark-killed-after-h H` "
           f"(H defaults to {STALE_RUNNING_H:g}).", "",
           "| run | experiment | job | started (UTC) | status |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.start_time_ms, r.run_id)):
        if r.status == "RUNNING":
            age_h = max(0.0, (now_ms - r.start_time_ms) / 3_600_000)
            what = f"interrupted: RUNNING for {age_h:.1f} h"
        elif r.status == "KILLED":
            what = "interrupted: marked KILLED"
        elif r.status == "FAILED":
            what = "failed while logging"
        else:
            what = r.status
        out.append(f"| `{r.run_id[:8]}` | {cell(r.experiment)} | "
                   f"{cell(r.tags.get('sweep_job', r.run_name)) or '—'} | "
                   f"{_started(r.start_time_ms)} | {what} |")
    return out + [""]


def render_suites(rows: list[LedgerRow], parents: dict[str, str] | None = None) -> list[str]:
    """One table per suite run (rows tagged ``suite``, grouped by sweep id, newest last): a
    line per configuration with its MRR on every corpus (ΔMRR against that corpus's baseline
    and the Holm-adjusted p beside it when the sweep has a baseline) and the macro average
    (the unweighted mean over the corpora), so a verdict is read corpus by corpus. A suite
    whose sweep is incomplete (``parents``: :func:`rag.ledger.sweep.incomplete_reason`) says
    so under its heading."""
    from rag.ledger.sweep import incomplete_reason, suite_summary

    suites = [r for r in rows if r.tags.get("suite")]
    if not suites:
        return []
    out = ["# Suites", "",
           "The same configuration on every corpus of a suite. A corpus suite: MRR per "
           "corpus, with ΔMRR against the corpus's own baseline row and its Holm-adjusted p "
           "(across that corpus's jobs; * p < 0.05); macro = the unweighted mean over the "
           "corpora. A repository suite (semble's benchmark): its own tables, below. An "
           "effect that holds on one corpus only is a hypothesis, not a decision.", ""]
    ids = sorted(dict.fromkeys(r.tags.get("sweep_id", "") for r in suites),
                 key=lambda sid: min(r.start_time_ms for r in suites if r.tags.get("sweep_id") == sid))
    for sid in ids:
        srows = sorted((r for r in suites if r.tags.get("sweep_id") == sid),
                       key=lambda r: r.start_time_ms)
        if any(r.tags.get("dataset_repo") for r in srows):  # a repository suite (semble)
            from rag.ledger.suite_tables import reference_figures, render_suite_tables, suite_tables

            base = srows[0].tags.get("sweep_baseline") or None
            out += [f"## Suite {code(srows[0].tags['suite'])}: {cell(sid)}", "",
                    f"Sweep {code(srows[0].tags.get('sweep_name', '?'))}, baseline "
                    f"{code(base or 'none')}; "
                    f"{len(srows)} rows on {len({r.tags['dataset_repo'] for r in srows})} "
                    "repositories. (The test across queries is on the parent run's "
                    "suite_tables.md.)", ""]
            if why := incomplete_reason(sid, parents):
                out += [f"**Incomplete suite:** {why}.", ""]
            out += render_suite_tables(suite_tables(srows, baseline=base,
                                                    reference=reference_figures(srows)))
            continue
        corpora = list(dict.fromkeys(r.experiment for r in srows))
        base = srows[0].tags.get("sweep_baseline") or "none"
        out += [f"## Suite {code(srows[0].tags['suite'])}: {cell(sid)}", "",
                f"Sweep {code(srows[0].tags.get('sweep_name', '?'))}, baseline {code(base)}; "
                f"{len(srows)} rows on {len(corpora)} corpora.", ""]
        if why := incomplete_reason(sid, parents):
            out += [f"**Incomplete suite:** {why}.", ""]
        head = ["configuration", *[f"MRR {cell(c)}" for c in corpora], "macro MRR",
                *[f"Recall@8 {cell(c)}" for c in corpora], "macro Recall@8"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for g in suite_summary(srows):
            def mrr(c: str) -> str:
                v = g["corpora"].get(c, {})
                if "mrr" not in v:
                    return "—"
                if "mrr_delta" not in v:
                    return f"{v['mrr']:.3f}"
                p = v.get("mrr_p_holm", v.get("mrr_p"))
                star = "*" if p is not None and p < 0.05 else ""
                ptxt = "" if p is None else f", p {'<0.001' if p < 0.001 else f'{p:.3f}'}{star}"
                from rag.eval.significance import DEFAULT_MARGIN, three_valued_verdict

                word = VERDICT_WORDS[three_valued_verdict(
                    v["mrr_delta"], margin=DEFAULT_MARGIN, p_holm=p, ci_low=v.get("mrr_ci_low"),
                    ci_high=v.get("mrr_ci_high"))]  # rag gate's rule; "pass" left unsaid
                return (f"{v['mrr']:.3f} ({v['mrr_delta']:+.3f}{ptxt})"
                        + ("" if word == "pass" else f" {word}"))

            def macro(m: str) -> str:
                v = g["macro"].get(m)
                return fmt(v) if v is not None else f"n/a ({g['corpora_with_rows']} corpora)"

            cells = [code(g["config"]), *[mrr(c) for c in corpora], macro("mrr"),
                     *[fmt(g["corpora"].get(c, {}).get("recall_at_8")) for c in corpora],
                     macro("recall_at_8")]
            out.append("| " + " | ".join(cells) + " |")
        out += [""]
    return out


def render_ledger(rows: Iterable[LedgerRow], *, source: str, sweep: str | None = None,
                  parents: dict[str, str] | None = None,
                  unfinished: Iterable[LedgerRow] = (), now_ms: int | None = None,
                  figures: dict[str, dict[str, str]] | None = None) -> str:
    """The whole ledger: per experiment (corpus) the runs outside sweeps, oldest first, then
    one section per sweep. With ``sweep`` only that sweep's section. ``parents`` maps sweep
    id -> the status of its parent run; a sweep whose parent is not FINISHED is flagged.
    ``unfinished`` rows (never FINISHED: see :func:`render_unfinished`) are listed in a
    section of their own, first, with their age at ``now_ms`` (ms since the epoch; default
    now). ``figures`` (run id or sweep id -> figure name -> path relative to the report,
    :func:`rag.ledger.figures.write_report_figures`) are embedded as images."""
    import time

    rows = sorted(rows, key=lambda r: (r.experiment, r.start_time_ms))
    unfinished = [r for r in unfinished
                  if sweep is None or sweep in (r.tags.get("sweep_name"), r.tags.get("sweep_id"))]
    out = ["# Ledger" if sweep is None else f"# Ledger: sweep {code(sweep)}", "", BANNER, "",
           f"Source: {code(source)}. One row per evaluation (MLflow run), oldest first. "
           "Recall@8, MRR and prose Recall@8 are means over the golden positives; "
           "Recall@2k tokens is the recall of the ranked chunks that fit, in order, in 2,048 "
           "tokens of context (the embedder's tokenizer). "
           "abstain is the share of negatives with no hit or only weak hits; false_weak the "
           "share of positives that got no hit (dropped, or no lexical match) or only weak hits; "
           "dropped the share of positives whose hits were all dropped. The abstention "
           "column names the signal and its (drop, weak) thresholds, `transferred` when they "
           "came from another row's calibration. "
           "p50 is per-query search latency.", ""]
    out += render_unfinished(unfinished, now_ms=int(time.time() * 1000) if now_ms is None
                             else now_ms)
    if sweep is not None:
        # a sweep's name (every run of it) or one run's id, as a sweep prints it at its end
        rows = [r for r in rows if sweep in (r.tags.get("sweep_name"), r.tags.get("sweep_id"))]
    if not rows:
        out += ["_No ledger rows yet: run `python -m rag.run`._" if sweep is None
                else f"_No rows for sweep `{sweep}`: run `python -m rag.run +sweep={sweep}`._", ""]
        return "\n".join(out)
    out += render_suites(rows, parents)
    for exp in dict.fromkeys(r.experiment for r in rows):
        exp_rows = [r for r in rows if r.experiment == exp]
        out += [f"# {cell(exp)}" if sweep is None else f"Experiment {code(exp)}.", ""]
        single = [r for r in exp_rows if not r.tags.get("sweep_name")]
        if single:
            out += ["## Single runs", ""]
            out += render_table(single)
            out += [""]
            out += render_calibration(single[-1], figures=(figures or {}).get(single[-1].run_id))
            out += [""]
        for name in dict.fromkeys(r.tags["sweep_name"] for r in exp_rows if r.tags.get("sweep_name")):
            out += render_sweep(name, [r for r in exp_rows if r.tags.get("sweep_name") == name],
                                parents, figures)
    return "\n".join(out)
