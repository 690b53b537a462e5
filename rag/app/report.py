"""``python -m rag.report``: write reports/ledger.md from the MLflow ledger."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from rag.app.config import (add_tracking_uri_argument, default_output_dir, default_tracking_uri,
                        expand_path, project_root)
from rag.ledger.mlflow_store import STALE_RUNNING_H, Ledger, LedgerError
from rag.ledger.report import LedgerRow, render_ledger
from rag.core.names import safe_component


def write_report(uri: str, out_path: Path, *, prefix: str = "rag", ledger=None,
                 sweep: str | None = None) -> Path:
    """Read every row of the ``prefix-*`` experiments and write the markdown ledger: finished
    rows in the tables, rows that never finished (interrupted) in a section of their own.

    Args:
        ledger: an open :class:`rag.ledger.mlflow_store.Ledger` on ``uri`` to reuse.
        sweep: write only that sweep's section.

    Returns:
        ``out_path``.

    Raises:
        LedgerError: the store cannot be opened or read (one line).
        OSError: the report cannot be written.
    """
    import os
    import tempfile

    from mlflow.exceptions import MlflowException

    from rag.ledger.mlflow_store import one_line

    ledger = ledger or Ledger(uri, create=False)
    from sqlalchemy.exc import SQLAlchemyError

    rows: list[LedgerRow] = []
    unfinished: list[LedgerRow] = []
    parents: dict[str, str] = {}
    try:
        for exp in ledger.experiments(prefix):
            rows += [LedgerRow.from_mlflow(r, exp.name) for r in ledger.rows([exp.experiment_id])]
            unfinished += [LedgerRow.from_mlflow(r, exp.name)
                           for r in ledger.unfinished([exp.experiment_id])]
            parents.update(ledger.sweep_parents([exp.experiment_id]))
    except (MlflowException, SQLAlchemyError) as exc:
        raise LedgerError(f"cannot read the ledger at {uri}: {one_line(exc)}") from exc
    out_path.parent.mkdir(parents=True, exist_ok=True)
    from rag.ledger.figures import write_report_figures

    try:  # pictures beside the report (reports/figures/), linked relative to it
        figures = write_report_figures(ledger, rows, out_path.parent / "figures", parents=parents)
    except Exception as exc:  # noqa: BLE001 - a report without pictures is still a report
        print(f"warning: report figures not written ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        figures = {}
    text = render_ledger(rows, source=uri, sweep=sweep, parents=parents,
                         unfinished=unfinished, figures=figures) + "\n"
    # a unique temporary name: parallel sweep jobs may write the report at the same time
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, out_path)
    return out_path


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (``python -m rag.report``, ``rag report``).

    Returns:
        0; 2 after one ``error:`` line when the store is missing, not a database (or not an
        MLflow store) or unreadable, or the report cannot be written (argparse's usage errors
        also exit 2).
    """
    parser = argparse.ArgumentParser(
        prog="python -m rag.report",
        description="Write the markdown ledger (one row per MLflow run) from the MLflow store.")
    add_tracking_uri_argument(parser)
    parser.add_argument("--out", default="reports/ledger.md",
                        help="output file; a relative path is taken from $RAG_OUTPUT_DIR or the "
                             "project root (default: reports/ledger.md)")
    parser.add_argument("--prefix", default="rag", help="experiment name prefix (default: rag)")
    parser.add_argument("--sweep", default=None, metavar="NAME",
                        help="write only this sweep's section, to reports/sweep_NAME.md "
                             "(unless --out is given): a sweep's name (every run of it) or "
                             "one run's id (routing-20261205T214356-c3b9, as a sweep prints it)")
    parser.add_argument("--mark-killed-after-h", type=float, nargs="?", default=None,
                        const=STALE_RUNNING_H, metavar="H",
                        help="first mark KILLED the rows (and sweep parent runs) still RUNNING "
                             "more than H hours after they started: left by a killed process "
                             f"(H default {STALE_RUNNING_H:g}); without it they are only listed "
                             "as interrupted")
    parser.add_argument("--experiments", nargs="*", default=None, metavar="FILE",
                        help="instead of a report, refill the generated sweep tables "
                             "(<!-- BEGIN GENERATED: sweep NAME --> blocks) of these write-ups "
                             "(default: every experiments/*.md) from the newest run of each sweep")
    parser.add_argument("--keep-missing", action="store_true",
                        help="with --experiments: leave as they are the blocks whose sweep has "
                             "no row in this ledger (each still names the sweep and ledger it "
                             "came from) and list them, instead of failing")
    args = parser.parse_args(argv)
    if args.keep_missing and args.experiments is None:
        parser.error("--keep-missing goes with --experiments")
    grace = args.mark_killed_after_h
    if grace is not None and not (math.isfinite(grace) and grace >= 0):
        parser.error(f"--mark-killed-after-h must be a number of hours >= 0, not {grace}")
    uri = default_tracking_uri(args.tracking_uri)
    out = args.out
    if args.sweep and out == "reports/ledger.md":
        out = f"reports/sweep_{safe_component(args.sweep, what='--sweep', encode=True)}.md"
    try:  # a store that is missing or not a database, a report that cannot be written: exit 2
        ledger = Ledger(uri, create=False)
        if grace is not None:
            marked = ledger.mark_killed([e.experiment_id for e in ledger.experiments(args.prefix)],
                                        older_than_h=grace)
            print(f"marked {len(marked)} run(s) RUNNING for more than {grace:g} h as KILLED"
                  + (": " + ", ".join(r[:8] for r in marked) if marked else ""))
        if args.experiments is not None:
            return _fill_experiments(ledger, uri, args.prefix, args.experiments,
                                     keep_missing=args.keep_missing)
        path = write_report(uri, expand_path(out, base=default_output_dir()), prefix=args.prefix, sweep=args.sweep,
                            ledger=ledger)
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the report {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def _fill_experiments(ledger, uri: str, prefix: str, files: list[str], *,
                      keep_missing: bool = False) -> int:
    """``--experiments``: refill the generated blocks; exit 2 naming a sweep with no rows
    (``keep_missing``: leave those blocks and list them)."""
    from rag.ledger.experiments import ExperimentsError, fill_generated_blocks

    paths = [expand_path(f, base=Path.cwd()) for f in files] if files else \
        sorted((project_root() / "experiments").glob("*.md"))
    rows: list[LedgerRow] = []
    parents: dict[str, str] = {}
    for exp in ledger.experiments(prefix):
        rows += [LedgerRow.from_mlflow(r, exp.name) for r in ledger.rows([exp.experiment_id])]
        parents.update(ledger.sweep_parents([exp.experiment_id]))
    try:
        kept: dict[Path, list[str]] | None = {} if keep_missing else None
        done = fill_generated_blocks(paths, rows, source=uri, parents=parents, kept=kept)
    except (ExperimentsError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p, names in done.items():
        if names:
            print(f"filled {p} ({', '.join(names)})")
        if kept and kept.get(p):
            print(f"kept as they were in {p}, no row in this ledger: {'; '.join(kept[p])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
