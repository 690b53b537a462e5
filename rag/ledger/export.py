"""``rag ledger export``: the ledger as one table, one line per ledger row.

Columns follow MLflow's own ``mlflow.search_runs`` naming, so nothing collides: ``run_id``,
``experiment``, ``run_name``, ``status``, ``start_time`` / ``end_time`` (UTC, ISO 8601),
``duration_s``, ``sweep_incomplete`` (for a row of a sweep that is incomplete — no parent
run, or a parent that did not finish: :func:`rag.ledger.sweep.incomplete_reason` — why;
empty for a complete sweep or a row outside sweeps), then ``tags.<key>`` (the ledger's own tags; MLflow's ``mlflow.*`` tags are
left out), ``params.<key>`` (the flattened config, as logged) and ``metrics.<name>`` (headline
first, in the row's logging order: :func:`rag.ledger.metric_groups.ordered`). A cell is empty
where a row lacks the key. Sweep parent runs are not rows; rows that never finished are left
out (``python -m rag.report`` lists them).

Formats: ``csv`` (a header line, then one line per row), ``json`` (an array with one row
object per line; empty cells are ``null``), ``parquet`` (pyarrow; a file only).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported when a table is made: `rag --help` and `rag search`
    import pandas as pd  # build this command's parser and must not pay for it

FORMATS = ("csv", "json", "parquet")


class ExportError(ValueError):
    """A bad export request (unknown experiment, parquet to a terminal); one line."""


def select_experiments(ledger: Any, *, prefix: str, experiment: str | None) -> list[Any]:
    """The ``<prefix>-*`` experiments, or the one named ``experiment`` (its full name,
    ``rag-flask-3.1.3``, or its corpus, ``flask-3.1.3``).

    Raises:
        ExportError: no experiment has that name (the known ones are listed).
    """
    exps = ledger.experiments(prefix)
    if experiment is None:
        return exps
    hit = [e for e in exps if e.name in (experiment, f"{prefix}-{experiment}")]
    if not hit:
        known = ", ".join(sorted(e.name for e in exps)) or "none"
        raise ExportError(f"--experiment {experiment!r}: no such experiment in the ledger "
                          f"(known: {known}; the corpora of a dataset such as semble's are "
                          f"rows of one experiment, {prefix}-<dataset name>: select them by "
                          "the table's tags.corpus column)")
    return hit


def ledger_table(ledger: Any, *, prefix: str = "rag", experiment: str | None = None) -> pd.DataFrame:
    """Every finished ledger row as one line (see the module docstring for the columns),
    oldest first.

    Raises:
        ExportError: see :func:`select_experiments`.
    """
    import pandas as pd

    from rag.ledger.metric_groups import ordered

    def iso(ms: int | None) -> str | None:
        return None if not ms else pd.Timestamp(ms, unit="ms", tz="UTC").isoformat()

    from rag.ledger.sweep import incomplete_reason

    records, metric_names, param_names, tag_names = [], set(), set(), set()
    for exp in select_experiments(ledger, prefix=prefix, experiment=experiment):
        parents = ledger.sweep_parents([exp.experiment_id])
        for r in ledger.rows([exp.experiment_id]):
            start, end = r.info.start_time, r.info.end_time
            tags = {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")}
            rec = {"run_id": r.info.run_id, "experiment": exp.name,
                   "run_name": r.info.run_name, "status": r.info.status,
                   "start_time": iso(start), "end_time": iso(end),
                   "duration_s": (end - start) / 1000 if start and end else None,
                   "sweep_incomplete": (incomplete_reason(tags["sweep_id"], parents)
                                        if tags.get("sweep_id") else None),
                   "_start": start or 0}
            rec.update({f"tags.{k}": v for k, v in tags.items()})
            rec.update({f"params.{k}": v for k, v in r.data.params.items()})
            rec.update({f"metrics.{k}": v for k, v in r.data.metrics.items()})
            tag_names |= set(tags)
            param_names |= set(r.data.params)
            metric_names |= set(r.data.metrics)
            records.append(rec)
    records.sort(key=lambda rec: (rec["_start"], rec["run_id"]))
    cols = ["run_id", "experiment", "run_name", "status", "start_time", "end_time", "duration_s",
            "sweep_incomplete",
            *[f"tags.{k}" for k in sorted(tag_names)],
            *[f"params.{k}" for k in sorted(param_names)],
            *[f"metrics.{k}" for k in ordered(metric_names)]]
    return pd.DataFrame.from_records(records, columns=cols)


def _json_cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def write_table(df: pd.DataFrame, fmt: str, out: str | Path | None) -> None:
    """Write ``df`` as ``fmt`` to the file ``out`` (``None`` or ``-``: standard output).

    Raises:
        ExportError: ``fmt`` is unknown, or parquet is asked for on standard output.
        OSError: the file cannot be written.
    """
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    to_stdout = out in (None, "-")
    if fmt == "parquet":
        if to_stdout:
            raise ExportError("--format parquet writes a binary file: give --out FILE")
        df.to_parquet(out, index=False)
        return
    if fmt == "csv":
        text = df.to_csv(index=False, lineterminator="\n")
    else:
        lines = [json.dumps({k: _json_cell(v) for k, v in rec.items()}, ensure_ascii=False)
                 for rec in df.to_dict(orient="records")]
        text = "[\n" + ",\n".join(lines) + ("\n" if lines else "") + "]\n"
    if to_stdout:
        sys.stdout.write(text)
    else:
        Path(out).write_text(text, encoding="utf-8")
