"""``rag golden mine --from git``: each commit's subject (and, with ``--with-body``, its body)
as a query, what the commit changed *as it is at --at* as its labels; the skip reasons and the
candidates format are in rag/golden/mining.py's docstring."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rag.golden.commit_filters import (HOUSEKEEPING, clean_subject, conventional_type, file_kind,
                                       housekeeping_reason, non_code_lines)
from rag.golden.mining import MineResult, MiningError, chunks_of, is_generic, run_git, safe_id, walk_documents

#: ``rag golden mine --from git``
SOURCE = "git"
#: the tag its candidates carry
TAG = "mined_git"
#: what ``examined`` counts
NOUN = "commits"
#: every skip reason (each counted, 0 too)
SKIPS = ("merge", "revert", "test_only", *HOUSEKEEPING, "generic_subject", "no_indexable_file",
         "too_large", "no_line_change", "whitespace_only", "changed_since",
         "comments_or_imports_only", "no_label", "too_many_labels")
#: defaults of ``--max-labels`` and ``--max-symbol-lines`` (rag golden mine's parser reads them)
DEFAULT_MAX_LABELS = 8
DEFAULT_MAX_SYMBOL_LINES = 150
SYMBOL_LABEL_KINDS = frozenset({"function", "class", "method", "section"})

_DIFF_OPTS = ("--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/",
              "--dst-prefix=b/", "-M")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(name: str) -> str:
    """A path as git prints it in diff headers: C-quoted (``"a \\"b\\".py"``, octal bytes
    ``\\303\\251``) when it holds a quote, a backslash, a control character or, without
    ``core.quotePath=false``, a non-ASCII byte; its UTF-8 characters kept as they are."""
    name = name.rstrip("\t")
    if not (len(name) >= 2 and name[0] == '"' and name[-1] == '"'):
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            octal = body[i + 1:i + 4]
            if len(octal) == 3 and all(ch in "01234567" for ch in octal):
                out.append(int(octal, 8))
                i += 4
                continue
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
        out.extend(c.encode("utf-8", "surrogateescape"))
        i += 1
    return out.decode("utf-8", "replace")


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
    """Each commit reachable from ``at`` (newest first): sha, parents, date, subject, body.
    Fields are NUL-separated and commits NUL-terminated (``-z``): a message can hold any
    other byte (git refuses NUL in one), so every field lands where it belongs."""
    out = run_git(top, "log", "-z", "--format=%H %P%x00%aI%x00%s%x00%b%x00", at, "--",
                  *pathspec)
    fields = out.split("\x00")
    for i in range(0, len(fields) - 4, 5):
        ids, date, subject, body = fields[i:i + 4]
        sha, *parents = ids.split()
        yield {"sha": sha, "parents": parents, "date": date, "subject": subject.strip(),
               "body": body.strip()}


_TRAILER = re.compile(r"^(Signed-off-by|Co-authored-by|Reviewed-by|Acked-by|Change-Id|"
                      r"Cherry-picked-from|Tested-by|Reported-by):", re.I)


def _git_query(subject: str, body: str, with_body: bool) -> str:
    q = clean_subject(subject)
    if with_body and body:
        kept = "\n".join(ln for ln in body.splitlines() if not _TRAILER.match(ln)).strip()
        if kept:
            q = f"{q}\n\n{kept}"
    return q


def _rename_log(top: Path, at: str) -> dict[str, list[tuple[str, str]]]:
    """commit -> the (old, new) renames it made, for every commit reachable from ``at``, each
    detected against its own first parent (``git log -M``; merges show none)."""
    out: dict[str, list[tuple[str, str]]] = {}
    text = run_git(top, "log", "-M", "--diff-filter=R", "--name-status", "-z", "--format=%x1e%H",
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
    between = run_git(top, "rev-list", "--topo-order", f"{sha}..{at}").split()
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


def _is_bundle(path: Path) -> bool:
    """A git bundle file (``# v2 git bundle`` / ``# v3 git bundle`` header)."""
    try:
        with open(path, "rb") as f:
            return f.read(16).startswith((b"# v2 git bundle", b"# v3 git bundle"))
    except OSError:
        return False


def _symbol_lines(chunks, symbol: str) -> int:
    """How many lines the chunks carrying ``symbol`` span (first start to last end)."""
    own = [c for c in chunks if c.symbol == symbol]
    return max(c.end_line for c in own) - min(c.start_line for c in own) + 1


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
             min_words: int = 3, max_labels: int = DEFAULT_MAX_LABELS,
             max_symbol_lines: int = DEFAULT_MAX_SYMBOL_LINES,
             keep_tests: bool = False, keep_housekeeping: bool = False,
             allow_shallow: bool = False,
             max_file_bytes: int = 1_000_000,
             exclude: list[str] | None = None, include: list[str] | None = None,
             known: Callable[[str], str | None] | None = None) -> MineResult:
    """Candidates from the commits of the git repository holding ``root`` (module docstring:
    the skip reasons and the line-mapping rule).

    ``known``: a commit whose source (``mined:git <sha>``) an earlier review decided is
    skipped under the reason it returns (rag/golden/miners/__init__.py), before it counts
    towards ``max_candidates``.

    ``keep_tests``: label test files too (by default a test file, as the walker categorises
    it, is never a label, and a commit that changed only tests is skipped as ``test_only``).
    ``keep_housekeeping``: do not skip the :data:`HOUSEKEEPING` commits
    (:func:`rag.golden.commit_filters.housekeeping_reason`). ``max_labels``: a commit with
    more labels is skipped (``too_many_labels``). ``max_symbol_lines``: a changed symbol
    longer than this is labelled by the changed lines instead (a 400-line function is not
    the answer to each of the fixes made in it).

    Raises:
        MiningError: ``root`` is a bundle, not in a git work tree, or a shallow clone (unless
            ``allow_shallow``), or ``at`` is not a revision.
    """
    from rag.corpus.chunk import split_lines

    root = Path(root)
    if root.is_file() and _is_bundle(root):
        raise MiningError(f"--path {root}: a git bundle; clone it first "
                          f"(git clone {root} DIR) and mine DIR")
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    try:
        top = Path(run_git(root, "rev-parse", "--show-toplevel").strip())
        prefix = run_git(root, "rev-parse", "--show-prefix").strip()
    except MiningError:
        raise MiningError(f"--path {root}: not inside a git work tree") from None
    try:
        at_sha = run_git(top, "rev-parse", "--verify", "--end-of-options", f"{at}^{{commit}}").strip()
    except MiningError:
        raise MiningError(f"--at {at}: not a commit of {top}") from None
    if not allow_shallow and run_git(top, "rev-parse", "--is-shallow-repository").strip() == "true":
        n = run_git(top, "rev-list", "--count", at_sha).strip()
        raise MiningError(f"--path {root}: a shallow clone ({n} commits of history): fetch the "
                          "rest (git fetch --unshallow) or pass --allow-shallow to mine what "
                          "is there")
    docs = walk_documents(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    indexed = set(docs)
    renames_of = _rename_log(top, at_sha)
    skipped: Counter = Counter({r: 0 for r in SKIPS})
    candidates: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    at_texts: dict[str, str | None] = {}
    at_chunks: dict[str, list] = {}
    at_non_code: dict[str, frozenset[int]] = {}
    differ: set[str] = set()
    examined = 0

    def rel(p: str | None) -> str | None:
        return p[len(prefix):] if p is not None and p.startswith(prefix) else None

    def at_text(path: str) -> str | None:  # corpus-relative
        if path not in at_texts:
            try:
                at_texts[path] = run_git(top, "show", f"{at_sha}:{prefix}{path}")
            except MiningError:
                at_texts[path] = None
        return at_texts[path]

    for commit in _commits(top, at_sha, [prefix] if prefix else []):
        if max_candidates is not None and len(candidates) >= max_candidates:
            break
        examined += 1
        sha, subject, body = commit["sha"], commit["subject"], commit["body"]
        if known is not None and (reason := known(f"mined:git {sha}")):
            skipped[reason] += 1
            continue
        if len(commit["parents"]) > 1:
            skipped["merge"] += 1
            continue
        if re.match(r'^(Revert|Reapply) "', subject) or "This reverts commit" in body:
            skipped["revert"] += 1
            continue
        if not keep_tests and conventional_type(subject)[0] in ("test", "tests"):
            skipped["test_only"] += 1
            continue
        # the commit's files (post-image paths) and where each is at --at
        own = parse_unified(run_git(top, "show", "--format=", "--unified=0", *_DIFF_OPTS, sha))
        if not keep_housekeeping:
            reason = housekeeping_reason(subject, [f.new or f.old for f in own])
            if reason:
                skipped[reason] += 1
                continue
        if is_generic(clean_subject(subject), min_words):  # "" too: only references
            skipped["generic_subject"] += 1
            continue
        own = [f for f in own if f.new is not None and rel(f.new) is not None]
        renames = _renames_since(top, sha, at_sha, renames_of, [f.new for f in own])
        kept = []  # (file diff, corpus path at --at)
        tests_left_out = 0
        for f in own:
            target_rel = rel(renames[f.new])
            if target_rel is not None and target_rel in indexed \
                    and at_text(target_rel) is not None:
                if not keep_tests and docs[target_rel].category == "test":
                    tests_left_out += 1
                elif not keep_housekeeping and file_kind(target_rel) == "changelog":
                    continue
                else:
                    kept.append((f, target_rel))
        if not kept:
            skipped["test_only" if tests_left_out else "no_indexable_file"] += 1
            continue
        n_lines = 0
        numstat = run_git(top, "show", "--format=", "--numstat", "-z", "-M", sha, "--",
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
        ws = run_git(top, "show", "--format=", "--unified=0", "-w", "--ignore-blank-lines",
                  *_DIFF_OPTS, sha, "--", *paths)
        # the hunks that change more than whitespace: a gofmt realignment of a const block,
        # a re-indent, never labels the lines it touched
        ws_hunks = {g.new: g.hunks for g in parse_unified(ws) if g.new is not None}
        if not any(ws_hunks.values()):
            skipped["whitespace_only"] += 1
            continue
        # carry the commit's lines to --at: blob against blob, so a rename is no obstacle
        since = {}
        for f, target in kept:
            since[f.new] = [h for g in parse_unified(run_git(
                top, "diff", "--unified=0", *_DIFF_OPTS, f"{sha}:{f.new}",
                f"{at_sha}:{prefix}{target}")) for h in g.hunks]
        labels: list[dict[str, Any]] = []
        label_keys: set = set()
        lost = total = non_code = 0
        files_labelled = 0
        for f, target in kept:
            text = at_text(target)
            if text is None:
                continue
            if target not in at_chunks:
                at_chunks[target] = chunks_of(target, text)
                at_non_code[target] = non_code_lines(target, text)
            quiet = at_non_code[target]
            chunks, text_lines = at_chunks[target], split_lines(text)
            later = since[f.new]
            symbols: list[str] = []
            loose: list[int] = []

            def place(n: int) -> int | None:
                m = map_line(n, later)
                if m is None or m > len(text_lines) or not text_lines[m - 1].strip():
                    return None
                return m

            for a, b, c, d in ws_hunks.get(f.new, ()):
                if d:
                    for n in range(c, c + d):
                        total += 1
                        m = map_line(n, later)
                        if m is None:
                            lost += 1
                            continue
                        if m > len(text_lines) or not text_lines[m - 1].strip():
                            continue
                        if m in quiet:  # a comment, docstring or import line
                            non_code += 1
                            continue
                        ch = _smallest_chunk(chunks, m)
                        if _is_symbol_chunk(ch) and _symbol_lines(chunks, ch.symbol) \
                                <= max_symbol_lines:
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
                        if ca is not cb or not _is_symbol_chunk(ca):
                            continue
                        if _symbol_lines(chunks, ca.symbol) > max_symbol_lines:
                            # a large symbol is labelled by the lines around the deletion,
                            # as by its changed lines when lines were added
                            loose.extend(m for m in (above, below) if m not in quiet)
                        elif ca.symbol not in symbols:
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
            skipped["changed_since" if lost else "comments_or_imports_only" if non_code
                    else "no_label"] += 1
            continue
        if len(labels) > max_labels:
            skipped["too_many_labels"] += 1
            continue
        label_kinds = {file_kind(lab["path"]) for lab in labels}
        if not keep_housekeeping and label_kinds <= {"manifest", "ci", "config"}:
            # what is left to label is a go.mod line or a Makefile target: no query's answer
            skipped["dependency_bump" if label_kinds == {"manifest"} else "ci"] += 1
            continue
        labels.sort(key=lambda lab: (lab["path"], lab.get("lines", [0])[0]))
        note = (f"{len(kept)} indexed file(s), {n_lines} changed line(s) in the commit"
                + (f"; {lost} of its {total} new line(s) rewritten since" if lost else "")
                + (f"; {tests_left_out} test file(s) left out" if tests_left_out else "")
                + ("" if sha == at_sha else f"; lines as at {at_sha[:10]}"))
        candidates.append({
            "id": safe_id("git", sha[:10], seen_ids),
            "query": _git_query(subject, body, with_body),
            "source": f"mined:git {sha}",
            "tags": [TAG],
            "relevant": labels,
            "note": note,
            "commit": sha,
            "subject": subject,
            "date": commit["date"],
        })
    return MineResult("git", candidates, skipped, examined,
                      extra={"at": at_sha, "files_differ_from_worktree": len(differ)})


def from_args(args, *, root: Path, max_candidates: int | None, walk: dict,
              known: Callable[[str], str | None] | None = None) -> MineResult:
    """Run this miner with ``rag golden mine``'s parsed options (``walk``: the walker's
    ``max_file_bytes`` / ``exclude`` / ``include``; ``known``: see :func:`mine_git`)."""
    return mine_git(root, at=args.at, max_candidates=max_candidates, with_body=args.with_body,
                    known=known,
                    max_files=args.max_files, max_lines=args.max_lines,
                    min_words=args.min_words, max_labels=args.max_labels,
                    max_symbol_lines=args.max_symbol_lines, keep_tests=args.keep_tests,
                    keep_housekeeping=args.keep_housekeeping,
                    allow_shallow=args.allow_shallow, **walk)
