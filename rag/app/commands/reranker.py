"""``rag reranker``: train, evaluate and inspect the trained reranker; its options and what it does
live in rag/app/reranker_cli.py."""

from __future__ import annotations

from rag.app.commands import no_rest

NAME, ORDER = "reranker", 80


def add_parser(sub):
    from rag.app.reranker_cli import add_parser as add

    add(sub)
    return sub.choices["reranker"]


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    from rag.app.reranker_cli import run as reranker_run

    return reranker_run(args)
