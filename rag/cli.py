"""The ``rag`` command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    """``rag run [OVERRIDES...]`` and ``rag report [...]``."""
    parser = argparse.ArgumentParser(
        prog="rag",
        description="Evaluation harness and experiment tracker for retrieval over code repositories.")
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
    p_diff.add_argument("--tracking-uri", default="sqlite:///mlflow.db",
                        help="MLflow tracking URI; a relative sqlite path is taken from the "
                             "project root (default: sqlite:///mlflow.db)")
    p_search = sub.add_parser("search", help="search a corpus with the configured pipeline")
    p_search.add_argument("query", help="the question or identifier")
    p_search.add_argument("--mode", choices=["auto", "bm25", "dense", "hybrid"], default=None,
                          help="search.mode (default: the config's, auto)")
    p_search.add_argument("-r", "--corpus", default=None, metavar="CORPUS",
                          help="a directory to search (corpus.path), or omit for the default corpus")
    p_search.add_argument("--top-k", type=int, default=None, help="search.top_k (default 8)")
    p_search.add_argument("--types", nargs="+", default=None, metavar="T",
                          choices=["source", "test", "documentation", "example", "config", "other",
                                   "issue", "pull_request", "cli_help"],
                          help="only these document categories (applied before scoring)")
    p_search.add_argument("--json", action="store_true", help="print JSON (the hit shape)")
    p_search.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                          help="any other config override, e.g. abstain.min_dense=0.2")
    p_index = sub.add_parser("index", help="build or update the index of a corpus and say what changed")
    where = p_index.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help="a directory to index (default: the default corpus)")
    where.add_argument("--corpus", default=None, metavar="NAME",
                       help="a corpus config from conf/corpus/ (default: flask)")
    p_index.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p_serve = sub.add_parser("serve", help="serve POST /search and GET /health over HTTP")
    p_serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p_serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p_serve.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                         help="config overrides (the RAG_* environment flags also apply)")
    from rag.reranker_cli import add_parser as add_reranker_parser

    add_reranker_parser(sub)
    args, rest = parser.parse_known_args(argv)
    if args.command == "reranker":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from rag.reranker_cli import run as reranker_run

        return reranker_run(args)
    if args.command == "serve":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from rag.serve.app import serve

        return serve(args.host, args.port, list(args.overrides))
    if args.command in ("search", "index"):
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from rag.search_cli import index_command, search_command

        return search_command(args) if args.command == "search" else index_command(args)
    if args.command == "diff":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return _diff(args)
    if args.command == "run":
        return subprocess.call([sys.executable, "-m", "rag.run", *rest])
    from rag.report import main as report_main
    return report_main(rest)


def _diff(args: argparse.Namespace) -> int:
    import json

    from rag.config import tracking_uri
    from rag.ledger.diff import diff_per_query, render_text, summarize
    from rag.ledger.mlflow_store import Ledger
    from rag.ledger.sweep import per_query_frame

    uri = tracking_uri(args.tracking_uri)
    if uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///"):]):
        print(f"error: no ledger at {uri}", file=sys.stderr)
        return 2
    ledger = Ledger(uri)
    try:
        ids = [ledger.resolve_run_id(r) for r in (args.run_a, args.run_b)]
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    frames = [per_query_frame(ledger.download_text(r, "per_query.csv")) for r in ids]
    summary = summarize(diff_per_query(*frames), run_a=ids[0], run_b=ids[1], top=args.top)
    try:
        print(json.dumps(summary, indent=2) if args.json else render_text(summary))
    except BrokenPipeError:  # `rag diff ... | head`
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
