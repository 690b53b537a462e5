"""``rag golden mine --from docstrings``: a docstring's or doc comment's summary as the query,
the symbol it documents as the label (its own documentation masked when leakage is measured);
see rag/golden/mining.py's docstring.

Python docstrings are read with ``ast``; every other language the chunker names symbols in
keeps its documentation in the comment lines the chunker attaches to the symbol's chunk
(rag/corpus/languages.py: "A symbol's lines start at the comments ... directly above it"),
read here by :func:`doc_comment`: Go's ``//`` comments (https://go.dev/doc/comment), JSDoc
and TSDoc ``/** */``, Javadoc, KDoc, Scaladoc and PHPDoc ``/** */`` (block tags from the
first ``@tag`` on dropped, ``{@link X}`` read as ``X``), Rust and Swift ``///``, C#'s XML
documentation (the ``<summary>``), Doxygen ``///``/``/**``/``//!``/``/*!`` in C and C++, and
RDoc/YARD ``#`` comments in Ruby and ``#`` comments above a shell function."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from rag.golden.mining import MineResult, MiningError, WORD, chunks_of, leakage, mask_docstrings, safe_id, walk_documents

#: ``rag golden mine --from docstrings``
SOURCE = "docstrings"
#: the tag its candidates carry
TAG = "mined_docstring"
#: what ``examined`` counts
NOUN = "documented symbols"
#: every skip reason (each counted, 0 too)
SKIPS = ("short_summary", "duplicate_summary", "over_max")
SYMBOL_KINDS = frozenset({"function", "class", "method"})

#: language -> the comment markers its documentation is written with (a line marker, or a
#: block opener): the conventions named in this module's docstring
DOC_SYNTAX: dict[str, tuple[str, ...]] = {
    "go": ("//", "/*"),
    "rust": ("///", "/**"),
    "csharp": ("///", "/**"),
    "swift": ("///", "/**"),
    "c": ("///", "//!", "/**", "/*!"),
    "cpp": ("///", "//!", "/**", "/*!"),
    **dict.fromkeys(("typescript", "javascript", "java", "kotlin", "scala", "php"), ("/**",)),
    "ruby": ("#",),
    "shell": ("#",),
    # module attributes, not comments: @doc "..." / @doc """ heredoc """, @moduledoc
    "elixir": ("@doc", "@moduledoc", "@typedoc"),
    # LuaDoc / EmmyLua (--- first, then -- lines); Haddock (-- | first, then -- lines)
    "lua": ("---", "--"),
    "haskell": ("-- |", "--"),
    "zig": ("///",),
}
_ELIXIR_HEAD = re.compile(r"^\s*(defmodule|defprotocol|defimpl)\b")
_ELIXIR_ATTR = re.compile(r'^\s*@(doc|moduledoc|typedoc)\s+(?:~[sS])?("""|\'\'\'|"(.*)")\s*$')
_ELIXIR_PASS = re.compile(r"^\s*@(spec|impl|deprecated|since)\b")


def elixir_doc(text: str) -> tuple[str, int] | None:
    """The ``@doc`` / ``@moduledoc`` / ``@typedoc`` string at the top of an Elixir symbol chunk
    (above a ``def``, or just inside a ``defmodule``/``defimpl``/``defprotocol`` line), and
    how many lines of ``text`` it spans; None without one (``@doc false`` is none). Reads a
    one-line string (``@doc "Runs it."``) or a heredoc (between two lines of three double
    quotes, also ``~S``), its lines dedented; ``@spec``/``@impl`` lines above it are passed
    over."""
    from rag.corpus.chunk import split_lines

    lines = [ln.rstrip("\r\n") for ln in split_lines(text)]
    n = 1 if lines and _ELIXIR_HEAD.match(lines[0]) else 0
    while n < len(lines) and _ELIXIR_PASS.match(lines[n]):
        n += 1
    m = _ELIXIR_ATTR.match(lines[n]) if n < len(lines) else None
    if m is None:
        return None
    if m.group(3) is not None:  # one line
        return (m.group(3).replace('\\"', '"'), n + 1) if m.group(3).strip() else None
    quote, body, end = m.group(2), [], n + 1
    while end < len(lines) and lines[end].strip() != quote:
        body.append(lines[end])
        end += 1
    if end == len(lines):
        return None
    indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
    doc = "\n".join(b[indent:] for b in body).strip()
    return (doc, end + 1) if doc else None
_ATTRIBUTE = re.compile(r"^\s*(@[A-Za-z_][\w.]*(\(.*\))?\s*$|#\[.*\]\s*$|"
                        r"\[[A-Z][\w.]*(\(.*\))?\]\s*$)")
_DIRECTIVE = re.compile(r"(go:|nolint|shellcheck|\+build|-\*-|frozen_string_literal|encoding:|"
                        r"rubocop:|typed:)")
_INLINE_TAG = re.compile(r"\{@(?:link|linkplain|code|literal|see)\s+([^}\s]+)[^}]*\}")
_XML_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.S | re.I)
_XML_REF = re.compile(r"<(?:see|seealso|paramref|typeparamref)\s+(?:cref|name|langword)=\"([^\"]+)\"\s*/>", re.I)
_XML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
# Markdown and intra-doc links (Rust, KDoc, Swift): [text](url), [text][ref], [Name]
_MD_LINK = re.compile(r"\[([^\]\n]+)\](?:\([^)\s]*\)|\[[^\]\n]*\])?")


_RST_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`")


def docstring_summary(doc: str) -> str:
    """The summary of a cleaned docstring: the first sentence (up to ``.``, ``!`` or ``?``
    followed by a space) of its first paragraph, lines joined by single spaces, reST markup
    read as text (``:func:`x``` and ``:py:class:`~a.B``` as their target, double backticks
    dropped)."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    joined = " ".join(para.split())
    joined = _RST_ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~")
                           else m.group(1), joined).replace("``", "")
    m = re.match(r"(.+?[.!?])(?=\s)", joined)
    return m.group(1) if m else joined


def doc_comment(text: str, language: str) -> tuple[str, int] | None:
    """The documentation at the top of a non-Python symbol chunk's ``text``, cleaned, and
    how many lines of ``text`` it spans; None when the chunk starts with no doc comment.

    ``language``: a :class:`~rag.corpus.languages.LanguageSpec` name. Read: ``//`` and
    ``///`` line comments, ``/** */`` and ``/*! */`` blocks (the leading ``*`` of each line
    dropped), ``#`` line comments (Ruby, shell: not ``#!`` nor a Rust ``#[attribute]``),
    ``---``/``--`` (Lua) and ``-- |``/``--`` (Haskell's Haddock) line comments, Zig's ``///``;
    attribute and annotation lines between the comment and the declaration are passed over.
    Cleaned: comment markers; C# XML documentation reduced to its ``<summary>`` (``<see
    cref="X"/>`` read as ``X``); Javadoc-style block tags from the first ``@tag`` line on;
    ``{@link X}`` as ``X``; Markdown backticks and links (``[text](url)``, ``[Name]``). A Go comment of only a directive
    (``//go:generate``, ``//nolint``) or a shell ``shellcheck`` line is no documentation.
    """
    from rag.corpus.chunk import split_lines

    if language == "elixir":
        return elixir_doc(text)
    markers = DOC_SYNTAX.get(language, ())
    blocks = tuple(m for m in markers if m.startswith("/*"))
    line_markers = sorted((m for m in markers if not m.startswith("/*")), key=len, reverse=True)
    lines = split_lines(text)
    body: list[str] = []
    n = 0
    while n < len(lines):
        line = lines[n].rstrip("\r\n")
        head = line.lstrip()
        block = next((m for m in blocks if head.startswith(m)), None)
        if block and not head.startswith(("/**/", "/***")):
            first = head[len(block):]
            if "*/" in first:
                part, end = [first[:first.index("*/")]], n
            else:
                part, end = [first], n + 1
                while end < len(lines) and "*/" not in lines[end]:
                    part.append(lines[end].rstrip("\r\n"))
                    end += 1
                if end == len(lines):
                    return None
                last = lines[end].rstrip("\r\n")
                part.append(last[:last.index("*/")])
            body.extend(re.sub(r"^\s*\*(?!/)\s?", "", b) for b in part)
            n = end + 1
            continue
        marker = next((m for m in line_markers if head.startswith(m)), None)
        if marker and not (marker == "//" and head.startswith(("///", "//!")) and language != "go") \
                and not (marker == "#" and head.startswith(("#!", "#["))):
            rest = head[len(marker):]
            rest = rest[1:] if rest.startswith(" ") else rest
            if not _DIRECTIVE.match(rest.strip()):
                body.append(rest)
            n += 1
            continue
        if _ATTRIBUTE.match(line):
            n += 1
            continue
        break
    if not body:
        return None
    doc = "\n".join(body)
    summary = _XML_SUMMARY.search(doc)
    if summary:
        doc = summary.group(1)
    elif "<summary" in doc.lower():
        return None
    doc = _XML_REF.sub(r"\1", doc)
    doc = _XML_TAG.sub("", doc)
    kept = []
    for ln in doc.split("\n"):
        if re.match(r"\s*@[a-zA-Z]+", ln) or re.match(r"\s*#\s+(Examples?|Panics|Errors|"
                                                        r"Safety|Arguments)\b", ln):
            break
        kept.append(ln)
    doc = _INLINE_TAG.sub(r"\1", "\n".join(kept)).replace("`", "")
    doc = _MD_LINK.sub(r"\1", doc)
    doc = doc.strip()
    return (doc, n) if doc else None


def _documented_symbols(tree: ast.Module) -> list[tuple[str, str, str]]:
    """(symbol, kind, docstring) of every definition the Python chunker makes a chunk of."""
    out: list[tuple[str, str, str]] = []

    def visit_class(node: ast.ClassDef, prefix: str) -> None:
        qual = f"{prefix}{node.name}"
        doc = ast.get_docstring(node)
        if doc:
            out.append((qual, "class", doc))
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(child)
                if d:
                    out.append((f"{qual}.{child.name}", "method", d))
            elif isinstance(child, ast.ClassDef):
                visit_class(child, f"{qual}.")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(node)
            if d:
                out.append((node.name, "function", d))
        elif isinstance(node, ast.ClassDef):
            visit_class(node, "")
    return out


def mine_docstrings(root: Path, *, max_candidates: int | None = 200, min_words: int = 3,
                    keep_tests: bool = False, max_file_bytes: int = 1_000_000,
                    exclude: list[str] | None = None,
                    include: list[str] | None = None,
                    known: Callable[[str], str | None] | None = None) -> MineResult:
    """Candidates from the docstrings of the corpus's Python files and the doc comments of
    its files in the other languages of :data:`DOC_SYNTAX` (module docstring). Source files
    in a language with no reader here are named in ``MineResult.warnings``. Test files (the
    walker's ``test`` category) are left out unless ``keep_tests``. ``known``: a symbol whose
    source (``mined:docstring <path>#<symbol>``) an earlier review decided is skipped under
    the reason it returns, before ``max_candidates`` samples (rag/golden/miners/__init__.py)."""
    from rag.corpus.chunk import split_lines
    from rag.corpus.languages import language_name
    from rag.corpus.walk import SOURCE_SUFFIXES

    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    docs = walk_documents(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    skipped: Counter = Counter({r: 0 for r in SKIPS})
    found: list[dict[str, Any]] = []
    examined = 0
    unread: Counter = Counter()
    for path, doc in docs.items():
        if doc.category == "test" and not keep_tests:
            continue
        lang = language_name(path)
        if lang in DOC_SYNTAX:
            firsts: dict[str, Any] = {}
            for c in chunks_of(path, doc.text):
                if c.kind in SYMBOL_KINDS and c.symbol and c.symbol not in firsts:
                    firsts[c.symbol] = c
            for symbol, c in firsts.items():
                got = doc_comment(c.text, lang)
                if got is None:
                    continue
                examined += 1
                text, n_doc = got
                summary = docstring_summary(text)
                if len(WORD.findall(summary)) < min_words:
                    skipped["short_summary"] += 1
                    continue
                masked = "".join(split_lines(c.text)[n_doc:])
                found.append({"path": path, "symbol": symbol, "kind": c.kind, "query": summary,
                              "category": doc.category, "leakage": leakage(summary, c.text),
                              "leakage_masked": leakage(summary, masked)})
            continue
        if lang != "python":
            if lang is None and _suffix_of(path).lower() in SOURCE_SUFFIXES:
                unread[_suffix_of(path)] += 1
            continue
        try:
            tree = ast.parse(doc.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        syms = _documented_symbols(tree)
        if not syms:
            continue
        chunks = chunks_of(path, doc.text)
        masked_chunks = chunks_of(path, mask_docstrings(doc.text, "python"))
        for symbol, kind, text in syms:
            examined += 1
            summary = docstring_summary(text)
            if len(WORD.findall(summary)) < min_words:
                skipped["short_summary"] += 1
                continue
            body = "".join(c.text for c in chunks if c.symbol == symbol)
            masked = "".join(c.text for c in masked_chunks if c.symbol == symbol)
            if not body:  # not a chunk of its own (the chunker and this walk disagree)
                continue
            found.append({"path": path, "symbol": symbol, "kind": kind, "query": summary,
                          "category": doc.category,
                          "leakage": leakage(summary, body),
                          "leakage_masked": leakage(summary, masked)})
    counts = Counter(" ".join(f["query"].lower().split()) for f in found)
    unique = []
    for f in found:
        if counts[" ".join(f["query"].lower().split())] > 1:
            skipped["duplicate_summary"] += 1
        elif known is not None and (reason := known(source_of(f["path"], f["symbol"]))):
            skipped[reason] += 1
        else:
            unique.append(f)
    if max_candidates is not None and len(unique) > max_candidates:
        step = len(unique) / max_candidates
        keep = [unique[int(i * step)] for i in range(max_candidates)]
        skipped["over_max"] += len(unique) - len(keep)
        unique = keep
    seen_ids: set[str] = set()
    candidates = [{
        "id": safe_id("doc", f"{f['path']}-{f['symbol']}", seen_ids),
        "query": f["query"],
        "source": source_of(f["path"], f["symbol"]),
        "tags": [TAG],
        "types": [f["category"]],
        "relevant": [{"path": f["path"], "symbol": f["symbol"]}],
        "note": (f"{f['kind']} {'docstring' if f['path'].endswith(('.py', '.pyi')) else 'doc comment'} summary; {int(round(100 * f['leakage']))}% of its "
                 f"tokens are in the chunk, {int(round(100 * f['leakage_masked']))}% with "
                 "docstrings masked"),
        "kind": f["kind"],
        "leakage": f["leakage"],
        "leakage_masked": f["leakage_masked"],
    } for f in unique]
    warnings = []
    if unread:
        warnings.append("no docstrings read from " + ", ".join(
            f"{n} {suffix} file(s)" for suffix, n in sorted(unread.items(), key=lambda kv: -kv[1]))
            + ": no doc-comment reader for that language (rag/golden/miners/docstrings.py)")
    return MineResult("docstrings", candidates, skipped, examined, warnings=warnings)


def source_of(path: str, symbol: str) -> str:
    """A docstring candidate's ``source``: ``mined:docstring <path>#<symbol>`` (the symbol it
    documents names it alone, as a commit names a git candidate)."""
    return f"mined:docstring {path}#{symbol}"


def _suffix_of(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[name.rfind("."):] if "." in name[1:] else name


def from_args(args, *, root: Path, max_candidates: int | None, walk: dict,
              known: Callable[[str], str | None] | None = None) -> MineResult:
    """Run this miner with ``rag golden mine``'s parsed options (``walk``: the walker's
    ``max_file_bytes`` / ``exclude`` / ``include``; ``known``: see :func:`mine_docstrings`)."""
    return mine_docstrings(root, max_candidates=max_candidates, min_words=args.min_words,
                           keep_tests=args.keep_tests, known=known, **walk)
