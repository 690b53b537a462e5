"""The ``rag`` command.

Every subcommand exits with the statuses of one table (rag/core/exit_codes.py, docs/cli.md "Exit
codes"); a closed stdout (``rag search q | head -1``) and Ctrl-C are handled once, here
(:func:`rag.core.exit_codes.guarded`), never with a traceback. ``rag --version`` prints the
installed version; ``rag completion bash|zsh`` prints a completion script (shtab).
"""

from __future__ import annotations

import argparse


def version() -> str:
    """The installed ``rag`` distribution's version (importlib.metadata), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("rag")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``: prints ``rag <version>`` and exits 0; the version is looked up only
    then (importlib.metadata costs every other command ~50 ms of a cold start)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"rag {version()}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """The ``rag`` command (see ``rag --help``): returns its exit status (rag/core/exit_codes.py)."""
    from rag.core.exit_codes import guarded

    return guarded(lambda: _main(argv))


def build_parser() -> argparse.ArgumentParser:
    """The ``rag`` command line: every subcommand and option (``rag completion`` reads it)."""
    parser = argparse.ArgumentParser(
        prog="rag",
        description="Evaluation harness and experiment tracker for retrieval over code repositories.",
        epilog="Exit status: 0 ok, 1 check failed (regression, label rot), 2 could not run "
               "(bad usage, config or input), 3 no result, 4 inconclusive (rag gate: not "
               "enough queries to decide), 130 interrupted, 141 stdout closed "
               "(docs/cli.md, Exit codes).")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    from rag.app.commands import commands

    for command in commands():  # one module each in rag/app/commands/
        command.add_parser(sub).set_defaults(func=command.run)
    return parser


def typed_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)parser of the command as typed (``rag golden review`` -> the
    ``review`` parser), so a usage error shows that command's usage, not ``rag``'s."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    return args.func(args, rest, typed_parser(parser, args))


if __name__ == "__main__":
    raise SystemExit(main())
