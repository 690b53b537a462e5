"""``rag index``: build or update the index of a corpus and say what changed
(rag/app/search_cli.py)."""

from __future__ import annotations

NAME, ORDER = "index", 50


def add_parser(sub):
    p = sub.add_parser("index", help="build or update the index of a corpus and say what changed")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help="a directory to index (default: the default corpus)")
    where.add_argument("--corpus", default=None, metavar="NAME",
                       help="a corpus config from conf/corpus/ (default: flask)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides (before or after the options)")
    return p


def run(args, rest, parser) -> int:
    unknown = [t for t in rest if t.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.overrides = [*args.overrides, *rest]
    from rag.app.search_cli import index_command

    return index_command(args)
