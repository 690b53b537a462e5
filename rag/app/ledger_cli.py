"""``rag ledger export`` and ``rag ledger screenshots``: the ledger as a table, and the MLflow
UI's view of one sweep as PNGs.

``rag ledger export --format csv|json|parquet [--out FILE] [--experiment NAME]`` writes every
finished ledger row as one line (:mod:`rag.ledger.export` gives the columns); ``--out`` absent
or ``-`` is standard output (csv and json only). ``rag ledger screenshots --out DIR``
starts ``mlflow server`` on 127.0.0.1 over the ledger,
captures the runs table, the sweep baseline's run page and the compare view of one sweep with
headless Chromium, checks that the sweep's rows line up there, and stops the server
(:mod:`rag.ledger.screenshots`).

Exit statuses (rag/core/exit_codes.py): 0 done; 1 screenshots taken but a page does not show
every row (each problem printed); 2 could not run — a store that is missing or not a ledger,
an unknown experiment, parquet to standard output, a file that cannot be written, no
chromium, no sweep in the ledger — with one ``error:`` line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path



def add_parser(sub) -> None:
    """Register ``ledger`` with its ``export`` and ``screenshots`` actions on the ``rag``
    subparsers."""
    from rag.ledger.export import FORMATS

    p = sub.add_parser("ledger", help="the ledger as a table (export) or as MLflow UI "
                                      "screenshots of a sweep",
                       description="Read the ledger (never writes a row).")
    acts = p.add_subparsers(dest="action", required=True)
    ex = acts.add_parser(
        "export", help="write the ledger as one table, one line per row (csv, json, parquet)",
        description="Every finished ledger row as one line: run_id, experiment, run_name, "
                    "status, start_time, end_time (UTC, ISO 8601), duration_s, then tags.<key>, "
                    "params.<key> and metrics.<name> (headline first). Sweep parent runs and "
                    "rows that never finished are left out.")
    ex.add_argument("--format", choices=FORMATS, default="csv", help="default: csv")
    ex.add_argument("--out", default=None, metavar="FILE",
                    help="the file to write (default, or -: standard output; parquet needs a "
                         "file)")
    ex.add_argument("--experiment", default=None, metavar="NAME",
                    help="only this experiment: its name (rag-flask-3.1.3) or its corpus "
                         "(flask-3.1.3); default: every <prefix>-* experiment")
    ex.add_argument("--prefix", default="rag", help="experiment name prefix (default: rag)")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(ex)
    add_screenshot_arguments(acts.add_parser(
        "screenshots", help="PNGs of the MLflow UI (runs table, run page, compare view) for "
                            "one sweep, taken with headless Chromium and checked",
        description=SCREENSHOTS_DESCRIPTION))
    ui = acts.add_parser(
        "ui", help="start the MLflow UI on 127.0.0.1 and print links to the newest sweep's runs "
                   "table (headline columns) and compare view",
        description=(
            "Start `mlflow server` on 127.0.0.1 over the ledger and print three links: the "
            "newest sweep's runs table with the headline metric columns (an MLflow shared view: "
            "one experiment tag mlflow.sharedViewState.<key>, never a row), the compare view "
            "of its rows (MLflow orders that view's metrics alphabetically) and the baseline's "
            "run page. Serves until Ctrl-C. Links use ledger.localhost, which browsers resolve "
            "to the loopback address."))
    add_screenshot_arguments(ui, out=False)


SCREENSHOTS_DESCRIPTION = (
    "Start `mlflow server` on 127.0.0.1 over the ledger, capture with headless Chromium "
    "(Debian's chromium; `make sysdeps` installs it) the runs table, the sweep baseline's run "
    "page and the compare view of the sweep's rows as runs_table.png, run_page.png and "
    "compare.png (with their rendered DOM as *.html), stop the server, and check that every "
    "row of the sweep is shown in the runs table and the compare view, that the compare view "
    "lists the headline metrics and that the run page shows the golden set's dataset and a "
    "duration. Exit 0: every row lines up; 1: a page misses something (listed); 2: could not "
    "run.")


def add_screenshot_arguments(p: argparse.ArgumentParser, *, out: bool = True) -> None:
    """The options of ``rag ledger screenshots`` (and, without ``--out``, ``rag ledger ui``)."""
    if out:
        p.add_argument("--out", default="reports/screenshots", metavar="DIR",
                       help="folder for the PNGs; a relative path is taken from "
                            "$RAG_OUTPUT_DIR or the project root (default: reports/screenshots)")
    p.add_argument("--sweep", default=None, metavar="SWEEP_ID",
                   help="the sweep id (default: the newest sweep in the ledger)")
    p.add_argument("--experiment", default=None, metavar="NAME",
                   help="the experiment's name or corpus (default: the newest sweep's)")
    p.add_argument("--prefix", default="rag", help="experiment name prefix (default: rag)")
    p.add_argument("--port", type=int, default=None,
                   help="port for the mlflow server on 127.0.0.1 (default: a free one)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(p)


def run(args: argparse.Namespace) -> int:
    """Dispatch ``rag ledger ACTION``; returns the exit status (see the module docstring)."""
    return {"export": export_command, "screenshots": screenshots_command,
            "ui": ui_command}[args.action](args)


def export_command(args: argparse.Namespace) -> int:
    """``rag ledger export``: 0, or 2 after one ``error:`` line."""
    from rag.app.config import default_tracking_uri
    from rag.ledger.export import ExportError, ledger_table, write_table
    from rag.ledger.mlflow_store import Ledger, LedgerError

    uri = default_tracking_uri(args.tracking_uri)
    try:
        if args.format == "parquet" and args.out in (None, "-"):
            raise ExportError("--format parquet writes a binary file: give --out FILE")
        table = ledger_table(Ledger(uri, create=False), prefix=args.prefix,
                             experiment=args.experiment)
        write_table(table, args.format, args.out)
    except (ExportError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        if args.out in (None, "-"):
            raise  # a closed stdout: rag.core.exit_codes.guarded exits 141 without a traceback
        print(f"error: cannot write {args.out}: Broken pipe", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out or 'standard output'}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    if args.out not in (None, "-"):
        print(f"wrote {len(table)} ledger row(s) to {args.out}", file=sys.stderr)
    return 0


def ui_command(args: argparse.Namespace) -> int:
    """``rag ledger ui``: 0 after Ctrl-C, 2 after one ``error:`` line (no sweep, the store or
    the server failed)."""
    import json
    import tempfile

    from rag.app.config import default_tracking_uri
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.screenshots import UI_HOST, ScreenshotError, free_port
    from rag.ledger.ui import check_port, prepare_links, serve_ui

    uri = default_tracking_uri(args.tracking_uri)
    port = args.port or free_port()
    try:
        check_port(port)
        links = prepare_links(Ledger(uri, create=False), port=port, host=UI_HOST,
                              sweep_id=args.sweep, experiment=args.experiment,
                              prefix=args.prefix)
    except (ScreenshotError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = Path(tempfile.gettempdir()) / f"rag-ledger-ui-{port}.log"

    def ready() -> None:
        if args.json:
            print(json.dumps(links.as_dict() | {"log": str(log)}), flush=True)
        else:
            what = (f"sweep {links.sweep_id}" if links.sweep_id else
                    "no sweep in this ledger yet: its newest rows")
            print(f"MLflow UI on {links.server} (log: {log}); Ctrl-C stops it\n"
                  f"  {what}, runs table with the headline columns:\n"
                  f"    {links.runs_table}\n"
                  f"  compare view of {'its' if links.sweep_id else 'the newest'} rows:\n"
                  f"    {links.compare}\n"
                  f"  the {'baseline' if links.sweep_id else 'newest row'}'s run page:\n"
                  f"    {links.baseline_run}", flush=True)

    try:
        code = serve_ui(uri, port=port, log=log, ready=ready)
    except ScreenshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if code:
        print(f"error: the MLflow server stopped by itself (log: {log})", file=sys.stderr)
    return code


def screenshots_command(args: argparse.Namespace) -> int:
    """``rag ledger screenshots``: 0 when every row lines up, 1 when a page misses something,
    2 after one ``error:`` line when it could not run."""
    import json

    from rag.app.config import default_output_dir, default_tracking_uri, expand_path
    from rag.ledger.mlflow_store import LedgerError
    from rag.ledger.screenshots import ScreenshotError, describe, sweep_pages

    uri = default_tracking_uri(args.tracking_uri)
    out = Path(expand_path(args.out, base=default_output_dir()))
    try:
        pages = sweep_pages(uri, out, sweep_id=args.sweep, experiment=args.experiment,
                            prefix=args.prefix, port=args.port)
    except (ScreenshotError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the screenshots into {out}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(describe(pages), indent=2))
    else:
        print(f"sweep {pages.sweep_id}: {len(pages.run_names)} rows")
        for name, path in pages.files.items():
            print(f"  {name}: {path}")
        for p in pages.problems:
            print(f"  problem: {p}")
        if not pages.problems:
            print("  every row lines up in the runs table and the compare view")
    return 1 if pages.problems else 0
