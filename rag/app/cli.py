"""The ``rag`` command.

Every subcommand exits with the statuses of one table (rag/core/exit_codes.py, docs/cli.md "Exit
codes"); a closed stdout (``rag search q | head -1``) and Ctrl-C are handled once, here
(:func:`rag.core.exit_codes.guarded`), never with a traceback. ``rag --version`` prints the
installed version; ``rag completion bash|zsh`` prints a completion script (shtab).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

SHELLS = ("bash", "zsh")


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
               "(bad usage, config or input), 3 no result, 130 interrupted, 141 stdout closed "
               "(docs/cli.md, Exit codes).")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="evaluate one configuration and log a ledger row "
                                       "(same as python -m rag.run; Hydra overrides and "
                                       "options such as --cfg job follow)",
                          add_help=False)
    sub.add_parser("report", help="write reports/ledger.md from MLflow (python -m rag.report; "
                                  "its options follow)", add_help=False)
    p_diff = sub.add_parser("diff", help="per-query comparison of two ledger rows")
    p_diff.add_argument("run_a", help="baseline run id (or a unique prefix, e.g. from reports/ledger.md)")
    p_diff.add_argument("run_b", help="the other run id (or a unique prefix)")
    p_diff.add_argument("--json", action="store_true", help="print JSON instead of text")
    p_diff.add_argument("--top", type=int, default=10, help="queries listed as moved most (default 10)")
    p_diff.add_argument("--changed-only", action="store_true",
                        help="list only the queries whose rank, losing stage or answer changed")
    p_diff.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="rich tables: auto = on a terminal (default), plain text otherwise")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(p_diff)
    p_search = sub.add_parser("search", help="search a corpus with the configured pipeline")
    p_search.add_argument("query", help="the question or identifier")
    from rag.app.config import SearchMode

    p_search.add_argument("--mode", choices=[m.value for m in SearchMode], default=None,
                          help="search.mode (default: the config's, auto)")
    p_search.add_argument("-r", "--corpus", default=None, metavar="CORPUS",
                          help="a directory to search (corpus.path), or omit for the default corpus")
    p_search.add_argument("--top-k", type=int, default=None, help="search.top_k (default 8)")
    from rag.corpus.walk import CATEGORIES

    p_search.add_argument("--types", nargs="+", default=None, metavar="T", choices=CATEGORIES,
                          help="only these document categories (applied before scoring)")
    p_search.add_argument("--json", action="store_true", help="print JSON (the hit shape)")
    p_search.add_argument("--check-links", action="store_true",
                          help="send bounded HEAD requests to the URLs of the first links.top_n "
                               "hits and report failures (links.concurrency, links.timeout_s, "
                               "links.budget_s); never changes the exit status")
    p_search.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                          help="any other config override, e.g. abstain.min_dense=0.2 "
                               "(before or after the query and the options)")
    p_index = sub.add_parser("index", help="build or update the index of a corpus and say what changed")
    where = p_index.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help="a directory to index (default: the default corpus)")
    where.add_argument("--corpus", default=None, metavar="NAME",
                       help="a corpus config from conf/corpus/ (default: flask)")
    p_index.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                         help="config overrides (before or after the options)")
    p_serve = sub.add_parser("serve", help="serve POST /search and GET /health over HTTP")
    p_serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p_serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p_serve.add_argument("--max-body-bytes", default=None, metavar="N",
                         help="answer 413 to a request body over N bytes (default: "
                              "RAG_MAX_BODY_BYTES, else 65536)")
    p_serve.add_argument("--batch-wait-ms", default=None, metavar="MS",
                         help="wait up to MS for concurrent queries to embed together (default: "
                              "RAG_BATCH_WAIT_MS, else 5)")
    p_serve.add_argument("--max-batch", default=None, metavar="N",
                         help="embed at most N concurrent queries in one batch; 1: no batching "
                              "(default: RAG_MAX_BATCH, else 16)")
    p_serve.add_argument("--log-key-file", default=None, metavar="FILE",
                         help="a secret key (>= 32 bytes) for the log lines' correlation_id, "
                              "an HMAC-SHA256 of the query; re-read when the file changes "
                              "(rotation). Default: RAG_LOG_HMAC_KEY_FILE, else "
                              "RAG_LOG_HMAC_KEY, else no correlation id")
    p_serve.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                         help="config overrides (the RAG_* environment flags also apply)")
    p_completion = sub.add_parser(
        "completion", help="print a shell completion script: rag completion bash|zsh",
        description="Print a completion script for the rag command (made with shtab). bash: "
                    "`rag completion bash > ~/.local/share/bash-completion/completions/rag`; "
                    "zsh: `rag completion zsh > \"${fpath[1]}/_rag\"`.")
    p_completion.add_argument("shell", choices=SHELLS)
    from rag.app.gate import add_parser as add_gate_parser
    from rag.app.golden_cli import add_parser as add_golden_parser
    from rag.app.ledger_cli import add_parser as add_ledger_parser
    from rag.app.reranker_cli import add_parser as add_reranker_parser

    add_reranker_parser(sub)
    add_golden_parser(sub)
    add_gate_parser(sub)
    add_ledger_parser(sub)
    for name, handler in HANDLERS.items():
        sub.choices[name].set_defaults(func=handler)
    return parser


def _no_rest(rest: list[str], parser: argparse.ArgumentParser) -> None:
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")


def _completion(args, rest, parser) -> int:
    _no_rest(rest, parser)
    import shtab

    print(shtab.complete(parser, shell=args.shell), end="")
    return 0


def _gate(args, rest, parser) -> int:
    from rag.app.gate import run as gate_run

    return gate_run(args, rest, parser)


def _golden(args, rest, parser) -> int:
    _no_rest(rest, parser)
    from rag.app.golden_cli import run as golden_run

    return golden_run(args)


def _ledger(args, rest, parser) -> int:
    _no_rest(rest, parser)
    from rag.app.ledger_cli import run as ledger_run

    return ledger_run(args)


def _reranker(args, rest, parser) -> int:
    _no_rest(rest, parser)
    from rag.app.reranker_cli import run as reranker_run

    return reranker_run(args)


def _serve(args, rest, parser) -> int:
    _no_rest(rest, parser)
    from rag.app.serve.app import serve

    return serve(args.host, args.port, list(args.overrides), body_limit=args.max_body_bytes,
                 batch_wait_ms=args.batch_wait_ms, max_batch=args.max_batch,
                 log_key_file=args.log_key_file)


def _search_or_index(args, rest, parser) -> int:
    # KEY=VALUE overrides may come before or after the query and the options
    # (`rag search Q -r DIR k=v`): argparse leaves those after an option in `rest`
    unknown = [t for t in rest if t.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "search":
        args.query, args.overrides = _query_and_overrides(
            [args.query, *args.overrides, *rest], parser)
    else:
        args.overrides = [*args.overrides, *rest]
    from rag.app.search_cli import index_command, search_command

    return search_command(args) if args.command == "search" else index_command(args)


def _diff_command(args, rest, parser) -> int:
    _no_rest(rest, parser)
    return _diff(args)


def _run(args, rest, parser) -> int:
    return subprocess.call([sys.executable, "-m", "rag.run", *rest])


def _report(args, rest, parser) -> int:
    from rag.app.report import main as report_main

    return report_main(rest)


#: subcommand -> handler(args, rest, parser) -> exit status (set on each subparser as its
#: ``func`` default: no if/elif on names)
HANDLERS = {"completion": _completion, "gate": _gate, "golden": _golden, "ledger": _ledger,
            "reranker": _reranker, "serve": _serve, "search": _search_or_index,
            "index": _search_or_index, "diff": _diff_command, "run": _run, "report": _report}


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    return args.func(args, rest, parser)


def _query_and_overrides(tokens: list[str],
                         parser: argparse.ArgumentParser) -> tuple[str, list[str]]:
    """Split ``rag search``'s positional tokens into the query and the config overrides.

    The query is the one token that is not shaped like an override (``[+~]KEY=VALUE`` or
    ``~KEY``); if every token is so shaped, the first whose key is not under a top-level config
    group (``rag search "timeout=30" abstain.min_dense=0.2``), else the first. Two tokens that
    are not overrides are an error (``parser.error``, exit 2).
    """
    import dataclasses
    import re

    from rag.app.config import RagConfig

    shaped = re.compile(r"[+~]{0,2}[A-Za-z_][\w.@/-]*=|~[A-Za-z_][\w.@/-]*$").match
    groups = "|".join([f.name for f in dataclasses.fields(RagConfig)] + ["hydra"])
    known = re.compile(rf"[+~]{{0,2}}(?:{groups})(?:[.@=]|$)").match
    others = [i for i, t in enumerate(tokens) if not shaped(t)]
    if len(others) > 1:
        parser.error("one query expected, got " + ", ".join(repr(tokens[i]) for i in others)
                     + " (quote a query that has spaces; overrides read KEY=VALUE)")
    if not others:
        others = [i for i, t in enumerate(tokens) if not known(t)] or [0]
    q = others[0]
    return tokens[q], [t for i, t in enumerate(tokens) if i != q]


def _diff(args: argparse.Namespace) -> int:
    """``rag diff RUN_A RUN_B``: exit 0, or 2 with one ``error:`` line when a row is unknown
    or ambiguous, the store is missing or not a database, a row has no per_query.csv, or the
    rows are from different corpora or share no positive query."""
    import json

    from rag.app.config import default_tracking_uri
    from rag.ledger.diff import DiffError, compare_rows, print_rich, render_text
    from rag.ledger.mlflow_store import Ledger, LedgerError

    uri = default_tracking_uri(args.tracking_uri)
    try:
        summary = compare_rows(Ledger(uri, create=False), args.run_a, args.run_b, top=args.top,
                               changed_only=args.changed_only)
    except (LookupError, LedgerError, DiffError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from rag.golden.review import use_color

    # a closed stdout (`rag diff ... | head`) raises BrokenPipeError: guarded (main) makes it
    # exit 141 without a traceback
    if args.json:
        print(json.dumps(summary, indent=2))
    elif use_color(args.color, sys.stdout):
        print_rich(summary)
    else:
        print(render_text(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
