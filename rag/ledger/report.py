"""Render the markdown ledger (reports/ledger.md) from ledger rows read back from MLflow."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

BANNER = ("<!-- GENERATED FILE: written by `python -m rag.report` from the MLflow ledger. "
          "Do not edit by hand; re-run the command instead. -->")

# (header, kind, key): kind "param" reads run params, "metric" run metrics.
COLUMNS: list[tuple[str, str, str]] = [
    ("mode", "param", "search.mode"),
    ("prose mode", "param", "search.prose_mode"),
    ("rerank", "param", "rerank.enabled"),
    ("Recall@8", "metric", "recall_at_8"),
    ("MRR", "metric", "mrr"),
    ("prose Recall@8", "metric", "prose/recall_at_8"),
    ("p50 ms", "metric", "latency_p50_ms"),
    ("abstain", "metric", "abstain_rate"),
    ("false_weak", "metric", "false_weak_rate"),
]

CALIBRATION_KEYS = ("positive_min_top_dense", "positive_median_top_dense",
                    "negative_max_top_dense", "negative_median_top_dense",
                    "suggested_min_dense", "suggested_weak_dense")


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

    @classmethod
    def from_mlflow(cls, run: Any, experiment: str) -> "LedgerRow":
        """From an ``mlflow.entities.Run``."""
        return cls(run_id=run.info.run_id, experiment=experiment,
                   run_name=run.info.run_name or "", start_time_ms=run.info.start_time or 0,
                   params=dict(run.data.params), metrics=dict(run.data.metrics),
                   tags=dict(run.data.tags))


def fmt(value: Any, key: str = "") -> str:
    """A metric or param for a table cell: 3 decimals for rates, 1 for milliseconds."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.1f}" if key.endswith("_ms") else f"{value:.3f}"
    return str(value)


def _cell(row: LedgerRow, kind: str, key: str) -> str:
    return fmt(row.params.get(key) if kind == "param" else row.metrics.get(key), key)


def render_table(rows: list[LedgerRow]) -> list[str]:
    """Markdown table, one line per row in the given order."""
    head = ["run", "started (UTC)", *[c[0] for c in COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        started = dt.datetime.fromtimestamp(r.start_time_ms / 1000, tz=dt.timezone.utc)
        cells = [f"`{r.run_id[:8]}` {r.run_name}".strip(), started.strftime("%Y-%m-%d %H:%M"),
                 *[_cell(r, kind, key) for _, kind, key in COLUMNS]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_calibration(row: LedgerRow) -> list[str]:
    """The calibration block of one row."""
    lines = [f"Calibration of the newest row (`{row.run_id[:8]}`, model "
             f"`{row.tags.get('model_id', '?').split('|')[0]}`, thresholds in force: "
             f"min_dense={row.params.get('abstain.min_dense', '?')}, "
             f"weak_dense={row.params.get('abstain.weak_dense', '?')}):", "", "```json", "{"]
    items = [(k, row.metrics.get(f"calibration/{k}")) for k in CALIBRATION_KEYS]
    body = [f'  "{k}": {"null" if v is None else round(v, 3)}' for k, v in items]
    lines.append(",\n".join(body))
    lines += ["}", "```", "",
              "Put `abstain.min_dense` below positive_min_top_dense and `abstain.weak_dense` "
              "between the two; recalibrate whenever the embedding model or corpus changes."]
    return lines


def render_ledger(rows: Iterable[LedgerRow], *, source: str) -> str:
    """The whole ledger: one section per experiment (corpus), rows oldest first."""
    rows = sorted(rows, key=lambda r: (r.experiment, r.start_time_ms))
    out = ["# Ledger", "", BANNER, "",
           f"Source: `{source}`. One row per evaluation (MLflow run), oldest first. "
           "Recall@8, MRR and prose Recall@8 are means over the golden positives; "
           "abstain is the share of negatives with no hit or only weak hits; false_weak the "
           "share of positives that got no hit (dropped, or no lexical match) or only weak hits; p50 is per-query search "
           "latency.", ""]
    if not rows:
        out += ["_No ledger rows yet: run `python -m rag.run`._", ""]
        return "\n".join(out)
    experiments = list(dict.fromkeys(r.experiment for r in rows))
    for exp in experiments:
        exp_rows = [r for r in rows if r.experiment == exp]
        out += [f"## {exp}", ""]
        out += render_table(exp_rows)
        out += [""]
        out += render_calibration(exp_rows[-1])
        out += [""]
    return "\n".join(out)
