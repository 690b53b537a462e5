"""``python -m rag.report``: write reports/ledger.md from the MLflow ledger."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rag.config import expand_path, tracking_uri
from rag.ledger.report import LedgerRow, render_ledger


def write_report(uri: str, out_path: Path, *, prefix: str = "rag", ledger=None,
                 sweep: str | None = None) -> Path:
    """Read every finished row of the ``prefix-*`` experiments and write the markdown ledger.

    Args:
        ledger: an open :class:`rag.ledger.mlflow_store.Ledger` on ``uri`` to reuse.
        sweep: write only that sweep's section.

    Returns:
        ``out_path``.
    """
    from rag.ledger.mlflow_store import Ledger

    ledger = ledger or Ledger(uri)
    import os
    import tempfile

    rows: list[LedgerRow] = []
    parents: dict[str, str] = {}
    for exp in ledger.experiments(prefix):
        rows += [LedgerRow.from_mlflow(r, exp.name) for r in ledger.rows([exp.experiment_id])]
        parents.update(ledger.sweep_parents([exp.experiment_id]))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    text = render_ledger(rows, source=uri, sweep=sweep, parents=parents) + "\n"
    # a unique temporary name: parallel sweep jobs may write the report at the same time
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, out_path)
    return out_path


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m rag.report",
        description="Write the markdown ledger (one row per MLflow run) from the MLflow store.")
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db",
                        help="MLflow tracking URI; a relative sqlite path is taken from the "
                             "project root (default: sqlite:///mlflow.db)")
    parser.add_argument("--out", default="reports/ledger.md",
                        help="output file, relative to the project root (default: reports/ledger.md)")
    parser.add_argument("--prefix", default="rag", help="experiment name prefix (default: rag)")
    parser.add_argument("--sweep", default=None, metavar="NAME",
                        help="write only this sweep's section, to reports/sweep_NAME.md "
                             "(unless --out is given)")
    args = parser.parse_args(argv)
    uri = tracking_uri(args.tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        print(f"error: no ledger at {uri}; run `python -m rag.run` first", file=sys.stderr)
        return 1
    out = args.out
    if args.sweep and out == "reports/ledger.md":
        out = f"reports/sweep_{args.sweep}.md"
    path = write_report(uri, expand_path(out), prefix=args.prefix, sweep=args.sweep)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
