"""BEIR-format datasets in (Thakur et al., "BEIR: A Heterogeneous Benchmark for Zero-shot
Evaluation of Information Retrieval Models", NeurIPS 2021 Datasets and Benchmarks).

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title"?, "text"}`` per line),
``queries.jsonl`` (``{"_id", "text"}``), ``qrels/<split>.tsv`` (tab-separated, header line
``query-id corpus-id score``; score > 0 relevant) and, as ``rag golden export --format beir``
writes it, an optional ``negatives.jsonl`` (unanswerable queries, queries.jsonl's format).
:func:`prepare_beir` converts it once (rag/datasets/common.py: cache folder, atomic write)
into a rag corpus and golden set:

* **Documents become files.** A document's file holds ``title + " " + text`` when it has a
  non-empty title (as BEIR's dense evaluators join them), else ``text`` exactly (UTF-8, no
  line break added or translated), so a file exported from a repository is that file again.
* **Doc ids become paths.** If any id of the corpus is a safe relative path with a folder
  (``src/flask/app.py``: :func:`is_safe_path`), the corpus is a file tree and each such id is
  written at that path, so the chunker treats it exactly as the original file; a path that
  is also another id's folder is not. Every other id (``doc1``, ``../x``, ``/abs``, odd
  characters), and every id of a corpus with no such path, is written as
  ``_ids/<name>`` (:func:`mapped_path`): the id with each character other than ASCII letters,
  digits, ``.``, ``+`` and ``-`` written as ``_`` plus its UTF-8 bytes in hex (``a b`` ->
  ``a_20b``), made a safe folder name by :func:`rag.core.names.safe_component` (which replaces a
  name that does not start with a letter or digit, or is over 128 characters, by a slug plus
  a hash). ``manifest.json``'s ``ids`` maps each such file back to its id
  (:func:`original_doc_id`), which is what run.trec docnos and labels name.
* **``path#symbol`` documents** (what the export writes for a symbol label: the symbol's
  chunks of a file of the corpus) are recognised when their text is exactly those chunks
  of their path's file: they are not written (the file already holds them) and a qrels line
  naming one becomes a symbol label, as in the exported golden set. Otherwise they are
  documents of their own.
* **Secrets are not written.** A document that the walk would skip as a secret under the
  name it is written as (:func:`rag.corpus.walk.secret_kind`: a private key block, an AWS
  secret, ...) is left out, counted (``counts.secrets``) and noted with its
  ``corpus.jsonl:LINE``; a qrels line that labels one is an error that says so.
* **Documents too large to index are not written.** A document over ``max_document_bytes``
  (``corpus.max_file_bytes``, UTF-8 bytes of what its file would hold) would be skipped by
  the corpus walk as ``too_large``; it is left out, counted (``counts.too_large``) and noted
  with its ``corpus.jsonl:LINE`` and size, and a qrels line that labels one is an error that
  says so and names the setting to raise.
* **Qrels.** Score > 0: a label with that grade (golden labels carry grades, used by nDCG);
  score <= 0: judged non-relevant, not a label. Queries of queries.jsonl with no relevant
  judgement in the split are not evaluated (counted, said once). No negatives.jsonl: the
  golden set has ``negatives: []`` and abstention rates are n/a (absent), not 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rag.corpus.walk import secret_kind
from rag.datasets.common import (CORPUS_DIR, EVERY_DOCUMENT, GOLDEN_DIR, DatasetError, Judgement,
                                 Prepared, Topic, build_golden, dataset_tags, fingerprint, json_id,
                                 materialise, numbered_lines, read_jsonl, write_golden)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
NEGATIVES_FILE = "negatives.jsonl"
QRELS_DIR = "qrels"
# the folder of documents whose id is not written as a path
MAPPED_DIR = "_ids"
# appended to a mapped name that a secret rule of the walk would judge by its name (``identity``,
# ``x.p12``, ``a.env``): escaping never ends a name with it, so no two ids meet
NEUTRAL_SUFFIX = "_doc"
_PATH_PUNCT = set("._+@=,~ ()[]-")
_KEEP = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-")


def is_safe_path(doc_id: str) -> bool:
    """Whether a doc id is written as the file it names: ``/``-separated parts, each of
    letters, digits, space and ``._+@=,~()[]-`` (no ``#``, ``%``, ``\\``, control characters),
    none empty, ``.``, ``..`` or ``.git``, none with surrounding spaces or over 255 bytes,
    and not under the reserved :data:`MAPPED_DIR`."""
    parts = doc_id.split("/")
    if parts[0] == MAPPED_DIR or len(doc_id.encode("utf-8", "surrogatepass")) > 1024:
        return False
    return all(p not in ("", ".", "..", ".git") and p == p.strip()
               and len(p.encode("utf-8", "surrogatepass")) <= 255
               and all(ch.isalnum() or ch in _PATH_PUNCT for ch in p) for p in parts)


def mapped_path(doc_id: str) -> str:
    """The corpus path of a document whose id is not written as a path:
    ``_ids/<escaped id>`` (see the module docstring), e.g. ``doc1`` -> ``_ids/doc1``,
    ``q 1/x`` -> ``_ids/q_201_2Fx``. A name that one of the walk's secret rules would match
    by name (:func:`rag.corpus.walk.secret_name_rule`: ``identity``, ``x.p12``, ``a.env``,
    ``credentials``; config-like names such as ``x.json`` are kept) gets
    :data:`NEUTRAL_SUFFIX`: ``identity`` -> ``_ids/identity_doc``."""
    from rag.core.names import safe_component

    from rag.corpus.walk import secret_name_rule

    escaped = "".join(ch if ch in _KEEP else "".join(
        f"_{b:02X}" for b in ch.encode("utf-8", "surrogatepass")) for ch in doc_id)
    rel = f"{MAPPED_DIR}/{safe_component(escaped, what='BEIR doc id', encode=True)}"
    if secret_name_rule(rel) not in (None, "config"):
        rel += NEUTRAL_SUFFIX  # a name rule would skip (or judge) the document by its name
    return rel


def original_doc_id(docno: str, manifest: dict[str, Any]) -> str:
    """The BEIR doc id that a converted corpus's doc id stands for (a run.trec docno,
    percent-encoded or not; ``path`` or ``path#symbol``), from the folder's manifest.json
    (:func:`load_manifest`): a file under ``_ids/`` maps back to its id; a path, or a
    ``path#symbol`` of a file written at its path, is its own id."""
    from rag.eval.golden import unquote_docno

    doc = unquote_docno(docno)
    ids = manifest.get("ids", {})
    path, hash_, symbol = doc.partition("#")
    return ids[doc] if doc in ids else f"{ids[path]}#{symbol}" if hash_ and path in ids else doc


def _content(obj: dict[str, Any], where: str) -> str:
    text, title = obj.get("text"), obj.get("title") or ""
    if not isinstance(text, str) or not isinstance(title, str):
        raise DatasetError(f"{where}: 'text' (and 'title', if given) must be strings")
    return f"{title} {text}" if title else text


def _queries(path: Path, what: str) -> list[Topic]:
    out = []
    for n, obj in read_jsonl(path, what):
        where = f"{path}:{n}"
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: query {obj.get('_id')!r} needs a non-empty 'text'")
        out.append(Topic(id=json_id(obj, where), text=text.strip(), where=where))
    return out


def read_qrels(path: Path) -> list[Judgement]:
    """The judgements of a BEIR qrels file: ``query-id<TAB>corpus-id<TAB>score`` lines after
    an optional header line.

    Raises:
        DatasetError: the file is missing (naming the splits there are), or a line has not
            three tab-separated fields or an integer score (``file:line: ...``).
    """
    if not path.is_file() and path.parent.is_dir():
        splits = sorted(p.stem for p in path.parent.glob("*.tsv"))
        raise DatasetError(f"{path}: not found (splits in {path.parent}: "
                           f"{', '.join(splits) or 'none'}; pass dataset.split=NAME)")
    out = []
    for n, line in numbered_lines(path, "BEIR qrels"):
        fields = line.split("\t")
        if n == 1 and fields[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue  # the header
        where = f"{path}:{n}"
        if len(fields) != 3:
            raise DatasetError(f"{where}: expected query-id<TAB>corpus-id<TAB>score, got "
                               f"{len(fields)} tab-separated field(s)")
        try:
            grade = int(fields[2].strip())
        except ValueError:
            raise DatasetError(f"{where}: score {fields[2]!r} is not an integer") from None
        out.append(Judgement(qid=fields[0].strip(), doc=fields[1], grade=grade, where=where))
    return out


def _symbol_text(path: str, text: str, symbol: str) -> str:
    """The text of ``symbol``'s chunks of file ``path`` (what the export writes)."""
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import Document, categorize

    doc = Document(path=path, category=categorize(path), text=text,
                   size=len(text.encode("utf-8", "surrogatepass")))
    return "".join(c.text for c in chunk_document(doc) if c.symbol == symbol)


def _write(root: Path, rel: str, content: str, where: str) -> None:
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DatasetError(f"{where}: the document's text is not valid Unicode "
                           f"({exc.reason})") from None
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


#: ``corpus.max_file_bytes``'s default: a document larger than this is not indexed
DEFAULT_MAX_DOCUMENT_BYTES = 1_000_000


def convert_beir(src: Path, out: Path, *, split: str, name: str,
                 topics: list[Topic], negatives: list[Topic] | None,
                 judgements: list[Judgement],
                 max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> dict[str, Any]:
    """Write ``out/corpus`` and ``out/golden`` from the BEIR folder ``src`` (queries,
    negatives and judgements already read). Returns the manifest's content (without the
    keys :func:`rag.datasets.common.materialise` adds).

    Raises:
        DatasetError: a bad or repeated corpus line (``corpus.jsonl:line``), two ids that
            would be one file, a judgement naming an unknown document (or one too large to
            index: over ``max_document_bytes``), or an empty split (judgements of queries not
            in queries.jsonl are counted, not an error).
    """
    corpus_file = src / CORPUS_FILE
    lines: dict[str, int] = {}
    for n, obj in read_jsonl(corpus_file, "BEIR corpus"):
        doc_id = json_id(obj, f"{corpus_file}:{n}")
        if doc_id in lines:
            raise DatasetError(f"{corpus_file}:{n}: doc id {doc_id!r} repeats line {lines[doc_id]}")
        lines[doc_id] = n
    if not lines:
        raise DatasetError(f"{corpus_file}: no documents")
    as_paths = {i for i in lines if is_safe_path(i)}
    if not any("/" in i for i in as_paths):
        as_paths = set()  # not a file tree: every id is mapped
    folders = {p.rsplit("/", k)[0] for p in as_paths for k in range(1, p.count("/") + 1)}
    as_paths -= folders
    candidates = {}  # path#symbol ids whose path is written as a file
    for i in lines:
        path, hash_, symbol = i.partition("#")
        if hash_ and symbol and path in as_paths:
            candidates[i] = (path, symbol)
    parents = {p for p, _ in candidates.values()}
    root = out / CORPUS_DIR
    root.mkdir(parents=True)
    file_of: dict[str, str] = {}
    taken: dict[str, str] = {}
    held: dict[str, tuple[str, str]] = {}  # id -> (content, where) kept for the symbol check
    secrets: dict[str, tuple[str, str]] = {}  # id -> (corpus.jsonl:LINE, kind): not written
    too_large: dict[str, tuple[str, int]] = {}  # id -> (corpus.jsonl:LINE, bytes): not written
    binary = 0

    def oversized(doc_id: str, content: str, n: int) -> bool:
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > max_document_bytes:
            too_large[doc_id] = (f"{CORPUS_FILE}:{n}", size)
        return size > max_document_bytes

    def secret(doc_id: str, rel: str, content: str, n: int) -> bool:
        kind = secret_kind(rel, content.encode("utf-8", "surrogatepass"))
        if kind is not None:
            secrets[doc_id] = (f"{CORPUS_FILE}:{n}", kind)
        return kind is not None
    for n, obj in read_jsonl(corpus_file, "BEIR corpus"):
        where = f"{corpus_file}:{n}"
        doc_id = json_id(obj, where)
        content = _content(obj, where)
        if doc_id in candidates or doc_id in parents:
            held[doc_id] = (content, where)
        if doc_id in candidates:
            continue
        rel = doc_id if doc_id in as_paths else mapped_path(doc_id)
        if rel in taken:
            raise DatasetError(f"{where}: doc id {doc_id!r} would be written as {rel!r}, as "
                               f"doc id {taken[rel]!r} is")
        taken[rel] = doc_id
        if oversized(doc_id, content, n) or secret(doc_id, rel, content, n):
            continue
        file_of[doc_id] = rel
        binary += "\x00" in content[:8192]
        _write(root, rel, content, where)
    symbol_docs: dict[str, list[str]] = {}
    strays = 0
    for doc_id, (path, symbol) in candidates.items():
        content, where = held[doc_id]
        if path not in secrets and _symbol_text(path, held[path][0], symbol) == content \
                and content:
            symbol_docs[doc_id] = [path, symbol]
            continue
        strays += 1  # not the symbol's chunks: a document of its own
        rel = mapped_path(doc_id)
        if rel in taken:
            raise DatasetError(f"{where}: doc id {doc_id!r} would be written as {rel!r}, as "
                               f"doc id {taken[rel]!r} is")
        taken[rel] = doc_id
        line = int(where.rsplit(":", 1)[1])
        if oversized(doc_id, content, line) or secret(doc_id, rel, content, line):
            continue
        file_of[doc_id] = rel
        _write(root, rel, content, where)
    qrels_file = f"{QRELS_DIR}/{split}.tsv"

    def resolve(doc: str, where: str) -> dict[str, Any]:
        if doc in symbol_docs:
            return {"path": symbol_docs[doc][0], "symbol": symbol_docs[doc][1]}
        if doc in too_large:
            line, size = too_large[doc]
            raise DatasetError(f"{where}: document {doc!r} ({line}) is {size:,} bytes, over "
                               f"corpus.max_file_bytes ({max_document_bytes:,}): the corpus "
                               "walk would skip it as too large, so it cannot be a label; "
                               f"pass corpus.max_file_bytes={size} to index it")
        if doc in secrets:
            line, kind = secrets[doc]
            raise DatasetError(f"{where}: document {doc!r} ({line}) holds a secret ({kind}): it "
                               "is not written to the corpus, as the walk never indexes a "
                               "secret, so it cannot be a label")
        if doc not in file_of:
            raise DatasetError(f"{where}: document {doc!r} is not in {corpus_file}")
        return {"path": file_of[doc]}

    positives, negs, counts, notes = build_golden(
        topics, judgements, negatives or [], resolve=resolve, topics_file=QUERIES_FILE,
        qrels_file=qrels_file)
    mapped = {rel: i for i, rel in file_of.items() if rel != i}
    if negatives is None:
        notes.append(f"no {NEGATIVES_FILE}: abstention rates are not measured")
    if mapped:
        notes.append(f"{len(mapped)} doc ids written under {MAPPED_DIR}/ (manifest.json 'ids' "
                     "maps them back)")
    if strays:
        notes.append(f"{strays} path#symbol documents are not their path's symbol chunks: "
                     "indexed as documents of their own")
    if secrets:
        shown = ", ".join(f"{line} ({kind})" for line, kind in list(secrets.values())[:10])
        more = f" and {len(secrets) - 10} more" if len(secrets) > 10 else ""
        notes.append(f"{len(secrets)} documents hold a secret and are not written (the corpus "
                     f"walk never indexes one): {shown}{more}")
    if too_large:
        shown = ", ".join(f"{line} ({size:,} bytes)" for line, size in list(too_large.values())[:10])
        more = f" and {len(too_large) - 10} more" if len(too_large) > 10 else ""
        notes.append(f"{len(too_large)} documents are over corpus.max_file_bytes "
                     f"({max_document_bytes:,} bytes) and are not written (the corpus walk "
                     f"would skip them): {shown}{more}")
    if binary:
        notes.append(f"{binary} documents hold a NUL character: the corpus walk skips them "
                     "as binary")
    write_golden(out / GOLDEN_DIR, corpus=name, positives=positives, negatives=negs,
                 head=f"# converted by rag/datasets/beir.py from {src} (split {split}); "
                      "'source' comments name the lines read\n")
    counts.update(documents=len(lines), files=len(file_of), mapped=len(mapped),
                  symbol_documents=len(symbol_docs))
    if secrets:
        counts["secrets"] = len(secrets)
    if too_large:
        counts["too_large"] = len(too_large)
    return {"sources": {"path": str(src), "split": split}, "counts": counts, "notes": notes,
            "ids": mapped, "symbol_documents": symbol_docs}


def prepare_beir(src: Path, *, split: str, name: str, cache_root: Path,
                 max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> Prepared:
    """The BEIR folder ``src`` as a rag corpus and golden set, converted once into
    ``cache_root/<name>-beir-<hash>`` (reused while its files are unchanged).

    Args:
        src: the BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv,
            optional negatives.jsonl).
        split: the qrels file's name, ``qrels/<split>.tsv``.
        name: the dataset's name: the golden set's ``corpus:`` and the cache folder's prefix.
        cache_root: ``${paths.cache_dir}/datasets``.
        max_document_bytes: ``corpus.max_file_bytes``: larger documents are not written
            (a label naming one is an error).

    Returns:
        :class:`rag.datasets.common.Prepared` with ``corpus_root`` set.

    Raises:
        DatasetError: ``file:line: ...`` for a missing file, a line that is not a JSON object
            or has no ``_id`` / ``text``, a repeated id, a qrels line that is not three
            fields with an integer score, a judgement naming a query or document that is not
            there, a query id a golden set cannot hold, or a split with no relevant
            judgement.
    """
    src = Path(src)
    if not src.is_dir():
        raise DatasetError(f"{src}: not a directory (dataset.path must be a BEIR folder)")
    files = {"corpus": src / CORPUS_FILE, "queries": src / QUERIES_FILE,
             "qrels": src / QRELS_DIR / f"{split}.tsv"}
    for what, f in files.items():
        if not f.is_file():
            if what == "qrels":
                read_qrels(f)  # names the splits there are
            raise DatasetError(f"{f}: not found (BEIR {what})")
    neg_file = src / NEGATIVES_FILE
    files["negatives"] = neg_file if neg_file.is_file() else None
    # the size cap is part of the conversion's identity (the default keeps earlier keys)
    fp = fingerprint("beir", name, files, split=split,
                     **({} if max_document_bytes == DEFAULT_MAX_DOCUMENT_BYTES
                        else {"max_document_bytes": max_document_bytes}))

    def write(tmp: Path) -> dict[str, Any]:
        topics = _queries(files["queries"], "BEIR queries")
        negatives = _queries(neg_file, "negatives") if files["negatives"] else None
        return convert_beir(src, tmp, split=split, name=name, topics=topics,
                            negatives=negatives, judgements=read_qrels(files["qrels"]),
                            max_document_bytes=max_document_bytes)

    folder, manifest, reused = materialise(cache_root, fmt="beir", name=name, fp=fp, write=write)
    prepared = Prepared(corpus_root=folder / CORPUS_DIR, golden_dir=folder / GOLDEN_DIR,
                        directory=folder, fingerprint=fp, reused=reused, manifest=manifest,
                        corpus_settings=dict(EVERY_DOCUMENT))
    prepared.tags = dataset_tags(prepared, {"path": src, "split": split})
    return prepared


def load_manifest(directory: Path) -> dict[str, Any]:
    """The manifest.json of a converted dataset folder (for :func:`original_doc_id`)."""
    return json.loads((Path(directory) / "manifest.json").read_text(encoding="utf-8"))
