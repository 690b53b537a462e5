"""TREC topics and qrels in, labelling the configured corpus (``corpus=`` / ``corpus.path``).

* **Topics**: ``qid<TAB>text`` lines (what ``rag golden export --format trec`` writes as
  topics.tsv, and the common TSV topics format), or SGML topics: classic
  ``<top> <num> Number: 301 <title> ... <desc> ... </top>`` blocks (closing field tags
  optional; the title is the query, a ``Topic:`` prefix dropped) and
  ``<topic number="1"> <query>...</query> </topic>`` blocks (the query, else the title).
  Whitespace runs in a query become one space.
* **Qrels**: ``qid iteration docno relevance`` lines. Relevance > 0: a label with that grade;
  <= 0: judged non-relevant, not a label. A docno is a rag doc id as run.trec and
  ``rag golden export`` write it (:func:`rag.eval.golden.trec_docno`): ``path``, or
  ``path#symbol`` for a symbol label (split at the first ``#``, as rag reads run files),
  percent-encoded; each is checked against the corpus (the files rag would index there, and
  the symbols its chunker names), with the qrels line of any that is not there.
* **Negatives** (optional): topics in the same format, ``dataset.negatives=FILE``, by default
  ``negatives.tsv`` beside the topics file when there is one (as the export writes it).

:func:`prepare_trec` converts them once into ``${paths.cache_dir}/datasets/<name>-trec-<hash>/
golden`` (rag/datasets/common.py), a golden set without a ``corpus:`` field (TREC files do
not name their corpus; the labels are checked against the evaluated one instead).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from rag.datasets.common import (GOLDEN_DIR, DatasetError, Judgement, Prepared, Topic,
                                 build_golden, dataset_tags, fingerprint, materialise,
                                 numbered_lines, read_text, write_golden)

NEGATIVES_FILE = "negatives.tsv"
_SGML = re.compile(r"<top>|<topic\b", re.I)
_TOP = re.compile(r"<top>(.*?)</top>", re.I | re.S)
_TOPIC = re.compile(r"<topic\b([^>]*)>(.*?)</topic>", re.I | re.S)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*([^\s<]+)", re.I)
_NUMBER_ATTR = re.compile(r"""number\s*=\s*["']([^"']*)["']""", re.I)


def _field(tag: str, body: str) -> str | None:
    m = re.search(rf"<{tag}>(.*?)(?=<|\Z)", body, re.I | re.S)
    if m is None:
        return None
    text = " ".join(m.group(1).split())
    return re.sub(r"^Topic:\s*", "", text, flags=re.I) if tag == "title" else text


def read_topics(path: Path, what: str = "TREC topics") -> list[Topic]:
    """The topics of ``path`` in file order: TSV or SGML (see the module docstring).

    Raises:
        DatasetError: the file is missing, a TSV line has no tab or no text, an SGML block
            has no number or no title/query, or SGML with no block (``file:line: ...``).
    """
    path = Path(path)
    text = read_text(path, what)
    # the format is the first non-blank line's: SGML topics start with <top> or <topic ...>
    # (a TSV query that merely mentions "<topic>" stays TSV)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not _SGML.match(first):
        out = []
        for n, line in numbered_lines(path, what):
            qid, tab, query = line.partition("\t")
            where = f"{path}:{n}"
            if not tab or not query.strip() or not qid.strip():
                raise DatasetError(f"{where}: expected qid<TAB>query text (or SGML "
                                   "<top> topics)")
            out.append(Topic(id=qid.strip(), text=" ".join(query.split()), where=where))
        return out
    out = []
    blocks = [(m.start(), None, m.group(1)) for m in _TOP.finditer(text)]
    blocks += [(m.start(), m.group(1), m.group(2)) for m in _TOPIC.finditer(text)]
    for start, attrs, body in sorted(blocks, key=lambda b: b[0]):
        where = f"{path}:{text.count(chr(10), 0, start) + 1}"
        if attrs is None:
            num = _NUM.search(body)
            qid, query = (num.group(1) if num else None), _field("title", body)
        else:
            num = _NUMBER_ATTR.search(attrs)
            qid = num.group(1).strip() if num else None
            query = _field("query", body) or _field("title", body)
        if not qid:
            raise DatasetError(f"{where}: topic without a number (<num> or number=\"...\")")
        if not query:
            raise DatasetError(f"{where}: topic {qid!r} has no title/query text")
        out.append(Topic(id=qid, text=query, where=where))
    if not out:
        raise DatasetError(f"{path}:1: SGML topics without a complete <top>...</top> or "
                           "<topic>...</topic> block")
    return out


def read_qrels(path: Path) -> list[Judgement]:
    """The judgements of a TREC qrels file (``qid iteration docno relevance`` lines).

    Raises:
        DatasetError: the file is missing, or a line has not four whitespace-separated fields
            or an integer relevance (``file:line: ...``).
    """
    out = []
    for n, line in numbered_lines(Path(path), "TREC qrels"):
        fields = line.split()
        where = f"{path}:{n}"
        if len(fields) != 4:
            raise DatasetError(f"{where}: expected 'qid iteration docno relevance', got "
                               f"{len(fields)} field(s)")
        try:
            grade = int(fields[3])
        except ValueError:
            raise DatasetError(f"{where}: relevance {fields[3]!r} is not an integer") from None
        out.append(Judgement(qid=fields[0], doc=fields[2], grade=grade, where=where))
    return out


def docno_label(docno: str) -> dict[str, Any]:
    """A docno as a golden label: ``{"path"}`` or ``{"path", "symbol"}``
    (:func:`rag.eval.golden.unquote_docno`, then split at the first ``#``)."""
    from rag.eval.golden import unquote_docno

    path, hash_, symbol = unquote_docno(docno).partition("#")
    return {"path": path, "symbol": symbol} if hash_ and symbol else {"path": path}


def corpus_checker(corpus_root: Callable[[], Path], *, walk: dict[str, Any] | None = None,
                   window_lines: int = 60, window_overlap: int = 10,
                   github_export: list[Path] | tuple = ()) -> Callable[[dict, str, str], None]:
    """A check ``(label, docno, where) -> None`` that a label names a file rag indexes in the
    corpus (:func:`rag.corpus.walk.walk_corpus` with the ``walk`` keyword arguments, see
    :func:`rag.corpus.walk.walk_settings`; default its defaults, plus the documents
    of ``github_export``) and, with a symbol, one its chunker names there. The corpus is
    walked on the first call, a file chunked when a symbol of it is first checked.

    Raises (the check):
        DatasetError: ``where: document ... is not in the corpus ...``.
    """
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import walk_corpus

    state: dict[str, Any] = {}

    def docs() -> dict[str, Any]:
        if "docs" not in state:
            root = corpus_root()
            found = {d.path: d for d in walk_corpus(root, **(walk or {}))}
            if github_export:
                from rag.corpus.github import GitHubExportError, load_github_export

                try:
                    for f in github_export:
                        found.update((d.path, d) for d in load_github_export(f))
                except GitHubExportError as exc:
                    raise DatasetError(str(exc)) from None
            state.update(docs=found, root=root, symbols={})
        return state["docs"]

    def check(label: dict, docno: str, where: str) -> None:
        found = docs()
        path, symbol = label["path"], label.get("symbol")
        if path not in found:
            raise DatasetError(f"{where}: document {docno!r} is not in the corpus "
                               f"{state['root']} (no file {path!r} is indexed there)")
        if symbol:
            if path not in state["symbols"]:
                state["symbols"][path] = {c.symbol for c in chunk_document(
                    found[path], window_lines=window_lines, overlap=window_overlap)}
            if symbol not in state["symbols"][path]:
                raise DatasetError(f"{where}: document {docno!r}: {path!r} has no symbol "
                                   f"{symbol!r} in the corpus {state['root']}")

    return check


def prepare_trec(topics: Path, qrels: Path, *, negatives: Path | None, name: str,
                 cache_root: Path, check: Callable[[dict, str, str], None] | None = None
                 ) -> Prepared:
    """TREC topics + qrels (+ negatives) as a rag golden set, converted once into
    ``cache_root/<name>-trec-<hash>/golden`` (reused while the files are unchanged). The
    files are read and the labels checked on every call: the corpus may have changed.

    Args:
        topics, qrels: the TREC files.
        negatives: unanswerable topics (topics format); None: ``negatives.tsv`` beside
            ``topics`` if there is one, else no negatives (abstention rates n/a).
        name: the cache folder's prefix.
        cache_root: ``${paths.cache_dir}/datasets``.
        check: :func:`corpus_checker`'s check (None: labels are not checked here).

    Returns:
        :class:`rag.datasets.common.Prepared` with ``corpus_root`` None (the configured
        corpus is evaluated).

    Raises:
        DatasetError: ``file:line: ...`` for a missing file, a malformed topic or qrels line,
            a docno not in the corpus (judgements of queries not in the topics are counted,
            not an error), a query
            id a golden set cannot hold, or no relevant judgement at all.
    """
    topics, qrels = Path(topics), Path(qrels)
    if negatives is None and (topics.parent / NEGATIVES_FILE).is_file() \
            and topics.name != NEGATIVES_FILE:
        negatives = topics.parent / NEGATIVES_FILE
    topic_list = read_topics(topics)
    negative_list = read_topics(negatives, "negatives") if negatives is not None else []
    judgements = read_qrels(qrels)

    def resolve(docno: str, where: str) -> dict[str, Any]:
        label = docno_label(docno)
        if check is not None:
            check(label, docno, where)
        return label

    positives, negs, counts, notes = build_golden(
        topic_list, judgements, negative_list, resolve=resolve, topics_file=topics.name,
        qrels_file=qrels.name)
    if negatives is None:
        notes.append("no negatives: abstention rates are not measured")
    fp = fingerprint("trec", name, {"topics": topics, "qrels": qrels, "negatives": negatives})

    def write(tmp: Path) -> dict[str, Any]:
        write_golden(tmp / GOLDEN_DIR, corpus=None, positives=positives, negatives=negs,
                     head=f"# converted by rag/datasets/trec.py from {topics} and {qrels}; "
                          "'source' comments name the lines read\n")
        return {"sources": {"topics": str(topics), "qrels": str(qrels),
                            "negatives": str(negatives) if negatives else None},
                "counts": counts, "notes": notes}

    folder, manifest, reused = materialise(cache_root, fmt="trec", name=name, fp=fp, write=write)
    prepared = Prepared(corpus_root=None, golden_dir=folder / GOLDEN_DIR, directory=folder,
                        fingerprint=fp, reused=reused, manifest=manifest)
    prepared.tags = dataset_tags(prepared, {"topics": topics, "qrels": qrels,
                                            **({"negatives": negatives} if negatives else {})})
    return prepared
