"""Errors shared by the entry points."""

from __future__ import annotations

import errno as _errno


class RunError(RuntimeError):
    """A user-facing failure: printed as one ``error:`` message, exit status 2."""


class CacheWriteError(RunError):
    """A file under the cache (chunk store, embedding cache, build, model export) could not be
    written: out of space, a read-only or unwritable directory. The message names the path;
    whoever raised it has removed its temporary files."""


def os_problem(exc: BaseException) -> str:
    """One line saying what an ``OSError`` (or a SQLite error) was, without its traceback:
    ``No space left on device (ENOSPC)``, ``Read-only file system (EROFS)``, or the first line
    of the message of another exception."""
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code is not None:
        name = _errno.errorcode.get(code, str(code))
        return f"{exc.strerror or name} ({name})"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
