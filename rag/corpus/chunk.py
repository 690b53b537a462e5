"""Chunkers: Python by symbol (``ast``), other languages by symbol (tree-sitter, see
:mod:`rag.corpus.languages`), Markdown and reST by section, other text by line windows.

A :class:`Chunk` is the unit that is indexed and returned. Its ``content_hash`` is the
SHA-256 of :attr:`Chunk.indexed_text` (a ``path: symbol`` header plus the body), which is
what both channels see, so the embedding cache can be keyed on it.

Every chunker bounds its chunks (:func:`bound_chunk`), by characters and at line ends:

* a line longer than :data:`MAX_LINE_CHARS` (a minified bundle, a data blob, a paragraph
  without line breaks) is cut into pieces of at most that many characters, each piece its own
  chunk with ``start_line == end_line ==`` that line, and id ``path:L-L@OFFSET`` (OFFSET: the
  piece's 0-based character offset in line L);
* the remaining lines of a chunk longer than :data:`MAX_CHUNK_CHARS` are packed, in order,
  into consecutive chunks of at most that many characters, cut only at line ends.

A chunk within both bounds is exactly what the chunker made before the bounds existed
(``CHUNKER_VERSION`` 1): in Flask 3.1.3 and in this repository the largest chunk has 20,392
characters and the longest line 3,629, so their chunks are unchanged. Without the bounds a
1 MB one-line file was one 1 MB chunk, and the embedder's tokenizer encodes a whole text
before truncating it (docs/limits.md).

Python, Markdown, reST and windows make exactly the chunks of ``CHUNKER_VERSION`` 2; version 3
adds symbol chunks for the languages of :data:`rag.corpus.languages.LANGUAGES` (TypeScript,
JavaScript, Go, Rust, Java, C, C++, C#, Ruby, PHP, Kotlin, Swift), which were windows before;
version 4 changes only those languages' symbol chunks (doc comments across one blank line,
recovery of declarations in trees with errors, classes in JS/TS functions); version 5 adds
Scala and shell (Bash) symbol chunks, which were windows, and changes nothing else.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from rag.corpus.languages import MODULE_SYMBOL, language_for, outline
from rag.corpus.walk import Document

# 2: long lines and oversized chunks are split (bound_chunk); other chunks are as in 1
# 3: symbol chunks for the tree-sitter languages (rag/corpus/languages.py), which were windows;
#    Python, Markdown, reST and windows of other files as in 2
# 4: tree-sitter languages: a doc comment one blank line above a declaration is its own;
#    declarations a tree with errors lost are recovered; classes in a top-level JS/TS function
#    are chunks (rag/corpus/languages.py); Python, Markdown, reST and windows as in 3
# 5: Scala (.scala, .sc) and shell (.sh, .bash) by symbol, which were windows; everything
#    else as in 4
# 6: Elixir (.ex, .exs) by symbol (defmodule / defimpl / defprotocol, def / defp / defmacro /
#    defdelegate ...), which were windows; everything else as in 5
# 7: Lua (.lua) and Haskell (.hs) by symbol (Lua functions, ``M.f`` and ``M:f`` as methods
#    of ``M``; Haskell data/newtype/type/class/instance, a function's equations and signature
#    as one symbol), which were windows; everything else as in 6
# 8: Zig (.zig) by symbol (``fn`` and ``const A = struct/enum/union {...}`` with its
#    methods), which were windows; everything else as in 7
# 9: Python: a function's ``@overload`` stubs are one chunk with its implementation (they were
#    a chunk each, ranked above the code under one name); a class chunk's span ends at its
#    own last line (blank lines that only separate methods are left out: ``class Option``
#    2858-2949, not 2858-3644); Markdown/reST: a preamble of link targets only (``(options)=``)
#    opens the first section instead of being a chunk of its own; everything else as in 8
# 10: Lua: ``M.f = function ... end`` and ``local f = function ... end`` are symbols (``M.f``,
#    ``f``); JavaScript/TypeScript: a top-level ``app.use = function``, ``Foo.prototype.bar =
#    function`` is a symbol (``app.use``, ``Foo.bar``); they stayed in ``<module>``
#    (express's ``application.js`` was 11 module windows); a computed member (``app[m] =
#    function``, Lua ``M["f"] =``) or a target that is not a name still does; everything else
#    as in 9
CHUNKER_VERSION = "10"


@functools.lru_cache(maxsize=1)
def chunker_code() -> str:
    """The first 16 hex digits of the SHA-256 of the source of the modules that decide which
    files are read and what their chunks are (this module, rag/corpus/languages.py, walk.py
    and secrets.py). Caches of chunks and indexes are keyed by it beside
    :data:`CHUNKER_VERSION`, so that code changed without a version bump (an edit not yet
    versioned, an experiment undone) never reuses chunks another code made."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("chunk.py", "languages.py", "walk.py", "secrets.py"):
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()[:16]

#: No chunk holds more characters than this. Above the largest ordinary chunk measured
#: (20,392 characters: a 60-line window of Flask's uv.lock; 99% of chunks are under 10,200).
MAX_CHUNK_CHARS = 32_768

#: A line longer than this is cut into pieces of at most this many characters. No line of
#: Flask 3.1.3 or of this repository is longer than 3,629 characters; a piece holds about
#: 1,000-2,000 word pieces of minified code, several times what the embedder reads (256).
MAX_LINE_CHARS = 4_096


@dataclass(frozen=True)
class Chunk:
    """One indexed unit.

    Attributes:
        id: stable id ``path:start_line-end_line`` (unique within a corpus); a piece of a
            long line adds ``@OFFSET``, its character offset in the line.
        path: corpus-relative POSIX path.
        symbol: qualified symbol (``Flask.make_response``, ``Router.Handle``,
            ``Outer.Inner.method``; naming per language in :mod:`rag.corpus.languages`),
            ``<module>`` for a file's remaining top-level code, a section title for
            Markdown/reST, or None for windows.
        start_line, end_line: 1-based, inclusive.
        category: the document's category.
        kind: function | class | method | module | section | window. ``class`` is any
            class-like declaration: class, struct, union, interface, protocol, enum, trait,
            Rust ``impl`` block, Ruby module, Kotlin object, type alias (TypeScript ``type``,
            Go ``type``, C ``typedef``...); ``method`` a function inside one, or one qualified
            by a receiver or owner (Go ``func (r *Router) Handle``, C++ ``Foo::bar``).
        text: the chunk body.
        content_hash: SHA-256 hex of :attr:`indexed_text`.
    """

    id: str
    path: str
    symbol: str | None
    start_line: int
    end_line: int
    category: str
    kind: str
    text: str
    content_hash: str

    @property
    def indexed_text(self) -> str:
        """What the channels index: ``"path: symbol\\n"`` (or ``"path\\n"``) then the body."""
        return _header(self.path, self.symbol) + self.text


def _header(path: str, symbol: str | None) -> str:
    return f"{path}: {symbol}\n" if symbol else f"{path}\n"


def make_chunk(doc: Document, *, symbol: str | None, start: int, end: int, kind: str,
               text: str, offset: int | None = None) -> Chunk:
    """Build a chunk of ``doc`` and compute its id and content hash.

    ``offset`` is given for a piece of a long line only: the piece's 0-based character offset
    in its line, appended to the id as ``@OFFSET`` so the pieces of one line have distinct ids.
    """
    digest = hashlib.sha256((_header(doc.path, symbol) + text).encode("utf-8")).hexdigest()
    cid = f"{doc.path}:{start}-{end}" + (f"@{offset}" if offset is not None else "")
    return Chunk(id=cid, path=doc.path, symbol=symbol, start_line=start,
                 end_line=end, category=doc.category, kind=kind, text=text,
                 content_hash=digest)


# --------------------------------------------------------------------------- bounds

_TERMINATOR = re.compile(r"(?:\r\n|\r|\n)\Z")
# the last whitespace character of a window, and the last character that never joins an
# identifier in the BM25 tokenizer (rag/index/tokenize.py joins letters, digits, _ . / -)
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")
_LAST_SEPARATOR = re.compile(r"[^A-Za-z0-9_./\-](?=[A-Za-z0-9_./\-]*\Z)")


def _check_bounds(max_chunk_chars: int, max_line_chars: int) -> None:
    if not 16 <= max_line_chars <= max_chunk_chars:
        raise ValueError("need 16 <= max_line_chars <= max_chunk_chars, got "
                         f"{max_line_chars}, {max_chunk_chars}")


def split_long_line(line: str, max_chars: int = MAX_LINE_CHARS) -> list[str]:
    """Cut one line into consecutive pieces of at most ``max_chars`` characters.

    The pieces concatenate to ``line``; its terminator (``\\n``, ``\\r\\n`` or ``\\r``) stays
    whole at the end of the last piece. Each cut falls in the second half of its window: after
    the window's last whitespace, else after its last character that cannot be part of an
    identifier (so a word or dotted name is not split when there is any other place to cut),
    else exactly at ``max_chars`` characters.

    Raises:
        ValueError: ``max_chars`` < 16.
    """
    if max_chars < 16:
        raise ValueError(f"need max_chars >= 16, got {max_chars}")
    if len(line) <= max_chars:
        return [line]
    m = _TERMINATOR.search(line)
    term = m.group(0) if m else ""
    body = line[:len(line) - len(term)]
    limit = max_chars - len(term)  # the last piece must still hold the terminator
    pieces: list[str] = []
    pos = 0
    while len(body) - pos > limit:
        lo, hi = pos + limit // 2, pos + limit
        cut = hi
        for pattern in (_LAST_SPACE, _LAST_SEPARATOR):
            found = pattern.search(body, lo, hi)
            if found:
                cut = found.end()
                break
        pieces.append(body[pos:cut])
        pos = cut
    pieces.append(body[pos:] + term)
    return pieces


def bound_chunk(doc: Document, numbered: list[tuple[int, str]], *, symbol: str | None,
                kind: str, max_chunk_chars: int = MAX_CHUNK_CHARS,
                max_line_chars: int = MAX_LINE_CHARS) -> list[Chunk]:
    """The chunk made of ``numbered`` lines, or its bounded parts when it is too big.

    Args:
        doc: the document.
        numbered: (1-based line number, line with its ending) pairs, in order; the numbers need
            not be consecutive (a class chunk leaves out its methods' lines).
        symbol, kind: given to every chunk made.
        max_chunk_chars, max_line_chars: the bounds (see the module docstring).

    Returns:
        ``[]`` for blank text; one chunk, exactly as an unbounded chunker makes it
        (``start_line`` the first number, ``end_line`` the last, the lines joined), when the
        text has at most ``max_chunk_chars`` characters and no line longer than
        ``max_line_chars``; otherwise, in order, a chunk per non-blank piece of every long line
        (:func:`split_long_line`) and the other lines packed greedily into chunks of at most
        ``max_chunk_chars`` characters, cut only at line ends. No returned chunk is longer than
        ``max_chunk_chars`` characters.

    Raises:
        ValueError: bounds outside ``16 <= max_line_chars <= max_chunk_chars``.
    """
    _check_bounds(max_chunk_chars, max_line_chars)
    if not numbered:
        return []
    total = sum(len(line) for _, line in numbered)
    if total <= max_chunk_chars and all(len(line) <= max_line_chars for _, line in numbered):
        text = "".join(line for _, line in numbered)
        if not text.strip():
            return []
        return [make_chunk(doc, symbol=symbol, start=numbered[0][0], end=numbered[-1][0],
                           kind=kind, text=text)]
    out: list[Chunk] = []
    run: list[tuple[int, str]] = []
    size = 0

    def flush() -> None:
        text = "".join(line for _, line in run)
        if text.strip():
            out.append(make_chunk(doc, symbol=symbol, start=run[0][0], end=run[-1][0],
                                  kind=kind, text=text))
        run.clear()

    for number, line in numbered:
        if len(line) > max_line_chars:
            flush()
            size = 0
            offset = 0
            for piece in split_long_line(line, max_line_chars):
                if piece.strip():
                    out.append(make_chunk(doc, symbol=symbol, start=number, end=number,
                                          kind=kind, text=piece, offset=offset))
                offset += len(piece)
            continue
        if run and size + len(line) > max_chunk_chars:
            flush()
            size = 0
        run.append((number, line))
        size += len(line)
    flush()
    return out


# --------------------------------------------------------------------------- Python


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split only on \\n, \\r\\n and \\r (as ``ast`` and editors count
    lines; ``str.splitlines`` also splits on form feeds and U+2028, which shifts line numbers)."""
    return _LINE.findall(text)


def _span(node: ast.AST) -> tuple[int, int]:
    start = node.lineno  # type: ignore[attr-defined]
    for dec in getattr(node, "decorator_list", []):
        start = min(start, dec.lineno)
    return start, node.end_lineno  # type: ignore[attr-defined]


def _numbered(lines: list[str], line_numbers: Iterable[int]) -> list[tuple[int, str]]:
    return [(i, lines[i - 1]) for i in line_numbers]


def _is_overload(node: ast.AST) -> bool:
    """A ``@overload`` / ``@typing.overload`` / ``@t.overload`` signature stub."""
    return any((isinstance(d, ast.Name) and d.id == "overload")
               or (isinstance(d, ast.Attribute) and d.attr == "overload")
               for d in getattr(node, "decorator_list", ()))


def _merge_overloads(body: list[ast.stmt]) -> Iterator[ast.stmt | tuple[str, int, int]]:
    """``body`` with each function as ``(name, start, end)``, its ``@overload`` stubs merged
    into it: stubs and the implementation that directly follows them under one name are one
    span (one symbol, one chunk, so a stub does not outrank the code); stubs with another
    statement between them and the implementation stay a span of their own; other
    statements as they are."""
    pending: tuple[str, int, int] | None = None  # overload stubs waiting for their function
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            s, e = _span(node)
            if pending is not None and pending[0] == node.name:
                s = pending[1]
                pending = None
            elif pending is not None:
                yield pending
                pending = None
            if _is_overload(node):
                pending = (node.name, s, e)
                continue
            yield node.name, s, e
            continue
        if pending is not None:
            yield pending
            pending = None
        yield node
    if pending is not None:
        yield pending


def chunk_python(doc: Document, *, window_lines: int = 60, overlap: int = 10,
                 max_chunk_chars: int = MAX_CHUNK_CHARS,
                 max_line_chars: int = MAX_LINE_CHARS) -> list[Chunk]:
    """Chunk a Python file by symbol.

    One chunk per top-level function, per class (its header, docstring and attributes, i.e.
    the class minus its methods, its nested classes and the blank lines that only separate
    them), per method (``Class.method``, nested classes give ``Outer.Inner.method``), and one
    ``<module>`` chunk with the remaining top-level lines. A function's ``@overload`` stubs
    directly above it are one chunk with it (:func:`_merge_overloads`). Functions nested in functions stay inside their parent. A file that does
    not parse falls back to line windows. Each chunk is bounded by :func:`bound_chunk`, so a
    long symbol or line can give several chunks with the same symbol.
    """
    _check_bounds(max_chunk_chars, max_line_chars)
    try:
        tree = ast.parse(doc.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return chunk_windows(doc, window_lines=window_lines, overlap=overlap,
                             max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars)
    lines = split_lines(doc.text)
    chunks: list[Chunk] = []
    covered: set[int] = set()

    def add(symbol: str, kind: str, line_numbers: Iterable[int]) -> None:
        chunks.extend(bound_chunk(doc, _numbered(lines, line_numbers), symbol=symbol, kind=kind,
                                  max_chunk_chars=max_chunk_chars,
                                  max_line_chars=max_line_chars))

    def visit_class(node: ast.ClassDef, prefix: str) -> None:
        qual = f"{prefix}{node.name}"
        start, end = _span(node)
        inner: set[int] = set()
        for child in _merge_overloads(node.body):
            if isinstance(child, tuple):
                name, cs, ce = child
                add(f"{qual}.{name}", "method", range(cs, ce + 1))
                inner.update(range(cs, ce + 1))
            elif isinstance(child, ast.ClassDef):
                cs, ce = _span(child)
                visit_class(child, f"{qual}.")
                inner.update(range(cs, ce + 1))
        own = [i for i in range(start, end + 1) if i not in inner]
        # blank lines that only separate methods are not the class's: its chunk's span ends at
        # its own last line, not at the blank line before its last method
        keep, nxt = [], None  # nxt: whether the next non-blank line after i is the class's own
        for i in reversed(own):
            if lines[i - 1].strip():
                keep.append(i)
                nxt = True
            elif nxt and (i + 1) not in inner:
                keep.append(i)
            else:
                nxt = False
        add(qual, "class", keep[::-1])

    for node in _merge_overloads(tree.body):
        if isinstance(node, tuple):
            name, s, e = node
            add(name, "function", range(s, e + 1))
            covered.update(range(s, e + 1))
        elif isinstance(node, ast.ClassDef):
            s, e = _span(node)
            visit_class(node, "")
            covered.update(range(s, e + 1))
    rest = [i for i in range(1, len(lines) + 1) if i not in covered and lines[i - 1].strip()]
    add(MODULE_SYMBOL, "module", rest)
    chunks.sort(key=lambda c: (c.start_line, c.end_line))
    return chunks


# --------------------------------------------------------------------------- other languages


def _pack(doc: Document, numbered: list[tuple[int, str]], breaks: frozenset[int], *,
          symbol: str, kind: str, max_lines: int | None, max_chunk_chars: int,
          max_line_chars: int) -> list[Chunk]:
    """:func:`bound_chunk` of ``numbered``, cut first at ``breaks`` when it is too big.

    Within ``max_chunk_chars`` characters (and ``max_lines`` lines, when given) this is
    exactly :func:`bound_chunk`. Otherwise the lines are cut into segments before every line
    number in ``breaks`` (a member or statement starts there), a segment of more than
    ``max_lines`` lines into pieces of ``max_lines``, and consecutive segments are packed
    greedily into parts within both limits; each part goes through :func:`bound_chunk`.
    """
    size = sum(len(line) for _, line in numbered)
    if size <= max_chunk_chars and (max_lines is None or len(numbered) <= max_lines):
        return bound_chunk(doc, numbered, symbol=symbol, kind=kind,
                           max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars)
    segments: list[list[tuple[int, str]]] = []
    for number, line in numbered:
        if not segments or number in breaks or (max_lines and len(segments[-1]) >= max_lines):
            segments.append([])
        segments[-1].append((number, line))
    parts: list[list[tuple[int, str]]] = [[]]
    size = 0
    for seg in segments:
        seg_size = sum(len(line) for _, line in seg)
        if parts[-1] and (size + seg_size > max_chunk_chars
                          or (max_lines and len(parts[-1]) + len(seg) > max_lines)):
            parts.append([])
            size = 0
        parts[-1].extend(seg)
        size += seg_size
    return [c for part in parts
            for c in bound_chunk(doc, part, symbol=symbol, kind=kind,
                                 max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars)]


def chunk_code(doc: Document, *, window_lines: int = 60, overlap: int = 10,
               max_chunk_chars: int = MAX_CHUNK_CHARS,
               max_line_chars: int = MAX_LINE_CHARS) -> list[Chunk]:
    """Chunk a source file of a :data:`rag.corpus.languages.LANGUAGES` language by symbol.

    The symbols and their names are :func:`rag.corpus.languages.outline`'s, as for Python:
    one chunk per top-level function, per class-like declaration (minus its methods and
    nested types), per method, and ``<module>`` chunks for the remaining non-blank lines.
    A part too big for one chunk is cut where a member or statement starts
    (:func:`_pack`); ``<module>`` lines are also cut into parts of at most ``window_lines``
    lines (a test file of ``describe(...)`` calls is all module code). Every chunk is bounded
    by :func:`bound_chunk`. A file of another suffix, one whose tree has errors and no
    symbol (none found by the grammar nor recovered from the text), or a minified one, falls
    back to :func:`chunk_windows`.
    """
    _check_bounds(max_chunk_chars, max_line_chars)
    spec = language_for(doc.path)
    lines = split_lines(doc.text)
    found = outline(doc.text, lines, spec, max_line_chars=max_line_chars) if spec else None
    if found is None:
        return chunk_windows(doc, window_lines=window_lines, overlap=overlap,
                             max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars)
    chunks: list[Chunk] = []
    for part in found.parts:
        chunks.extend(_pack(doc, _numbered(lines, part.lines), part.breaks, symbol=part.symbol,
                            kind=part.kind,
                            max_lines=window_lines if part.kind == "module" else None,
                            max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars))
    chunks.sort(key=lambda c: (c.start_line, c.end_line))
    return chunks


# --------------------------------------------------------------------------- Markdown / reST

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
#: a link target: MyST ``(name)=``, reST ``.. _name:``
_LINK_TARGET = re.compile(r"^\s*(\([^\s()]+\)=|\.\. _[^:\s][^:]*:)\s*$")
#: a line beside link targets that holds no text: blank or a one-line HTML comment
_NO_TEXT = re.compile(r"^\s*(<!--.*-->)?\s*$")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`*+#:.<>_])\1{2,}\s*$")


def _section_starts_markdown(lines: list[str], max_title: int) -> list[tuple[int, str]]:
    starts: list[tuple[int, str]] = []
    fence: str | None = None  # the opening fence run, e.g. "```" or "~~~~"
    for i, line in enumerate(lines):
        m_fence = _MD_FENCE.match(line)
        if m_fence:
            run = m_fence.group(1)
            if fence is None:
                fence = run
            elif run[0] == fence[0] and len(run) >= len(fence) and not line.strip()[len(run):]:
                fence = None  # CommonMark: closed only by the same character, at least as long
            continue
        # a line too long to be one chunk is text, never a title (every chunk of a section
        # repeats its title in the indexed header)
        m = None if fence or len(line) > max_title else _MD_HEADING.match(line)
        if m:
            starts.append((i, m.group(2).strip()))
    return starts


def _section_starts_rst(lines: list[str], max_title: int) -> list[tuple[int, str]]:
    starts = []
    i = 0
    while i < len(lines) - 1:
        title, under = lines[i].rstrip("\n"), lines[i + 1].rstrip("\n")
        if title.strip() and len(lines[i]) <= max_title and not _RST_ADORNMENT.match(title) \
                and _RST_ADORNMENT.match(under) \
                and len(under.strip()) >= len(title.strip()) and not title.startswith(" "):
            has_over = i > 0 and _RST_ADORNMENT.match(lines[i - 1].rstrip("\n") or "")
            starts.append((i - 1 if has_over else i, title.strip()))
            i += 2
            continue
        i += 1
    return starts


def chunk_sections(doc: Document, *, rst: bool, window_lines: int = 60,
                   overlap: int = 10, max_chunk_chars: int = MAX_CHUNK_CHARS,
                   max_line_chars: int = MAX_LINE_CHARS) -> list[Chunk]:
    """Chunk Markdown (ATX ``#`` headings) or reST (underlined titles) by section.

    The symbol is the section title; text before the first heading becomes a chunk whose
    symbol is None, unless it is link targets (MyST ``(name)=``, reST ``.. _name:``) with
    only blank lines or one-line HTML comments beside them: then it opens the first section. A file with no heading falls back to line windows. Each section is
    bounded by :func:`bound_chunk` (a giant paragraph gives several chunks of its section).
    """
    _check_bounds(max_chunk_chars, max_line_chars)
    lines = split_lines(doc.text)
    starts = (_section_starts_rst(lines, max_line_chars) if rst
              else _section_starts_markdown(lines, max_line_chars))
    if not starts:
        return chunk_windows(doc, window_lines=window_lines, overlap=overlap,
                             max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars)
    bounds: list[tuple[int, int, str | None]] = []
    head = lines[:starts[0][0]]
    if any(_LINK_TARGET.match(ln) for ln in head) and all(
            _LINK_TARGET.match(ln) or _NO_TEXT.match(ln) for ln in head):
        # a preamble of link targets ("(options)=", ".. _options:") names the first section:
        # it opens it instead of being a chunk that holds no text
        starts[0] = (0, starts[0][1])
    if starts[0][0] > 0:
        bounds.append((0, starts[0][0], None))
    for n, (s, title) in enumerate(starts):
        e = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        bounds.append((s, e, title))
    out = []
    for s, e, title in bounds:
        out.extend(bound_chunk(doc, _numbered(lines, range(s + 1, e + 1)), symbol=title,
                               kind="section", max_chunk_chars=max_chunk_chars,
                               max_line_chars=max_line_chars))
    return out


# --------------------------------------------------------------------------- windows


def chunk_windows(doc: Document, *, window_lines: int = 60, overlap: int = 10,
                  max_chunk_chars: int = MAX_CHUNK_CHARS,
                  max_line_chars: int = MAX_LINE_CHARS) -> list[Chunk]:
    """Fixed windows of ``window_lines`` lines, consecutive windows sharing ``overlap`` lines.

    A line longer than ``max_line_chars`` is never inside a window: it is cut into piece
    chunks of its own (:func:`split_long_line`), and the lines between long lines are windowed
    as if each stretch were a file of its own (its first window starts at its first line).
    A window longer than ``max_chunk_chars`` characters is split at line ends
    (:func:`bound_chunk`); a chunk id that an overlapping window already produced is not
    repeated.

    Raises:
        ValueError: ``overlap`` is not smaller than ``window_lines``, or bounds outside
            ``16 <= max_line_chars <= max_chunk_chars``.
    """
    if not 0 <= overlap < window_lines:
        raise ValueError(f"need 0 <= overlap < window_lines, got {overlap}, {window_lines}")
    _check_bounds(max_chunk_chars, max_line_chars)
    lines = split_lines(doc.text)
    out: list[Chunk] = []
    seen: set[str] = set()

    def emit(chunks: list[Chunk]) -> None:
        for c in chunks:
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)

    def window(first: int, last: int) -> None:  # 0-based line indices, last exclusive
        step = window_lines - overlap
        for s in range(first, last, step):
            e = min(s + window_lines, last)
            emit(bound_chunk(doc, _numbered(lines, range(s + 1, e + 1)), symbol=None,
                             kind="window", max_chunk_chars=max_chunk_chars,
                             max_line_chars=max_line_chars))
            if e >= last:
                break

    stretch = 0  # first line of the current stretch of ordinary lines
    for i, line in enumerate(lines):
        if len(line) > max_line_chars:
            window(stretch, i)
            emit(bound_chunk(doc, [(i + 1, line)], symbol=None, kind="window",
                             max_chunk_chars=max_chunk_chars, max_line_chars=max_line_chars))
            stretch = i + 1
    window(stretch, len(lines))
    return out


#: ``corpus.chunker``: ``symbol`` (the dispatch of :func:`chunk_document`) or ``window`` (every
#: file in line windows, :func:`chunk_windows`).
CHUNKERS = ("symbol", "window")


def chunk_document(doc: Document, *, window_lines: int = 60, overlap: int = 10,
                   max_chunk_chars: int = MAX_CHUNK_CHARS,
                   max_line_chars: int = MAX_LINE_CHARS, chunker: str = "symbol") -> list[Chunk]:
    """Dispatch on the file suffix: ``.py``/``.pyi`` by symbol (``ast``), the suffixes of
    :data:`rag.corpus.languages.LANGUAGES` by symbol (tree-sitter), ``.md``/``.rst`` by section,
    anything else by windows. With ``chunker="window"`` every file (code, documentation,
    issues) is cut into windows of ``window_lines`` lines sharing ``overlap`` lines.

    Every path bounds its chunks (``max_chunk_chars``, ``max_line_chars``: see
    :func:`bound_chunk`).

    Raises:
        ValueError: an unknown ``chunker`` (:data:`CHUNKERS`).
    """
    name = doc.path.lower()
    opts = dict(window_lines=window_lines, overlap=overlap, max_chunk_chars=max_chunk_chars,
                max_line_chars=max_line_chars)
    if chunker not in CHUNKERS:
        raise ValueError(f"chunker must be one of {list(CHUNKERS)}, got {chunker!r}")
    if chunker == "window":
        return chunk_windows(doc, **opts)
    if doc.category in ("issue", "pull_request"):  # title heading + body, Markdown
        return chunk_sections(doc, rst=False, **opts)
    if name.endswith((".py", ".pyi")):
        return chunk_python(doc, **opts)
    if name.endswith((".md", ".markdown")):
        return chunk_sections(doc, rst=False, **opts)
    if name.endswith(".rst"):
        return chunk_sections(doc, rst=True, **opts)
    if language_for(name) is not None:
        return chunk_code(doc, **opts)
    return chunk_windows(doc, **opts)


def chunk_documents(docs: Iterable[Document], *, window_lines: int = 60, overlap: int = 10,
                    max_chunk_chars: int = MAX_CHUNK_CHARS,
                    max_line_chars: int = MAX_LINE_CHARS,
                    chunker: str = "symbol") -> Iterator[Chunk]:
    """Chunk every document in order (see :func:`chunk_document`)."""
    for doc in docs:
        yield from chunk_document(doc, window_lines=window_lines, overlap=overlap,
                                  max_chunk_chars=max_chunk_chars,
                                  max_line_chars=max_line_chars, chunker=chunker)
