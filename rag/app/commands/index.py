"""``rag index``: build or update the index of a corpus and say what changed
(rag/app/search_cli.py); ``--verify`` checks the published builds instead
(rag/app/index_verify.py)."""

from __future__ import annotations

NAME, ORDER = "index", 50


def add_parser(sub):
    p = sub.add_parser("index", help="build or update the index of a corpus and say what changed")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help="a directory to index (default: the default corpus)")
    where.add_argument("--corpus", default=None, metavar="NAME",
                       help="a corpus config from conf/corpus/ (default: flask)")
    p.add_argument("--verify", action="store_true",
                   help="build nothing: check every published build of the corpus against the "
                        "sizes, SHA-256 and shapes its manifest records (exit 0 whole, 1 a "
                        "damaged build, named; 2 nothing published)")
    p.add_argument("--force", action="store_true",
                   help="publish a new build even when the current one already holds the same "
                        "files, settings, embedder and commit (by default nothing is published "
                        "then)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides (before or after the options)")
    return p


def run(args, rest, parser) -> int:
    unknown = [t for t in rest if t.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.overrides = [*args.overrides, *rest]
    if args.verify:
        from rag.app.index_verify import verify_command

        return verify_command(args)
    from rag.app.search_cli import index_command

    try:
        return index_command(args)
    except OSError as exc:  # a write no stage names itself (e.g. a read-only cache folder)
        import sys

        from rag.core.errors import os_problem
        from rag.core.exit_codes import ExitCode

        where = exc.filename or "the cache"
        print(f"error: cannot write {where}: {os_problem(exc)}", file=sys.stderr)
        return int(ExitCode.ERROR)
