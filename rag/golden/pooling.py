"""TREC-style pooling of several rankings, for judging new (query, unit) pairs.

``rag golden pool`` takes queries (the golden set's ``queries.yaml`` and/or candidates files)
and several rankings — ledger rows (``--runs`` or every row of a ``--sweep``: their
chunk-level ``run.chunks.jsonl``, else ``run.trec``), TREC run files, and rag's own search of
``--path`` in several modes for every query no row ranked (the application provides it:
rag/app/pool_rankings.py) — and collects, per query, the candidate's own labels (proposals)
and the union of the rankings' top ``depth`` units (:func:`chunk_unit`). Each pooled unit says
whether a label of that query already judges it; ``rag golden review``
(:mod:`rag.golden.review`) walks the unjudged ones and writes the judgements into the golden
files. The pool file is never the golden set.

Candidates file (``--queries FILE``)::

    candidates:
      - id: cand-streaming          # same entry shape as queries.yaml entries ...
        query: how do I stream a large response
        tags: [prose]
        source: mined:github 4562   # ... plus where it came from (golden/README.md)
        # relevant: optional: proposals (a miner's labels), pooled first and reviewed one
        # by one, never counted as judgements; not_relevant: review writes here until the
        # candidate's first relevant label moves it into queries.yaml

Pool file (JSON Lines, UTF-8, one JSON object per line):

* line 1, the header: ``{"pool": 1, "golden": ABS_DIR, "corpus": NAME|null,
  "corpus_root": DIR|null, "depth": K, "queries_files": [ABS_FILE, ...],
  "runs": [{"id": RUN_ID_OR_FILE, "label": TEXT, "corpus": NAME|null,
  "corpus_root": DIR|null}, ...], "created": ISO-8601}``; ``corpus_root`` is the rows'
  ``corpus_root`` tag when they agree (review's default corpus root).
* then one line per query, in the order of the queries files: ``{"query_id": ID,
  "query": TEXT, "origin": "queries.yaml" | ABS_CANDIDATES_FILE, "source": TEXT|null,
  "missing_in": [RUN, ...], "hits": [HIT, ...]}``, where ``missing_in`` lists the rankings
  that have no ranking for the query and each HIT is ``{"docno": DOCNO, "doc": DOC_ID,
  "path": PATH, "symbol": SYMBOL|null, "lines": [A, B]|null, "chunk_lines": [A, B]|null,
  "best_rank": R|null, "runs": [RUN, ...], "ranks": {RUN: R, ...}, "priority": P,
  "proposed": BOOL,
  "judged": "relevant" | "not_relevant" | null, "label": DOC_KEY|null}``. ``docno`` is the
  run file's field, ``doc`` its decoded doc id (:func:`rag.eval.golden.unquote_docno`):
  ``path``, ``path#symbol`` or ``path#L<a>-<b>`` (``symbol`` / ``lines`` split out of it);
  ``chunk_lines`` the lines of the ranked chunk when the ranking says (chunk-level runs, rag's
  own); ``best_rank`` the best 1-based rank over the rankings (null for a proposal no ranking
  found); ``runs`` the rankings that ranked it within ``depth`` (header ids) and ``ranks``
  its rank in each; ``priority`` the
  sum over them of 1/rank; ``proposed`` a label of the candidate itself; ``label`` the label
  that judges it. Proposals come first, then hits by priority, best rank, doc id.

A hit is judged when a ``relevant:`` or ``not_relevant:`` label of its query names the same
unit (see :func:`judgement`): ``path#symbol`` / ``path#L<a>-<b>`` by a label of that path and
symbol / lines, or by a whole-file label of that path (it covers every chunk); ``path`` by a
whole-file label; and a ``path`` hit of a query whose relevant labels narrow that path (a
``symbol`` or ``lines``) counts as judged not relevant: a run names the whole-file unit only
for a chunk other than the labelled ones.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rag.eval.golden import NEGATIVES_FILE, QUERIES_FILE, unquote_docno

POOL_VERSION = 1
DEFAULT_DEPTH = 10
GOLDEN_ORIGIN = QUERIES_FILE  # the ``origin`` of a query that lives in the golden queries.yaml


class PoolError(ValueError):
    """A bad input of pooling (queries file, run file, ledger rows); one line."""


@dataclass
class PoolQuery:
    """One query to pool: its labels (raw label mappings) and where it lives."""

    id: str
    query: str
    origin: str  # GOLDEN_ORIGIN or the absolute path of a candidates file
    source: str | None = None
    relevant: list[dict[str, Any]] = field(default_factory=list)
    not_relevant: list[dict[str, Any]] = field(default_factory=list)
    # a candidate's own labels (mined or written with it): proposals to judge, never judgements
    proposed: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunSource:
    """One row's ranking: id (run id or file), display label, and query id -> docnos in rank
    order."""

    id: str
    label: str
    ranking: dict[str, list[str]]
    corpus: str | None = None
    corpus_root: str | None = None
    # docno -> the (start, end) lines of the chunk it names, where the source knows them
    # (a chunk-level run): lets a span label judge a symbol hit it overlaps
    lines: dict[str, tuple[int, int]] = field(default_factory=dict)


# ---------------------------------------------------------------------------- labels

def _well_formed(lab: Any) -> bool:
    if not isinstance(lab, Mapping) or not isinstance(lab.get("path"), str):
        return False
    lines = lab.get("lines")
    return lines is None or (isinstance(lines, list) and len(lines) == 2 and all(
        isinstance(x, int) and not isinstance(x, bool) for x in lines))


def well_formed_labels(raw: Any) -> list[dict[str, Any]]:
    """The well-formed labels of a list: a string ``path`` and, when given, ``lines`` of two
    integers (a malformed label of the golden set judges nothing; ``rag golden check`` names
    it)."""
    return [lab for lab in raw if _well_formed(lab)] if isinstance(raw, list) else []


def candidate_labels(raw: Any, where: str, key: str) -> list[dict[str, Any]]:
    """A candidate's ``relevant:`` or ``not_relevant:`` (``key``) list; absent is empty.

    Raises:
        PoolError: not a list, or a label without a string ``path`` or with ``lines`` that
            are not two integers (``where``: the file and the candidate's id).
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PoolError(f"{where}: {key}: must be a list of labels ({{path: ...}}, with a "
                        f"symbol or lines: [start, end]), got {raw!r}; nothing was pooled")
    for n, lab in enumerate(raw, 1):
        if not _well_formed(lab):
            raise PoolError(f"{where}: {key}: label {n} ({lab!r}) needs a 'path' and, if "
                            "given, 'lines' of two integers; nothing was pooled")
    return list(raw)


_SPAN = re.compile(r"^L(\d+)-(\d+)$")


def split_doc(doc: str) -> tuple[str, str | None, tuple[int, int] | None]:
    """A doc id as (path, symbol, lines): ``path``, ``path#symbol`` or ``path#L<a>-<b>``
    (a span, as :attr:`rag.eval.golden.Label.doc_key` names it)."""
    path, _, rest = doc.partition("#")
    m = _SPAN.match(rest)
    if m:
        return path, None, (int(m.group(1)), int(m.group(2)))
    return path, rest or None, None


def label_key(label: Mapping[str, Any]) -> str:
    """A raw label's doc id, as :attr:`rag.eval.golden.Label.doc_key`: ``path``,
    ``path#symbol`` or ``path#L<start>-<end>``."""
    if label.get("symbol"):
        return f"{label['path']}#{label['symbol']}"
    lines = label.get("lines")
    if isinstance(lines, list) and len(lines) == 2:
        return f"{label['path']}#L{lines[0]}-{lines[1]}"
    return str(label["path"])


def _narrows(label: Mapping[str, Any]) -> bool:
    return bool(label.get("symbol") or label.get("lines"))


def judgement(doc: str, relevant: Sequence[Mapping[str, Any]],
              not_relevant: Sequence[Mapping[str, Any]], *,
              lines: tuple[int, int] | None = None) -> tuple[str | None, str | None]:
    """Whether the labels of one query judge the doc id ``doc`` (``path``, ``path#symbol`` or
    ``path#L<a>-<b>``): ``("relevant" | "not_relevant", label doc id)`` or ``(None, None)``.

    In order: a label naming the same unit (same doc id); a whole-file label of the doc's
    path (it covers every chunk); a span label of the path that overlaps the doc's lines
    (``lines``, or the doc's own span: the evaluation counts such a chunk as hitting the
    label); for a whole-file doc, a relevant label narrowing that path to a symbol or lines
    (a run names the whole-file unit only for another chunk of the path: not relevant, as
    the evaluation scores it).
    """
    path, _, span = split_doc(doc)
    lines = lines or span
    lists = (("relevant", relevant), ("not_relevant", not_relevant))
    for verdict, labels in lists:  # the same unit
        for lab in labels:
            if label_key(lab) == doc:
                return verdict, doc
    if doc != path:
        for verdict, labels in lists:  # a whole-file label covers every chunk
            for lab in labels:
                if lab["path"] == path and not _narrows(lab):
                    return verdict, label_key(lab)
        if lines:
            for verdict, labels in lists:  # a span label the chunk overlaps
                for lab in labels:
                    got = lab.get("lines")
                    if lab["path"] == path and isinstance(got, list) and len(got) == 2 \
                            and got[0] <= lines[1] and lines[0] <= got[1]:
                        return verdict, label_key(lab)
        return None, None
    for lab in relevant:
        if lab["path"] == path and _narrows(lab):
            return "not_relevant", label_key(lab)
    return None, None


# ---------------------------------------------------------------------------- queries

def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PoolError(f"{path}: file not found") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PoolError(f"{where}: not valid YAML ({problem}); nothing was pooled") from None


def _entries(data: Any, path: Path) -> tuple[str, list[Any]]:
    if isinstance(data, dict) and isinstance(data.get("candidates"), list):
        return "candidates", data["candidates"]
    if isinstance(data, dict) and isinstance(data.get("queries"), list):
        return "queries", data["queries"]
    raise PoolError(f"{path}: expected a 'queries:' or 'candidates:' list at the top level")


#: the id prefix of the placeholder queries ``rag golden init`` writes (``example-file``)
INIT_EXAMPLE_PREFIX = "example-"


def is_init_example(query_id: str) -> bool:
    """Whether ``query_id`` is one of ``rag golden init``'s placeholder queries (never pooled;
    ``rag golden check`` names those left in)."""
    return query_id.startswith(INIT_EXAMPLE_PREFIX)


def load_pool_queries(golden_dir: Path, files: Sequence[Path] | None = None,
                      warn=None) -> list[PoolQuery]:
    """The queries to pool, in file order.

    Args:
        golden_dir: the golden directory; its ``queries.yaml`` holds the judged queries.
        files: queries files (``queries:`` list, e.g. the golden ``queries.yaml``) or
            candidates files (``candidates:`` list); default: the golden ``queries.yaml``.
            A candidate whose id is in the golden ``queries.yaml`` is that query (it was moved
            there by a review); one whose id is a negative's is left out (warned).
        warn: called with one line per query left out (default: print to stderr).

    Raises:
        PoolError: a missing or invalid file, an entry without id or query text.
    """
    warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    golden_dir = Path(golden_dir)
    gfile = (golden_dir / QUERIES_FILE).resolve()
    if not golden_dir.is_dir():
        raise PoolError(f"{golden_dir}: golden directory not found")
    golden: dict[str, PoolQuery] = {}
    gdata = _read_yaml(gfile) if gfile.is_file() else {"queries": []}
    for item in _entries(gdata, gfile)[1] or []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            golden[item["id"]] = PoolQuery(
                id=item["id"], query=str(item.get("query") or "").strip(), origin=GOLDEN_ORIGIN,
                source=item.get("source"), relevant=well_formed_labels(item.get("relevant")),
                not_relevant=well_formed_labels(item.get("not_relevant")))
    negatives = set()
    nfile = golden_dir / NEGATIVES_FILE
    if nfile.is_file():
        ndata = _read_yaml(nfile)
        if isinstance(ndata, dict) and isinstance(ndata.get("negatives"), list):
            negatives = {n.get("id") for n in ndata["negatives"] if isinstance(n, dict)}
    out: list[PoolQuery] = []
    seen: dict[str, Path] = {}
    for f in (files if files else [gfile]):
        f = Path(f).resolve()
        kind, items = _entries(gdata if f == gfile else _read_yaml(f), f)
        for n, item in enumerate(items, 1):
            if not isinstance(item, dict) or not isinstance(item.get("id"), str) \
                    or not isinstance(item.get("query"), str) or not item["query"].strip():
                raise PoolError(f"{f}: {kind} entry {n} needs an 'id' and a non-empty 'query'")
            qid = item["id"]
            if qid in seen:
                warn(f"{f}: query {qid!r} already read from {seen[qid]}; this one is left out")
                continue
            if qid in negatives and qid not in golden:
                warn(f"{f}: query {qid!r} has the id of a negative in {nfile}; left out")
                continue
            seen[qid] = f
            if qid in golden:
                out.append(golden[qid])
            elif f == gfile:  # not a mapping with an id at load: cannot happen (checked above)
                continue
            elif kind == "queries":
                raise PoolError(f"{f}: a queries file other than {gfile}: review can write "
                                "only into the golden set and candidates files; give its "
                                "entries as a candidates file (a 'candidates:' list)")
            else:  # a candidate: its relevant labels are proposals, judged in review
                where = f"{f}: candidate {qid!r}"
                out.append(PoolQuery(
                    id=qid, query=item["query"].strip(), origin=str(f), source=item.get("source"),
                    not_relevant=candidate_labels(item.get("not_relevant"), where, "not_relevant"),
                    proposed=candidate_labels(item.get("relevant"), where, "relevant")))
    return out


# ---------------------------------------------------------------------------- runs

def parse_run_text(text: str, where: str) -> dict[str, list[str]]:
    """A TREC run file's text as query id -> docnos in rank order (the rank column orders a
    query's lines, ties by docno, as :func:`rag.eval.retriever.parse_run_file` reads them).

    Raises:
        PoolError: a line without six fields or with a non-integer rank (``where:line``).
    """
    rows: dict[str, list[tuple[int, str]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise PoolError(f"{where}:{n}: a TREC run line has 6 fields "
                            f"(qid Q0 docno rank score tag), got {len(parts)}")
        qid, _, doc, rank, _, _ = parts
        try:
            rows.setdefault(qid, []).append((int(rank), doc))
        except ValueError:
            raise PoolError(f"{where}:{n}: rank must be an integer, got {rank!r}") from None
    return {q: [d for _, d in sorted(r)] for q, r in rows.items()}


def parse_chunk_run(text: str, where: str) -> tuple[dict[str, list[str]], dict[str, tuple[int, int]]]:
    """A row's ``run.chunks.jsonl`` (:func:`rag.eval.evaluate.chunk_run_jsonl`) as query id ->
    docnos of :func:`chunk_unit` in rank order (a unit twice, as two chunks of one symbol,
    once), and docno -> the first such chunk's lines.

    Raises:
        PoolError: a line that is not JSON or lacks ``query_id`` / ``hits`` (``where:line``).
    """
    from rag.eval.golden import trec_docno

    ranking: dict[str, list[str]] = {}
    spans: dict[str, tuple[int, int]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            qid, hits = str(rec["query_id"]), list(rec["hits"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise PoolError(f"{where}:{n}: not a chunk-run line ({exc})") from None
        docs = ranking.setdefault(qid, [])
        for h in sorted(hits, key=lambda h: h.get("rank", 0)):
            start, end = int(h.get("start_line") or 0), int(h.get("end_line") or 0)
            docno = trec_docno(chunk_unit(str(h["path"]), h.get("symbol"), start, end))
            if docno not in docs:
                docs.append(docno)
                if start >= 1:
                    spans.setdefault(docno, (start, max(start, end)))
    return ranking, spans


def _chunk_run_text(ledger, run_id: str) -> str | None:
    from rag.ledger.mlflow_store import CHUNK_RUN_JSONL, LedgerError

    try:
        return ledger.download_text(run_id, CHUNK_RUN_JSONL)
    except LedgerError:
        return None


def run_file_sources(files: Iterable[Path]) -> list[RunSource]:
    """Run files given directly (``--run-file``): each is one row, named by its path."""
    out = []
    for f in files:
        f = Path(f)
        try:
            text = f.read_text(encoding="utf-8")
        except OSError as exc:
            raise PoolError(f"{f}: cannot read the run file ({exc.strerror or exc})") from None
        out.append(RunSource(id=str(f), label=f.name, ranking=parse_run_text(text, str(f))))
    return out


def _row_label(run: Any) -> str:
    tags = run.data.tags
    return tags.get("sweep_job") or tags.get("mlflow.runName") or run.info.run_id[:8]


def ledger_sources(uri: str, *, runs: Sequence[str] | None = None, sweep: str | None = None,
                   corpus: str | None = None, warn=None) -> list[RunSource]:
    """The TREC run file of ledger rows (``run.trec.txt``, ``run.trec`` for older rows):
    ``runs`` (ids or unique prefixes) or every finished
    row tagged ``sweep_id = sweep`` (of ``corpus`` when given: a suite's sweep spans corpora).

    Raises:
        PoolError: no row matches, rows of different corpora, a row without run.trec, or a
            store that cannot be opened (one line each).
    """
    from rag.ledger.mlflow_store import CHUNK_RUN_JSONL, Ledger, LedgerError

    warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    try:
        ledger = Ledger(uri, create=False)
        if sweep is not None:
            if "'" in sweep:
                raise PoolError(f"--sweep {sweep!r}: a sweep id holds no quote")
            exps = [e.experiment_id for e in ledger.client.search_experiments()]
            rows = ledger.rows(exps, where=f"tags.sweep_id = '{sweep}'")
            if not rows:
                raise PoolError(f"no finished ledger row is tagged sweep_id={sweep!r} in {uri}")
            if corpus:
                other = [r for r in rows if r.data.tags.get("corpus") not in (None, corpus)]
                if other:
                    warn(f"{len(other)} row(s) of sweep {sweep} are of another corpus than "
                         f"{corpus!r}; left out")
                rows = [r for r in rows if r not in other]
                if not rows:
                    raise PoolError(f"no row of sweep {sweep!r} is of corpus {corpus!r}")
        else:
            rows = [ledger.client.get_run(ledger.resolve_run_id(ref)) for ref in runs or []]
        corpora = sorted({r.data.tags.get("corpus") for r in rows} - {None})
        if len(corpora) > 1:
            raise PoolError(f"the rows are of different corpora ({', '.join(corpora)}); pool "
                            "rows of one corpus")
        if corpus and corpora and corpora != [corpus]:
            raise PoolError(f"the rows are of corpus {corpora[0]!r}, the golden set of {corpus!r}")
        out = []
        for r in rows:
            rid = r.info.run_id
            src = RunSource(id=rid, label=_row_label(r), ranking={},
                            corpus=r.data.tags.get("corpus"),
                            corpus_root=r.data.tags.get("corpus_root"))
            chunks = _chunk_run_text(ledger, rid)
            if chunks is not None:  # the ranking as returned, chunk by chunk
                src.ranking, src.lines = parse_chunk_run(chunks, f"row {rid[:8]} {CHUNK_RUN_JSONL}")
            else:  # an older row: run.trec.txt (or run.trec), units as its labels collapsed them
                name, text = ledger.download_run_file(rid)
                src.ranking = parse_run_text(text, f"row {rid[:8]} {name}")
            out.append(src)
        return out
    except LookupError as exc:
        # a KeyError's str() quotes its message: take the message itself
        raise PoolError(str(exc.args[0]) if exc.args else str(exc)) from None
    except LedgerError as exc:
        raise PoolError(str(exc)) from None


# ---------------------------------------------------------------------------- pooling

def chunk_unit(path: str, symbol: str | None, start_line: int, end_line: int) -> str:
    """The unit a ranked chunk is judged at, as a doc id: ``path#symbol`` for a chunk that
    carries a symbol (function, class, method, section), ``path#L<start>-<end>`` for any
    other chunk with lines (``<module>`` code, a window), ``path`` when lines are unknown.
    A verdict on it is a label of exactly that unit (golden/README.md "three units"), so
    ``n`` on one chunk never judges the rest of its file."""
    from rag.corpus.languages import MODULE_SYMBOL

    if symbol and symbol != MODULE_SYMBOL:
        return f"{path}#{symbol}"
    if start_line >= 1:
        return f"{path}#L{start_line}-{max(start_line, end_line)}"
    return path


def pool(queries: Sequence[PoolQuery], runs: Sequence[RunSource], *,
         depth: int = DEFAULT_DEPTH) -> list[dict[str, Any]]:
    """Per query (in order), its proposed labels (a candidate's own) and the union of every
    run's top ``depth`` docnos: one record per query, the shape of a pool file's query line
    (module docstring).

    Hits are ordered for review: proposals first, then by ``priority``, the sum over the runs
    of 1/rank (a unit several runs put high comes before one a single run found low; depth-k
    pooling ordered by the reciprocal-rank weight of RRF, Cormack, Clarke & Buettcher 2009,
    without its constant: a static stand-in for move-to-front pooling, Cormack, Palmer &
    Clarke 1998, which judges first what the most productive runs rank high), then best rank,
    then doc id.
    """
    if depth < 1:
        raise PoolError(f"--depth must be >= 1, got {depth}")
    from rag.eval.golden import trec_docno

    records = []
    for q in queries:
        hits: dict[str, dict[str, Any]] = {}
        missing = []
        for lab in q.proposed:
            doc = label_key(lab)
            path, symbol, lines = split_doc(doc)
            verdict, label = judgement(doc, q.relevant, q.not_relevant)
            hits[trec_docno(doc)] = {"docno": trec_docno(doc), "doc": doc, "path": path,
                                     "symbol": symbol, "lines": list(lines) if lines else None,
                                     "chunk_lines": None, "best_rank": None, "runs": [],
                                     "ranks": {},
                                     "priority": 0.0, "proposed": True,
                                     "judged": verdict, "label": label}
        for run in runs:
            docs = run.ranking.get(q.id)
            if docs is None:
                missing.append(run.id)
                continue
            for rank, docno in enumerate(docs[:depth], start=1):
                h = hits.get(docno)
                if h is None:
                    doc = unquote_docno(docno)
                    path, symbol, lines = split_doc(doc)
                    span = run.lines.get(docno)
                    verdict, label = judgement(doc, q.relevant, q.not_relevant, lines=span)
                    h = hits[docno] = {"docno": docno, "doc": doc, "path": path,
                                       "symbol": symbol,
                                       "lines": list(lines) if lines else None,
                                       "chunk_lines": list(span) if span else None,
                                       "best_rank": rank, "runs": [], "ranks": {},
                                       "priority": 0.0,
                                       "proposed": False, "judged": verdict, "label": label}
                if h["chunk_lines"] is None and run.lines.get(docno):
                    h["chunk_lines"] = list(run.lines[docno])
                h["best_rank"] = rank if h["best_rank"] is None else min(h["best_rank"], rank)
                if run.id not in h["runs"]:
                    h["runs"].append(run.id)
                    h["ranks"][run.id] = rank
                    h["priority"] = round(h["priority"] + 1.0 / rank, 6)
        ordered = sorted(hits.values(), key=lambda h: (
            not h["proposed"], -h["priority"], h["best_rank"] or 0, h["doc"]))
        records.append({"query_id": q.id, "query": q.query, "origin": q.origin,
                        "source": q.source, "missing_in": missing, "hits": ordered})
    return records


def pool_header(golden_dir: Path, runs: Sequence[RunSource], *, depth: int,
                queries_files: Sequence[Path], corpus: str | None) -> dict[str, Any]:
    """The pool file's first line (see the module docstring)."""
    roots = {r.corpus_root for r in runs if r.corpus_root}
    return {"pool": POOL_VERSION, "golden": str(Path(golden_dir).resolve()), "corpus": corpus,
            "corpus_root": roots.pop() if len(roots) == 1 else None, "depth": depth,
            "queries_files": [str(Path(f).resolve()) for f in queries_files],
            "runs": [{"id": r.id, "label": r.label, "corpus": r.corpus,
                      "corpus_root": r.corpus_root} for r in runs],
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def write_pool(path: Path, header: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> None:
    """Write a pool file (JSON Lines: the header, then one line per query)."""
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(r, ensure_ascii=False) for r in records]
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_pool(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pool file's header and query records.

    Raises:
        PoolError: not a pool file (missing, not JSON Lines, no header, another version).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PoolError(f"{path}: cannot read the pool file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PoolError(f"{path}: not a pool file (not UTF-8 text)") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise PoolError(f"{path}:{n}: not a JSON line ({exc.msg})") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("pool") != POOL_VERSION:
        raise PoolError(f"{path}: not a pool file of version {POOL_VERSION} "
                        "(written by rag golden pool)")
    header = rows[0]
    runs = header.get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("id"), str)
                                             for r in runs):
        raise PoolError(f"{path}:1: the header's runs must be a list of {{id, label}} objects")
    for key in ("golden", "corpus", "corpus_root"):
        if header.get(key) is not None and not isinstance(header[key], str):
            raise PoolError(f"{path}:1: the header's {key} must be a string or null")
    for n, r in enumerate(rows[1:], 2):
        if not isinstance(r, dict) or not {"query_id", "query", "origin", "hits"} <= set(r):
            raise PoolError(f"{path}:{n}: a query line needs query_id, query, origin and hits")
        if not all(isinstance(r[k], str) for k in ("query_id", "query", "origin")) \
                or not isinstance(r["hits"], list):
            raise PoolError(f"{path}:{n}: query_id, query and origin are strings, hits a list")
        for h in r["hits"]:
            cl = h.get("chunk_lines") if isinstance(h, dict) else None
            if not isinstance(h, dict) or not isinstance(h.get("doc"), str) \
                    or not isinstance(h.get("path"), str) or not isinstance(h.get("runs", []), list) \
                    or (cl is not None and not (isinstance(cl, list) and len(cl) == 2 and all(
                        isinstance(x, int) and not isinstance(x, bool) for x in cl))):
                raise PoolError(f"{path}:{n}: a hit needs a string doc and path, a list of "
                                "runs and chunk_lines of two integers or null")
    return header, rows[1:]


# ---------------------------------------------------------------------------- CLI

def add_pool_parser(sub) -> argparse.ArgumentParser:
    """Register ``pool`` on the ``rag golden`` action subparsers."""
    p = sub.add_parser(
        "pool",
        help="pool the top-k hits of several rankings per query (TREC pooling) for judging",
        description=(
            "Collect, per query, the union of several rankings' top --depth hits, each at the "
            "unit it is judged at (the chunk's symbol, or its lines), with its best rank, the "
            "rankings that found it and whether a relevant/not_relevant label of the query "
            "already judges it; a candidate's own labels come first, as proposals to review. "
            "The rankings: ledger rows (--runs, or every row of --sweep; their chunk-level "
            "run.chunks.jsonl, else run.trec), TREC run files (--run-file), and rag itself "
            "over --path in each of --modes, for every query no row ranked (a candidate is "
            "in no row) or, with no rows given, for every query. Writes a pool file (JSON "
            "Lines; format: rag/golden/pooling.py) for rag golden review; the golden set is "
            "not changed."),
        epilog="example: rag golden pool --golden golden/myrepo --path /src/myrepo "
               "--queries golden/myrepo/queries.yaml golden/myrepo/candidates-git.yaml")
    p.add_argument("--golden", required=True, metavar="DIR",
                   help="the golden directory (queries.yaml, negatives.yaml)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--runs", nargs="+", metavar="ID", help="ledger rows (run ids or unique prefixes)")
    src.add_argument("--sweep", metavar="SWEEP_ID",
                     help="every finished row tagged with this sweep_id (of the golden set's corpus)")
    src.add_argument("--run-file", nargs="+", metavar="FILE", dest="run_files",
                     help="TREC run files instead of ledger rows (one row each)")
    p.add_argument("--path", default=None, metavar="DIR",
                   help="the corpus directory rag ranks the queries of no row in (default: "
                        "the rows' corpus_root, when they name one)")
    p.add_argument("--modes", nargs="+", default=None, metavar="MODE",
                   help="the search modes rag ranks with over --path (default: every mode, "
                        "as +sweep=routing runs them)")
    p.add_argument("--queries", nargs="+", action="extend", metavar="FILE", default=None,
                   help="queries files (queries: list) and candidates files (candidates: "
                        "list, entries as in queries.yaml plus source:); several after one "
                        "flag, or the flag repeated; default: the golden queries.yaml (give it "
                        "too to pool both)")
    p.add_argument("--depth", type=int, default=DEFAULT_DEPTH, metavar="K",
                   help=f"hits taken from each ranking per query (default {DEFAULT_DEPTH})")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="the pool file to write (default: <--golden>/pool.jsonl)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides for rag's own rankings (as rag search takes them)")
    from rag.ledger.tracking_uri import add_tracking_uri_argument

    add_tracking_uri_argument(p)
    return p


#: ``rank(corpus_root, queries, *, modes, depth, overrides) -> [RunSource]``: rag's own
#: rankings of ``queries`` over a corpus (the application provides it: rag/app/pool_rankings.py)
Ranker = Any


def pool_command(args: argparse.Namespace, *, rank: Ranker | None = None) -> int:
    """``rag golden pool``: write a pool file; exit 2 with one ``error:`` line on bad input.

    ``rank``: rag's own retrieval (see :data:`Ranker`); None: rows and run files only."""
    golden = Path(args.golden)
    try:
        out = Path(args.out) if args.out else golden / "pool.jsonl"
        if out.resolve().parent == golden.resolve() and out.name in (QUERIES_FILE, NEGATIVES_FILE):
            raise PoolError(f"--out {out}: the pool file is never a golden file")
        if out.is_dir():
            raise PoolError(f"--out {out}: is a directory")
        if args.depth < 1:
            raise PoolError(f"--depth must be >= 1, got {args.depth}")
        files = [Path(f) for f in args.queries] if args.queries else [golden / QUERIES_FILE]
        queries = load_pool_queries(golden, files)
        examples = [q.id for q in queries if q.origin == GOLDEN_ORIGIN and is_init_example(q.id)]
        if examples:
            print(f"note: left out {len(examples)} example query(ies) from rag golden init "
                  f"({', '.join(examples)}): edit or delete them in {golden / QUERIES_FILE}",
                  file=sys.stderr)
            queries = [q for q in queries if q.id not in examples or q.origin != GOLDEN_ORIGIN]
        if not queries:
            raise PoolError("no query to pool in " + ", ".join(str(f) for f in files))
        corpus = None
        gfile = golden / QUERIES_FILE
        if gfile.is_file():
            data = _read_yaml(gfile)
            corpus = str(data["corpus"]) if isinstance(data, dict) and data.get("corpus") else None
        if getattr(args, "run_files", None):
            runs = run_file_sources(Path(f) for f in args.run_files)
        elif args.runs or args.sweep:
            from rag.ledger.tracking_uri import default_tracking_uri

            runs = ledger_sources(default_tracking_uri(args.tracking_uri), runs=args.runs,
                                  sweep=args.sweep, corpus=corpus)
        else:
            runs = []
        unranked = [q for q in queries if all(q.id not in r.ranking for r in runs)]
        roots = {r.corpus_root for r in runs if r.corpus_root}
        root = Path(args.path) if args.path else (Path(roots.pop()) if len(roots) == 1 else None)
        if unranked and root is not None and rank is not None:
            if not root.is_dir():
                raise PoolError(f"--path {root}: not a directory")
            print(f"ranking {len(unranked)} queries no row ranked with rag over {root}",
                  file=sys.stderr)
            runs = [*runs, *rank(root, unranked, modes=args.modes, depth=args.depth,
                                 overrides=list(args.overrides))]
        elif not runs:
            raise PoolError("nothing ranks the queries: give --path DIR (rag ranks them), "
                            "--sweep, --runs or --run-file")
        records = pool(queries, runs, depth=args.depth)
        header = pool_header(golden, runs, depth=args.depth, queries_files=files, corpus=corpus)
        if header["corpus_root"] is None and root is not None:
            header["corpus_root"] = str(root.resolve())
        write_pool(out, header, records)
    except (PoolError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hits = sum(len(r["hits"]) for r in records)
    todo = sum(1 for r in records for h in r["hits"] if h["judged"] is None)
    proposed = sum(1 for r in records for h in r["hits"] if h.get("proposed") and h["judged"] is None)
    unranked_n = sum(1 for r in records if len(r["missing_in"]) == len(runs))
    print(f"pooled {len(runs)} ranking(s) at depth {args.depth} over {len(records)} queries: "
          f"{hits} units, {todo} unjudged ({proposed} proposed labels) in "
          f"{sum(1 for r in records if any(h['judged'] is None for h in r['hits']))} queries"
          + (f"; {unranked_n} queries ranked by none (give --path)" if unranked_n else "")
          + f"; wrote {out}")
    return 0
