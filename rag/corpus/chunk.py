"""Chunkers: Python by symbol (``ast``), Markdown and reST by section, other text by line windows.

A :class:`Chunk` is the unit that is indexed and returned. Its ``content_hash`` is the
SHA-256 of :attr:`Chunk.indexed_text` (a ``path: symbol`` header plus the body), which is
what both channels see, so the embedding cache can be keyed on it.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from rag.corpus.walk import Document

CHUNKER_VERSION = "1"


@dataclass(frozen=True)
class Chunk:
    """One indexed unit.

    Attributes:
        id: stable id ``path:start_line-end_line`` (unique within a corpus).
        path: corpus-relative POSIX path.
        symbol: qualified Python symbol (``Flask.make_response``), ``<module>`` for a module's
            remaining top-level code, a section title for Markdown/reST, or None for windows.
        start_line, end_line: 1-based, inclusive.
        category: the document's category.
        kind: function | class | method | module | section | window.
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
               text: str) -> Chunk:
    """Build a chunk of ``doc`` and compute its id and content hash."""
    digest = hashlib.sha256((_header(doc.path, symbol) + text).encode("utf-8")).hexdigest()
    return Chunk(id=f"{doc.path}:{start}-{end}", path=doc.path, symbol=symbol, start_line=start,
                 end_line=end, category=doc.category, kind=kind, text=text,
                 content_hash=digest)


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


def _lines_text(lines: list[str], line_numbers: Iterable[int]) -> str:
    return "".join(lines[i - 1] for i in line_numbers)


def chunk_python(doc: Document, *, window_lines: int = 60, overlap: int = 10) -> list[Chunk]:
    """Chunk a Python file by symbol.

    One chunk per top-level function, per class (its header, docstring and attributes, i.e.
    the class minus its methods and nested classes), per method (``Class.method``, nested
    classes give ``Outer.Inner.method``), and one ``<module>`` chunk with the remaining
    top-level lines. Functions nested in functions stay inside their parent. A file that does
    not parse falls back to line windows.
    """
    try:
        tree = ast.parse(doc.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return chunk_windows(doc, window_lines=window_lines, overlap=overlap)
    lines = split_lines(doc.text)
    chunks: list[Chunk] = []
    covered: set[int] = set()

    def visit_class(node: ast.ClassDef, prefix: str) -> None:
        qual = f"{prefix}{node.name}"
        start, end = _span(node)
        inner: set[int] = set()
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cs, ce = _span(child)
                chunks.append(make_chunk(doc, symbol=f"{qual}.{child.name}", start=cs, end=ce,
                                         kind="method",
                                         text=_lines_text(lines, range(cs, ce + 1))))
                inner.update(range(cs, ce + 1))
            elif isinstance(child, ast.ClassDef):
                cs, ce = _span(child)
                visit_class(child, f"{qual}.")
                inner.update(range(cs, ce + 1))
        own = [i for i in range(start, end + 1) if i not in inner]
        text = _lines_text(lines, own)
        if text.strip():
            chunks.append(make_chunk(doc, symbol=qual, start=own[0], end=own[-1], kind="class",
                                     text=text))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            s, e = _span(node)
            chunks.append(make_chunk(doc, symbol=node.name, start=s, end=e, kind="function",
                                     text=_lines_text(lines, range(s, e + 1))))
            covered.update(range(s, e + 1))
        elif isinstance(node, ast.ClassDef):
            s, e = _span(node)
            visit_class(node, "")
            covered.update(range(s, e + 1))
    rest = [i for i in range(1, len(lines) + 1) if i not in covered and lines[i - 1].strip()]
    if rest:
        chunks.append(make_chunk(doc, symbol="<module>", start=rest[0], end=rest[-1],
                                 kind="module", text=_lines_text(lines, rest)))
    chunks.sort(key=lambda c: (c.start_line, c.end_line))
    return chunks


# --------------------------------------------------------------------------- Markdown / reST

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`*+#:.<>_])\1{2,}\s*$")


def _section_starts_markdown(lines: list[str]) -> list[tuple[int, str]]:
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
        m = None if fence else _MD_HEADING.match(line)
        if m:
            starts.append((i, m.group(2).strip()))
    return starts


def _section_starts_rst(lines: list[str]) -> list[tuple[int, str]]:
    starts = []
    i = 0
    while i < len(lines) - 1:
        title, under = lines[i].rstrip("\n"), lines[i + 1].rstrip("\n")
        if title.strip() and not _RST_ADORNMENT.match(title) and _RST_ADORNMENT.match(under) \
                and len(under.strip()) >= len(title.strip()) and not title.startswith(" "):
            has_over = i > 0 and _RST_ADORNMENT.match(lines[i - 1].rstrip("\n") or "")
            starts.append((i - 1 if has_over else i, title.strip()))
            i += 2
            continue
        i += 1
    return starts


def chunk_sections(doc: Document, *, rst: bool, window_lines: int = 60,
                   overlap: int = 10) -> list[Chunk]:
    """Chunk Markdown (ATX ``#`` headings) or reST (underlined titles) by section.

    The symbol is the section title; text before the first heading becomes a chunk whose
    symbol is None. A file with no heading falls back to line windows.
    """
    lines = split_lines(doc.text)
    starts = _section_starts_rst(lines) if rst else _section_starts_markdown(lines)
    if not starts:
        return chunk_windows(doc, window_lines=window_lines, overlap=overlap)
    bounds: list[tuple[int, int, str | None]] = []
    if starts[0][0] > 0:
        bounds.append((0, starts[0][0], None))
    for n, (s, title) in enumerate(starts):
        e = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        bounds.append((s, e, title))
    out = []
    for s, e, title in bounds:
        text = "".join(lines[s:e])
        if text.strip():
            out.append(make_chunk(doc, symbol=title, start=s + 1, end=e, kind="section", text=text))
    return out


# --------------------------------------------------------------------------- windows


def chunk_windows(doc: Document, *, window_lines: int = 60, overlap: int = 10) -> list[Chunk]:
    """Fixed windows of ``window_lines`` lines, consecutive windows sharing ``overlap`` lines.

    Raises:
        ValueError: ``overlap`` is not smaller than ``window_lines``.
    """
    if not 0 <= overlap < window_lines:
        raise ValueError(f"need 0 <= overlap < window_lines, got {overlap}, {window_lines}")
    lines = split_lines(doc.text)
    out, step = [], window_lines - overlap
    for s in range(0, max(len(lines), 1), step):
        e = min(s + window_lines, len(lines))
        text = "".join(lines[s:e])
        if text.strip():
            out.append(make_chunk(doc, symbol=None, start=s + 1, end=e, kind="window", text=text))
        if e >= len(lines):
            break
    return out


def chunk_document(doc: Document, *, window_lines: int = 60, overlap: int = 10) -> list[Chunk]:
    """Dispatch on the file suffix: ``.py``/``.pyi`` by symbol, ``.md``/``.rst`` by section."""
    name = doc.path.lower()
    if doc.category in ("issue", "pull_request"):  # title heading + body, Markdown
        return chunk_sections(doc, rst=False, window_lines=window_lines, overlap=overlap)
    if name.endswith((".py", ".pyi")):
        return chunk_python(doc, window_lines=window_lines, overlap=overlap)
    if name.endswith((".md", ".markdown")):
        return chunk_sections(doc, rst=False, window_lines=window_lines, overlap=overlap)
    if name.endswith(".rst"):
        return chunk_sections(doc, rst=True, window_lines=window_lines, overlap=overlap)
    return chunk_windows(doc, window_lines=window_lines, overlap=overlap)


def chunk_documents(docs: Iterable[Document], *, window_lines: int = 60,
                    overlap: int = 10) -> Iterator[Chunk]:
    """Chunk every document in order."""
    for doc in docs:
        yield from chunk_document(doc, window_lines=window_lines, overlap=overlap)
