"""The ``rag`` command."""

from __future__ import annotations

import argparse
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    """``rag run [OVERRIDES...]`` and ``rag report [...]``."""
    parser = argparse.ArgumentParser(
        prog="rag",
        description="Evaluation harness and experiment tracker for retrieval over code repositories.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="evaluate one configuration and log a ledger row "
                                       "(same as python -m rag.run; Hydra overrides follow)")
    p_run.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides, e.g. search.mode=bm25")
    p_rep = sub.add_parser("report", help="write reports/ledger.md from MLflow (python -m rag.report)")
    p_rep.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "run":
        return subprocess.call([sys.executable, "-m", "rag.run", *args.overrides])
    from rag.report import main as report_main
    return report_main(args.args)


if __name__ == "__main__":
    raise SystemExit(main())
