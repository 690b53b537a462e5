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
        source: mined:git 0123abcd...      # mined:docstring <path>#<symbol> | mined:github <url>
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

**git** (:func:`rag.golden.miners.git.mine_git`). Each commit reachable from ``--at`` (default ``HEAD``), newest
first, until ``--max`` candidates: the subject, cleaned (:func:`rag.golden.commit_filters.clean_subject`:
no Conventional-Commits prefix ``fix(x):``, ``[tag]``, PR/issue reference ``(#123)``,
``fixes #12``, ``gh-12`` nor ticket key ``ABC-123:``; plus the body, without trailers, with
``--with-body``) is the query, and what the commit changed, *as it is in the file at --at*,
is the label. A commit counts under the first reason that skips it:

``merge`` (more than one parent), ``revert`` (``Revert "..."``/``Reapply "..."``, or a body
saying "This reverts commit"), ``test_only`` (a ``test:`` commit, or one whose indexed files
are all tests; ``--keep-tests`` keeps both), the housekeeping reasons of
:func:`rag.golden.commit_filters.housekeeping_reason` (``dependency_bump``, ``ci``,
``lint_or_format``, ``typo``, ``docs_only``, ``changelog``; ``--keep-housekeeping`` keeps
them), ``generic_subject`` (fewer than ``--min-words`` words once references are gone, every
word a generic one such as wip/fix/typo/update/cleanup/bump, or a version bump or release),
``no_indexable_file`` (none of the files it changed is indexed at ``--at``: outside the
corpus directory, skipped by the walker's rules, deleted or binary), ``too_large`` (more than
``--max-files`` such files or ``--max-lines`` changed lines in them), ``no_line_change``
(a pure rename, a mode change), ``whitespace_only`` (``git diff -w --ignore-blank-lines`` of
those files is empty), ``changed_since`` (no label
left because every changed line was rewritten or deleted between the commit and ``--at``),
``no_label`` (only blank lines, or deletions that no symbol holds on both sides),
``too_many_labels`` (more than ``--max-labels``, default 8: a sweeping refactor answers no
one query). Never labels, by default: test files (the walker's ``test`` category) and
changelogs (``CHANGES.rst``, ``HISTORY.md``...); lines whose change is whitespace only
(the hunks of ``git show -w --ignore-blank-lines``, so a gofmt realignment of a ``const``
block labels only the constant that is new); a changed symbol over ``--max-symbol-lines``
(default 150) lines gives its changed lines as a span instead of the whole symbol.

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

**docstrings** (:func:`rag.golden.miners.docstrings.mine_docstrings`). Python: each function, class and method that
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
documented symbol's file. The other languages the chunker names symbols in keep their
documentation in the comments the chunker attaches above the symbol (rag/corpus/languages.py):
:func:`rag.golden.miners.docstrings.doc_comment` reads each language's own doc-comment
syntax (Go ``//``; ``/** */`` for JSDoc, TSDoc, Javadoc, KDoc, Scaladoc, PHPDoc; ``///`` for
Rust, Swift, C#'s XML ``<summary>``, Doxygen; ``#`` for Ruby and shell), and
``leakage_masked`` is measured against the chunk without those comment lines. Source files
in a language with no reader (Elixir, Lua...) are named in a ``warning:`` line.

*Masking at index time* (not wired here): an ``index.mask_docstrings: bool = False`` key
(rag/app/config.py ``IndexConfig``) for build_index to pass on, which replaces each document's
text by ``mask_docstrings(doc.text, language_name(doc.path))`` before
``chunk_document`` (rag/index/build.py, the chunking loop of :func:`build_index`); the flag
must also enter that function's chunk-store ``settings`` (a masked and an unmasked chunk set
of one corpus must not share a store entry). The index stage key already hashes ``cfg.index``.

**github** (:func:`rag.golden.miners.github.mine_github`). One or more gh JSON exports (``--export``, repeatable),
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

**Re-mining** (``--force`` over an existing candidates file, any source): candidates whose
``source`` is listed under that file's ``discarded:`` (written by ``rag golden review``'s
``d``) or is the ``source`` of a query of ``--golden``'s queries.yaml (a candidate moved in)
are not proposed again (skip reasons ``discarded_in_review``, ``already_golden``;
the miners leave them out before ``--max`` counts, :class:`KnownCandidates`), and the
``discarded:`` list is carried into the new file as it was.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: keys of a candidate that queries.yaml does not take (dropped when a candidate moves there)
PER_SOURCE_KEYS = ("commit", "subject", "date", "kind", "leakage", "leakage_masked", "url",
                   "prs")
#: seconds one git command may take
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
    warnings: list[str] = field(default_factory=list)  # printed as ``warning:`` lines


# --------------------------------------------------------------------------- shared helpers

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'.\-]*")
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
CONVENTIONAL_PREFIX = re.compile(r"^(feat|fix|chore|docs|refactor|perf|test|tests|build|ci|"
                                 r"style|revert)(\([^)]*\))?!?:\s*", re.I)


def is_generic(text: str, min_words: int = 3) -> bool:
    """True for a subject or title too short or too generic to be a query: fewer than
    ``min_words`` words, every word a generic one (``fix typo in readme``, ``wip``), or a
    version bump / release (``Bump version to 1.2.0``, ``v2.0.1``, ``Release 3.1``)."""
    words = [w.lower().rstrip(".") for w in WORD.findall(text)]
    if len(words) < min_words:
        return True
    if all(w in _GENERIC_WORDS for w in words):
        return True
    return bool(_VERSION_BUMP.match(text))


# git, for the miners that read a repository's history
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                 "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
                 "GIT_PREFIX")

def run_git(cwd: Path, *args: str) -> str:
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


def safe_id(prefix: str, text: str, seen: set[str]) -> str:
    """An id matching golden.py's ``^[A-Za-z0-9][A-Za-z0-9_.\\-]*$``, unique in ``seen``."""
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "-", f"{prefix}-{text}").strip("-.") or prefix
    out, n = base, 2
    while out in seen:
        out, n = f"{base}-{n}", n + 1
    seen.add(out)
    return out


def walk_documents(root: Path, *, max_file_bytes: int, exclude: list[str] | None,
                   include: list[str] | None):
    """The corpus's documents as ``rag index`` walks them (default excludes plus ``exclude``)."""
    from rag.corpus.walk import DEFAULT_EXCLUDES, walk_corpus

    return {d.path: d for d in walk_corpus(
        root, max_file_bytes=max_file_bytes, exclude=[*DEFAULT_EXCLUDES, *(exclude or [])],
        include=list(include or []))}


def chunks_of(path: str, text: str):
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

def _noun(source: str) -> str:
    from rag.golden.miners import miners

    return miners()[source].NOUN


def skip_line(result: MineResult) -> str:
    """``examined N <things>: K candidates; skipped: reason n, ...`` (stderr, file header)."""
    skips = ", ".join(f"{r} {n}" for r, n in result.skipped.items())
    return (f"examined {result.examined} {_noun(result.source)}: {len(result.candidates)} "
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
    doc.update({k: v for k, v in result.extra.items() if k != "discarded"})
    doc["examined"] = result.examined
    doc["skipped"] = dict(result.skipped)
    doc["candidates"] = result.candidates
    if result.extra.get("discarded"):  # review's d: kept out of every later mine --force
        doc["discarded"] = result.extra["discarded"]
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
    from rag.golden.miners import miners

    p.add_argument("--from", dest="source", required=True, choices=sorted(miners()),
                   help="what to mine")
    p.add_argument("--path", required=True, metavar="DIR",
                   help="the corpus directory (git: inside a git work tree)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="candidates file (default: <--golden or cwd>/candidates-<source>.yaml)")
    p.add_argument("--golden", default=None, metavar="DIR",
                   help="the golden directory: default place of the output, and its "
                        "queries.yaml's corpus: names the candidates' corpus")
    p.add_argument("--corpus", default=None, metavar="NAME",
                   help="the corpus name written as corpus: (default: from --golden, else "
                        "--path's directory name, the name python -m rag.run corpus.path=DIR "
                        "gives it)")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing candidates file (default: refused); what its "
                        "discarded: list and --golden's queries.yaml hold is not proposed again")
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
    from rag.golden.miners.git import DEFAULT_MAX_LABELS, DEFAULT_MAX_SYMBOL_LINES

    p.add_argument("--max-labels", type=int, default=DEFAULT_MAX_LABELS,
                   help=f"git: skip a commit with more labels (default {DEFAULT_MAX_LABELS})")
    p.add_argument("--max-symbol-lines", type=int, default=DEFAULT_MAX_SYMBOL_LINES,
                   help="git: a changed symbol longer than this is labelled by its changed "
                        f"lines instead (default {DEFAULT_MAX_SYMBOL_LINES})")
    p.add_argument("--keep-tests", action="store_true",
                   help="git: label test files too (default: left out; a commit changing "
                        "only tests is skipped as test_only); docstrings: mine test files too")
    p.add_argument("--allow-shallow", action="store_true",
                   help="git: mine a shallow clone's truncated history (default: refused)")
    p.add_argument("--keep-housekeeping", action="store_true",
                   help="git: keep dependency-bump, CI, lint/format, typo, docs-only and "
                        "changelog commits (default: skipped, each counted by reason)")
    p.add_argument("--export", action="append", default=[], metavar="FILE",
                   help="github: a gh JSON export of PRs and/or issues (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="walk: also skip these gitignore patterns (as corpus.exclude_extra)")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="walk: re-allow these paths (as corpus.include)")
    p.add_argument("--max-file-bytes", type=int, default=1_000_000,
                   help="walk: skip files over this size (default 1000000)")
    return p


#: the skip reasons of what an earlier review decided (:meth:`KnownCandidates.reason`), listed
#: last, in this order, when a mine re-mines over a reviewed file or a golden set
KNOWN_SKIPS = ("already_golden", "discarded_in_review")


@dataclass
class KnownCandidates:
    """What earlier reviews already decided, by a candidate's ``source`` (``mined:git <sha>``,
    ``mined:docstring <path>#<symbol>``, ``mined:github <url>``: each names one candidate):
    ``discarded`` (the old candidates file's ``discarded:`` entries, written by ``rag golden
    review``'s ``d``, carried into the new file as they are) and ``accepted`` (the sources of
    queries.yaml's mined queries). ``warnings``: what could not be read."""

    discarded: list[Any] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.discarded or self.accepted)

    def reason(self, source: str) -> str | None:
        """The skip reason of a candidate with this ``source`` (:data:`KNOWN_SKIPS`), or None."""
        if source in self.accepted:
            return "already_golden"
        if any(isinstance(d, dict) and d.get("source") == source for d in self.discarded):
            return "discarded_in_review"
        return None


def known_candidates(old: Path | None, golden: str | None) -> KnownCandidates:
    """Read the decisions a re-mine must respect (:class:`KnownCandidates`).

    Raises:
        MiningError: the old candidates file does not parse, or its ``discarded:`` is not a
            list: its review decisions cannot be carried over, and overwriting it would
            propose the discarded candidates again (fix the file, or move it away).
    """
    known = KnownCandidates()
    if old is not None:
        keep = ("its candidates discarded in review would be proposed again: fix the file, "
                "or move it away to start over; nothing was written")
        try:
            data = yaml.safe_load(old.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{old}:{mark.line + 1}" if mark is not None else str(old)
            first = (str(getattr(exc, "problem", None) or exc).strip().splitlines()
                     or [type(exc).__name__])[0]
            raise MiningError(f"{where}: cannot read its discarded: list ({first}); "
                              f"{keep}") from None
        listed = data.get("discarded") if isinstance(data, dict) else None
        if listed is not None and not isinstance(listed, list):
            raise MiningError(f"{old}: discarded: is not a list; {keep}")
        if listed:
            known.discarded = list(listed)
    if golden:
        try:
            data = yaml.safe_load((Path(golden) / "queries.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            data = None  # rag golden check reports a golden set that does not load
        for q in (data.get("queries") if isinstance(data, dict) else None) or []:
            if isinstance(q, dict) and str(q.get("source") or "").startswith("mined:"):
                known.accepted.add(str(q["source"]))
    return known


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


def mine(args: argparse.Namespace, known: KnownCandidates | None = None) -> MineResult:
    """Run the miner ``args.source`` names with the parsed options; ``known``: what earlier
    reviews decided, left out before ``--max`` counts (:data:`KNOWN_SKIPS`) and its
    ``discarded:`` list carried into the result."""
    for name in ("max", "max_files", "max_lines", "min_words", "max_labels", "max_symbol_lines"):
        if getattr(args, name) < 0:
            raise MiningError(f"--{name.replace('_', '-')} must be >= 0")
    if args.max_file_bytes <= 0:
        raise MiningError("--max-file-bytes must be > 0")
    if args.export and args.source != "github":
        raise MiningError("--export is only used with --from github")
    walk = dict(max_file_bytes=args.max_file_bytes, exclude=args.exclude, include=args.include)
    limit = args.max or None
    root = Path(args.path)
    from rag.golden.miners import miners

    if not known:
        return miners()[args.source].from_args(args, root=root, max_candidates=limit, walk=walk)
    result = miners()[args.source].from_args(args, root=root, max_candidates=limit, walk=walk,
                                             known=known.reason)
    counts = {r: result.skipped.pop(r, 0) for r in KNOWN_SKIPS}
    result.skipped.update(counts)  # listed last, in a fixed order, 0 too
    if known.discarded:
        result.extra = {**result.extra, "discarded": known.discarded}
    return result


def mine_command(args: argparse.Namespace) -> int:
    """``rag golden mine``: write the candidates file; exit 2 with one ``error:`` line on bad
    input."""
    try:
        out = output_path(args.source, args.out, args.golden)
        if out.exists() and out.is_dir():
            raise MiningError(f"--out {out}: is a directory")
        if out.exists() and not getattr(args, "force", False):
            raise MiningError(f"--out {out}: exists (it may hold review verdicts on its "
                              "candidates' labels, lost if overwritten; the candidates "
                              "discarded in review, listed under its discarded:, and those "
                              "moved into --golden's queries.yaml are not proposed again); "
                              "give --force to overwrite it, or another --out")
        known = known_candidates(out if out.exists() else None, args.golden)
        result = mine(args, known)
        result.warnings[:0] = known.warnings
        from rag.core.names import corpus_name_of_dir

        corpus = args.corpus or _corpus_of(args.golden) or corpus_name_of_dir(str(args.path))
        text = render_candidates(result, corpus=corpus)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="\n")
    except (MiningError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(skip_line(result), file=sys.stderr)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {len(result.candidates)} candidates to {out}")
    return 0
