"""Golden sets: answerable queries with labelled relevant paths (qrels) and negatives.

File format: golden/README.md. Loading validates everything and reports *every* problem at
once, each with its file and line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from rag.corpus.walk import CATEGORIES

QUERIES_FILE = "queries.yaml"
NEGATIVES_FILE = "negatives.yaml"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# a label's ``types`` name the walker's categories (one vocabulary: rag/corpus/walk.py)
TYPE_NAMES = CATEGORIES
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class GoldenError(ValueError):
    """One or more problems in a golden set; ``problems`` lists them as ``file:line: text``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        head = f"{len(problems)} problem(s) in the golden set:"
        super().__init__("\n  ".join([head, *problems]))


@dataclass(frozen=True)
class Label:
    """One relevant item: a path, optionally narrowed to one symbol, with a grade >= 1."""

    path: str
    symbol: str | None = None
    grade: int = 1

    @property
    def doc_key(self) -> str:
        """The evaluation doc id: ``path`` or ``path#symbol``."""
        return f"{self.path}#{self.symbol}" if self.symbol else self.path


@dataclass(frozen=True)
class GoldenQuery:
    """An answerable query with its labels."""

    id: str
    query: str
    tags: tuple[str, ...]
    relevant: tuple[Label, ...]
    line: int = 0
    # categories a caller would filter this query by, a priori (the filters sweep)
    types: tuple[str, ...] = ()

    @property
    def qrels(self) -> dict[str, int]:
        """doc key -> grade."""
        return {lab.doc_key: lab.grade for lab in self.relevant}

    @property
    def symbol_paths(self) -> dict[str, set[str]]:
        """path -> labelled symbols, for the paths this query labels at symbol level."""
        out: dict[str, set[str]] = {}
        for lab in self.relevant:
            if lab.symbol:
                out.setdefault(lab.path, set()).add(lab.symbol)
        return out


@dataclass(frozen=True)
class NegativeQuery:
    """A query whose right answer is "nothing in this corpus"."""

    id: str
    query: str
    tags: tuple[str, ...] = ()
    note: str = ""
    line: int = 0


@dataclass
class GoldenSet:
    """Positives and negatives of one corpus, with a fingerprint of the files they came from."""

    positives: list[GoldenQuery]
    negatives: list[NegativeQuery]
    fingerprint: str
    directory: Path
    corpus: str | None = None
    tags: list[str] = field(default_factory=list)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records the 1-based line of every mapping under ``__line__``."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key (PyYAML would silently keep the last value)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise DuplicateKeyError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        seen.add(key)
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)  # noqa: S506
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
        return None
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        problems.append(f"{path}:{line}: not valid YAML: {exc.problem or exc}")
        return None
    except (yaml.YAMLError, TypeError) as exc:  # TypeError: an unhashable (complex) key
        problems.append(f"{path}: not valid YAML: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}:1: expected a mapping at the top level")
        return None
    allowed = {"corpus", "queries" if path.name == QUERIES_FILE else "negatives", "__line__"}
    extra = set(data) - allowed
    if extra:
        problems.append(f"{path}:1: unknown top-level key(s) {sorted(extra)}")
    return data


def _tags(raw: Any, where: str, problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, str) and t for t in raw):
        problems.append(f"{where}: tags must be a list of non-empty strings")
        return ()
    bad = [t for t in raw if not _TAG.match(t)]
    if bad:
        # tags become metric-name prefixes (prose/recall_at_8); keep them MLflow-legal
        problems.append(f"{where}: tag(s) {bad} must match {_TAG.pattern}")
        return ()
    return tuple(raw)


def load_golden(directory: Path, *, corpus_paths: Iterable[str] | None = None,
                corpus_symbols: Iterable[tuple[str, str]] | None = None) -> GoldenSet:
    """Load and validate ``queries.yaml`` and ``negatives.yaml`` from ``directory``.

    Args:
        directory: the golden directory (e.g. ``golden/flask``).
        corpus_paths: every indexed path; when given, a label naming another path is an error.
        corpus_symbols: every (path, symbol) of the index; when given, a label's symbol must
            be one of them.

    Raises:
        GoldenError: listing every problem (missing file, bad YAML, duplicate id across both
            files, empty query, no relevant label, unknown key, label path or symbol not in
            the corpus, a path labelled both with and without a symbol in one query).
    """
    directory = Path(directory)
    problems: list[str] = []
    if not directory.is_dir():
        raise GoldenError([f"{directory}: golden directory not found"])
    qpath, npath = directory / QUERIES_FILE, directory / NEGATIVES_FILE
    qdata, ndata = _load_yaml(qpath, problems), _load_yaml(npath, problems)
    paths = set(corpus_paths) if corpus_paths is not None else None
    symbols = set(corpus_symbols) if corpus_symbols is not None else None
    seen: dict[str, str] = {}
    positives: list[GoldenQuery] = []
    negatives: list[NegativeQuery] = []

    def check_id(qid: Any, where: str) -> bool:
        if not isinstance(qid, str) or not _ID.match(qid):
            problems.append(f"{where}: id must match {_ID.pattern}, got {qid!r}")
            return False
        if qid in seen:
            problems.append(f"{where}: duplicate id {qid!r} (first at {seen[qid]})")
            return False
        seen[qid] = where
        return True

    def check_query(text: Any, where: str, qid: Any) -> bool:
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: query {qid!r} has an empty query text")
            return False
        return True

    if qdata is not None:
        items = qdata.get("queries")
        if not isinstance(items, list) or not items:
            problems.append(f"{qpath}: needs a non-empty 'queries' list")
            items = []
        for item in items:
            if not isinstance(item, dict):
                problems.append(f"{qpath}: every entry of 'queries' must be a mapping")
                continue
            where = f"{qpath}:{item.get('__line__', '?')}"
            extra = set(item) - {"id", "query", "tags", "types", "relevant", "note", "__line__"}
            if extra:
                problems.append(f"{where}: unknown key(s) {sorted(extra)}")
            qid = item.get("id")
            ok = check_id(qid, where) & check_query(item.get("query"), where, qid)
            labels: list[Label] = []
            rel = item.get("relevant")
            if not isinstance(rel, list) or not rel:
                problems.append(f"{where}: query {qid!r} needs at least one 'relevant' label")
                rel = []
            with_symbol, without_symbol = set(), set()
            for lab in rel:
                lwhere = f"{qpath}:{lab.get('__line__', '?') if isinstance(lab, dict) else '?'}"
                if not isinstance(lab, dict) or not isinstance(lab.get("path"), str):
                    problems.append(f"{lwhere}: query {qid!r}: a label needs a 'path'")
                    continue
                lextra = set(lab) - {"path", "symbol", "grade", "__line__"}
                if lextra:
                    problems.append(f"{lwhere}: query {qid!r}: unknown label key(s) {sorted(lextra)}")
                path, symbol, grade = lab["path"], lab.get("symbol"), lab.get("grade", 1)
                if not isinstance(grade, int) or isinstance(grade, bool) or grade < 1:
                    problems.append(f"{lwhere}: query {qid!r}: grade must be an integer >= 1")
                    grade = 1
                if symbol is not None and (not isinstance(symbol, str) or not symbol):
                    problems.append(f"{lwhere}: query {qid!r}: symbol must be a non-empty string")
                    symbol = None
                if paths is not None and path not in paths:
                    problems.append(f"{lwhere}: query {qid!r}: label path {path!r} is not in the corpus")
                elif symbol and symbols is not None and (path, symbol) not in symbols:
                    problems.append(f"{lwhere}: query {qid!r}: label symbol {symbol!r} is not "
                                    f"defined in {path!r}")
                (with_symbol if symbol else without_symbol).add(path)
                labels.append(Label(path=path, symbol=symbol, grade=grade))
            for p in sorted(with_symbol & without_symbol):
                problems.append(f"{where}: query {qid!r} labels {p!r} both with and without a symbol")
            if len({lab.doc_key for lab in labels}) != len(labels):
                problems.append(f"{where}: query {qid!r} repeats a label")
            tags = _tags(item.get("tags"), where, problems)
            types = item.get("types") or []
            if not isinstance(types, list) or not set(types) <= set(TYPE_NAMES):
                problems.append(f"{where}: query {qid!r}: types must be a list of {list(TYPE_NAMES)}")
                types = []
            if ok:
                positives.append(GoldenQuery(id=qid, query=item["query"].strip(), tags=tags,
                                             types=tuple(types),
                                             relevant=tuple(labels),
                                             line=item.get("__line__", 0)))
    if ndata is not None:
        items = ndata.get("negatives")
        if not isinstance(items, list):
            problems.append(f"{npath}: needs a 'negatives' list")
            items = []
        for item in items:
            if not isinstance(item, dict):
                problems.append(f"{npath}: every entry of 'negatives' must be a mapping")
                continue
            where = f"{npath}:{item.get('__line__', '?')}"
            extra = set(item) - {"id", "query", "tags", "note", "__line__"}
            if extra:
                problems.append(f"{where}: unknown key(s) {sorted(extra)}")
            qid = item.get("id")
            tags = _tags(item.get("tags"), where, problems)
            if check_id(qid, where) & check_query(item.get("query"), where, qid):
                negatives.append(NegativeQuery(id=qid, query=item["query"].strip(), tags=tags,
                                               note=str(item.get("note", "")),
                                               line=item.get("__line__", 0)))
    if problems:
        raise GoldenError(problems)
    h = hashlib.sha256()
    for p in (qpath, npath):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    tags = sorted({t for q in positives for t in q.tags})
    return GoldenSet(positives=positives, negatives=negatives, fingerprint=h.hexdigest(),
                     directory=directory, corpus=(qdata or {}).get("corpus"), tags=tags)


def trec_docno(doc_id: str) -> str:
    """A doc id as a TREC docno (one whitespace-free field): ``%`` and whitespace (in Markdown
    section symbols) are percent-encoded, reversibly (``docs/a.rst#The Salt`` ->
    ``docs/a.rst#The%20Salt``; :func:`unquote_docno`), exactly as
    :func:`rag.eval.evaluate.trec_run_lines` writes them, so qrels and run files agree and a
    run file read back names the same units."""
    from urllib.parse import quote

    return quote(doc_id, safe="".join(chr(c) for c in range(33, 127) if chr(c) != "%"))


def unquote_docno(docno: str) -> str:
    """Inverse of :func:`trec_docno`."""
    from urllib.parse import unquote

    return unquote(docno)


def trec_qrels_lines(golden: GoldenSet) -> list[str]:
    """The positives' labels as TREC qrels lines ``qid 0 docno relevance``.

    The docno is the evaluation doc id the run file uses (``path``, or ``path#symbol`` for a
    symbol label; :attr:`Label.doc_key`, through :func:`trec_docno`) and the relevance is the
    label's grade. Positives in file order, labels in file order. Negatives have no relevant
    document, so TREC qrels cannot hold them: they are left out (``trec_eval`` scores only the
    queries that have qrels, so the negatives' rankings in a run file are ignored).
    """
    return [f"{q.id} 0 {trec_docno(doc)} {grade}"
            for q in golden.positives for doc, grade in q.qrels.items()]
