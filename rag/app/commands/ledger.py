"""``rag ledger``: export the ledger and screenshot the MLflow UI; its options and what it does
live in rag/app/ledger_cli.py."""

from __future__ import annotations

from rag.app.commands import no_rest

NAME, ORDER = "ledger", 110


def add_parser(sub):
    from rag.app.ledger_cli import add_parser as add

    add(sub)
    return sub.choices["ledger"]


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    from rag.app.ledger_cli import run as ledger_run

    return ledger_run(args)
