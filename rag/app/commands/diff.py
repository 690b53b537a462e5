"""``rag diff RUN_A RUN_B``: the per-query comparison of two ledger rows (rag/ledger/diff.py)."""

from __future__ import annotations

import sys

from rag.app.commands import no_rest

NAME, ORDER = "diff", 30


def add_parser(sub):
    from rag.app.config import add_tracking_uri_argument

    p = sub.add_parser("diff", help="per-query comparison of two ledger rows")
    p.add_argument("run_a", help="baseline run id (or a unique prefix, e.g. from reports/ledger.md)")
    p.add_argument("run_b", help="the other run id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write a self-contained page with both rankings side by side "
                        "per query (most changed first; hit scores, losing stage, chunk text "
                        "with the query's terms highlighted)")
    p.add_argument("--top", type=int, default=10, help="queries listed as moved most (default 10)")
    p.add_argument("--changed-only", action="store_true",
                   help="list only the queries whose rank, losing stage or answer changed")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="rich tables: auto = on a terminal (default), plain text otherwise")
    add_tracking_uri_argument(p)
    return p


def check_writable(path: str) -> None:
    """Refuse an ``--html`` path that cannot be written before anything is read: a directory
    or another file that is not a regular one (``/dev/full``), a parent that cannot be made.

    Raises:
        OSError: one line naming the path.
    """
    from pathlib import Path

    p = Path(path)
    if p.exists() and not p.resolve().is_file():
        raise OSError(f"cannot write {path}: "
                      + ("it is a directory" if p.is_dir() else "not a regular file"))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror or exc}") from None


def run(args, rest, parser) -> int:
    """Exit 0, or 2 with one ``error:`` line when a row is unknown or ambiguous, the store is
    missing or not a database, a row has no per_query.csv, or the rows are from different
    corpora or share no positive query."""
    no_rest(rest, parser)
    if args.top < 0:
        parser.error(f"argument --top: must be >= 0, got {args.top}")
    import json

    from rag.app.config import default_tracking_uri
    from rag.golden.review import use_color
    from rag.ledger.diff import DiffError, compare_rows, print_rich, render_text
    from rag.ledger.mlflow_store import Ledger, LedgerError

    from rag.core.paths import write_text_replacing
    from rag.ledger.diff_html import DiffPageError, page_inputs, render_html

    uri = default_tracking_uri(args.tracking_uri)
    try:
        if args.html:
            check_writable(args.html)
        ledger = Ledger(uri, create=False)
        summary = compare_rows(ledger, args.run_a, args.run_b, top=args.top,
                               changed_only=args.changed_only)
        if args.html:
            page = render_html(summary, page_inputs(ledger, summary["run_a"], summary["run_b"]))
            write_text_replacing(args.html, page)
            print(f"wrote {args.html} ({len(summary['per_query'])} queries side by side)",
                  file=sys.stderr)
    except (LookupError, LedgerError, DiffError, DiffPageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # a closed stdout (`rag diff ... | head`) raises BrokenPipeError: guarded (rag.app.cli.main)
    # makes it exit 141 without a traceback
    if args.json:
        print(json.dumps(summary, indent=2))
    elif use_color(args.color, sys.stdout):
        print_rich(summary)
    else:
        print(render_text(summary))
    return 0
