"""What a ranking feature reads from a query: whether it names an identifier, the identifier's
own name, identifiers embedded in prose, and the prose's keywords.

The shapes follow semble's ranking stage (MinishLab/semble ``semble/ranking/boosting.py``,
MIT): a query is *identifier-shaped* when it is one namespace-qualified name
(``Sinatra::Base``, ``flask.app.Flask``), starts with ``_``, holds an upper-case letter or
``_`` after its first letter (``ExecuteC``, ``url_for``) or starts upper-case (``Command``,
``Json``). Unlike the router's :func:`rag.search.route.looks_like_symbol` (which must not send
a one-word question to BM25 alone), this shape only decides which features apply and how
fusion weighs the channels, so a plain capitalised word counts. A query of one lower-case
word (``distill``, ``jsonify``) stays prose, but the word is also taken as an embedded
identifier: a function of that name is what a one-word lookup most often wants (not semble's
rule; experiments/ranking.md, "2026-12-06").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_IDENTIFIER_QUERY = re.compile(
    r"^(?:"
    r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\\|->|\.|#)[A-Za-z_][A-Za-z0-9_]*)+"  # qualified
    r"|_[A-Za-z0-9_]*"  # leading underscore
    r"|[A-Za-z][A-Za-z0-9]*[A-Z_][A-Za-z0-9_]*"  # an upper-case letter or _ inside
    r"|[A-Z][A-Za-z0-9]*"  # starts upper-case
    r")$")
# camelCase / PascalCase / snake_case words inside prose; plain words and acronyms are not
_EMBEDDED = re.compile(
    r"\b(?:[A-Z][a-z][a-zA-Z0-9]*[A-Z][a-zA-Z0-9]*"
    r"|[a-z][a-zA-Z0-9]*[A-Z][a-zA-Z0-9]+"
    r"|[a-z][a-z0-9]*_[a-z0-9_]+)\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a query of one lower-case word of >= 3 letters
_ONE_WORD = re.compile(r"[a-z][a-z0-9]{2,}$")
_SEPARATORS = ("::", "\\", "->", "#", ".")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
#: words never matched against paths (semble's list)
STOPWORDS = frozenset(
    "a an and are as at be by do does for from has have how if in is it not of on or the to was"
    " what when where which who why with".split())


def identifier_parts(token: str) -> tuple[str, ...]:
    """``token`` lower-cased, then its snake_case or camelCase parts when it has two or more
    (``HandlerStack`` -> ``("handlerstack", "handler", "stack")``, ``simple`` ->
    ``("simple",)``)."""
    low = token.lower()
    parts = ([p for p in low.split("_") if p] if "_" in token
             else [m.lower() for m in _CAMEL.findall(token)])
    return (low, *parts) if len(parts) >= 2 else (low,)


@dataclass(frozen=True)
class QueryShape:
    """A query as the ranking features read it.

    Attributes:
        text: the query, stripped.
        identifier: the query is identifier-shaped (module docstring).
        names: the names a definition must have to answer an identifier query (the last
            component of a qualified name, and the whole query when qualified); empty for prose.
        embedded: identifiers written inside a prose query (``How does HandlerStack work``);
            empty for an identifier query.
        keywords: lower-cased words of >= 3 letters that are not :data:`STOPWORDS` (prose
            only; empty for an identifier query).
    """

    text: str
    identifier: bool
    names: frozenset[str]
    embedded: frozenset[str]
    keywords: frozenset[str]


@lru_cache(maxsize=4096)
def query_shape(query: str) -> QueryShape:
    """The :class:`QueryShape` of ``query``."""
    q = query.strip()
    if _IDENTIFIER_QUERY.match(q):
        last = q
        for sep in _SEPARATORS:
            if sep in q:
                last = q.rsplit(sep, 1)[-1]
                break
        return QueryShape(q, True, frozenset({last, q}), frozenset(), frozenset())
    words = frozenset(w.lower() for w in _WORD.findall(q)
                      if len(w) > 2 and w.lower() not in STOPWORDS)
    embedded = frozenset(_EMBEDDED.findall(q))
    if _ONE_WORD.match(q) and q not in STOPWORDS:
        # one lower-case word (``distill``, ``jsonify``): maybe a function's name, so its
        # definition is looked for as an embedded identifier's is (at embedded_identifier's
        # weight, half of an identifier query's)
        embedded = frozenset({q})
    return QueryShape(q, False, frozenset(), embedded, words)
