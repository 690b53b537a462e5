"""``rag run``: ``python -m rag.run`` with the same arguments (Hydra overrides, ``--cfg job``)."""

from __future__ import annotations

import subprocess
import sys

NAME, ORDER = "run", 10


def add_parser(sub):
    return sub.add_parser("run", help="evaluate one configuration and log a ledger row "
                                      "(same as python -m rag.run; Hydra overrides and "
                                      "options such as --cfg job follow)",
                          add_help=False)


def run(args, rest, parser) -> int:
    return subprocess.call([sys.executable, "-m", "rag.run", *rest])
