"""``rag golden review``: judge the unjudged (query, unit) pairs of a pool file in a terminal.

Each pair shows its evidence, read from the corpus root: the unit's lines — a ``path#symbol``
unit's symbol (the file chunked as the index chunks it), a ``path#L<a>-<b>`` span, a whole-file
unit's ranked chunk when the pool knows its lines (else the file from its first line) — with
:data:`DEFAULT_CONTEXT` lines of context and at most ``--max-lines`` lines of the unit; the
query's terms and the lines holding them; for a candidate's own (mined) label the commit's diff
of its file; and the pool's judged coverage so far. Syntax highlighting (rich) when stdout is a
terminal, plain numbered lines otherwise (``--color``). Line-based: no mouse, no alternate
screen, works over SSH. ``--only proposed|pooled`` walks one kind of pair.

Keys (one keypress on a terminal; one per line with ``--script FILE`` or ``-`` for stdin, or
whenever stdin is not a terminal; blank lines and ``#`` lines of a script are ignored; a script
with any other line that is not a key is refused before anything is written):

``y``  relevant: a label of the unit shown (``path``, ``path`` + ``symbol`` or ``path`` +
       ``lines``) is appended to the query's ``relevant:`` in queries.yaml. A candidate's first
       ``y`` moves it (it leaves its candidates file) into queries.yaml with that one label as
       its ``relevant:``: every key of its entry, ``source:`` included, except its other
       proposals (left in the pool, each reviewed in turn) and the miner's per-source keys
       :data:`rag.golden.mining.PER_SOURCE_KEYS` — ``kind``, ``leakage``, ``commit``, ...
       — which queries.yaml does not take. ``y UNIT`` (a script line, e.g.
       ``y Flask.url_for``, ``y Registering Blueprints`` or ``y L10-20``) labels only that
       symbol (as the chunker names it in that file) or that span of a whole-file hit
       instead, and the rest of the file then counts as judged not relevant (the narrowing
       rule of :func:`rag.golden.pooling.judgement`). A unit that is not a symbol of the file
       (or a span past its end), or ``y UNIT`` on a hit that is not a whole file, is not
       written: the pair is skipped with one line saying why.
``n``  not relevant: the label is appended to the query's ``not_relevant:`` (for a candidate
       not yet in queries.yaml: in its entry of the candidates file, and out of its proposals).
``s``  skip this pair (it comes back in the next session).
``e``  edit the query text (on a terminal: prompted; in a script: ``e NEW TEXT``); the pair is
       shown again.
``d``  discard the candidate: its query makes no golden query; it leaves its candidates file
       and its pairs are left out (a query of queries.yaml is never discarded here).
``q``  quit. Every judgement is written when it is made, so a session can stop anywhere and
       the next one skips every pair that is judged by then.

The YAML files are rewritten with ruamel.yaml's round trip: comments, key order, quoting and
blank lines are kept. After each write of queries.yaml the golden set is loaded with
:func:`rag.eval.golden.load_golden`; if it loaded before the session and no longer does, the
write is undone and the session stops (exit 2).
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from rag.eval.golden import NEGATIVES_FILE, QUERIES_FILE
from rag.golden.pooling import (GOLDEN_ORIGIN, PoolError, judgement, label_key, read_pool, split_doc,
                                well_formed_labels)

KEYS = {"y": "relevant", "n": "not relevant", "s": "skip", "e": "edit the query text",
        "d": "discard the candidate (its query makes no golden query)",
        "q": "quit"}
PROMPT = "[y] relevant  [n] not relevant  [s] skip  [e] edit query  [d] discard candidate  [q] quit > "
DEFAULT_MAX_LINES = 80
DEFAULT_CONTEXT = 3  # lines shown above and below a hit's unit
DEFAULT_DIFF_LINES = 40  # lines of a mined label's commit diff shown


class ReviewError(RuntimeError):
    """A review cannot go on (bad input, a write that breaks the golden set); one line."""


# ---------------------------------------------------------------------------- YAML round trip

def _yaml_for(text: str):
    """A round-trip ruamel.yaml instance that writes ``text`` back unchanged (indentation
    guessed from it, long lines never re-wrapped, quotes kept)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.util import load_yaml_guess_indent

    y = YAML()
    y.preserve_quotes = True
    y.width = 1 << 16
    try:
        _, ind, bsi = load_yaml_guess_indent(text)
    except Exception:  # noqa: BLE001 - the real load reports the error
        ind, bsi = None, None
    bsi = bsi or 0
    ind = ind or (4 if bsi else 2)
    y.indent(mapping=ind - bsi if ind - bsi >= 2 else 2, sequence=ind, offset=bsi)
    return y


def _containers():
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    return CommentedMap, CommentedSeq


def _tail_slot(node):
    """Where the comment after a node's last line lives: (container, key/index, position)."""
    cmap, cseq = _containers()
    while True:
        if isinstance(node, cmap) and len(node):
            k = list(node.keys())[-1]
            if isinstance(node[k], (cmap, cseq)) and len(node[k]):
                node = node[k]
                continue
            return node, k, 2
        if isinstance(node, cseq) and len(node):
            i = len(node) - 1
            if isinstance(node[i], (cmap, cseq)) and len(node[i]):
                node = node[i]
                continue
            return node, i, 0
        return None


def _get_token(slot):
    node, k, pos = slot
    entry = node.ca.items.get(k)
    return entry[pos] if entry and len(entry) > pos else None


def _set_token(slot, token) -> None:
    node, k, pos = slot
    entry = node.ca.items.setdefault(k, [None, None, None, None] if pos == 2 else [None, None])
    entry[pos] = token


def _new_token(value: str):
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    return CommentToken(value, CommentMark(0), None)


def grow(container, change: Callable[[], None], *, gap: bool = False) -> None:
    """Apply ``change`` (which adds something at the end of ``container``) so that the lines
    that followed the container's old last line (blank lines, comments before the next
    entry) follow the new last line instead; an end-of-line comment stays where it was.
    ``gap``: leave one blank line between the old last line and the new content."""
    before = _tail_slot(container)
    token = _get_token(before) if before is not None else None
    change()
    after = _tail_slot(container)
    if before is None or after is None or (before[0] is after[0] and before[1] == after[1]
                                           and _get_token(after) is token):
        return
    if token is None:
        if gap:
            _set_token(before, _new_token("\n\n"))
        return
    first, nl, rest = token.value.partition("\n")
    if rest:
        moved = copy.copy(token)
        moved.value = "\n" + rest
        _set_token(after, moved)
    token.value = first + nl + ("\n" if gap else "")


def _fresh(node):
    """A copy of a loaded node without its comments (flow style of lists and maps kept)."""
    cmap, cseq = _containers()
    if isinstance(node, cmap):
        out = cmap((k, _fresh(v)) for k, v in node.items())
        if node.fa.flow_style():
            out.fa.set_flow_style()
        return out
    if isinstance(node, cseq):
        out = cseq(_fresh(v) for v in node)
        if node.fa.flow_style():
            out.fa.set_flow_style()
        return out
    return node


@dataclass
class _YamlFile:
    path: Path
    yaml: Any
    data: Any
    text: str


class GoldenEditor:
    """The golden ``queries.yaml`` (and candidates files), edited in place with round trips.

    Args:
        golden_dir: the golden directory.
        verify: after each write of queries.yaml, load the set with ``load_golden`` and undo
            the write if it no longer loads (only if it loaded when the editor was opened).
    """

    def __init__(self, golden_dir: Path, *, verify: bool = True) -> None:
        self.dir = Path(golden_dir)
        if not (self.dir / QUERIES_FILE).is_file():
            raise ReviewError(f"{self.dir}: no {QUERIES_FILE} there")
        self.files: dict[Path, _YamlFile] = {}
        self.queries = self._open(self.dir / QUERIES_FILE)
        if not isinstance(self.queries.data, dict) or not isinstance(self.queries.data.get("queries"), list):
            raise ReviewError(f"{self.queries.path}: needs a 'queries:' list")
        self.negative_ids = self._negative_ids()
        self.load_problem: str | None = None
        self.verify = verify
        self.replaced: list[str] = []  # narrower labels a whole-file label replaced
        if verify:
            self.load_problem = self._load_problem()

    def _negative_ids(self) -> set[str]:
        import yaml

        nfile = self.dir / NEGATIVES_FILE
        try:
            data = yaml.safe_load(nfile.read_text(encoding="utf-8")) if nfile.is_file() else None
        except (yaml.YAMLError, UnicodeDecodeError):
            return set()
        items = data.get("negatives") if isinstance(data, dict) else None
        return {n.get("id") for n in items or [] if isinstance(n, dict)}

    def _open(self, path: Path) -> _YamlFile:
        path = Path(path).resolve()
        if path in self.files:
            return self.files[path]
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ReviewError(f"{path}: cannot read ({exc.strerror or exc})") from None
        y = _yaml_for(text)
        try:
            data = y.load(text)
        except Exception as exc:  # noqa: BLE001 - ruamel's YAMLError and its kin
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ReviewError(f"{where}: not valid YAML ({problem}); fix it and run review "
                              "again (nothing was written)") from None
        f = self.files[path] = _YamlFile(path, y, data, text)
        return f

    def _problems(self) -> list[str]:
        """What stops the golden set loading now (``load_golden``'s problems, each without
        its ``file:line`` prefix, since a write moves lines); [] when it loads."""
        import re as _re

        from rag.eval.golden import GoldenError, load_golden

        try:
            load_golden(self.dir)
        except GoldenError as exc:
            return [_re.sub(r"^[^:]*:\d+:\s*", "", p) for p in exc.problems]
        return []

    def _load_problem(self) -> str | None:
        probs = self._problems()
        self.known_problems = set(probs)
        return "; ".join(probs) if probs else None

    def _save(self, f: _YamlFile) -> None:
        buf = io.StringIO()
        f.yaml.dump(f.data, buf)
        old, new = f.text, buf.getvalue()
        _write(f.path, new)
        f.text = new
        if self.verify and f.path == self.queries.path:
            # a set that loaded must still load; one that did not may gain no new problem
            new_problems = [p for p in self._problems()
                            if p not in getattr(self, "known_problems", set())]
            if new_problems:
                _write(f.path, old)
                f.text, f.data = old, f.yaml.load(old)
                raise ReviewError("the write was undone: it would add to what stops the golden "
                                  "set loading (rag.eval.golden.load_golden): "
                                  + "; ".join(new_problems))

    # -- lookups

    def golden_entry(self, qid: str):
        for item in self.queries.data["queries"]:
            if isinstance(item, dict) and item.get("id") == qid:
                return item
        return None

    def entry(self, qid: str, origin: str):
        """The query's entry and its file: queries.yaml first, else the candidates file."""
        item = self.golden_entry(qid)
        if item is not None:
            return item, self.queries
        if origin == GOLDEN_ORIGIN or not Path(origin).is_file():
            return None, None
        f = self._open(Path(origin))
        items = f.data.get("candidates") if isinstance(f.data, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("id") == qid:
                return item, f
        return None, None

    def labels(self, qid: str, origin: str) -> tuple[list[dict], list[dict]]:
        """``(relevant, not_relevant)`` judgements of a query. A candidate's ``relevant:``
        are its proposals (mined, unreviewed): no judgement until review moves them."""
        item, f = self.entry(qid, origin)
        if item is None:
            return [], []

        rel = well_formed_labels(item.get("relevant")) if f is self.queries else []
        return rel, well_formed_labels(item.get("not_relevant"))

    def is_candidate(self, qid: str, origin: str) -> bool:
        """True while the query is still an entry of its candidates file."""
        item, f = self.entry(qid, origin)
        return item is not None and f is not self.queries

    def judged(self, qid: str, origin: str, doc: str,
               lines: tuple[int, int] | None = None) -> str | None:
        rel, nrel = self.labels(qid, origin)
        return judgement(doc, rel, nrel, lines=lines)[0]

    # -- writes

    def _append_label(self, item, key: str, doc: str, *, at: int | None = None,
                      source: str | None = None) -> None:
        cmap, cseq = _containers()
        path, symbol, lines = split_doc(doc)
        label = cmap([("path", path)])
        if symbol:
            label["symbol"] = symbol
        if lines:
            span = cseq(lines)
            span.fa.set_flow_style()
            label["lines"] = span
        if source:
            label["source"] = source
        if isinstance(item.get(key), list) and len(item[key]):
            seq = item[key]
            if getattr(getattr(seq, "anchor", None), "value", None):
                # an anchored list (&shared) other queries alias: this query gets its own
                # copy, so a judgement lands in this query alone
                seq = copy.deepcopy(seq)
                seq.anchor.value = None
                item[key] = seq

            def change():
                if doc == path:  # a whole-file label replaces the narrower ones of its path
                    for i in reversed(range(len(seq))):
                        if isinstance(seq[i], dict) and seq[i].get("path") == path:
                            self.replaced.append(label_key(seq[i]))
                            del seq[i]
                seq.append(label)
            grow(item, change)
            return
        item.pop(key, None)  # an empty list
        keys = list(item.keys())
        # relevant before not_relevant, both after the query's other keys
        if at is not None:
            pass
        elif key == "relevant" and "not_relevant" in keys:
            at = keys.index("not_relevant")
        elif key == "not_relevant" and "relevant" in keys:
            at = keys.index("relevant") + 1
        else:
            at = len(keys)
        grow(item, lambda: item.insert(at, key, cseq([label])))

    def judge(self, qid: str, origin: str, doc: str, relevant: bool, *,
              source: str | None = None) -> str:
        """Write one judgement; returns the file written.

        A candidate's first ``y`` *moves* it: its entry goes to queries.yaml with that one
        label as its only ``relevant:`` (its ``not_relevant:`` judgements kept, the miner's
        per-source keys dropped) and leaves the candidates file; its other proposals stay in
        the pool to be judged one by one. ``n`` on a candidate's proposal records it under
        the candidate's ``not_relevant:`` and takes it out of its proposals. ``source``: the
        label's ``source:`` (how the judgement was made: :func:`label_source`).
        """
        item, f = self.entry(qid, origin)
        if item is None:
            raise ReviewError(f"query {qid!r} is in neither {self.queries.path} nor {origin}")
        if relevant and f is not self.queries:  # a candidate's first relevant label
            if qid in self.negative_ids:
                raise ReviewError(f"candidate {qid!r} has the id of a negative in "
                                  f"{self.dir / NEGATIVES_FILE}; rename it first")
            from rag.golden.mining import PER_SOURCE_KEYS

            new = _fresh(item)
            for key in PER_SOURCE_KEYS:  # a mined candidate's keys that queries.yaml refuses
                new.pop(key, None)
            # proposals, not judgements: only this one moves, where the list was
            at = list(new.keys()).index("relevant") if "relevant" in new else None
            new.pop("relevant", None)
            self._append_label(new, "relevant", doc, at=at, source=source)
            seq = self.queries.data["queries"]
            grow(seq, lambda: seq.append(new), gap=_separated(seq))
            self._save(self.queries)
            self._remove_entry(f, item)  # after queries.yaml: a crash between keeps both
            return str(self.queries.path)
        if not relevant and f is not self.queries:
            self._drop_proposal(item, doc)
        self._append_label(item, "relevant" if relevant else "not_relevant", doc, source=source)
        self._save(f)
        return str(f.path)

    def discard(self, qid: str, origin: str) -> str:
        """Remove a candidate from its candidates file (a reviewer's ``d``) and remember it
        in that file's ``discarded:`` list (``{source, query}``: what ``rag golden mine
        --force`` reads so as not to propose it again); returns the file.

        Raises:
            ReviewError: the query is not a candidate (it is in queries.yaml, or gone)."""
        item, f = self.entry(qid, origin)
        if item is None or f is self.queries:
            raise ReviewError(f"query {qid!r} is not a candidate of {origin}")
        if isinstance(f.data, dict):
            if f.data.get("discarded") is None:
                f.data["discarded"] = []
            elif not isinstance(f.data["discarded"], list):
                raise ReviewError(f"{f.path}: its discarded: is not a list; fix it by hand "
                                  "before discarding more")
            f.data["discarded"].append({"source": str(item.get("source") or ""),
                                        "query": str(item.get("query") or "")})
        self._remove_entry(f, item)
        return str(f.path)

    def _remove_entry(self, f: _YamlFile, item) -> None:
        items = f.data.get("candidates")
        for i in range(len(items)):
            if items[i] is item:
                del items[i]
                break
        self._save(f)

    @staticmethod
    def _drop_proposal(item, doc: str) -> None:
        seq = item.get("relevant")
        if isinstance(seq, list):
            for i in reversed(range(len(seq))):
                if isinstance(seq[i], dict) and isinstance(seq[i].get("path"), str) \
                        and label_key(seq[i]) == doc:
                    del seq[i]
            if not len(seq):
                del item["relevant"]

    def edit_query(self, qid: str, origin: str, text: str) -> str:
        """Replace the query text; returns the file written."""
        item, f = self.entry(qid, origin)
        if item is None:
            raise ReviewError(f"query {qid!r} is in neither {self.queries.path} nor {origin}")
        item["query"] = text
        self._save(f)
        return str(f.path)


def _separated(seq) -> bool:
    """Whether the entries of a list are separated by blank lines (the last gap decides)."""
    if len(seq) < 2:
        return False
    slot = _tail_slot(seq[-2])
    token = _get_token(slot) if slot else None
    return bool(token) and token.value.partition("\n")[2].startswith("\n")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.review-tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    except OSError:
        pass
    tmp.replace(path)


# ---------------------------------------------------------------------------- the hit's code

def indexed_paths(corpus_root: Path) -> frozenset[str]:
    """The corpus-relative paths rag indexes under ``corpus_root`` (the walker's default
    rules: ignore files, default excludes, size cap, no secrets, no binaries). Review and the
    judge read, show, send and label only these: never a path outside the root, a gitignored
    ``.env``, a key file or a binary a pool file names."""
    from rag.golden.mining import walk_documents

    return frozenset(walk_documents(Path(corpus_root), max_file_bytes=1_000_000, exclude=None,
                                    include=None))


@dataclass
class HitCode:
    """The lines of a hit: the unit is ``start``..``end`` (1-based, inclusive; ``total``
    lines); ``lines`` are shown from line ``first``, a few lines of context around the unit
    included (``first`` < ``start`` when there is context above)."""

    path: str
    start: int
    end: int
    lines: list[str]
    total: int
    note: str = ""
    first: int = 0  # 0: the same as start
    missing: bool = False  # the unit is not in the file now (a symbol gone): no verdict on it

    def __post_init__(self) -> None:
        if not self.first:
            self.first = self.start


def hit_code(corpus_root: Path, doc: str, *, max_lines: int = DEFAULT_MAX_LINES,
             context: int = DEFAULT_CONTEXT, lines: tuple[int, int] | list[int] | None = None,
             indexed: frozenset[str] | None = None) -> HitCode:
    """The code of a hit (``path``, ``path#symbol`` or ``path#L<a>-<b>``) under
    ``corpus_root``: the symbol's lines (the file chunked as the index chunks it), the span,
    or, for a whole-file hit, the chunk's own ``lines`` when the pool knows them (else the
    file from its first line); ``context`` lines above and below, at most ``max_lines`` of
    the unit.

    ``indexed`` (:func:`indexed_paths`): refuse a path rag does not index there.

    Raises:
        ReviewError: the path is not indexed (``indexed`` given), the file cannot be read, or
            the span is not inside it.
    """
    from rag.corpus.chunk import chunk_document, split_lines
    from rag.corpus.walk import Document, categorize

    path, symbol, span = split_doc(doc)
    if indexed is not None and path not in indexed:
        raise ReviewError(f"{path} is not a file rag indexes under {corpus_root} (outside it, "
                          "ignored, a secret, binary or too large): never shown nor labelled")
    f = Path(corpus_root) / path
    try:
        data = f.read_bytes()
    except OSError as exc:
        raise ReviewError(f"{f}: cannot read the hit's file ({exc.strerror or exc})") from None
    text = data.decode("utf-8", errors="replace")
    all_lines = [ln.rstrip("\r\n") for ln in split_lines(text)]
    start, end, note = 1, len(all_lines), ""
    whole = missing = False
    if span:
        if not 1 <= span[0] <= span[1] <= len(all_lines):
            raise ReviewError(f"{doc}: lines {span[0]}-{span[1]} are not inside {path} "
                              f"({len(all_lines)} lines)")
        start, end = span
    elif symbol:
        chunks = [c for c in chunk_document(Document(path=path, category=categorize(path),
                                                     text=text, size=len(data)))
                  if c.symbol == symbol]
        if chunks:
            start, end = min(c.start_line for c in chunks), max(c.end_line for c in chunks)
        else:
            note = f"symbol {symbol!r} not found in the file now; the whole file is shown"
            whole = missing = True
    elif lines:
        start, end = int(lines[0]), min(int(lines[1]), len(all_lines))
        note = "a whole-file unit: the lines of the chunk that was ranked"
    else:
        whole = True
    total = max(0, end - start + 1)
    shown_end = end if not max_lines or total <= max_lines else start + max_lines - 1
    first = start if whole else max(1, start - context)
    last = shown_end if whole or shown_end < end else min(len(all_lines), end + context)
    return HitCode(path=path, start=start, end=end, lines=all_lines[first - 1:last],
                   total=total, note=note, first=first, missing=missing)


def query_terms(query: str) -> list[str]:
    """The query's terms as BM25 reads them (:func:`rag.index.tokenize.tokenize`: lower
    case, identifiers split, stopwords out), distinct, in order."""
    from rag.index.tokenize import tokenize

    return list(dict.fromkeys(tokenize(query)))


def term_lines(code: HitCode, terms: list[str]) -> dict[str, list[int]]:
    """term -> the shown line numbers holding it (case-insensitive substring)."""
    out: dict[str, list[int]] = {}
    for i, line in enumerate(code.lines):
        low = line.lower()
        for t in terms:
            if t in low:
                out.setdefault(t, []).append(code.first + i)
    return out


def commit_hunks(corpus_root: Path, source: str | None, path: str, *,
                 symbol: str | None = None, max_lines: int = DEFAULT_DIFF_LINES
                 ) -> list[str] | None:
    """For a label mined from git (``source: mined:git <sha>``): the commit's diff of
    ``path`` (``git show --unified=1``; the path as the pool names it, relative to the corpus
    root) — only the hunks that name ``symbol``'s last part in their ``@@`` line (git's
    enclosing-function context) or their lines, when any does — at most ``max_lines``
    lines; None for another source, or when git cannot show it (not a work tree, an unknown
    commit, a file renamed since)."""
    import re
    import subprocess

    m = re.match(r"mined:git ([0-9a-f]{7,40})\b", source or "")
    if not m:
        return None
    try:
        p = subprocess.run(["git", "-C", str(corpus_root), "show", "--format=", "--unified=1",
                            "--no-color", "--no-ext-diff", m.group(1), "--", path],
                           capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return None
    out = [ln for ln in p.stdout.decode("utf-8", "replace").splitlines()
           if not ln.startswith(("diff --git", "index ", "--- ", "+++ "))]
    if not out:
        return None
    if symbol:
        name = symbol.rsplit(".", 1)[-1]
        hunks: list[list[str]] = []
        for ln in out:
            if ln.startswith("@@") or not hunks:
                hunks.append([ln])
            else:
                hunks[-1].append(ln)
        mine = [h for h in hunks if any(re.search(rf"\b{re.escape(name)}\b", ln) for ln in h)]
        if mine and len(mine) < len(hunks):
            out = [ln for h in mine for ln in h] + [
                f"... ({len(hunks) - len(mine)} other hunk(s) of this file not shown)"]
    return out[:max_lines] + ([f"... ({len(out) - max_lines} more diff lines)"]
                              if len(out) > max_lines else [])


def narrowed_doc(corpus_root: Path, doc: str, unit: str) -> tuple[str | None, str | None]:
    """The doc id of ``unit`` (a symbol as the chunker names it in the file, or
    ``L<start>-<end>``) inside the whole-file hit ``doc``: ``(doc id, None)``, or ``(None,
    why)`` when the hit is not a whole file, the file cannot be read, or the unit is not a
    symbol of the file / a span inside it."""
    import re

    from rag.corpus.chunk import chunk_document, split_lines
    from rag.corpus.walk import Document, categorize

    if "#" in doc:
        return None, f"{doc} is not a whole-file hit: 'y {unit}' narrows only a path"
    try:
        data = (Path(corpus_root) / doc).read_bytes()
    except OSError as exc:
        return None, f"cannot read {doc} ({exc.strerror or exc})"
    text = data.decode("utf-8", errors="replace")
    m = re.fullmatch(r"L(\d+)-(\d+)", unit)
    if m:
        a, b, n = int(m.group(1)), int(m.group(2)), len(split_lines(text))
        if not 1 <= a <= b <= n:
            return None, f"{unit} is not a span of {doc} (1 <= start <= end <= {n})"
        return f"{doc}#L{a}-{b}", None
    symbols = {c.symbol for c in chunk_document(Document(
        path=doc, category=categorize(doc), text=text, size=len(data))) if c.symbol}
    if unit not in symbols:
        return None, f"{unit!r} is not a symbol of {doc}"
    return f"{doc}#{unit}", None


def _golden_corpus(golden_dir: Path) -> str | None:
    """The ``corpus:`` field of ``golden_dir``'s queries.yaml, or None (absent, unreadable)."""
    import yaml

    try:
        data = yaml.safe_load((golden_dir / QUERIES_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return data.get("corpus") if isinstance(data, dict) else None


def use_color(mode: str, stream: TextIO) -> bool:
    """``always`` / ``never``, or ``auto``: when ``stream`` is a terminal (and rich imports)."""
    if mode == "never":
        return False
    if mode == "auto":
        try:
            if not stream.isatty():
                return False
        except (AttributeError, ValueError):
            return False
    import importlib.util

    return importlib.util.find_spec("rich") is not None


@dataclass
class Pair:
    """One (query, hit) to judge."""

    query_id: str
    query: str
    origin: str
    source: str | None
    hit: dict[str, Any]
    runs_total: int


def render_pair(out: TextIO, pair: Pair, code: HitCode | None, error: str | None, *,
                index: int, total: int, color: bool, labels: tuple[list, list],
                run_labels: dict[str, str], diff: list[str] | None = None,
                coverage: tuple[int, int] | None = None, moved: bool = False) -> None:
    """Write one pair: header (query, where it lives, its labels so far, the hit's ranks or
    "proposed by the miner", judged coverage so far) and the evidence: the unit's lines with
    a few lines of context (``:`` in the gutter for context, ``|`` for the unit, ``*`` where
    a query term occurs; highlighted with rich on a terminal) and, for a mined label, the
    commit's diff of its file."""
    hit = pair.hit
    where = "queries.yaml" if pair.origin == GOLDEN_ORIGIN or moved \
        else f"candidate from {Path(pair.origin).name}"
    found = ", ".join(run_labels.get(r, r[:8]) for r in hit.get("runs", []))
    head = [f"[{index}/{total}] {pair.query_id} ({where}"
            + (f"; source: {pair.source}" if pair.source else "") + ")"
            + (f"  judged so far {coverage[0]}/{coverage[1]} pooled units "
               f"({100 * coverage[0] / coverage[1]:.0f}%)" if coverage and coverage[1] else ""),
            f"  query: {pair.query}"]
    rel, nrel = labels
    if rel:
        head.append("  relevant: " + ", ".join(label_key(lab) for lab in rel))
    if nrel:
        head.append("  not relevant: " + ", ".join(label_key(lab) for lab in nrel))
    if hit.get("proposed") and not hit.get("runs"):
        head.append(f"  hit: {hit['doc']}  proposed by the miner (a label of the candidate)")
    else:
        head.append(f"  hit: {hit['doc']}  " + ("proposed by the miner; " if hit.get("proposed") else "")
                    + f"best rank {hit['best_rank']}, found by "
                    f"{len(hit.get('runs', []))}/{pair.runs_total} ranking(s)"
                    + (f": {found}" if found else ""))
    terms = query_terms(pair.query)
    where_terms: dict[str, list[int]] = {}
    if code is not None:
        span = f"{code.path}:{code.start}-{code.end}" if code.total else f"{code.path} (empty)"
        shown_unit = min(code.total, code.first + len(code.lines) - code.start)
        more = code.total - shown_unit
        head.append(f"  {span}" + (f"  (first {shown_unit} of {code.total} lines)" if more > 0 else ""))
        if code.note:
            head.append(f"  note: {code.note}")
        where_terms = term_lines(code, terms)
        if terms:
            head.append("  terms: " + ", ".join(
                f"{t} (line {', '.join(map(str, where_terms[t][:5]))})" if t in where_terms
                else f"{t} (absent)" for t in terms))
    if error:
        head.append(f"  ({error})")
    marked = {n for ns in where_terms.values() for n in ns}
    if not color:
        out.write("\n".join(head) + "\n")
        if code is not None:
            width = len(str(code.first + max(len(code.lines) - 1, 0)))
            for i, line in enumerate(code.lines):
                n = code.first + i
                gutter = "|" if code.start <= n <= code.end else ":"
                out.write(f"{'*' if n in marked else ' '}{n:>{width}} {gutter} {line}\n")
        if diff:
            out.write("  the commit's change to this file:\n")
            for line in diff:
                out.write(f"    {line}\n")
        out.flush()
        return
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.text import Text

    console = Console(file=out, force_terminal=True, highlight=False, soft_wrap=False)
    console.rule(style="dim")
    console.print(Text(head[0], style="bold"))
    for line in head[1:]:
        console.print(Text(line, style="cyan" if line.startswith("  query:") else ""))
    if code is not None and code.lines:
        body = "\n".join(code.lines)
        syntax = Syntax(body, Syntax.guess_lexer(code.path, code=body), theme="ansi_dark",
                        line_numbers=True, start_line=code.first, word_wrap=False,
                        highlight_lines=set(range(code.start, code.end + 1)))
        for i, line in enumerate(code.lines):  # the query's terms, reversed
            low = line.lower()
            for t in terms:
                at = low.find(t)
                while at >= 0:
                    syntax.stylize_range("reverse", (i + 1, at), (i + 1, at + len(t)))
                    at = low.find(t, at + len(t))
        console.print(syntax)
    if diff:
        console.print(Text("  the commit's change to this file:", style="bold"))
        for line in diff:
            console.print(Text("    " + line, style="green" if line.startswith("+")
                               else "red" if line.startswith("-") else "dim"))
    out.flush()


# ---------------------------------------------------------------------------- keys

class Keys:
    """Where the keys come from: ``next()`` -> (key, argument) or None at the end."""

    def next(self, out: TextIO) -> tuple[str, str | None] | None:  # pragma: no cover
        raise NotImplementedError

    def edit(self, current: str, out: TextIO) -> str | None:  # pragma: no cover
        raise NotImplementedError


class ScriptKeys(Keys):
    """One key per line (``y``, ``n``, ``s``, ``q``, ``e NEW TEXT``); blank and ``#`` lines
    are ignored; each key read is echoed after the prompt."""

    def __init__(self, lines: Iterator[str], name: str) -> None:
        self.lines = lines
        self.name = name
        self.n = 0

    def next(self, out):
        for raw in self.lines:
            self.n += 1
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, _, arg = line.partition(" ")
            if key not in KEYS or (arg.strip() and key not in ("e", "y")):
                raise ReviewError(f"{self.name}:{self.n}: unknown key {line!r} "
                                  f"(one of {', '.join(KEYS)}; e takes the new text, y "
                                  "optionally a symbol or L<start>-<end> of the hit's file)")
            out.write(PROMPT + line + "\n")
            return key, arg.strip() or None
        return None

    def edit(self, current, out):
        return None


def check_script(lines: list[str], name: str) -> None:
    """Refuse a review script with any line that is not a key, naming each (``name:line``),
    before the session writes anything.

    Raises:
        ReviewError: one line per bad script line, joined.
    """
    bad = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, arg = line.partition(" ")
        if key not in KEYS or (arg.strip() and key not in ("e", "y")):
            bad.append(f"{name}:{n}: unknown key {line!r}")
    if bad:
        raise ReviewError("; ".join(bad) + f" (keys: {', '.join(KEYS)}; e takes the new text, "
                          "y optionally a symbol or L<start>-<end> of a whole-file hit); "
                          "nothing was judged")


class TerminalKeys(Keys):
    """One keypress (cbreak mode) from a terminal; the new query text read as a line."""

    def __init__(self, stdin: TextIO) -> None:
        self.stdin = stdin

    def _getch(self) -> str:
        import termios
        import tty

        fd = self.stdin.fileno()
        old = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd)
            return os.read(fd, 1).decode("utf-8", errors="replace")
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)

    def next(self, out):
        while True:
            out.write(PROMPT)
            out.flush()
            ch = self._getch()
            if ch in ("", "\x04"):  # EOF, Ctrl-D
                out.write("\n")
                return None
            if ch == "\x03":
                raise KeyboardInterrupt
            out.write(ch + "\n")
            if ch in KEYS:  # case matters: a stray capital never discards a candidate
                return ch, None
            out.write(f"unknown key {ch!r}: " + ", ".join(f"{k} {v}" for k, v in KEYS.items()) + "\n")

    def edit(self, current, out):
        out.write(f"current: {current}\nnew query text (empty: keep): ")
        out.flush()
        line = self.stdin.readline()  # cooked mode: the terminal's own line editing
        return line.strip() or None


# ---------------------------------------------------------------------------- the session

@dataclass
class Summary:
    relevant: int = 0
    not_relevant: int = 0
    skipped: int = 0
    edited: int = 0
    left: int = 0
    quit: bool = False
    written: set[str] = field(default_factory=set)
    coverage: tuple[int, int] = (0, 0)  # (judged, pooled) units of the pool at the end
    discarded: int = 0
    # verdicts that named a unit the hit does not have (y SYMBOL / y L<a>-<b>): not judged
    unapplied: int = 0


def label_source(pair: Pair, reviewer: str | None = None) -> str:
    """The ``source:`` a label written in review carries: the candidate's own (``mined:git
    <sha>``) for a miner's proposal, ``review:proposal`` for another candidate's own label,
    ``review:pool`` for a pooled hit; with a ``reviewer`` (``--reviewer``), every label says
    who judged it: ``review:pool by <reviewer>``, ``mined:git <sha> by <reviewer>`` (the
    miner's source first, so its kind and commit still read from it)."""
    if pair.hit.get("proposed"):
        src = pair.source or ""
        if not src.startswith("mined:"):
            src = "review:proposal"
    else:
        src = "review:pool"
    return f"{src} by {reviewer}" if reviewer else src


#: a ``--reviewer`` name: one word of letters, digits and ``_.:@-`` (it lands in ``source:``)
_REVIEWER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]*$")


def _hit_lines(hit: dict[str, Any]) -> tuple[int, int] | None:
    got = hit.get("chunk_lines")
    return (int(got[0]), int(got[1])) if isinstance(got, list) and len(got) == 2 else None


#: ``--only``: which of a pool's pairs a session walks
ONLY = ("all", "proposed", "pooled")


def pending_pairs(records: list[dict[str, Any]], editor: GoldenEditor, runs_total: int, *,
                  only: str = "all", gone: set[str] | None = None) -> list[Pair]:
    """The pool's pairs that the golden files (as they are now) do not judge, in pool order;
    ``only="proposed"``: a candidate's own labels alone, ``"pooled"``: the rankings' hits.
    A query no longer in the golden files (a discarded candidate, a query removed by hand) has
    no pairs; its id is added to ``gone``."""
    out = []
    for r in records:
        if editor.entry(r["query_id"], r["origin"])[0] is None:
            if gone is not None:
                gone.add(r["query_id"])
            continue
        for h in r["hits"]:
            if only != "all" and bool(h.get("proposed")) != (only == "proposed"):
                continue
            if editor.judged(r["query_id"], r["origin"], h["doc"], _hit_lines(h)) is None:
                out.append(Pair(r["query_id"], r["query"], r["origin"], r.get("source"), h,
                                runs_total))
    return out


def judged_units(records: list[dict[str, Any]], editor: GoldenEditor) -> tuple[int, int]:
    """``(judged, pooled)``: how many of the pool's units the golden files judge now, of all
    (judged coverage of the pool; proposals count once judged)."""
    judged = total = 0
    for r in records:
        for h in r["hits"]:
            total += 1
            judged += editor.judged(r["query_id"], r["origin"], h["doc"], _hit_lines(h)) is not None
    return judged, total


def review(pool_file: Path, golden_dir: Path, corpus_root: Path | None, keys: Keys,
           out: TextIO, *, color: bool, max_lines: int = DEFAULT_MAX_LINES,
           verify: bool = True, only: str = "all", reviewer: str | None = None) -> Summary:
    """One review session (see the module docstring); returns what was done. ``reviewer``:
    who judges (written into each review label's ``source:``, :func:`label_source`).

    Raises:
        ReviewError / PoolError: bad pool file or golden set, a script line that is not a key,
            a write that would break the golden set (every earlier judgement is kept).
    """
    header, records = read_pool(pool_file)
    editor = GoldenEditor(golden_dir, verify=verify)
    if editor.load_problem:
        out.write(f"warning: the golden set does not load now ({editor.load_problem}); "
                  "a judgement that would add a problem is undone\n")
    if header.get("golden") and Path(header["golden"]).resolve() != Path(golden_dir).resolve():
        out.write(f"warning: the pool was made for {header['golden']}, not {golden_dir}\n")
    labelled = _golden_corpus(Path(golden_dir))
    if header.get("corpus") and labelled and str(header["corpus"]) != str(labelled):
        raise ReviewError(f"{pool_file}: the pool was made for corpus {header['corpus']!r} but "
                          f"{golden_dir} labels corpus {labelled!r}: its hits cannot be judged "
                          "there")
    run_labels = {r["id"]: r.get("label") or r["id"][:8] for r in header.get("runs", [])}
    gone: set[str] = set()
    pairs = pending_pairs(records, editor, len(header.get("runs", [])), only=only, gone=gone)
    summary = Summary()
    total = len(pairs)
    coverage = list(judged_units(records, editor))
    out.write(f"{total} unjudged pair(s) in {pool_file}; judged {coverage[0]}/{coverage[1]} "
              "pooled units"
              + (f"; {len(gone)} of its queries are no longer in the golden files (discarded "
                 "or removed): left out" if gone else "") + "\n")
    texts: dict[str, str] = {}
    indexed = indexed_paths(corpus_root) if corpus_root is not None and pairs else None
    for i, pair in enumerate(pairs, 1):
        if editor.judged(pair.query_id, pair.origin, pair.hit["doc"],
                         _hit_lines(pair.hit)) is not None:
            continue  # judged meanwhile (a path label covers this symbol hit)
        item, _ = editor.entry(pair.query_id, pair.origin)
        if item is None:
            if pair.query_id not in gone:
                gone.add(pair.query_id)
                out.write(f"warning: query {pair.query_id!r} is no longer in the golden files; "
                          "its pairs are left out\n")
            continue
        code, error, diff = None, None, None
        if corpus_root is not None:
            try:
                code = hit_code(corpus_root, pair.hit["doc"], max_lines=max_lines,
                                lines=_hit_lines(pair.hit), indexed=indexed)
            except ReviewError as exc:
                error = str(exc)
            if pair.hit.get("proposed"):
                diff = commit_hunks(corpus_root, pair.source, pair.hit["path"],
                                    symbol=pair.hit.get("symbol"))
        else:
            error = "no corpus root: give --corpus-root or config overrides"
        while True:
            pair.query = texts.get(pair.query_id) or str(item.get("query", pair.query))
            render_pair(out, pair, code, error, index=i, total=total, color=color,
                        labels=editor.labels(pair.query_id, pair.origin), run_labels=run_labels,
                        diff=diff, coverage=(coverage[0], coverage[1]),
                        moved=not editor.is_candidate(pair.query_id, pair.origin))
            got = keys.next(out)
            if got is None or got[0] == "q":
                summary.quit = True
                break
            key, arg = got
            if key == "d":
                if not editor.is_candidate(pair.query_id, pair.origin):
                    out.write(f"not discarded: {pair.query_id} is in queries.yaml (d discards "
                              "a candidate; edit queries.yaml to remove a query)\n")
                    continue
                summary.written.add(editor.discard(pair.query_id, pair.origin))
                summary.discarded += 1
                gone.add(pair.query_id)
                out.write(f"discarded candidate {pair.query_id}\n")
                break
            if key == "e":
                text = arg if arg is not None else keys.edit(pair.query, out)
                if text:
                    summary.written.add(editor.edit_query(pair.query_id, pair.origin, text))
                    texts[pair.query_id] = text
                    summary.edited += 1
                    out.write("note: the pool's hits were retrieved for the old text; run "
                              "rag golden pool again to rank the new one\n")
                continue
            doc = pair.hit["doc"]
            if key == "y" and arg:  # narrow a whole-file hit to one of its symbols or a span
                doc, why = (narrowed_doc(corpus_root, pair.hit["doc"], arg)
                            if corpus_root is not None else (None, "no corpus root"))
                if doc is None:
                    out.write(f"not judged: {why}; skipped\n")
                    summary.skipped += 1
                    summary.unapplied += 1
                    break
            if key in ("y", "n") and (error or (code is not None and code.missing)):
                # a hit whose file or symbol is not in the corpus now: a label on it would not
                # load (rag golden check would report it), so it is not written
                out.write(f"not judged: {pair.hit['doc']} is not in the corpus as the pool "
                          f"names it ({error or code.note}); skipped\n")
                summary.skipped += 1
            elif key == "s":
                summary.skipped += 1
            else:
                summary.written.add(editor.judge(pair.query_id, pair.origin, doc,
                                                 relevant=key == "y",
                                                 source=label_source(pair, reviewer)))
                if editor.replaced:
                    out.write(f"note: {pair.hit['doc']} replaces the narrower label(s) "
                              f"{', '.join(editor.replaced)} of that file\n")
                    editor.replaced.clear()
                if key == "y":
                    summary.relevant += 1
                else:
                    summary.not_relevant += 1
                coverage[0] += 1
            item, _ = editor.entry(pair.query_id, pair.origin)  # may have moved to queries.yaml
            break
        if summary.quit:
            break
    summary.left = sum(1 for p in pairs if editor.judged(p.query_id, p.origin, p.hit["doc"],
                                                         _hit_lines(p.hit)) is None
                       and editor.entry(p.query_id, p.origin)[0] is not None)
    summary.coverage = judged_units(records, editor)
    return summary


# ---------------------------------------------------------------------------- CLI

def add_review_parser(sub) -> argparse.ArgumentParser:
    """Register ``review`` on the ``rag golden`` action subparsers."""
    p = sub.add_parser(
        "review",
        help="judge a pool file's unjudged (query, hit) pairs; writes into the golden files",
        description=(
            "Show each unjudged (query, hit) pair of a pool file (rag golden pool) with the "
            "hit's code and read one key: y relevant, n not relevant, s skip, e edit the query "
            "text, d discard a candidate, q quit. Each judgement is written at once into queries.yaml (relevant: / "
            "not_relevant:, comments and order kept; a candidate moves into queries.yaml at "
            "its first y), so a later session resumes where this one stopped."))
    p.add_argument("--pool", required=True, metavar="FILE", help="the pool file")
    p.add_argument("--golden", required=True, metavar="DIR",
                   help="the golden directory to write into")
    p.add_argument("--corpus-root", default=None, metavar="DIR",
                   help="where the hits' files are (default: from the config overrides if "
                        "any are given, else the rows' corpus_root recorded in the pool)")
    p.add_argument("--script", default=None, metavar="FILE",
                   help="read the keys from FILE ('-': stdin), one per line, lower case "
                        "(y, n, s, d, q, 'e NEW TEXT', or 'y UNIT': label only that symbol or "
                        "L<start>-<end> of a whole-file hit); every line is checked before "
                        "anything is written")
    p.add_argument("--reviewer", default=None, metavar="NAME",
                   help="who judges: each label written gets ' by NAME' after its source "
                        "('review:pool by NAME', 'mined:git SHA by NAME'), so a set says whose "
                        "verdicts it holds (default: no name)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="syntax highlighting: auto (when stdout is a terminal), always, never")
    p.add_argument("--only", choices=ONLY, default="all",
                   help="proposed: only the candidates' own (mined) labels, the quickest way "
                        "to turn candidates into queries; pooled: only the rankings' hits; "
                        "all (default): both, proposals first within each query")
    p.add_argument("--max-lines", type=int, default=DEFAULT_MAX_LINES, metavar="N",
                   help=f"lines of code shown per hit (default {DEFAULT_MAX_LINES}; 0: all)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides naming the corpus (e.g. corpus=zod, corpus.path=DIR)")
    return p


def _corpus_root(args, header: dict[str, Any],
                 compose_config: Callable[[list[str]], Any] | None) -> Path | None:
    if args.corpus_root:
        root = Path(args.corpus_root)
        if not root.is_dir():
            raise ReviewError(f"--corpus-root {root}: not a directory")
        return root
    if args.overrides:
        from rag.corpus.fetch import corpus_root
        from rag.core.errors import RunError

        if compose_config is None:
            raise ReviewError("config overrides name a corpus only through `rag golden review` "
                              "(no config composition was given)")

        try:
            return corpus_root(compose_config(list(args.overrides)))
        except RunError as exc:
            raise ReviewError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - Hydra / OmegaConf composition errors
            raise ReviewError(f"config overrides {' '.join(args.overrides)}: "
                              f"{str(exc).splitlines()[0]}") from None
    root = header.get("corpus_root")
    return Path(root) if root and Path(root).is_dir() else None


def review_command(args: argparse.Namespace, *, stdin: TextIO | None = None,
                   stdout: TextIO | None = None,
                   compose_config: Callable[[list[str]], Any] | None = None) -> int:
    """``rag golden review``; exit 2 with one ``error:`` line on bad input. ``compose_config``
    (overrides -> config; the application layer passes rag.app.search_cli's) resolves a corpus
    named by ``KEY=VALUE`` overrides; without it only ``--corpus-root`` and the pool's header
    name the corpus."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    try:
        reviewer = getattr(args, "reviewer", None)
        if reviewer is not None and not _REVIEWER.match(reviewer):
            raise ReviewError(f"--reviewer {reviewer!r}: one word of letters, digits and "
                              "_.:@- (it is written into each label's source:)")
        header, _ = read_pool(Path(args.pool))
        root = _corpus_root(args, header, compose_config)
        if args.script or not stdin.isatty():
            # a script (a file, or stdin): read whole, every line a key before anything is
            # written
            name = args.script if args.script and args.script != "-" else "<stdin>"
            try:
                lines = (stdin.read() if name == "<stdin>"
                         else Path(args.script).read_text(encoding="utf-8")).splitlines()
            except OSError as exc:
                raise ReviewError(f"--script {args.script}: {exc.strerror or exc}") from None
            check_script(lines, name)
            keys: Keys = ScriptKeys(iter(lines), name)
        else:
            keys = TerminalKeys(stdin)
        summary = Summary()
        try:
            summary = review(Path(args.pool), Path(args.golden), root, keys, stdout,
                             color=use_color(args.color, stdout), max_lines=args.max_lines,
                             only=getattr(args, "only", "all"),
                             reviewer=getattr(args, "reviewer", None))
        except KeyboardInterrupt:
            stdout.write("\ninterrupted; every judgement made is saved\n")
            return 130
    except (ReviewError, PoolError, OSError) as exc:
        stdout.flush()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if summary.left and not args.script and not stdin.isatty():
        print(f"note: standard input is not a terminal, so it was read as a review script and "
              f"ended with {summary.left} pair(s) left; run rag golden review in a terminal to "
              "judge them by key, or give the keys with --script FILE", file=sys.stderr)
    done = summary.relevant + summary.not_relevant
    stdout.write(f"judged {done} pair(s) ({summary.relevant} relevant, {summary.not_relevant} "
                 f"not relevant), skipped {summary.skipped}, edited {summary.edited} query text(s)"
                 + (f", discarded {summary.discarded} candidate(s)" if summary.discarded else "")
                 + (f"; {summary.left} left for the next session" if summary.left else "")
                 + (f"; judged coverage of the pool {summary.coverage[0]}/{summary.coverage[1]} "
                    f"units ({100 * summary.coverage[0] / summary.coverage[1]:.0f}%)"
                    if summary.coverage[1] else "")
                 + (f"; wrote {', '.join(sorted(summary.written))}" if summary.written else "")
                 + "\n")
    if summary.unapplied and (args.script or not stdin.isatty()):
        # a script cannot retry a key as a person does: its caller must learn of the miss
        print(f"error: {summary.unapplied} 'y UNIT' verdict(s) of the script could not be "
              "applied (each 'not judged' above says why); every other verdict is saved",
              file=sys.stderr)
        return 1
    return 0
