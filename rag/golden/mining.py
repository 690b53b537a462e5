"""``rag golden mine``: candidate queries with candidate labels, mined from a repository's own
history, docstrings or GitHub issues — for a person to review, never a golden set.

::

    rag golden mine --from git        --path DIR [--at REV] [--with-body] [--max N] [--out FILE]
    rag golden mine --from docstrings --path DIR [--max N] [--out FILE]
    rag golden mine --from github     --path DIR --export prs.json [--export issues.json] ...

The output is a *candidates file*, by default ``<--golden DIR, else the current
directory>/candidates-<source>.yaml``; ``queries.yaml`` and ``negatives.yaml`` are refused as
outputs. Its format is kept close to ``queries.yaml`` (golden/README.md) so that a reviewer
can move an entry over by copying ``id``, ``query``, ``tags``, ``types``, ``relevant``,
``note`` and ``source`` (a query's provenance in queries.yaml) and dropping the per-source
keys (:data:`PER_SOURCE_KEYS`; ``rag golden review`` drops them when its first ``y`` moves
a candidate)::

    # Candidates mined by `rag golden mine --from git`: NOT a golden set. ...
    # examined 57 commits: 18 candidates; skipped: merge 3, revert 1, ...
    corpus: flask-3.1.3          # only when known (--corpus, or the corpus: of --golden's set)
    source: git                  # git | docstrings | github
    at: 0123abcd...              # git only: the revision the labels' lines refer to
    examined: 57                 # commits / documented symbols / records looked at
    skipped: {merge: 3, revert: 1, ...}   # reason -> count, every reason listed (0 too)
    candidates:
      - id: git-0123abcd45
        query: Handle quoted fields when parsing headers
        source: mined:git 0123abcd...      # mined:docstring | mined:github <url>
        tags: [mined_git]
        relevant:
          - path: pkg/parse.py
            symbol: parse_header           # a chunk the chunker makes (golden/README.md)
          - path: pkg/parse.py
            lines: [3, 4]                  # 1-based, inclusive: a span outside any symbol
        note: 2 files, +5 -2 lines; ...
        commit: 0123abcd...                # git: commit, subject, date
        subject: Handle quoted fields when parsing headers
        date: '2024-05-01T12:00:00+02:00'

Per-source keys: ``commit``, ``subject``, ``date`` (git); ``leakage``, ``leakage_masked``,
``kind`` (docstrings); ``url``, ``prs`` (github). Skip counts go to stderr as well. ``tags``
say how a candidate was made (``mined_git``, ``mined_docstring``, ``mined_github``); a
docstring candidate's ``types`` name the walker's category of its file (``source``,
``test``, ``example``, ...), as ``types:`` does in queries.yaml — never a tag, which would
mix it into per-tag metrics of another meaning (golden/flask's ``example`` and ``config``).

**git** (:func:`mine_git`). Each commit reachable from ``--at`` (default ``HEAD``), newest
first, until ``--max`` candidates: the subject (plus the body, without trailers, with
``--with-body``; a Conventional-Commits prefix ``fix(x):`` is dropped) is the query, and what
the commit changed, *as it is in the file at --at*, is the label. A commit counts under the
first reason that skips it:

``merge`` (more than one parent), ``revert`` (``Revert "..."``/``Reapply "..."``, or a body
saying "This reverts commit"), ``generic_subject`` (fewer than ``--min-words`` words, every
word a generic one such as wip/fix/typo/update/cleanup/bump, or a version bump or release),
``no_indexable_file`` (none of the files it changed is indexed at ``--at``: outside the
corpus directory, skipped by the walker's rules, deleted or binary), ``too_large`` (more than
``--max-files`` such files or ``--max-lines`` changed lines in them), ``no_line_change``
(a pure rename, a mode change), ``whitespace_only`` (``git diff -w --ignore-blank-lines`` of
those files is empty), ``changed_since`` (no label
left because every changed line was rewritten or deleted between the commit and ``--at``),
``no_label`` (only blank lines, or deletions that no symbol holds on both sides).

*The mapping rule.* ``git show --unified=0 -M <sha>`` gives the lines each hunk left in the
commit's version of a file (a pure deletion is the place between two lines). Those line
numbers are carried to ``--at``: the file's name there follows the renames of the commits
between the two, each detected against its own parent (``git log -M``, so a file moved
later keeps its lines even after heavy edits), and its lines go through the blob diff
``git diff --unified=0 <sha>:<path> <at>:<path at --at>``: a line outside that diff's hunks
is shifted by the lines inserted and removed above it; a line inside a hunk was rewritten since
and is dropped (counted in the note). The file at ``--at`` (``git show <at>:<path>``) is cut
by rag's chunker, and each surviving non-blank line goes to the smallest chunk that holds it:
a function, class, method or titled Markdown/reST section gives a ``symbol`` label; any other
line (``<module>`` code, a window, a preamble) joins a ``lines: [start, end]`` label (runs of
such lines joined across blank lines). A pure deletion gives a symbol label only when the
lines on both sides of it are in the same symbol. Which files are indexed is what the walker
lists in the *work tree* of ``--path`` (its rules: ``--exclude``, ``--include``,
``--max-file-bytes``), so build the evaluated index from ``--at`` (for ``HEAD``, a clean work
tree): the header counts ``files_differ_from_worktree`` when a labelled file's text there is
not its text at ``--at``.

**docstrings** (:func:`mine_docstrings`, Python only). Each function, class and method that
rag chunks as a symbol (top-level functions, classes, methods, nested classes' methods; not
functions nested in functions) and has a docstring: its summary (the first sentence of the
docstring's first paragraph, lines joined) is the query and its definition the label (path +
symbol). Skipped: ``short_summary`` (under ``--min-words`` words), ``duplicate_summary`` (the
same summary on several symbols: ambiguous, all of them), ``over_max`` (beyond ``--max``: an
evenly spaced subset is kept). The docstring sits in the indexed chunk, so such queries are
easy by construction: each candidate carries ``leakage``, the share of the query's distinct
tokens (:func:`rag.index.tokenize.tokenize`) found in the tokens of the relevant chunk's text
(about 1.0 by construction), and ``leakage_masked``, the same share against the chunk cut
from the file after :func:`mask_docstrings` (what an index built with docstrings masked
still shares with the query: identifiers, comments). They are tagged ``mined_docstring`` so
that metrics on them are reported separately; their ``types`` is the category of the
documented symbol's file. Other languages keep their doc comments in
comments above the symbol (rag/corpus/languages.py); they are not mined (their summaries are
not separable from licence headers and commented-out code without per-language rules).

*Masking at index time* (not wired here): an ``index.mask_docstrings: bool = False`` key
(rag/config.py ``IndexConfig``) for build_index to pass on, which replaces each document's
text by ``mask_docstrings(doc.text, language_name(doc.path))`` before
``chunk_document`` (rag/index/build.py, the chunking loop of :func:`build_index`); the flag
must also enter that function's chunk-store ``settings`` (a masked and an unmasked chunk set
of one corpus must not share a store entry). The index stage key already hashes ``cfg.index``.

**github** (:func:`mine_github`). One or more gh JSON exports (``--export``, repeatable),
made with::

    gh pr list --state merged --limit 1000 \\
        --json number,title,body,url,files,closingIssuesReferences,mergedAt > prs.json
    gh issue list --state all --limit 1000 --json number,title,body,url > issues.json

(the issue fields are those rag/corpus/github.py reads, so one export serves both). A
record is a pull request when its URL holds ``/pull/`` or it has ``files``. A merged PR
(``mergedAt`` set, or no ``mergedAt``/``state`` field in the export) links the issues of its
``closingIssuesReferences`` and those its body closes (``Fixes #12``, ``closes
https://github.com/o/r/issues/12``; GitHub's keywords). An issue of the export linked by at
least one merged PR gives a candidate: its title (plus body with ``--with-body``) as the
query, every file its linked PRs changed as a path label (files the walker indexes only;
paths are repository-relative in gh's export, so a corpus in a subdirectory of the git work
tree drops the prefix). A merged PR that links no issue of the export gives a candidate from
its own title. Skipped: ``not_merged``, ``issue_without_pr`` (an issue no merged PR
closes), ``generic_title``, ``no_indexable_file``, ``too_large`` (more than ``--max-files``
indexed files), ``over_max`` (beyond ``--max``, newest numbers kept). ``gh pr list`` returns at
most 100 files per pull request.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

SOURCES = ("git", "docstrings", "github")
TAGS = {"git": "mined_git", "docstrings": "mined_docstring", "github": "mined_github"}
GIT_SKIPS = ("merge", "revert", "generic_subject", "no_indexable_file", "too_large",
             "no_line_change", "whitespace_only", "changed_since", "no_label")
DOC_SKIPS = ("short_summary", "duplicate_summary", "over_max")
GITHUB_SKIPS = ("not_merged", "issue_without_pr", "generic_title", "no_indexable_file",
                "too_large", "over_max")
#: keys of a candidate that queries.yaml does not take (dropped when a candidate moves there)
PER_SOURCE_KEYS = ("commit", "subject", "date", "kind", "leakage", "leakage_masked", "url",
                   "prs")
SYMBOL_LABEL_KINDS = frozenset({"function", "class", "method", "section"})
GIT_TIMEOUT_S = 300


class MiningError(ValueError):
    """Bad input for ``rag golden mine``: printed as one ``error:`` line, exit 2."""


@dataclass
class MineResult:
    """What one miner found: the candidates (dicts in file order) and the skip counts."""

    source: str
    candidates: list[dict[str, Any]]
    skipped: Counter
    examined: int
    extra: dict[str, Any] = field(default_factory=dict)  # top-level keys (git: at, ...)


# --------------------------------------------------------------------------- shared helpers

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'.\-]*")
_GENERIC_WORDS = frozenset("""
    wip fix fixes fixed fixing typo typos update updates updated cleanup clean up minor misc
    tweak tweaks lint linting format formatting formatted refactor refactoring style docs doc
    changelog readme bump bumped release released version versions merge merged small change
    changes stuff more some the a an and in of to for on it this that test tests todo temp tmp
    again review comments comment address pr feedback work changes. etc
""".split())
_VERSION_BUMP = re.compile(
    r"^\s*(v?\d+(\.\d+)+\S*\s*$|(bump|release|prepare|preparing|releasing)\b.*\d|"
    r"(version|release)\s+v?\d+(\.\d+)+)", re.I)
_CONVENTIONAL = re.compile(r"^(feat|fix|chore|docs|refactor|perf|test|tests|build|ci|style|"
                           r"revert)(\([^)]*\))?!?:\s*", re.I)


def is_generic(text: str, min_words: int = 3) -> bool:
    """True for a subject or title too short or too generic to be a query: fewer than
    ``min_words`` words, every word a generic one (``fix typo in readme``, ``wip``), or a
    version bump / release (``Bump version to 1.2.0``, ``v2.0.1``, ``Release 3.1``)."""
    words = [w.lower().rstrip(".") for w in _WORD.findall(text)]
    if len(words) < min_words:
        return True
    if all(w in _GENERIC_WORDS for w in words):
        return True
    return bool(_VERSION_BUMP.match(text))


def _safe_id(prefix: str, text: str, seen: set[str]) -> str:
    """An id matching golden.py's ``^[A-Za-z0-9][A-Za-z0-9_.\\-]*$``, unique in ``seen``."""
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "-", f"{prefix}-{text}").strip("-.") or prefix
    out, n = base, 2
    while out in seen:
        out, n = f"{base}-{n}", n + 1
    seen.add(out)
    return out


def _walk(root: Path, *, max_file_bytes: int, exclude: list[str] | None,
          include: list[str] | None):
    """The corpus's documents as ``rag index`` walks them (default excludes plus ``exclude``)."""
    from rag.corpus.walk import DEFAULT_EXCLUDES, walk_corpus

    return {d.path: d for d in walk_corpus(
        root, max_file_bytes=max_file_bytes, exclude=[*DEFAULT_EXCLUDES, *(exclude or [])],
        include=list(include or []))}


def _chunks(path: str, text: str):
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import Document, categorize

    return chunk_document(Document(path=path, category=categorize(path), text=text,
                                   size=len(text.encode("utf-8", "surrogatepass"))))


def _tokens(text: str) -> set[str]:
    from rag.index.tokenize import tokenize

    return set(tokenize(text))


def leakage(query: str, chunk_text: str) -> float:
    """Share of the query's distinct tokens (:func:`rag.index.tokenize.tokenize`) that are
    tokens of ``chunk_text``; 0.0 for a query without tokens. Rounded to 3 places."""
    q = _tokens(query)
    if not q:
        return 0.0
    return round(len(q & _tokens(chunk_text)) / len(q), 3)


# --------------------------------------------------------------------------- mask_docstrings


def mask_docstrings(text: str, language: str | None) -> str:
    """``text`` with its docstrings' text removed, every line number kept.

    Python (``language == "python"``): the docstring of the module and of every class,
    function and method (the first statement, a plain string literal, as ``ast.get_docstring``
    sees it) is replaced by blank lines — its first line keeps what precedes the literal
    (indentation), its last line what follows it, and the lines between keep only their line
    endings; where the docstring is the body's only statement a ``""`` stays in its place so
    the file still parses. A docstring whose removal would not parse (code after it on its
    last line) is left as it is. Other languages and Python that does not parse are returned
    unchanged (their doc comments are comments, which this does not touch).
    """
    if language != "python":
        return text
    from rag.corpus.chunk import split_lines

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return text
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            spans.append((first.lineno, first.col_offset, first.end_lineno,
                          first.end_col_offset, len(node.body) == 1))
    if not spans:
        return text
    lines = split_lines(text)

    def apply(current: list[str], span) -> list[str]:
        sl, sc, el, ec, only = span
        out = list(current)
        head = out[sl - 1].encode("utf-8", "surrogatepass")[:sc].decode("utf-8", "surrogatepass")
        tail_line = out[el - 1]
        body = tail_line.rstrip("\r\n")
        ending = tail_line[len(body):]
        tail = body.encode("utf-8", "surrogatepass")[ec:].decode("utf-8", "surrogatepass")
        placeholder = '""' if only else ""
        if tail.strip() and not tail.strip().startswith("#"):
            raise ValueError("code after the docstring")
        if sl == el:
            out[sl - 1] = (head + placeholder).rstrip() + ending if not tail.strip() \
                else head + placeholder + tail + ending
            return out
        first_line = out[sl - 1]
        first_ending = first_line[len(first_line.rstrip("\r\n")):]
        out[sl - 1] = (head + placeholder).rstrip() + first_ending
        for i in range(sl, el - 1):
            ln = out[i]
            out[i] = ln[len(ln.rstrip("\r\n")):]
        out[el - 1] = (tail.rstrip() if tail.strip() else "") + ending
        return out

    for span in sorted(spans, reverse=True):  # bottom-up: earlier spans keep their lines
        try:
            trial = apply(lines, span)
        except ValueError:
            continue
        lines = trial
    masked = "".join(lines)
    try:
        ast.parse(masked)
    except (SyntaxError, ValueError):
        return text
    return masked


# --------------------------------------------------------------------------- git


_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                 "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
                 "GIT_PREFIX")
_DIFF_OPTS = ("--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/",
              "--dst-prefix=b/", "-M")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        p = subprocess.run(["git", "-c", "core.quotePath=false", *args], cwd=cwd, env=env,
                           capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MiningError(f"git {args[0]}: {exc}") from None
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip().splitlines()
        raise MiningError(f"git {' '.join(args[:2])} failed in {cwd}: "
                          f"{msg[-1] if msg else 'exit ' + str(p.returncode)}")
    return p.stdout.decode("utf-8", "replace")


def _unquote(name: str) -> str:
    """A path as git prints it in diff headers (C-quoted when it holds odd characters)."""
    name = name.rstrip("\t")
    if len(name) >= 2 and name[0] == '"' and name[-1] == '"':
        import codecs

        raw = codecs.escape_decode(name[1:-1].encode("latin-1", "backslashreplace"))[0]
        return raw.decode("utf-8", "replace")
    return name


@dataclass
class _FileDiff:
    old: str | None  # path before (None: added)
    new: str | None  # path after (None: deleted)
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)


def parse_unified(text: str) -> list[_FileDiff]:
    """Files and ``(old_start, old_count, new_start, new_count)`` hunks of a git diff printed
    with ``--src-prefix=a/ --dst-prefix=b/`` (content lines are skipped by count, so a
    removed line that reads ``-- x`` is never taken for a header)."""
    files: list[_FileDiff] = []
    cur: _FileDiff | None = None
    left_old = left_new = 0
    for line in text.split("\n"):
        if left_old or left_new:
            if line.startswith("-"):
                left_old -= 1
            elif line.startswith("+"):
                left_new -= 1
            elif line.startswith("\\"):
                pass
            else:  # a context line (never with --unified=0)
                left_old, left_new = left_old - 1, left_new - 1
            continue
        if line.startswith("diff --git "):
            cur = _FileDiff(old=None, new=None)
            files.append(cur)
            cur.old = cur.new = ""  # unknown until the headers
        elif cur is None:
            continue
        elif line.startswith("rename from "):
            cur.old = _unquote(line[len("rename from "):])
        elif line.startswith("rename to "):
            cur.new = _unquote(line[len("rename to "):])
        elif line.startswith("--- "):
            p = _unquote(line[4:])
            cur.old = None if p == "/dev/null" else p[2:] if p.startswith("a/") else p
        elif line.startswith("+++ "):
            p = _unquote(line[4:])
            cur.new = None if p == "/dev/null" else p[2:] if p.startswith("b/") else p
        elif line.startswith("@@"):
            m = _HUNK.match(line)
            if m:
                a, b, c, d = (int(m.group(1)), int(m.group(2) or 1), int(m.group(3)),
                              int(m.group(4) or 1))
                cur.hunks.append((a, b, c, d))
                left_old, left_new = b, d
    return [f for f in files if f.old != "" or f.new != ""]


def map_line(line: int, hunks: list[tuple[int, int, int, int]]) -> int | None:
    """``line`` of a diff's old side at its place on the new side, or None when a hunk
    rewrote or removed it. Hunks as :func:`parse_unified` gives them (``--unified=0``)."""
    shift_from = None
    for a, b, c, d in hunks:
        if b and a <= line <= a + b - 1:
            return None
        old_end = a + b - 1 if b else a
        if line > old_end:
            shift_from = (old_end, c + d - 1 if d else c)
    if shift_from is None:
        return line
    return line - shift_from[0] + shift_from[1]


def _commits(top: Path, at: str, pathspec: list[str]) -> Iterable[dict[str, Any]]:
    fmt = "%H%x1f%P%x1f%aI%x1f%s%x1f%b%x1e"
    out = _git(top, "log", f"--format={fmt}", at, "--", *pathspec)
    for rec in out.split("\x1e"):
        rec = rec.lstrip("\n")
        if not rec:
            continue
        sha, parents, date, subject, body = (rec.split("\x1f") + [""] * 5)[:5]
        yield {"sha": sha, "parents": parents.split(), "date": date, "subject": subject.strip(),
               "body": body.strip()}


_TRAILER = re.compile(r"^(Signed-off-by|Co-authored-by|Reviewed-by|Acked-by|Change-Id|"
                      r"Cherry-picked-from|Tested-by|Reported-by):", re.I)


def _git_query(subject: str, body: str, with_body: bool) -> str:
    q = _CONVENTIONAL.sub("", subject).strip() or subject
    if with_body and body:
        kept = "\n".join(ln for ln in body.splitlines() if not _TRAILER.match(ln)).strip()
        if kept:
            q = f"{q}\n\n{kept}"
    return q


def _rename_log(top: Path, at: str) -> dict[str, list[tuple[str, str]]]:
    """commit -> the (old, new) renames it made, for every commit reachable from ``at``, each
    detected against its own first parent (``git log -M``; merges show none)."""
    out: dict[str, list[tuple[str, str]]] = {}
    text = _git(top, "log", "-M", "--diff-filter=R", "--name-status", "-z", "--format=%x1e%H",
                at)
    for block in text.split("\x1e"):
        fields = [f.strip("\n") for f in block.split("\0")]
        if not fields or not fields[0]:
            continue
        sha, rest = fields[0], [f for f in fields[1:] if f]
        for i in range(0, len(rest) - 2, 3):
            if rest[i].startswith("R"):
                out.setdefault(sha, []).append((rest[i + 1], rest[i + 2]))
    return out


def _renames_since(top: Path, sha: str, at: str, renames_of: dict, paths: list[str]
                   ) -> dict[str, str]:
    """Each of ``paths`` (as in commit ``sha``) under the name it has at ``at``: the renames
    of the commits between them applied oldest first."""
    now = {p: p for p in paths}
    if not renames_of or sha == at:
        return now
    between = _git(top, "rev-list", "--topo-order", f"{sha}..{at}").split()
    for c in reversed(between):
        for old, new in renames_of.get(c, ()):
            for p, cur in now.items():
                if cur == old:
                    now[p] = new
    return now


def _smallest_chunk(chunks, line: int):
    best = None
    for c in chunks:
        if c.start_line <= line <= c.end_line and (
                best is None or c.end_line - c.start_line < best.end_line - best.start_line):
            best = c
    return best


def _is_symbol_chunk(c) -> bool:
    return c is not None and c.kind in SYMBOL_LABEL_KINDS and bool(c.symbol)


def _line_runs(lines: Iterable[int], text_lines: list[str]) -> list[tuple[int, int]]:
    """Sorted line numbers as ``(start, end)`` runs; a gap of blank lines does not split."""
    runs: list[list[int]] = []
    for n in sorted(set(lines)):
        if runs and all(not text_lines[k - 1].strip() for k in range(runs[-1][1] + 1, n)):
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return [(s, e) for s, e in runs]


def mine_git(root: Path, *, at: str = "HEAD", max_candidates: int | None = 200,
             with_body: bool = False, max_files: int = 20, max_lines: int = 500,
             min_words: int = 3, max_file_bytes: int = 1_000_000,
             exclude: list[str] | None = None, include: list[str] | None = None) -> MineResult:
    """Candidates from the commits of the git repository holding ``root`` (module docstring:
    the skip reasons and the line-mapping rule).

    Raises:
        MiningError: ``root`` is not in a git work tree, or ``at`` is not a revision.
    """
    from rag.corpus.chunk import split_lines

    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
        prefix = _git(root, "rev-parse", "--show-prefix").strip()
    except MiningError:
        raise MiningError(f"--path {root}: not inside a git work tree") from None
    try:
        at_sha = _git(top, "rev-parse", "--verify", "--end-of-options", f"{at}^{{commit}}").strip()
    except MiningError:
        raise MiningError(f"--at {at}: not a commit of {top}") from None
    docs = _walk(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    indexed = set(docs)
    renames_of = _rename_log(top, at_sha)
    skipped: Counter = Counter({r: 0 for r in GIT_SKIPS})
    candidates: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    at_texts: dict[str, str | None] = {}
    at_chunks: dict[str, list] = {}
    differ: set[str] = set()
    examined = 0

    def rel(p: str | None) -> str | None:
        return p[len(prefix):] if p is not None and p.startswith(prefix) else None

    def at_text(path: str) -> str | None:  # corpus-relative
        if path not in at_texts:
            try:
                at_texts[path] = _git(top, "show", f"{at_sha}:{prefix}{path}")
            except MiningError:
                at_texts[path] = None
        return at_texts[path]

    for commit in _commits(top, at_sha, [prefix] if prefix else []):
        if max_candidates is not None and len(candidates) >= max_candidates:
            break
        examined += 1
        sha, subject, body = commit["sha"], commit["subject"], commit["body"]
        if len(commit["parents"]) > 1:
            skipped["merge"] += 1
            continue
        if re.match(r'^(Revert|Reapply) "', subject) or "This reverts commit" in body:
            skipped["revert"] += 1
            continue
        if is_generic(_CONVENTIONAL.sub("", subject), min_words):
            skipped["generic_subject"] += 1
            continue
        # the commit's files (post-image paths) and where each is at --at
        own = parse_unified(_git(top, "show", "--format=", "--unified=0", *_DIFF_OPTS, sha))
        own = [f for f in own if f.new is not None and rel(f.new) is not None]
        renames = _renames_since(top, sha, at_sha, renames_of, [f.new for f in own])
        kept = []  # (file diff, corpus path at --at)
        for f in own:
            target_rel = rel(renames[f.new])
            if target_rel is not None and target_rel in indexed \
                    and at_text(target_rel) is not None:
                kept.append((f, target_rel))
        if not kept:
            skipped["no_indexable_file"] += 1
            continue
        n_lines = 0
        numstat = _git(top, "show", "--format=", "--numstat", "-z", "-M", sha, "--",
                       *sorted({p for f, _ in kept for p in (f.old, f.new) if p}))
        for rec in re.finditer(r"(\d+|-)\t(\d+|-)\t", numstat):
            n_lines += sum(int(x) for x in rec.groups() if x != "-")
        if len(kept) > max_files or n_lines > max_lines:
            skipped["too_large"] += 1
            continue
        if not any(f.hunks for f, _ in kept):
            skipped["no_line_change"] += 1
            continue
        paths = sorted({p for f, _ in kept for p in (f.old, f.new) if p})
        ws = _git(top, "show", "--format=", "--unified=0", "-w", "--ignore-blank-lines",
                  *_DIFF_OPTS, sha, "--", *paths)
        if not any(f.hunks for f in parse_unified(ws)):
            skipped["whitespace_only"] += 1
            continue
        # carry the commit's lines to --at: blob against blob, so a rename is no obstacle
        since = {}
        for f, target in kept:
            since[f.new] = [h for g in parse_unified(_git(
                top, "diff", "--unified=0", *_DIFF_OPTS, f"{sha}:{f.new}",
                f"{at_sha}:{prefix}{target}")) for h in g.hunks]
        labels: list[dict[str, Any]] = []
        label_keys: set = set()
        lost = total = 0
        files_labelled = 0
        for f, target in kept:
            text = at_text(target)
            if text is None:
                continue
            if target not in at_chunks:
                at_chunks[target] = _chunks(target, text)
            chunks, text_lines = at_chunks[target], split_lines(text)
            later = since[f.new]
            symbols: list[str] = []
            loose: list[int] = []

            def place(n: int) -> int | None:
                m = map_line(n, later)
                if m is None or m > len(text_lines) or not text_lines[m - 1].strip():
                    return None
                return m

            for a, b, c, d in f.hunks:
                if d:
                    for n in range(c, c + d):
                        total += 1
                        m = map_line(n, later)
                        if m is None:
                            lost += 1
                            continue
                        if m > len(text_lines) or not text_lines[m - 1].strip():
                            continue
                        ch = _smallest_chunk(chunks, m)
                        if _is_symbol_chunk(ch):
                            if ch.symbol not in symbols:
                                symbols.append(ch.symbol)
                        else:
                            loose.append(m)
                else:  # a pure deletion after line c: the symbol on both sides, if one
                    above = next((place(k) for k in range(c, 0, -1) if place(k)), None)
                    below = next((place(k) for k in range(c + 1, len(text_lines) + 1)
                                  if place(k)), None) if c < len(text_lines) + 1 else None
                    if above and below:
                        ca, cb = _smallest_chunk(chunks, above), _smallest_chunk(chunks, below)
                        if ca is cb and _is_symbol_chunk(ca) and ca.symbol not in symbols:
                            symbols.append(ca.symbol)
            before = len(labels)
            for s in symbols:
                if (target, s) not in label_keys:
                    label_keys.add((target, s))
                    labels.append({"path": target, "symbol": s})
            for s, e in _line_runs(loose, text_lines):
                labels.append({"path": target, "lines": [s, e]})
            if len(labels) > before:
                files_labelled += 1
                if target in docs and docs[target].text != text:
                    differ.add(target)
        if not labels:
            skipped["changed_since" if lost else "no_label"] += 1
            continue
        labels.sort(key=lambda lab: (lab["path"], lab.get("lines", [0])[0]))
        note = (f"{len(kept)} indexed file(s), {n_lines} changed line(s) in the commit"
                + (f"; {lost} of its {total} new line(s) rewritten since" if lost else "")
                + ("" if sha == at_sha else f"; lines as at {at_sha[:10]}"))
        candidates.append({
            "id": _safe_id("git", sha[:10], seen_ids),
            "query": _git_query(subject, body, with_body),
            "source": f"mined:git {sha}",
            "tags": [TAGS["git"]],
            "relevant": labels,
            "note": note,
            "commit": sha,
            "subject": subject,
            "date": commit["date"],
        })
    return MineResult("git", candidates, skipped, examined,
                      extra={"at": at_sha, "files_differ_from_worktree": len(differ)})


# --------------------------------------------------------------------------- docstrings


def docstring_summary(doc: str) -> str:
    """The summary of a cleaned docstring: the first sentence (up to ``.``, ``!`` or ``?``
    followed by a space) of its first paragraph, lines joined by single spaces."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    joined = " ".join(para.split())
    m = re.match(r"(.+?[.!?])(?=\s)", joined)
    return m.group(1) if m else joined


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
                    max_file_bytes: int = 1_000_000, exclude: list[str] | None = None,
                    include: list[str] | None = None) -> MineResult:
    """Candidates from the docstrings of the corpus's Python files (module docstring)."""
    from rag.corpus.languages import language_name

    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    docs = _walk(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    skipped: Counter = Counter({r: 0 for r in DOC_SKIPS})
    found: list[dict[str, Any]] = []
    examined = 0
    for path, doc in docs.items():
        if language_name(path) != "python":
            continue
        try:
            tree = ast.parse(doc.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        syms = _documented_symbols(tree)
        if not syms:
            continue
        chunks = _chunks(path, doc.text)
        masked_chunks = _chunks(path, mask_docstrings(doc.text, "python"))
        for symbol, kind, text in syms:
            examined += 1
            summary = docstring_summary(text)
            if len(_WORD.findall(summary)) < min_words:
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
        else:
            unique.append(f)
    if max_candidates is not None and len(unique) > max_candidates:
        step = len(unique) / max_candidates
        keep = [unique[int(i * step)] for i in range(max_candidates)]
        skipped["over_max"] += len(unique) - len(keep)
        unique = keep
    seen_ids: set[str] = set()
    candidates = [{
        "id": _safe_id("doc", f"{f['path']}-{f['symbol']}", seen_ids),
        "query": f["query"],
        "source": "mined:docstring",
        "tags": [TAGS["docstrings"]],
        "types": [f["category"]],
        "relevant": [{"path": f["path"], "symbol": f["symbol"]}],
        "note": (f"{f['kind']} docstring summary; {int(round(100 * f['leakage']))}% of its "
                 f"tokens are in the chunk, {int(round(100 * f['leakage_masked']))}% with "
                 "docstrings masked"),
        "kind": f["kind"],
        "leakage": f["leakage"],
        "leakage_masked": f["leakage_masked"],
    } for f in unique]
    return MineResult("docstrings", candidates, skipped, examined)


# --------------------------------------------------------------------------- github

_CLOSES = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b\s*:?\s+"
    r"(?:(?:https?://[^\s/]+/)?([\w.\-]+/[\w.\-]+)(?:/issues/|#)|#)(\d+)", re.I)


def _repo_of(url: str) -> str | None:
    m = re.search(r"https?://[^/]+/([^/]+/[^/]+)/(?:issues|pull)/\d+", url or "")
    return m.group(1).lower() if m else None


def mine_github(root: Path, exports: list[Path], *, max_candidates: int | None = 200,
                with_body: bool = False, max_files: int = 20, min_words: int = 3,
                max_file_bytes: int = 1_000_000, exclude: list[str] | None = None,
                include: list[str] | None = None) -> MineResult:
    """Candidates from gh JSON exports of issues and pull requests (module docstring).

    Raises:
        MiningError: an export is missing, not a JSON list, a record lacks number/title/url,
            or no pull request in the exports has ``files``.
    """
    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    if not exports:
        raise MiningError("--from github needs at least one --export FILE (a gh JSON export)")
    records: list[dict] = []
    for path in exports:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MiningError(f"--export {path}: file not found") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise MiningError(f"--export {path}: not a JSON export: {exc}") from None
        if not isinstance(data, list):
            raise MiningError(f"--export {path}: expected a JSON list of issues or pull requests")
        for i, rec in enumerate(data):
            if not isinstance(rec, dict) or not all(rec.get(k) for k in ("number", "title", "url")):
                raise MiningError(f"--export {path}: record {i} lacks number, title or url")
            records.append(rec)
    prs = [r for r in records if "/pull/" in str(r["url"]) or "files" in r]
    issues = {}
    for r in records:
        if r not in prs:
            issues[(_repo_of(str(r["url"])), int(r["number"]))] = r
    if prs and not any("files" in r for r in prs):
        raise MiningError("no pull request in the exports has 'files': export them with "
                          "gh pr list --json number,title,body,url,files,"
                          "closingIssuesReferences,mergedAt")
    prefix = ""
    try:
        prefix = _git(root, "rev-parse", "--show-prefix").strip()
    except MiningError:
        pass
    docs = _walk(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    skipped: Counter = Counter({r: 0 for r in GITHUB_SKIPS})
    examined = len(records)

    def indexed_files(pr: dict) -> list[str]:
        out = []
        for f in pr.get("files") or []:
            p = f.get("path") if isinstance(f, dict) else str(f)
            if p and p.startswith(prefix) and p[len(prefix):] in docs:
                if p[len(prefix):] not in out:
                    out.append(p[len(prefix):])
        return out

    def merged(pr: dict) -> bool:
        if "mergedAt" in pr:
            return bool(pr["mergedAt"])
        if "state" in pr:
            return str(pr["state"]).upper() == "MERGED"
        return True

    linked: dict[tuple, list[dict]] = {}  # issue key -> its merged PRs
    alone: list[dict] = []
    for pr in sorted(prs, key=lambda r: int(r["number"])):
        if not merged(pr):
            skipped["not_merged"] += 1
            continue
        repo = _repo_of(str(pr["url"]))
        keys = []
        for ref in pr.get("closingIssuesReferences") or []:
            if isinstance(ref, dict) and ref.get("number"):
                r_repo = _repo_of(str(ref.get("url", ""))) or repo
                keys.append((r_repo, int(ref["number"])))
        for m in _CLOSES.finditer(str(pr.get("body") or "")):
            keys.append(((m.group(1) or repo or "").lower() or None, int(m.group(2))))
        keys = [k for k in dict.fromkeys(keys) if k in issues]
        for k in keys:
            linked.setdefault(k, []).append(pr)
        if not keys:
            alone.append(pr)
    skipped["issue_without_pr"] += sum(1 for k in issues if k not in linked)

    def text_of(rec: dict) -> str:
        title = str(rec["title"]).strip()
        body = str(rec.get("body") or "").strip()
        return f"{title}\n\n{body}" if with_body and body else title

    items = []  # (number, kind, record, prs)
    for k, prs_of in linked.items():
        items.append((int(issues[k]["number"]), "issue", issues[k], prs_of))
    for pr in alone:
        items.append((int(pr["number"]), "pr", pr, [pr]))
    items.sort(key=lambda t: -t[0])  # newest first
    out = []
    for number, kind, rec, prs_of in items:
        if is_generic(str(rec["title"]), min_words):
            skipped["generic_title"] += 1
            continue
        files: list[str] = []
        for pr in prs_of:
            files += [p for p in indexed_files(pr) if p not in files]
        if not files:
            skipped["no_indexable_file"] += 1
            continue
        if len(files) > max_files:
            skipped["too_large"] += 1
            continue
        out.append((number, kind, rec, prs_of, files))
    if max_candidates is not None and len(out) > max_candidates:
        skipped["over_max"] += len(out) - max_candidates
        out = out[:max_candidates]
    seen_ids: set[str] = set()
    candidates = []
    for number, kind, rec, prs_of, files in out:
        nums = ", ".join(f"#{p['number']}" for p in prs_of)
        candidates.append({
            "id": _safe_id(f"gh-{kind}", str(number), seen_ids),
            "query": text_of(rec),
            "source": f"mined:github {rec['url']}",
            "tags": [TAGS["github"]],
            "relevant": [{"path": p} for p in files],
            "note": (f"issue #{number}, files changed by {nums}" if kind == "issue"
                     else f"pull request #{number} (no linked issue in the export), its files"),
            "url": str(rec["url"]),
            "prs": [int(p["number"]) for p in prs_of],
        })
    return MineResult("github", candidates, skipped, examined)


# --------------------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _list(dumper: yaml.SafeDumper, data: list):
    flow = all(isinstance(x, (str, int, float)) for x in data) and bool(data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)

_NOUNS = {"git": "commits", "docstrings": "documented symbols", "github": "issues and PRs"}


def skip_line(result: MineResult) -> str:
    """``examined N <things>: K candidates; skipped: reason n, ...`` (stderr, file header)."""
    skips = ", ".join(f"{r} {n}" for r, n in result.skipped.items())
    return (f"examined {result.examined} {_NOUNS[result.source]}: {len(result.candidates)} "
            f"candidates; skipped: {skips}")


def render_candidates(result: MineResult, *, corpus: str | None = None) -> str:
    """The candidates file (module docstring: the format)."""
    head = [
        f"# Candidates mined by `rag golden mine --from {result.source}`: NOT a golden set.",
        "# Review each entry; move the ones you keep into queries.yaml with their id, query,",
        "# tags, types, relevant, note and source, leaving out the other keys "
        f"({', '.join(PER_SOURCE_KEYS)}).",
        "# Labels are candidates too: trim them.",
        f"# {skip_line(result)}",
    ]
    if result.source == "docstrings":
        head.append("# Docstring queries repeat text of their own chunk (see leakage): report "
                    "them apart (tag mined_docstring).")
    doc: dict[str, Any] = {}
    if corpus:
        doc["corpus"] = corpus
    doc["source"] = result.source
    doc.update(result.extra)
    doc["examined"] = result.examined
    doc["skipped"] = dict(result.skipped)
    doc["candidates"] = result.candidates
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=10_000)
    return "\n".join(head) + "\n" + body


# --------------------------------------------------------------------------- CLI


def add_mine_parser(sub) -> argparse.ArgumentParser:
    """Register ``mine`` on the ``rag golden`` action subparsers; returns the parser."""
    p = sub.add_parser(
        "mine", help="mine candidate queries and labels from git history, docstrings or "
                     "GitHub issues/PRs into a candidates file to review",
        description=(
            "Write candidate queries with candidate labels, mined from the corpus's git "
            "history (commit subjects; the symbols or lines each commit changed, as they "
            "are at --at), its Python docstrings (summary -> the documented symbol) or a "
            "gh JSON export (issue or PR title -> the files the PR changed), to a "
            "candidates file for review — never to queries.yaml. Skip counts by reason go "
            "to stderr and the file header. Format and rules: the docstring of "
            "rag/golden/mining.py."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=("github export: gh pr list --state merged --limit 1000 --json "
                "number,title,body,url,files,closingIssuesReferences,mergedAt > prs.json; "
                "gh issue list --state all --limit 1000 --json number,title,body,url > "
                "issues.json"))
    p.add_argument("--from", dest="source", required=True, choices=SOURCES,
                   help="what to mine")
    p.add_argument("--path", required=True, metavar="DIR",
                   help="the corpus directory (git: inside a git work tree)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="candidates file (default: <--golden or cwd>/candidates-<source>.yaml)")
    p.add_argument("--golden", default=None, metavar="DIR",
                   help="the golden directory: default place of the output, and its "
                        "queries.yaml's corpus: names the candidates' corpus")
    p.add_argument("--corpus", default=None, metavar="NAME",
                   help="the corpus name written as corpus: (default: from --golden, else none)")
    p.add_argument("--max", type=int, default=200, metavar="N",
                   help="at most N candidates (default 200; 0: no limit)")
    p.add_argument("--with-body", action="store_true",
                   help="git/github: the commit body or issue body joins the query")
    p.add_argument("--min-words", type=int, default=3,
                   help="a subject, title or summary with fewer words is skipped (default 3)")
    p.add_argument("--at", default="HEAD", metavar="REV",
                   help="git: the revision the labels' lines refer to (default HEAD)")
    p.add_argument("--max-files", type=int, default=20,
                   help="git/github: skip a commit or PR touching more indexed files (default 20)")
    p.add_argument("--max-lines", type=int, default=500,
                   help="git: skip a commit changing more lines in indexed files (default 500)")
    p.add_argument("--export", action="append", default=[], metavar="FILE",
                   help="github: a gh JSON export of PRs and/or issues (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="walk: also skip these gitignore patterns (as corpus.exclude_extra)")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="walk: re-allow these paths (as corpus.include)")
    p.add_argument("--max-file-bytes", type=int, default=1_000_000,
                   help="walk: skip files over this size (default 1000000)")
    return p


def _corpus_of(golden: str | None) -> str | None:
    if not golden:
        return None
    try:
        data = yaml.safe_load((Path(golden) / "queries.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data.get("corpus") if isinstance(data, dict) else None


def output_path(source: str, out: str | None, golden: str | None) -> Path:
    """Where the candidates go; the golden set's own files are refused."""
    path = Path(out) if out else Path(golden or ".") / f"candidates-{source}.yaml"
    if path.name in ("queries.yaml", "negatives.yaml"):
        raise MiningError(f"--out {path}: mined candidates are never written into the golden "
                          "set; write a candidates file and move reviewed entries over")
    return path


def mine(args: argparse.Namespace) -> MineResult:
    """Run the miner ``args.source`` names with the parsed options."""
    for name in ("max", "max_files", "max_lines", "min_words"):
        if getattr(args, name) < 0:
            raise MiningError(f"--{name.replace('_', '-')} must be >= 0")
    if args.max_file_bytes <= 0:
        raise MiningError("--max-file-bytes must be > 0")
    if args.export and args.source != "github":
        raise MiningError("--export is only used with --from github")
    walk = dict(max_file_bytes=args.max_file_bytes, exclude=args.exclude, include=args.include)
    limit = args.max or None
    root = Path(args.path)
    if args.source == "git":
        return mine_git(root, at=args.at, max_candidates=limit, with_body=args.with_body,
                        max_files=args.max_files, max_lines=args.max_lines,
                        min_words=args.min_words, **walk)
    if args.source == "docstrings":
        return mine_docstrings(root, max_candidates=limit, min_words=args.min_words, **walk)
    return mine_github(root, [Path(e) for e in args.export], max_candidates=limit,
                       with_body=args.with_body, max_files=args.max_files,
                       min_words=args.min_words, **walk)


def mine_command(args: argparse.Namespace) -> int:
    """``rag golden mine``: write the candidates file; exit 2 with one ``error:`` line on bad
    input."""
    try:
        out = output_path(args.source, args.out, args.golden)
        if out.exists() and out.is_dir():
            raise MiningError(f"--out {out}: is a directory")
        result = mine(args)
        text = render_candidates(result, corpus=args.corpus or _corpus_of(args.golden))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="\n")
    except (MiningError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(skip_line(result), file=sys.stderr)
    print(f"wrote {len(result.candidates)} candidates to {out}")
    return 0
