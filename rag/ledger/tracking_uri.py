"""Where the ledger is: MLflow tracking URIs resolved the way every command resolves them
(a relative ``sqlite:///file`` against the project root or ``$RAG_OUTPUT_DIR``, never against
the current directory, which Hydra may change), and the shared ``--tracking-uri`` flag."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rag.core.paths import expand_path


def tracking_uri(uri: str, base: Path | None = None) -> str:
    """Make a relative ``sqlite:///file`` URI (or a bare path) absolute against ``base``
    (default: the project root).

    MLflow's own default is ``sqlite:///mlflow.db`` in the *current* directory, which Hydra
    may change; the ledger must not move with it.
    """
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str(expand_path(uri[len(prefix):], base=base))
    if "://" not in uri:
        return str(expand_path(uri, base=base))
    return uri


#: ``--tracking-uri``'s help, shared by every command that reads the ledger
TRACKING_URI_HELP = ("MLflow tracking URI; a relative sqlite path is taken from $RAG_OUTPUT_DIR "
                     "or the project root (default: $MLFLOW_TRACKING_URI, else "
                     "sqlite:///mlflow.db)")


def add_tracking_uri_argument(parser: Any) -> None:
    """Add ``--tracking-uri`` (resolved later by :func:`default_tracking_uri`) to an argparse
    parser."""
    parser.add_argument("--tracking-uri", default=None, help=TRACKING_URI_HELP)


def default_tracking_uri(flag: str | None = None) -> str:
    """The ledger a command reads when ``--tracking-uri`` is not given: ``flag``, else
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` under ``$RAG_OUTPUT_DIR`` (or the
    project root) — the same store ``python -m rag.run`` writes by default."""
    uri = flag or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    return tracking_uri(uri, base=default_output_dir())


def default_output_dir() -> Path:
    """Where commands outside a Hydra run (``rag report``, ``rag diff``, ``rag golden``) take
    relative store and report paths from: ``$RAG_OUTPUT_DIR``, else the project root — the
    same place ``paths.output_dir`` defaults to."""
    return expand_path(os.environ.get("RAG_OUTPUT_DIR", "."))
