"""``rag search QUERY``: search a corpus with the configured pipeline (rag/app/search_cli.py)."""

from __future__ import annotations

import argparse

NAME, ORDER = "search", 40


def add_parser(sub):
    from rag.app.config import SearchMode
    from rag.corpus.walk import CATEGORIES

    p = sub.add_parser("search", help="search a corpus with the configured pipeline")
    p.add_argument("query", help="the question or identifier")
    p.add_argument("--mode", choices=[m.value for m in SearchMode], default=None,
                   help="search.mode (default: the config's, hybrid)")
    p.add_argument("-r", "--path", "--corpus", dest="corpus", default=None, metavar="DIR",
                   help="a directory to search (corpus.path; --path as rag index and rag golden "
                        "spell it), or omit for the default corpus")
    p.add_argument("--top-k", type=int, default=None,
                   help="hits to return (search.top_k, default in conf/search/); the "
                        "candidate pools grow to hold them")
    p.add_argument("--types", nargs="+", default=None, metavar="T", choices=CATEGORIES,
                   help="only these document categories, one or more of: "
                        + ", ".join(CATEGORIES) + " (applied before scoring; the query goes "
                        "before --types, which takes every word after it)")
    p.add_argument("--json", action="store_true", help="print JSON (the hit shape)")
    p.add_argument("--check-links", action="store_true",
                   help="send bounded HEAD requests to the URLs of the first links.top_n "
                        "hits and report failures (links.concurrency, links.timeout_s, "
                        "links.budget_s); never changes the exit status")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="any other config override, e.g. abstain.min_dense=0.2 "
                        "(before or after the query and the options)")
    return p


def run(args, rest, parser) -> int:
    # KEY=VALUE overrides may come before or after the query and the options
    # (`rag search Q -r DIR k=v`): argparse leaves those after an option in `rest`
    unknown = [t for t in rest if t.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.query, args.overrides = query_and_overrides([args.query, *args.overrides, *rest], parser)
    from rag.app.search_cli import search_command

    return search_command(args)


def query_and_overrides(tokens: list[str],
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
