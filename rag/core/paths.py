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


def write_text_replacing(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to the regular file ``path`` whole or not at all: into a
    temporary file beside it, renamed over it. A symlink is followed (its target is written);
    a path that exists and is not a regular file (a directory, ``/dev/full``, a FIFO) is
    refused, never replaced; missing parent directories are made. Returns the file written.

    Raises:
        OSError: ``cannot write PATH: reason`` (one line; the temporary file is removed).
    """
    import tempfile

    shown = str(path)
    target = Path(path)
    try:
        if target.is_symlink():
            target = target.resolve()
        if target.exists() and not target.is_file():
            raise OSError(f"cannot write {shown}: not a regular file")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        if str(exc).startswith("cannot write "):
            raise
        raise OSError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(f"cannot write {shown}: {exc.strerror or exc}") from None
    return target
