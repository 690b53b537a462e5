"""Label rot: a golden set's labels checked against a corpus in seconds, without an embedding
model (the corpus is walked and chunked with the run's own walk and chunker settings, nothing
is embedded or indexed).

A label *rots* when the corpus moves on: its path is gone (deleted, moved, renamed), its
symbol is no longer a chunk of that path (renamed, moved to another file), or its span
``lines: [start, end]`` runs past the end of the file. For each problem the check suggests
where the label probably went, **from names only** -- no copy of the old corpus or of the
labelled text is stored, so the labels need nothing beside ``queries.yaml``:

* a missing path: a file that defines the label's symbol (exact name), a path that ends with
  the old one or the other way round (``flask/app.py`` -> ``src/flask/app.py``), a file of the
  same name elsewhere, then the most similar path;
* a missing symbol: the same name in another file, the same name with another spelling in
  the same file (``handleAuthCallback`` -> ``handle_auth_callback``), the same method name under
  another class (``Cart.add_item`` -> ``Basket.add_item``), then the most similar names of the
  file;
* a span past the end of its file: the file's length;
* a span whose text changed (its ``digest:`` -- :func:`rag.eval.golden.span_digest`, taken
  when it was labelled or by ``rag golden check --pin`` -- no longer matches its lines): the
  lines of the same length that now carry that digest (lines inserted above it, a function
  moved down), else no suggestion. A span without a digest cannot be told from a correct
  one, since the old text is not stored: ``--pin`` records the digests of a set known good.

What names cannot find (a file renamed to an unrelated name, a symbol renamed to an unrelated
word) is reported without a suggestion.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

MAX_SUGGESTIONS = 3


@dataclass
class CorpusView:
    """What the labels are checked against: every indexed path with its line count and the
    symbols the chunker cuts from it."""

    name: str
    root: Path
    lines: dict[str, int]                      # path -> number of lines
    symbols: dict[str, list[str]]              # path -> its chunk symbols, in file order
    chunks: int = 0
    categories: dict[str, str] = field(default_factory=dict)   # path -> walker category
    # (path, symbol) -> (first line, last line) of its first chunk
    spans: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_symbol: dict[str, list[str]] = {}
        self.by_basename: dict[str, list[str]] = {}
        for path, syms in self.symbols.items():
            for s in dict.fromkeys(syms):
                self.by_symbol.setdefault(s, []).append(path)
        for path in self.lines:
            self.by_basename.setdefault(PurePosixPath(path).name, []).append(path)

    @property
    def paths(self) -> set[str]:
        return set(self.lines)

    def has_symbol(self, path: str, symbol: str) -> bool:
        return symbol in self.symbols.get(path, ())

    def read_text(self, path: str) -> str | None:
        """The current text of ``path`` read from ``root`` (None when it is not a file there,
        e.g. a GitHub export document), for span digests; undecodable bytes replaced."""
        f = self.root / path
        try:
            return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else None
        except OSError:
            return None


def find_span(text: str, digest: str, length: int) -> list[tuple[int, int]]:
    """Every span of ``length`` lines of ``text`` whose :func:`rag.eval.golden.span_digest`
    is ``digest``, as 1-based inclusive ``(start, end)``, in file order."""
    from rag.eval.golden import span_digest

    n = len(text.splitlines())
    return [(a, a + length - 1) for a in range(1, n - length + 2)
            if span_digest(text, (a, a + length - 1)) == digest]


def corpus_view(root: Path, *, name: str, walk: dict[str, Any] | None = None,
                window_lines: int = 60, window_overlap: int = 10,
                extra_docs: Iterable[Any] = ()) -> CorpusView:
    """Walk and chunk ``root`` as an index build would (``walk``: the keyword arguments of
    :func:`rag.corpus.walk.walk_settings`), embedding nothing.

    Raises:
        FileNotFoundError: ``root`` is not a directory.
    """
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import walk_corpus

    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    lines: dict[str, int] = {}
    symbols: dict[str, list[str]] = {}
    categories: dict[str, str] = {}
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    n = 0
    for doc in [*walk_corpus(root, **(walk or {})), *extra_docs]:
        lines[doc.path] = len(doc.text.splitlines())
        categories[doc.path] = doc.category
        chunks = chunk_document(doc, window_lines=window_lines, overlap=window_overlap)
        n += len(chunks)
        symbols[doc.path] = [c.symbol for c in chunks if c.symbol]
        for c in chunks:
            if c.symbol:
                spans.setdefault((c.path, c.symbol), (c.start_line, c.end_line))
    return CorpusView(name=name, root=root, lines=lines, symbols=symbols, chunks=n,
                      categories=categories, spans=spans)


def corpus_view_from_config(cfg) -> CorpusView:
    """:func:`corpus_view` of the corpus a composed config names (``corpus.path``, or the
    sdist / npm package, fetched once into the cache), with its walk and chunk settings and
    its ``corpus.github_export`` documents."""
    from rag.core.paths import expand_path
    from rag.corpus.walk import walk_settings
    from rag.corpus.fetch import corpus_root

    c = cfg.corpus
    extra: list[Any] = []
    if c.github_export:
        from rag.corpus.github import load_github_export

        for f in c.github_export:
            extra += load_github_export(expand_path(f, base=Path.cwd()))
    return corpus_view(corpus_root(cfg), name=str(c.name), walk=walk_settings(c),
                       window_lines=int(c.window_lines), window_overlap=int(c.window_overlap),
                       extra_docs=extra)


@dataclass
class Suggestion:
    """A probable new location of a rotten label."""

    path: str
    symbol: str | None
    why: str
    score: float

    lines: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        if self.symbol:
            return f"{self.path}#{self.symbol}"
        return f"{self.path}#L{self.lines[0]}-{self.lines[1]}" if self.lines else self.path


@dataclass
class LabelProblem:
    """One label that does not resolve in the corpus."""

    where: str           # file:line of the query
    query_id: str
    label: str           # path, path#symbol or path#L<start>-<end>
    kind: str            # path_missing | symbol_missing | lines_out_of_range | span_changed
    message: str
    suggestions: list[Suggestion] = field(default_factory=list)
    in_field: str = "relevant"     # relevant | not_relevant

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["suggestions"] = [{**asdict(s), "label": s.label, "score": round(s.score, 3)}
                            for s in self.suggestions]
        return d


def _norm(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _best(cands: dict[tuple[str, str | None], tuple[float, str]]) -> list[Suggestion]:
    out = [Suggestion(path=p, symbol=s, why=why, score=score)
           for (p, s), (score, why) in cands.items()]
    out.sort(key=lambda s: (-s.score, s.path, s.symbol or ""))
    return out[:MAX_SUGGESTIONS]


def _add(cands: dict, key: tuple[str, str | None], score: float, why: str) -> None:
    if key not in cands or cands[key][0] < score:
        cands[key] = (score, why)


def suggest_path(view: CorpusView, path: str, symbol: str | None = None) -> list[Suggestion]:
    """Where a missing ``path`` (labelled at ``symbol``, if given) probably went."""
    cands: dict[tuple[str, str | None], tuple[float, str]] = {}
    old = PurePosixPath(path)
    if symbol:
        for p in view.by_symbol.get(symbol, ()):
            same_name = PurePosixPath(p).name == old.name
            _add(cands, (p, symbol), 0.95 if same_name else 0.9,
                 f"defines {symbol!r}" + (" in a file of the same name" if same_name else ""))
    for p in view.lines:
        if p.endswith("/" + path) or path.endswith("/" + p):
            _add(cands, (p, symbol if symbol and view.has_symbol(p, symbol) else None), 0.85,
                 "the same path under another directory")
    for p in view.by_basename.get(old.name, ()):
        _add(cands, (p, symbol if symbol and view.has_symbol(p, symbol) else None),
             0.6 + 0.2 * _ratio(path, p), "a file of the same name")
    if not cands:
        for p in difflib.get_close_matches(path, list(view.lines), n=MAX_SUGGESTIONS, cutoff=0.75):
            _add(cands, (p, None), 0.5 * _ratio(path, p), "the most similar path")
    return _best(cands)


def suggest_symbol(view: CorpusView, path: str, symbol: str) -> list[Suggestion]:
    """Where a ``symbol`` no longer defined in ``path`` probably went."""
    cands: dict[tuple[str, str | None], tuple[float, str]] = {}
    for p in view.by_symbol.get(symbol, ()):
        if p != path:
            _add(cands, (p, symbol), 0.9, "the same symbol in another file")
    here = list(dict.fromkeys(view.symbols.get(path, ())))
    key, last = _norm(symbol), symbol.rsplit(".", 1)[-1]
    for s in here:
        if _norm(s) == key:
            _add(cands, (path, s), 0.85, "the same name spelled differently")
        elif "." in symbol and s.rsplit(".", 1)[-1] == last and s.count(".") == symbol.count("."):
            _add(cands, (path, s), 0.7, f"the same name {last!r} under another parent")
    if "." in symbol:
        for s, paths in view.by_symbol.items():
            if s != symbol and s.rsplit(".", 1)[-1] == last and s.count(".") == symbol.count("."):
                for p in paths:
                    if p != path:
                        _add(cands, (p, s), 0.6, f"the same name {last!r} in another file")
    else:
        for s, paths in view.by_symbol.items():
            if s != symbol and _norm(s) == key:
                for p in paths:
                    _add(cands, (p, s), 0.75, "the same name spelled differently, in another file")
    for s in difflib.get_close_matches(symbol, here, n=MAX_SUGGESTIONS, cutoff=0.6):
        _add(cands, (path, s), 0.5 * _ratio(symbol, s), "a similar name in the same file")
    return _best(cands)


def _label_lines(lab: Any) -> tuple[int, int] | None:
    lines = getattr(lab, "lines", None)
    if lines is None:
        return None
    try:
        a, b = lines
        return int(a), int(b)
    except (TypeError, ValueError):
        return None


def label_text(lab: Any) -> str:
    """A label as its evaluation doc id: ``path``, ``path#symbol`` or ``path#L<start>-<end>``."""
    lines = _label_lines(lab)
    if lines:
        return f"{lab.path}#L{lines[0]}-{lines[1]}"
    return f"{lab.path}#{lab.symbol}" if getattr(lab, "symbol", None) else lab.path


def check_label(view: CorpusView, lab: Any, *, where: str, query_id: str,
                field_name: str = "relevant") -> LabelProblem | None:
    """The problem of one label (a :class:`rag.eval.golden.Label`), or None when it resolves."""
    path, symbol, lines = lab.path, getattr(lab, "symbol", None), _label_lines(lab)
    text = label_text(lab)
    if path not in view.lines:
        return LabelProblem(where, query_id, text, "path_missing",
                            f"path {path!r} is not in the corpus",
                            suggest_path(view, path, symbol), field_name)
    if symbol and not view.has_symbol(path, symbol):
        return LabelProblem(where, query_id, text, "symbol_missing",
                            f"symbol {symbol!r} is not defined in {path!r}",
                            suggest_symbol(view, path, symbol), field_name)
    if lines and not 1 <= lines[0] <= lines[1] <= view.lines[path]:
        n = view.lines[path]
        sug = [Suggestion(path, None, f"the file has {n} lines now", 0.3)] if n else []
        return LabelProblem(where, query_id, text, "lines_out_of_range",
                            f"lines {lines[0]}-{lines[1]} are outside {path!r} "
                            f"({n} lines)", sug, field_name)
    digest = getattr(lab, "digest", None)
    if lines and digest:
        from rag.eval.golden import span_digest

        current = view.read_text(path)
        if current is not None and span_digest(current, lines) != digest:
            found = find_span(current, digest, lines[1] - lines[0] + 1)
            sug = [Suggestion(path, None, "the labelled text is here now (same digest)", 0.95,
                              lines=span) for span in found[:MAX_SUGGESTIONS]]
            return LabelProblem(where, query_id, text, "span_changed",
                                f"lines {lines[0]}-{lines[1]} of {path!r} no longer hold the "
                                f"labelled text (digest {digest})", sug, field_name)
    return None


def check_golden(golden, view: CorpusView) -> list[LabelProblem]:
    """Every label of ``golden`` (a :class:`rag.eval.golden.GoldenSet` loaded without corpus
    checks) that does not resolve in ``view``, in file order: the ``relevant`` labels and,
    where the set has them, each query's ``not_relevant`` ones."""
    qfile = Path(golden.directory) / "queries.yaml"
    problems = []
    for q in golden.positives:
        for field_name in ("relevant", "not_relevant"):
            for lab in getattr(q, field_name, None) or ():
                # the label's own line, as the loader names it (the query's when unknown)
                where = f"{qfile}:{getattr(lab, 'line', 0) or q.line}"
                p = check_label(view, lab, where=where, query_id=q.id, field_name=field_name)
                if p is not None:
                    problems.append(p)
    return problems


def render_problems(problems: list[LabelProblem]) -> list[str]:
    """Text lines: one per problem, then one indented line per suggestion."""
    out = []
    for p in problems:
        what = "" if p.in_field == "relevant" else f" ({p.in_field})"
        out.append(f"{p.where}: {p.query_id}{what}: {p.label}: {p.message}")
        for s in p.suggestions:
            out.append(f"    maybe {s.label}  ({s.why})")
        if not p.suggestions:
            out.append("    no likely new location found by name")
    return out


def pin_digests(queries_file: Path, view: CorpusView) -> int:
    """Write a ``digest:`` (:func:`rag.eval.golden.span_digest` of the current text) after
    the ``lines:`` of every span label in ``queries_file`` that has none, keeping comments,
    order and quoting (ruamel.yaml round trip, written atomically); returns how many were
    added. Labels whose file is not readable under ``view.root`` or whose span runs past its
    end are left alone (``rag golden check`` reports those).

    Raises:
        OSError: the file cannot be read or written.
        ValueError: the file is not a queries file (no ``queries:`` list).
    """
    import io

    from rag.eval.golden import span_digest
    from rag.golden.review import _write, _yaml_for

    text = Path(queries_file).read_text(encoding="utf-8")
    y = _yaml_for(text)
    data = y.load(text)
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        raise ValueError(f"{queries_file}: no 'queries:' list")
    texts: dict[str, str | None] = {}
    added = 0
    for q in data["queries"]:
        if not isinstance(q, dict):
            continue
        for field_name in ("relevant", "not_relevant"):
            for lab in q.get(field_name) or ():
                if not isinstance(lab, dict) or "digest" in lab or "lines" not in lab:
                    continue
                path, lines = lab.get("path"), lab.get("lines")
                if not isinstance(path, str) or not (isinstance(lines, list) and len(lines) == 2):
                    continue
                if path not in texts:
                    texts[path] = view.read_text(path)
                if texts[path] is None:
                    continue
                d = span_digest(texts[path], (int(lines[0]), int(lines[1])))
                if d is None:
                    continue
                keys = list(lab.keys())
                lab.insert(keys.index("lines") + 1, "digest", d)
                added += 1
    if added:
        buf = io.StringIO()
        y.dump(data, buf)
        _write(Path(queries_file), buf.getvalue())
    return added
