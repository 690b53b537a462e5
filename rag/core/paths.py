"""Paths every layer needs: the project root and how a configured path is made absolute.

Imports nothing of rag (the bottom layer, DESIGN.md §8); :mod:`rag.app.config` re-exports both.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The directory that relative config paths are taken from.

    ``$RAG_PROJECT_ROOT`` if set; else the checkout holding this package (it has a
    pyproject.toml next to ``rag/``); else the current directory.
    """
    env = os.environ.get("RAG_PROJECT_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file():
        return here
    return Path.cwd().resolve()


def expand_path(value: str | Path, base: Path | None = None) -> Path:
    """``~`` expanded; a relative path is taken from ``base`` (default: the project root)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = (base or project_root()) / p
    return p.resolve()
