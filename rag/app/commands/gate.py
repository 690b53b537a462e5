"""``rag gate``: pass, regression or could-not-compare for a candidate against a baseline; its
options and what it does live in rag/app/gate.py."""

from __future__ import annotations

NAME, ORDER = "gate", 100


def add_parser(sub):
    from rag.app.gate import add_parser as add

    add(sub)
    return sub.choices["gate"]


def run(args, rest, parser) -> int:
    from rag.app.gate import run as gate_run

    return gate_run(args, rest, parser)
