"""Per-index facts the ranking features look up, built once per index and kept with it: each
chunk's file stem, the name it defines, and lookups from a (normalised) stem or a defined name
to the chunks that have it, so a definition outside the candidate pool is found without
scanning every chunk."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, Sequence

# the last component of a qualified symbol (``Command.ExecuteC``, ``Sinatra::Base``, ``a#b``)
_SYMBOL_SEP = re.compile(r"::|\.|#|->|\\")
# chunk kinds whose symbol is not a definition
_NOT_DEFINITIONS = frozenset({"module", "section", "window"})
#: words that introduce a definition, in the languages of rag.corpus.languages and those it
#: only windows (Scala ``case class``, Elixir ``defmodule``, shell and Lua ``function``);
#: case-sensitive (semble's list, ``semble/ranking/boosting.py``, with ``val``, ``impl`` and
#: ``alias`` added). Haskell's ``data`` and ``newtype`` count only at a line's start (prose
#: says "the data model").
DEFINITION_KEYWORDS = (
    "class", "module", "defmodule", "def", "defp", "defmacro", "interface", "struct", "enum",
    "trait", "type", "func", "function", "object", "abstract class", "data class", "case class",
    "fn", "fun", "package", "namespace", "protocol", "record", "typedef", "impl", "alias")
_KEYWORDS = "|".join(re.escape(k) for k in DEFINITION_KEYWORDS)


@lru_cache(maxsize=1024)
def definition_pattern(name: str) -> re.Pattern[str]:
    """Where a chunk's text defines ``name``, in the languages rag windows as in the others:

    * a keyword of :data:`DEFINITION_KEYWORDS` at a line start or after white space, then
      ``name`` (optionally qualified by ``.``, ``::`` or Lua's ``:``), then white space, one of
      ``<({:[;=`` or the end of the line (``class Router(``, ``defmodule Phoenix.Router do``,
      ``fn route<``, ``function Picker:new(``);
    * a type bound to a constant (Zig ``pub const Allocator = struct {``: ``const`` or ``var``,
      the name, an optional type, ``=``, then ``struct``, ``enum``, ``union``, ``opaque`` or
      ``error`` and its ``{`` or ``(``; ``error.OutOfMemory`` is a value, not a type);
    * Haskell's ``data`` / ``newtype`` at a line's start (``data Value = ...``);
    * a function assigned to the name (Lua ``M.run = function(a)``, JavaScript
      ``exports.parse = function``);
    * a type signature starting a line (Haskell ``encode :: ToJSON a => a -> ByteString``,
      indented in a ``class`` body);
    * C's ``#define NAME``.

    Every part stays within one line: a keyword that ends a comment (``# ... is a distinct
    object``) does not define the name starting the next line. Module-level bindings
    (``EXCLUDE = ...``) are :func:`binding_pattern`'s, read in code chunks only.
    """
    n = re.escape(name)
    # within one line: a keyword ending a comment line never defines the next line's name
    return re.compile(
        rf"(?:^|(?<=\s))(?:{_KEYWORDS})[ \t]+(?:[A-Za-z_][A-Za-z0-9_]*(?:\.|::|:))*"
        rf"{n}(?:\s|[<({{:\[;=]|$)"
        rf"|(?:^|(?<=\s))(?:const|var)[ \t]+{n}[ \t]*(?::[^=\n;{{]{{0,200}})?=[ \t]*"
        rf"(?:extern[ \t]+|packed[ \t]+)?(?:struct|enum|union|opaque|error)[ \t]*[({{]"
        rf"|^(?:data|newtype)(?:[ \t]+instance)?[ \t]+{n}\b"
        rf"|(?:^|(?<=\s))(?:[A-Za-z_][A-Za-z0-9_]*[.:])*{n}[ \t]*=[ \t]*function\b"
        rf"|^[ \t]*{n}[ \t]*::[ \t]"
        rf"|^#[ \t]*define[ \t]+{n}\b", re.MULTILINE)


#: modifiers a module-level binding may start with (``export const``, ``pub(crate) static``,
#: ``private const val``, ``local``)
_BINDING_MODIFIERS = (r"(?:(?:export|pub(?:\([^)\n]*\))?|local|private|public|internal|"
                      r"protected|static|const|let|var|val|final|readonly|declare|mut)[ \t]+)*")


@lru_cache(maxsize=1024)
def binding_pattern(name: str) -> re.Pattern[str]:
    """Where a code chunk binds ``name`` at module level:

    * the name at a line's first column, after modifiers (:data:`_BINDING_MODIFIERS`:
      ``export const``, ``pub const``, ``private const val``, Lua ``local``), an optional
      type, then ``=`` (Python ``EXCLUDE: typing.Final = "exclude"``, ``export const VERSION =
      "1"``, Rust ``pub const MAGIC: [u8; 4] = ...``, Lua ``local Picker = {}``);
    * an entry of a Go ``const (`` / ``var (`` block (``DebugMode = "debug"``, indented).

    An indented binding elsewhere is a local or a field, a comparison (``==``), an arrow
    (``=>``) or an import (``const std = @import("std")``, ``= require(...)``) defines
    nothing. Read only in code chunks (:meth:`ChunkFacts.defines`): in documentation and
    configuration ``Note: set FOO=1`` or ``url: https://...?a=1`` are prose, not bindings.
    """
    n = re.escape(name)
    value = r"=(?![=>~])(?![ \t]*@?(?:import|require)\b)"
    return re.compile(
        rf"^{_BINDING_MODIFIERS}{n}[ \t]*(?::[^=\n]{{0,200}})?{value}"
        # the block's lines: blank, or indented with content (disjoint: no backtracking blow-up)
        rf"|^(?:const|var)[ \t]*\([ \t]*\n(?:[ \t]*\n|[ \t]+[^ \t\n][^\n]*\n){{0,400}}?"
        rf"[ \t]+{n}(?:[ \t]+[A-Za-z_][\w.*\[\]]*)?[ \t]*{value}", re.MULTILINE)


#: the categories whose chunks are code: module-level bindings count there only
CODE_CATEGORIES = frozenset({"source", "test", "example"})


def stem_forms(stem: str) -> set[str]:
    """The forms a lower-cased file stem is matched under: itself, without ``_`` and ``-``, and
    both without trailing ``s`` (``routers`` answers ``router``)."""
    norm = stem.replace("_", "").replace("-", "")
    return {stem, norm, stem.rstrip("s"), norm.rstrip("s")}


def symbol_components(name: str) -> tuple[str, ...]:
    """A qualified name's components, whatever the language's separator (``::``, ``.``, ``#``,
    ``->``, ``\\``): ``Sinatra::Base`` and ``Sinatra.Base`` -> ``("Sinatra", "Base")``."""
    return tuple(p for p in _SYMBOL_SEP.split(name.strip()) if p)


@dataclass
class ChunkFacts:
    """Attributes:
        stems: lower-cased file stem of each chunk (``tree.go`` -> ``tree``).
        defined: the name each chunk defines (the last component of its symbol), or None for a
            module remainder, a section, a window or a chunk without symbol.
        by_stem: each form of :func:`stem_forms` -> chunk indices.
        by_defined: defined name -> chunk indices.
    """

    stems: list[str]
    defined: list[str | None]
    by_stem: dict[str, list[int]]
    by_defined: dict[str, list[int]]

    @classmethod
    def of(cls, chunks: Sequence[Any]) -> "ChunkFacts":
        """Build from an index's chunks (``path``, ``symbol``, ``kind``)."""
        stems, defined = [], []
        by_stem: dict[str, list[int]] = defaultdict(list)
        by_defined: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(chunks):
            stem = PurePosixPath(c.path).stem.lower()
            stems.append(stem)
            for form in stem_forms(stem):
                by_stem[form].append(i)
            name = (_SYMBOL_SEP.split(c.symbol)[-1] or None
                    if c.symbol and c.kind not in _NOT_DEFINITIONS else None)
            defined.append(name)
            if name:
                by_defined[name].append(i)
        return cls(stems, defined, dict(by_stem), dict(by_defined))

    def defines(self, i: int, chunk: Any, names: frozenset[str]) -> bool:
        """Whether chunk ``i`` defines one of ``names``: its symbol's last component is one of
        them (every language rag chunks by symbol), or its text holds a definition keyword
        followed by one (:func:`definition_pattern`: languages rag windows), or, in a code
        chunk, a module-level binding of one (:func:`binding_pattern`)."""
        if self.defined[i] in names:
            return True
        if any(definition_pattern(n).search(chunk.text) for n in names):
            return True
        return (getattr(chunk, "category", "source") in CODE_CATEGORIES
                and any(binding_pattern(n).search(chunk.text) for n in names))


def facts_of(index: Any) -> ChunkFacts:
    """The :class:`ChunkFacts` of ``index``, built on first use and kept with it (as the
    on-demand channels are, rag/search/channels.py ``channel_of``)."""
    cache = index.__dict__.setdefault("_ranking_facts", {})
    if "facts" not in cache:
        cache["facts"] = ChunkFacts.of(index.chunks)
    return cache["facts"]
