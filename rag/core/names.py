"""The one way a name (a corpus name, a sweep name, an experiment name) becomes a folder or
file name: :func:`safe_component`.

A name that matches :data:`SAFE_NAME` — a letter or digit, then up to 127 letters, digits,
``.``, ``_``, ``+`` or ``-`` (``flask-3.1.3``, ``shop``, ``rrf_k``) — is used unchanged.
Anything else is refused with a ``ValueError`` naming the key and the value (``..``, ``.``,
a path separator, NUL, an OmegaConf interpolation ``${...}``, a space, a quote, ...), or, for
names that are *derived* rather than typed (a directory's own name used as the default corpus
name), encoded: the unsafe characters become ``_`` and a short hash of the original name is
appended, so ``it's`` gives ``it_s-<8 hex>`` — deterministic, distinct for distinct names, and
always a single safe path component.
"""

from __future__ import annotations

import hashlib
import re

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._+-]+")


def _why_unsafe(name: str) -> str:
    if name == "":
        return "it is empty"
    if name in (".", ".."):
        return "it names the current or parent directory"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if "\0" in name:
        return "it contains a NUL character"
    if "${" in name:
        return "it contains an interpolation (${...})"
    if len(name) > 128:
        return f"it is {len(name)} characters long (at most 128)"
    if not name[0].isascii() or not name[0].isalnum():
        return "it must start with a letter or digit"
    return "only letters, digits, '.', '_', '+' and '-' are allowed"


def safe_component(name: str, *, what: str = "corpus.name", encode: bool = False) -> str:
    """``name`` as one path component that cannot leave its parent folder.

    Args:
        name: the name to place under a folder.
        what: the config key or option the name came from, for the error message.
        encode: for names derived from data (a directory's name), return an encoded safe
            name instead of refusing: unsafe runs of characters become ``_``, leading
            ``.``/``_``/``+``/``-`` are dropped, and ``-`` plus the first 8 hex digits of the
            SHA-256 of the original name are appended (``"it's"`` -> ``"it_s-<hash>"``,
            ``".."`` -> ``"n-<hash>"``). A safe name is returned unchanged either way.

    Returns:
        ``name`` itself when it matches :data:`SAFE_NAME`; else (``encode=True``) the encoding.

    Raises:
        ValueError: ``encode`` is false and ``name`` does not match :data:`SAFE_NAME`; the
            message names ``what``, the value and the reason (``..``, a separator, NUL,
            ``${``, ...).
    """
    name = str(name)
    if SAFE_NAME.fullmatch(name):
        return name
    if not encode:
        raise ValueError(f"{what}={name!r} cannot be used as a folder name: {_why_unsafe(name)} "
                         f"(allowed: {SAFE_NAME.pattern})")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    slug = _UNSAFE_RUN.sub("_", name).lstrip("._+-")[:100] or "n"
    return f"{slug}-{digest}"


def digest(text: str, n: int = 8) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``text`` (UTF-8, lone surrogates kept), for
    keying a folder by something longer than a name (e.g. a corpus directory's resolved path)."""
    return hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:n]


def corpus_name_of_dir(path: str) -> str:
    """The corpus name of a directory indexed by path (``corpus.path=DIR``): its folder name
    (of the resolved path; ``root`` for ``/``), encoded by :func:`safe_component` when it is
    not a safe folder name."""
    from pathlib import Path

    base = Path(str(path)).expanduser().resolve().name or "root"
    return safe_component(base, what="corpus.name", encode=True)
