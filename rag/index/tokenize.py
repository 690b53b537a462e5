"""A code-aware tokenizer for BM25.

An identifier is kept whole *and* split into its parts, so ``handleAuthCallback`` yields
``handleauthcallback, handle, auth, callback`` and ``flask.app.make_response`` yields the
dotted whole, each dotted component (``make_response``), and the words (``make``,
``response``). snake_case, kebab-case, dotted and path tokens are treated alike.

``bm25.tokenizer`` selects one of :data:`TOKENIZERS`: ``code`` (the above, the default) or
``identifiers`` (:func:`tokenize_identifiers`: each identifier whole and split on snake/camel
case, no stopword list, one-letter tokens kept, no dotted/path compounds), the tokenization
external reference figures such as CoSQA's BM25 describe (experiments/cosqa.md).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

TOKENIZER_VERSION = "2"

# A run of identifier characters, possibly joined by . / - (dotted names, paths, kebab-case);
# it may start with digits when a letter follows (``4xx``, ``2fa``, ``3des``: version 2;
# version 1 read ``4xx`` as ``xx``); a number alone is no token.
_COMPOUND = re.compile(r"(?<![A-Za-z0-9_])[0-9]*[A-Za-z_][A-Za-z0-9_]*"
                       r"(?:[./\-][A-Za-z_][A-Za-z0-9_]*)*")
_PART_SPLIT = re.compile(r"[./\-]")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# Common English function words; identifiers are never dropped by this list unless they are
# exactly one of these words.
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does doing for from had has have how
    i if in into is it its me my no not of on or our should so than that the their them then
    there these they this those to too was we were what when where which while who why will
    with would you your""".split()
)


def _words(identifier: str) -> list[str]:
    out = []
    for piece in identifier.split("_"):
        out.extend(m.group(0).lower() for m in _CAMEL.finditer(piece))
    return out


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` for BM25, in order, with duplicates (term frequency matters).

    Args:
        text: any text (code, prose, a query).

    Returns:
        Lower-cased tokens of length >= 2 that are not stopwords.
    """
    tokens: list[str] = []
    for m in _COMPOUND.finditer(text):
        tokens.extend(_expand(m.group(0)))
    return tokens


@lru_cache(maxsize=262_144)
def _expand(compound: str) -> tuple[str, ...]:
    """The tokens of one identifier-like run (cached: code repeats its identifiers)."""
    whole = compound.strip("_")
    if not whole:
        return ()
    candidates = [whole.lower()]
    components = [c for c in _PART_SPLIT.split(whole) if c]
    if len(components) > 1:
        candidates.extend(c.lower() for c in components)
    for comp in components:
        words = _words(comp)
        if len(words) > 1 or (words and words[0] != comp.lower()):
            candidates.extend(words)
    out: list[str] = []
    seen: set[str] = set()
    for tok in candidates:
        tok = tok.strip("_")
        if len(tok) < 2 or tok in STOPWORDS or tok in seen:
            continue
        seen.add(tok)
        out.append(tok)
    return tuple(out)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tokenize_identifiers(text: str) -> list[str]:
    """Tokens of ``text`` for the ``identifiers`` tokenizer, in order, with duplicates.

    Each identifier (``[A-Za-z_][A-Za-z0-9_]*``) gives its whole lower-cased form and, when it
    has several snake_case / camelCase parts, each part (``is_iterable`` -> ``is_iterable, is,
    iterable``); no stopword list, no minimum length, and ``.``, ``/``, ``-`` separate
    identifiers instead of joining them.
    """
    tokens: list[str] = []
    for m in _IDENTIFIER.finditer(text):
        tokens.extend(_expand_identifier(m.group(0)))
    return tokens


@lru_cache(maxsize=262_144)
def _expand_identifier(identifier: str) -> tuple[str, ...]:
    whole = identifier.strip("_").lower()
    if not whole:
        return ()
    out = [whole]
    words = _words(identifier)
    if len(words) > 1 or (words and words[0] != whole):
        out.extend(w for w in words if w not in out)
    return tuple(out)


#: ``bm25.tokenizer`` -> the function that tokenizes chunks and queries alike.
TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"code": tokenize,
                                                     "identifiers": tokenize_identifiers}


def get_tokenizer(name: str) -> Callable[[str], list[str]]:
    """The tokenizer called ``name`` (:data:`TOKENIZERS`).

    Raises:
        ValueError: unknown name.
    """
    try:
        return TOKENIZERS[name]
    except KeyError:
        raise ValueError(f"bm25.tokenizer must be one of {sorted(TOKENIZERS)}, "
                         f"got {name!r}") from None
