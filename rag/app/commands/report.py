"""``rag report``: ``python -m rag.report`` (rag/app/report.py) with the same options."""

from __future__ import annotations

NAME, ORDER = "report", 20


def add_parser(sub):
    return sub.add_parser("report", help="write reports/ledger.md from MLflow (python -m "
                                         "rag.report; its options follow)", add_help=False)


def run(args, rest, parser) -> int:
    from rag.app.report import main as report_main

    return report_main(rest)
