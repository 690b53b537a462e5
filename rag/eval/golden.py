"""Golden sets: answerable queries with labelled relevant units (qrels) and negatives.

File format: golden/README.md. Loading validates everything and reports *every* problem at
once, each with its file and line.

A label names one of three units: a file (``path``), a line span (``path`` + ``lines: [start,
end]``, 1-based, inclusive) or a symbol (``path`` + ``symbol``). Given the index's chunks
(:class:`CorpusUnits`), a symbol label is resolved once, at load time, to the lines of the
chunks that carry that symbol (:attr:`Label.spans`), so span and symbol labels are judged the
same way: a ranked chunk is relevant when its lines overlap the label's lines
(:func:`overlap_ok`, ``eval.min_overlap``). That lets chunking itself be ablated: a symbol
label still names the same lines when the index is cut into windows.
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
# a query's ``source``: hand, mined:git <sha>, mined:docstring <path>#<symbol>, mined:github <url>, ...
_SOURCE = re.compile(r"^(hand|mined:[A-Za-z0-9_.\-]+(?: [^\s].*)?)$")
# a label's ``source``: how that one judgement was made (rag golden review writes it)
def _shown(value: Any) -> str:
    """``repr`` of a YAML value as the file wrote it (without the loader's ``__line__``)."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "__line__"}
    return repr(value)


_LABEL_SOURCE = re.compile(r"^(hand|(mined|review):[A-Za-z0-9_.\-]+(?: [^\s].*)?)$")
_LABEL_KEYS = {"path", "symbol", "lines", "digest", "grade", "source", "__line__"}
_DIGEST = re.compile(r"^[0-9a-f]{12}$")
DIGEST_CHARS = 12

#: line ranges: sorted, disjoint, inclusive (start, end) pairs
Ranges = tuple[tuple[int, int], ...]


class GoldenError(ValueError):
    """One or more problems in a golden set; ``problems`` lists them as ``file:line: text``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        head = f"{len(problems)} problem(s) in the golden set:"
        super().__init__("\n  ".join([head, *problems]))


@dataclass(frozen=True)
class Label:
    """One judged unit: a path, optionally narrowed to one symbol or one line span, with a
    grade >= 1.

    Attributes:
        lines: ``(start, end)``, 1-based and inclusive, for a span label.
        spans: the lines the label covers, as :data:`Ranges`: a span label's ``lines``; a
            symbol label's lines once resolved against the index (:class:`CorpusUnits`;
            ``()`` when it was loaded without one: then it matches chunks by symbol name).
        digest: a span label's optional ``digest:`` (:func:`span_digest` of its lines when
            it was labelled), so ``rag golden check`` can tell a span whose text moved
            inside its file (and where to) from a correct one.
        line: the label's own line in ``queries.yaml`` (0 when not read from a file), so
            ``rag golden check`` and the loader name the same line; never part of its
            identity.
        source: how this judgement was made, when the label says: ``hand``,
            ``mined:<how> <detail>`` (a miner's proposal accepted in review) or
            ``review:<how>`` (``review:pool``: a pooled hit judged in ``rag golden review``).
    """

    path: str
    symbol: str | None = None
    grade: int = 1
    lines: tuple[int, int] | None = None
    spans: Ranges = ()
    digest: str | None = None
    source: str | None = field(default=None, compare=False)  # provenance, not identity
    # the label's own line in queries.yaml (0: not read from a file), for messages
    line: int = field(default=0, compare=False)

    @property
    def unit(self) -> str:
        """``file`` (any chunk of the path), ``symbol`` or ``span``."""
        return "symbol" if self.symbol else "span" if self.lines else "file"

    @property
    def doc_key(self) -> str:
        """The evaluation doc id: ``path``, ``path#symbol`` or ``path#L<start>-<end>``."""
        if self.symbol:
            return f"{self.path}#{self.symbol}"
        if self.lines:
            return f"{self.path}#L{self.lines[0]}-{self.lines[1]}"
        return self.path


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
    # units judged NOT relevant (same label schema; grade unused): judged coverage only
    not_relevant: tuple[Label, ...] = ()
    # where the query came from: hand, mined:git <sha>, mined:docstring <path>#<symbol>, ...
    source: str | None = None
    # relevant units outside the indexed corpus (an external label set's target whose file
    # is not in the tree, or not indexed under ``unindexed: keep``), their paths relative to
    # the repository (with the set's ``subtree:`` prefix): nothing can retrieve them, yet
    # they count as relevant (Recall's and the ideal DCG's denominators, qrels.txt), as
    # trec_eval and semble count a relevant document that was never retrieved
    unresolved: tuple[Label, ...] = ()

    @property
    def qrels(self) -> dict[str, int]:
        """doc key -> grade (relevant and unresolved labels)."""
        return {lab.doc_key: lab.grade for lab in (*self.relevant, *self.unresolved)}

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
    # the index's line structure the labels were resolved against (None: loaded without it)
    units: "CorpusUnits | None" = None
    # ``unindexed: keep``: the labels (``file:line: path``) that named a file the index does
    # not hold and were kept as unresolved
    unindexed: list[str] = field(default_factory=list)
    # the folder of the labels' repository that the corpus is (``subtree:``): a relevant
    # label's path as written in the repository is ``subtree/path``; unresolved labels are
    # written that way already (chunk-level metrics compare chunk paths with those)
    subtree: str | None = None


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, disjoint inclusive ranges covering the same lines (adjacent ones joined)."""
    out: list[list[int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)


def range_lines(ranges: Ranges) -> int:
    """How many lines ``ranges`` cover."""
    return sum(e - s + 1 for s, e in ranges)


def covered_lines(a: Ranges, b: Ranges) -> int:
    """How many lines lie in both ``a`` and ``b``."""
    n = 0
    for s1, e1 in a:
        for s2, e2 in b:
            n += max(0, min(e1, e2) - max(s1, s2) + 1)
    return n


def overlap_ok(chunk: Ranges, label: Ranges, min_overlap: float = 0.0) -> bool:
    """Whether a chunk with lines ``chunk`` hits a label with lines ``label``.

    ``min_overlap`` 0 (the default): any overlap, at least one common line. A fraction in
    (0, 1]: the chunk must cover at least that share of the *label's* lines
    (|chunk ∩ label| / |label| >= min_overlap; the denominator is the label's line count,
    never the chunk's), e.g. 0.5 of a 10-line span = 5 lines.
    """
    common = covered_lines(chunk, label)
    if min_overlap <= 0:
        return common >= 1
    total = range_lines(label)
    return total > 0 and common >= 1 and common >= min_overlap * total - 1e-9


# kinds whose chunk leaves out the lines of the chunks nested in its range (a class chunk is
# the class minus its methods; a module chunk is the file minus its functions and classes)
_HOLED_KINDS = ("class", "module")


def chunk_line_sets(chunks: Iterable[Any]) -> dict[str, Ranges]:
    """Chunk id -> the lines the chunk holds.

    A chunk holds its ``start_line``..``end_line``, except a ``class`` or ``module`` chunk
    (kinds of the symbol chunkers, rag/corpus/chunk.py), which holds that range less the
    ranges of the other chunks of its path that lie strictly inside it: a Python class chunk
    is the class minus its methods and nested classes, a ``<module>`` chunk the file's
    top-level code minus its functions and classes. So the chunks of distinct symbols of one
    file never share a line, and a symbol label resolved to these lines hits exactly the
    chunks carrying that symbol. (Blank lines between top-level definitions belong to the
    ``<module>`` chunk's range under this rule.)
    """
    by_path: dict[str, list[Any]] = {}
    for c in chunks:
        by_path.setdefault(c.path, []).append(c)
    out: dict[str, Ranges] = {}
    for cs in by_path.values():
        for c in cs:
            own = ((c.start_line, c.end_line),)
            if getattr(c, "kind", None) in _HOLED_KINDS:
                inner = [(o.start_line, o.end_line) for o in cs
                         if o is not c and c.start_line <= o.start_line
                         and o.end_line <= c.end_line
                         and (o.start_line, o.end_line) != (c.start_line, c.end_line)]
                own = _subtract(own, merge_ranges(inner))
            out[c.id] = own
    return out


def _subtract(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be < cur or bs > e:
                continue
            if bs > cur:
                out.append((cur, bs - 1))
            cur = max(cur, be + 1)
        if cur <= e:
            out.append((cur, e))
    return tuple(out)


@dataclass(frozen=True)
class CorpusUnits:
    """The index's line structure that labels are resolved and chunks are judged against.

    Attributes:
        line_counts: path -> number of lines of the file (a span must end within it).
        symbol_lines: (path, symbol) -> the lines of the chunks carrying that symbol, as
            the symbol chunker cuts the file (whatever chunker the index used).
        chunk_lines: id of an indexed chunk -> its lines (:func:`chunk_line_sets`).
    """

    line_counts: dict[str, int]
    symbol_lines: dict[tuple[str, str], Ranges]
    chunk_lines: dict[str, Ranges]

    @classmethod
    def from_chunks(cls, chunks: Iterable[Any], *, label_chunks: Iterable[Any] | None = None,
                    line_counts: dict[str, int] | None = None) -> "CorpusUnits":
        """From the indexed chunks; symbols are resolved on ``label_chunks`` (the symbol
        chunker's chunks) when the index was cut otherwise, else on ``chunks``."""
        chunks = list(chunks)
        own = chunk_line_sets(chunks)
        ref = list(label_chunks) if label_chunks is not None else chunks
        ref_lines = own if label_chunks is None else chunk_line_sets(ref)
        acc: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for c in ref:
            if c.symbol:
                acc.setdefault((c.path, c.symbol), []).extend(ref_lines[c.id])
        return cls(line_counts=dict(line_counts or {}),
                   symbol_lines={k: merge_ranges(v) for k, v in acc.items()},
                   chunk_lines=own)


def corpus_units(index: Any) -> CorpusUnits:
    """The :class:`CorpusUnits` of a :class:`rag.index.build.Index`."""
    return CorpusUnits.from_chunks(index.chunks, label_chunks=getattr(index, "label_chunks", None),
                                   line_counts=getattr(index, "line_counts", None))


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
    allowed = {"corpus", "queries" if path.name == QUERIES_FILE else "negatives", "__line__",
               *(("unindexed", "subtree") if path.name == QUERIES_FILE else ())}
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
        # tags become metric-name prefixes (tag.prose.recall_at_8); keep them MLflow-legal
        problems.append(f"{where}: tag(s) {bad} must match {_TAG.pattern}")
        return ()
    return tuple(raw)


def span_digest(text: str, lines: tuple[int, int]) -> str | None:
    """The first :data:`DIGEST_CHARS` hex digits of the SHA-256 of lines ``start..end``
    (1-based, inclusive) of ``text``, each line right-stripped and joined with ``\\n`` (so
    line endings and trailing blanks do not count); ``None`` when the span runs past the
    end of ``text``. A span label's ``digest:`` holds it, taken when it was labelled."""
    all_lines = text.splitlines()
    start, end = lines
    if not 1 <= start <= end <= len(all_lines):
        return None
    body = "\n".join(line.rstrip() for line in all_lines[start - 1:end])
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def _parse_label(lab: Any, *, qid: Any, qpath: Path, what: str, problems: list[str],
                 paths: set[str] | None, symbols: Any, units: CorpusUnits | None) -> Label | None:
    """One label of ``relevant`` or ``not_relevant``, validated; None when unusable."""
    lwhere = f"{qpath}:{lab.get('__line__', '?') if isinstance(lab, dict) else '?'}"
    if not isinstance(lab, dict) or not isinstance(lab.get("path"), str):
        problems.append(f"{lwhere}: query {qid!r}: a label needs a 'path' ({what})")
        return None
    lextra = set(lab) - _LABEL_KEYS
    if lextra:
        problems.append(f"{lwhere}: query {qid!r}: "
                        f"{_unknown_keys(lextra, _LABEL_KEYS, what='label key')}")
    path, symbol, grade = lab["path"], lab.get("symbol"), lab.get("grade", 1)
    if not isinstance(grade, int) or isinstance(grade, bool) or grade < 1:
        problems.append(f"{lwhere}: query {qid!r}: grade must be an integer >= 1")
        grade = 1
    if symbol is not None and (not isinstance(symbol, str) or not symbol):
        problems.append(f"{lwhere}: query {qid!r}: symbol must be a non-empty string")
        symbol = None
    lines: tuple[int, int] | None = None
    if "lines" in lab:
        raw = lab["lines"]
        if not (isinstance(raw, list) and len(raw) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in raw)):
            problems.append(f"{lwhere}: query {qid!r}: lines must be [start, end], two integers")
        elif not 1 <= raw[0] <= raw[1]:
            problems.append(f"{lwhere}: query {qid!r}: lines {raw} need 1 <= start <= end")
        else:
            lines = (raw[0], raw[1])
        if "symbol" in lab:
            problems.append(f"{lwhere}: query {qid!r}: a label gives a symbol or lines, "
                            "never both")
            return None
    digest = lab.get("digest")
    if digest is not None and (not isinstance(digest, str) or not _DIGEST.match(digest)):
        problems.append(f"{lwhere}: query {qid!r}: digest must be {DIGEST_CHARS} lowercase hex "
                        f"digits (rag golden check --pin writes it), got {digest!r}")
        digest = None
    source = lab.get("source")
    if source is not None and (not isinstance(source, str) or not _LABEL_SOURCE.match(source)):
        problems.append(f"{lwhere}: query {qid!r}: a label's source must be 'hand', "
                        f"'mined:<how>[ <detail>]' or 'review:<how>[ <detail>]', got {source!r}")
        source = None
    if digest is not None and "lines" not in lab:
        problems.append(f"{lwhere}: query {qid!r}: a digest belongs to a span label "
                        "(lines: [start, end])")
    if paths is not None and path not in paths:
        problems.append(f"{lwhere}: query {qid!r}: label path {path!r} is not in the corpus")
    elif symbol and symbols is not None and (path, symbol) not in symbols:
        problems.append(f"{lwhere}: query {qid!r}: label symbol {symbol!r} is not "
                        f"defined in {path!r}")
    elif lines and units is not None and path in units.line_counts \
            and lines[1] > units.line_counts[path]:
        problems.append(f"{lwhere}: query {qid!r}: lines {list(lines)} end after the last "
                        f"line of {path!r} ({units.line_counts[path]})")
    if "lines" in lab and lines is None:
        return None
    spans: Ranges = ()
    if lines:
        spans = (lines,)
    elif symbol and units is not None:
        spans = units.symbol_lines.get((path, symbol), ())
    line = lab.get("__line__", 0)
    return Label(path=path, symbol=symbol, grade=grade, lines=lines, spans=spans,
                 digest=digest, source=source, line=line if isinstance(line, int) else 0)


def _check_units(labels: list[Label], where: str, qid: Any, what: str,
                 problems: list[str]) -> None:
    narrowed = {lab.path for lab in labels if lab.unit != "file"}
    whole = {lab.path for lab in labels if lab.unit == "file"}
    for p in sorted(narrowed & whole):
        problems.append(f"{where}: query {qid!r} labels {p!r} both with and without a symbol "
                        f"or lines ({what})")
    if len({lab.doc_key for lab in labels}) != len(labels):
        problems.append(f"{where}: query {qid!r} repeats a label ({what})")



#: the keys a query of queries.yaml / a negative of negatives.yaml may have (``__line__``: the
#: loader's own line number)
QUERY_KEYS = frozenset({"id", "query", "tags", "types", "relevant", "not_relevant", "note",
                        "source", "unresolved", "__line__"})
NEGATIVE_KEYS = frozenset({"id", "query", "tags", "note", "__line__"})


def _unknown_keys(extra: set, known: "frozenset[str] | set[str]", what: str = "key") -> str:
    """``unknown key(s) ['relevent'] ('relevent': did you mean 'relevant'?)``: the closest
    known key of each unknown one, by :func:`difflib.get_close_matches`."""
    import difflib

    shown = sorted(str(k) for k in extra)
    hints = [f"{k!r}: did you mean {m[0]!r}?" for k in shown
             if (m := difflib.get_close_matches(k, sorted(set(known) - {"__line__"}), n=1,
                                                cutoff=0.6))]
    return f"unknown {what}(s) {shown}" + (f" ({'; '.join(hints)})" if hints else "")


def load_golden(directory: Path, *, corpus_paths: Iterable[str] | None = None,
                corpus_symbols: Iterable[tuple[str, str]] | None = None,
                units: CorpusUnits | None = None) -> GoldenSet:
    """Load and validate ``queries.yaml`` and ``negatives.yaml`` from ``directory``.

    Args:
        directory: the golden directory (e.g. ``golden/flask``).
        corpus_paths: every indexed path; when given, a label naming another path is an error.
        corpus_symbols: every (path, symbol) of the index; when given, a label's symbol must
            be one of them.
        units: the index's line structure (:func:`corpus_units`); when given, a span must end
            within its file and every symbol label is resolved to its lines
            (:attr:`Label.spans`), so chunks are judged by overlap; the set keeps it
            (:attr:`GoldenSet.units`) for the evaluator.

    Raises:
        GoldenError: listing every problem (missing file, bad YAML, duplicate id across both
            files, empty query, no relevant label, unknown key, label path or symbol not in
            the corpus, bad ``lines`` or both ``symbol`` and ``lines``, a bad ``source``, a path
            labelled both as a whole file and narrowed in one query, a unit both relevant
            and not relevant).
    """
    directory = Path(directory)
    problems: list[str] = []
    if not directory.is_dir():
        raise GoldenError([f"{directory}: golden directory not found"])
    qpath, npath = directory / QUERIES_FILE, directory / NEGATIVES_FILE
    qdata, ndata = _load_yaml(qpath, problems), _load_yaml(npath, problems)
    paths = set(corpus_paths) if corpus_paths is not None else None
    symbols = set(corpus_symbols) if corpus_symbols is not None else None
    if symbols is None and units is not None:
        symbols = set(units.symbol_lines)
    seen: dict[str, str] = {}
    positives: list[GoldenQuery] = []
    negatives: list[NegativeQuery] = []
    unindexed = (qdata or {}).get("unindexed", "error")
    if unindexed not in ("error", "keep"):
        problems.append(f"{qpath}: unindexed must be 'error' or 'keep', got {unindexed!r}")
    keep_unindexed = unindexed == "keep"
    moved: list[str] = []
    subtree = (qdata or {}).get("subtree")
    if subtree is not None and (not isinstance(subtree, str) or not subtree.strip("/")
                                or subtree.startswith("/") or ".." in subtree.split("/")):
        problems.append(f"{qpath}: subtree must be a relative folder of the repository, got "
                        f"{subtree!r}")
        subtree = None
    subtree = subtree.strip("/") if subtree else None

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
        if text is None or (isinstance(text, str) and not text.strip()):
            problems.append(f"{where}: query {qid!r} has an empty query text")
            return False
        if not isinstance(text, str):
            problems.append(f"{where}: query {qid!r}: 'query' must be text, got "
                            f"{type(text).__name__} {_shown(text)} (quote it in YAML)")
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
            extra = set(item) - QUERY_KEYS
            if extra:
                problems.append(f"{where}: {_unknown_keys(extra, QUERY_KEYS)}")
            qid = item.get("id")
            missing = [k for k in ("id", "query") if k not in item]
            if missing:
                problems.append(f"{where}: the query has no {' and no '.join(map(repr, missing))}"
                                + (f" (id {qid!r})" if "id" in item else ""))
                ok = False
            else:
                ok = check_id(qid, where) & check_query(item.get("query"), where, qid)
            kw = dict(qid=qid, qpath=qpath, problems=problems, paths=paths, symbols=symbols,
                      units=units)
            rel = item.get("relevant")
            raw_unres = item.get("unresolved") or []
            if not isinstance(raw_unres, list):
                problems.append(f"{where}: query {qid!r}: unresolved must be a list of labels")
                raw_unres = []
            if rel is not None and not isinstance(rel, list):
                problems.append(f"{where}: query {qid!r}: 'relevant' must be a list of labels "
                                f"(- path: ...), got {type(rel).__name__} {_shown(rel)}")
                rel = []
            elif not rel and not raw_unres:
                problems.append(f"{where}: query {qid!r} needs at least one 'relevant' label")
                rel = []
            rel = rel or []  # none but unresolved ones
            if keep_unindexed and paths is not None:  # labels of files the walk did not index
                kept = [r for r in rel if not (isinstance(r, dict) and isinstance(
                    r.get("path"), str) and r["path"] not in paths)]
                moved += [f"{where}: {r['path']}" for r in rel if r not in kept]
                # unresolved paths are the repository's: the subtree's prefix goes back on
                raw_unres = [*raw_unres, *({**r, "path": f"{subtree}/{r['path']}"} if subtree
                                           else r for r in rel if r not in kept)]
                rel = kept
            labels = [lab for raw in rel
                      if (lab := _parse_label(raw, what="relevant", **kw)) is not None]
            unresolved = [lab for raw in raw_unres
                          if (lab := _parse_label(raw, what="unresolved", **{
                              **kw, "paths": None, "symbols": None, "units": None}))
                          is not None]
            _check_units([*labels, *unresolved], where, qid, "relevant", problems)
            nrel = item.get("not_relevant")
            if nrel is None:
                nrel = []
            elif not isinstance(nrel, list):
                problems.append(f"{where}: query {qid!r}: not_relevant must be a list of labels")
                nrel = []
            negative = [lab for raw in nrel
                        if (lab := _parse_label(raw, what="not_relevant", **kw)) is not None]
            _check_units(negative, where, qid, "not_relevant", problems)
            both = {lab.doc_key for lab in labels} & {lab.doc_key for lab in negative}
            for key in sorted(both):
                problems.append(f"{where}: query {qid!r} judges {key!r} both relevant and "
                                "not relevant")
            source = item.get("source")
            if source is not None and (not isinstance(source, str) or not _SOURCE.match(source)):
                problems.append(f"{where}: query {qid!r}: source must be 'hand' or "
                                f"'mined:<how>[ <detail>]' (e.g. 'mined:git <sha>'), got {source!r}")
                source = None
            tags = _tags(item.get("tags"), where, problems)
            types = item.get("types") or []
            if not isinstance(types, list) or not set(types) <= set(TYPE_NAMES):
                problems.append(f"{where}: query {qid!r}: types must be a list of {list(TYPE_NAMES)}")
                types = []
            if ok:
                positives.append(GoldenQuery(id=qid, query=item["query"].strip(), tags=tags,
                                             types=tuple(types),
                                             relevant=tuple(labels),
                                             line=item.get("__line__", 0),
                                             not_relevant=tuple(negative), source=source,
                                             unresolved=tuple(unresolved)))
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
            extra = set(item) - NEGATIVE_KEYS
            if extra:
                problems.append(f"{where}: {_unknown_keys(extra, NEGATIVE_KEYS)}")
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
                     directory=directory, corpus=(qdata or {}).get("corpus"), tags=tags,
                     units=units, unindexed=moved, subtree=subtree)


JUDGEMENT_DIGEST_CHARS = 16


def judgement_digest(query: "GoldenQuery | NegativeQuery") -> str:
    """What a query asks and how it is judged, as 16 hex characters of SHA-256: its text, its
    kind, and for a positive every relevant, unresolved and not-relevant unit (doc key and
    grade), in a canonical order. Two rows whose golden sets differ can still be paired on the
    queries whose digests agree (``rag gate``'s coverage guard): the same id with another
    digest is a query that was relabelled or reworded, not the same measurement.
    Independent of provenance (``source:``), line numbers in the file and the order of labels.
    """
    h = hashlib.sha256()
    h.update(query.query.encode() + b"\0")
    if isinstance(query, GoldenQuery):
        h.update(b"positive\0")
        for what, labels in (("relevant", (*query.relevant, *query.unresolved)),
                             ("not_relevant", query.not_relevant)):
            for key, grade in sorted((lab.doc_key, lab.grade) for lab in labels):
                h.update(f"{what}\t{key}\t{grade}\0".encode())
    else:
        h.update(b"negative\0")
    return h.hexdigest()[:JUDGEMENT_DIGEST_CHARS]


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

    The docno is the evaluation doc id the run file uses (``path``, ``path#symbol`` for a
    symbol label, ``path#L<start>-<end>`` for a span label; :attr:`Label.doc_key`, through
    :func:`trec_docno`) and the relevance is the label's grade: the evaluator keys a ranked
    chunk that hits a label by that label's doc id (rag/eval/evaluate.py ``collapse``), so
    the run file and these qrels name the same units. ``not_relevant`` labels are not written
    (judged coverage is the harness's own metric). Positives in file order, labels in file order. Negatives have no relevant
    document, so TREC qrels cannot hold them: they are left out (``trec_eval`` scores only the
    queries that have qrels, so the negatives' rankings in a run file are ignored).
    """
    return [f"{q.id} 0 {trec_docno(doc)} {grade}"
            for q in golden.positives for doc, grade in q.qrels.items()]
