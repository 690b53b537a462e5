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
                                       "(same as python -m rag.run; Hydra overrides and "
                                       "options such as --cfg job follow)",
                          add_help=False)
    sub.add_parser("report", help="write reports/ledger.md from MLflow (python -m rag.report; "
                                  "its options follow)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "run":
        return subprocess.call([sys.executable, "-m", "rag.run", *rest])
    from rag.report import main as report_main
    return report_main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
