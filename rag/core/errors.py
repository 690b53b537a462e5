"""Errors shared by the entry points."""

from __future__ import annotations


class RunError(RuntimeError):
    """A user-facing failure: printed as one ``error:`` message, exit status 2."""
