"""``rag golden``: golden sets (init, check, stats, power, expected scores, mining, pooling,
review); its options and what it does live in rag/app/golden_cli.py."""

from __future__ import annotations

from rag.app.commands import no_rest

NAME, ORDER = "golden", 90


def add_parser(sub):
    from rag.app.golden_cli import add_parser as add

    add(sub)
    return sub.choices["golden"]


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    from rag.app.golden_cli import run as golden_run

    return golden_run(args)
