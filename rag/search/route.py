"""The router: symbol-shaped queries go to BM25, prose to ``search.prose_mode``.

Deliberately narrow: a false positive sends a real question to BM25 (bad on prose); a false
negative only forgoes an improvement.
"""

from __future__ import annotations

import re

_ONE_TOKEN = re.compile(r"^[A-Za-z_][\w.\-/:]*$")
_CAMEL = re.compile(r"[a-z0-9][A-Z]")
_ALL_CAPS = re.compile(r"^[A-Z][A-Z0-9_]+$")


def looks_like_symbol(query: str) -> bool:
    """True for one token with an internal boundary.

    Boundaries: camelCase (``handleAuthCallback``), snake_case (``url_for``), kebab-case
    (``max-age``), dotted (``flask.app``), a path (``flask/json``), ALL_CAPS (``SECRET_KEY``,
    ``JSON``). A plain word (``Blueprint``) or anything with a space is prose.
    """
    q = query.strip()
    if not _ONE_TOKEN.match(q):
        return False
    inner = q.strip("_.-/:")
    if any(ch in inner for ch in "_.-/:"):
        return True
    if _CAMEL.search(q):
        return True
    return bool(_ALL_CAPS.match(q))


def route(query: str, *, mode: str, prose_mode: str) -> str:
    """The effective mode for one query: a channel name (``bm25``, ``dense``, ``grep``, ...:
    rag/search/channels.py ``CHANNELS``) or ``hybrid`` (RRF over ``search.fuse``).

    Raises:
        ValueError: unknown mode.
    """
    from rag.search.channels import CHANNELS

    if mode == "hybrid" or mode in CHANNELS:
        return mode
    if mode == "auto":
        return "bm25" if looks_like_symbol(query) else prose_mode
    raise ValueError(f"unknown search.mode {mode!r}")
