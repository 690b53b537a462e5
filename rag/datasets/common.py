"""What the BEIR and TREC readers share (rag/datasets/beir.py, rag/datasets/trec.py): reading
lines and JSON lines with their line numbers, turning topics + judgements into a golden set,
and writing a converted dataset into the cache once, atomically.

A converted dataset lives in ``${paths.cache_dir}/datasets/<name>-<format>-<hash>/``, where
``<hash>`` is the first 16 hex digits of :func:`fingerprint` (SHA-256 over the reader version,
the format, the name, the split and every input file's content): ``golden/`` (queries.yaml,
negatives.yaml: golden/README.md), for BEIR ``corpus/``, and ``manifest.json`` (what was
read, counts, notes and, for BEIR, the file of every document whose id is not its path). It
is written into a temporary folder beside it and renamed into place, so an interrupted
conversion leaves no half-written folder; an unchanged dataset is reused, a changed one gets
a new folder (older ones stay until deleted by hand).

:func:`prepare_dataset` is what ``python -m rag.run`` calls (rag/app/run.py ``run_inputs``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

# bump when a conversion changes what it writes: every dataset is then converted again
READER_VERSION = 1
MANIFEST = "manifest.json"
GOLDEN_DIR = "golden"
CORPUS_DIR = "corpus"
# the golden set's id rule (rag/eval/golden.py)
_GOLDEN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class DatasetError(ValueError):
    """A dataset file is missing or malformed, or names something unknown; the message
    starts with ``file:line:`` (or ``file:`` for the file as a whole)."""


@dataclass(frozen=True)
class Topic:
    """One query of a dataset: its id, text and where it was read (``file:line``)."""

    id: str
    text: str
    where: str


@dataclass(frozen=True)
class Judgement:
    """One qrels line: query id, document id as written, grade, where (``file:line``)."""

    qid: str
    doc: str
    grade: int
    where: str


#: the corpus settings of a dataset whose corpus is its documents, one file each: index every
#: one (no default excludes, no minified-text heuristic on a long one-line document; secrets
#: still not)
EVERY_DOCUMENT: dict[str, Any] = {"exclude": [], "include": ["**"]}


@dataclass
class Prepared:
    """A dataset ready to evaluate.

    Attributes:
        corpus_root: the converted corpus (BEIR); None for TREC (the configured corpus).
        golden_dir: the converted golden set (queries.yaml, negatives.yaml).
        directory: the dataset's cache folder.
        fingerprint: :func:`fingerprint` of the inputs (64 hex digits).
        reused: the folder already held this conversion.
        manifest: the content of its manifest.json.
        tags: ledger tags naming what was evaluated (``dataset_*``).
        corpus_settings: ``corpus.*`` keys the dataset sets on the run's config before the
            corpus is walked (:data:`EVERY_DOCUMENT` for BEIR, whose corpus is its documents,
            one file each; empty: a repository, walked as configured; semble's code-only
            index is set by its config group, conf/dataset/semble.yaml).
    """

    corpus_root: Path | None
    golden_dir: Path
    directory: Path
    fingerprint: str
    reused: bool
    manifest: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    corpus_settings: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for the console: what was read, what is not evaluated, where it lives."""
        m = self.manifest
        notes = "; ".join(m.get("notes", []))
        return (f"dataset {m['format']} {m['name']!r}: {m['counts']['positives']} queries "
                f"evaluated, {m['counts']['negatives']} negatives"
                + (f"; {notes}" if notes else "")
                + f" ({'reused' if self.reused else 'converted into'} {self.directory}"
                + (f"; its corpus, for rag search -r: {self.corpus_root}"
                   if self.corpus_root is not None else "") + ")")


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``.

    Raises:
        DatasetError: ``path: not found (what)`` or ``path:line: not UTF-8 ...``.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{path}: not found ({what})") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, expected {what}") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DatasetError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None


def numbered_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break) for every non-blank line.

    Raises:
        DatasetError: see :func:`read_text`.
    """
    for n, line in enumerate(read_text(path, what).split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip():
            yield n, line


def read_jsonl(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSON-lines file, read lazily.

    Raises:
        DatasetError: the file is missing or not UTF-8, or a line is not a JSON object
            (``path:line: not a JSON object: ...``).
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: not found ({what})") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    with handle:
        for n, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{path}:{n}: not UTF-8 text ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{n}: not a JSON object: {exc.msg} "
                                   f"(column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{path}:{n}: not a JSON object, got {type(obj).__name__}")
            yield n, obj


def json_id(obj: dict[str, Any], where: str, key: str = "_id") -> str:
    """``obj[key]`` as a non-empty string (an integer id is written as its digits).

    Raises:
        DatasetError: missing, empty, or neither a string nor an integer.
    """
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (str, int)) or str(v) == "":
        raise DatasetError(f"{where}: needs a non-empty string {key!r}, got {v!r}")
    return str(v)


def check_query_id(qid: str, where: str) -> str:
    """``qid`` if a golden set can hold it (rag/eval/golden.py: a letter or digit, then
    letters, digits, ``_``, ``.``, ``-``).

    Raises:
        DatasetError: naming the id and where it was read.
    """
    if not _GOLDEN_ID.match(qid):
        raise DatasetError(f"{where}: query id {qid!r} cannot be a golden id (it must match "
                           f"{_GOLDEN_ID.pattern})")
    return qid


def build_golden(topics: list[Topic], judgements: list[Judgement], negatives: list[Topic], *,
                 resolve: Callable[[str, str], dict[str, Any]], topics_file: str,
                 qrels_file: str) -> tuple[list[dict], list[dict], dict[str, int], list[str]]:
    """Golden-set entries from a dataset's topics, qrels lines and negatives.

    A judgement with grade > 0 is a relevant label with that grade (graded relevance is kept:
    golden labels carry ``grade``); grade <= 0 is a judged non-relevant document and is not
    a label. Topics with no relevant label are not evaluated (counted). ``resolve(doc,
    where)`` turns a judged document id into a label mapping (``path``, optional ``symbol``)
    or raises :class:`DatasetError`; it is called for relevant judgements only.

    Returns:
        ``(positives, negatives, counts, notes)``: queries.yaml entries (``id``, ``query``,
        ``relevant``, and ``source``: where they were read), negatives.yaml entries, counts
        (``queries``, ``positives``, ``unjudged``, ``labels``, ``non_relevant``,
        ``negatives``) and one-line notes about what is not evaluated.

    Raises:
        DatasetError: a repeated or unusable query id, a negative that repeats a query id, a
            judgement naming a negative, a repeated judgement, or no relevant judgement at
            all (an empty split). Judgements of query ids that are not in the topics are
            counted (``qrels_queries_not_in_topics``) and noted, not an error: qrels files
            commonly cover more topics than one split holds.
    """
    seen: dict[str, str] = {}
    for t in [*topics, *negatives]:
        check_query_id(t.id, t.where)
        if t.id in seen:
            raise DatasetError(f"{t.where}: query id {t.id!r} repeats the one at {seen[t.id]}")
        seen[t.id] = t.where
    negative_ids = {t.id for t in negatives}
    labels: dict[str, list[tuple[dict[str, Any], str]]] = {t.id: [] for t in topics}
    judged: dict[tuple[str, str], str] = {}
    outside: dict[str, str] = {}  # query id -> first judgement naming it
    non_relevant = 0
    for j in judgements:
        if j.qid in negative_ids:
            raise DatasetError(f"{j.where}: query {j.qid!r} is a negative (at {seen[j.qid]}); "
                               "a negative has no judged documents")
        if j.qid not in labels:  # qrels commonly cover more topics than one split holds
            outside.setdefault(j.qid, j.where)
            continue
        if (j.qid, j.doc) in judged:
            raise DatasetError(f"{j.where}: query {j.qid!r} judges document {j.doc!r} again "
                               f"(first at {judged[j.qid, j.doc]})")
        judged[j.qid, j.doc] = j.where
        if j.grade <= 0:
            non_relevant += 1
            continue
        label = dict(resolve(j.doc, j.where))
        if j.grade != 1:
            label["grade"] = j.grade
        labels[j.qid].append((label, j.where))
    positives = []
    for t in topics:
        if labels[t.id]:
            lines = ",".join(w.rsplit(":", 1)[-1] for _, w in labels[t.id])
            positives.append({"id": t.id, "query": t.text,
                              "relevant": [lab for lab, _ in labels[t.id]],
                              "source": f"{t.where}; {qrels_file}:{lines}"})
    if not positives:
        raise DatasetError(f"{qrels_file}: no relevant judgement (score > 0) for any query of "
                           f"{topics_file}: an empty split")
    unjudged = len(topics) - len(positives)
    notes = []
    if unjudged:
        notes.append(f"{unjudged} of {len(topics)} queries in {topics_file} have no relevant "
                     f"judgement in {qrels_file}: not evaluated")
    if outside:
        first = next(iter(outside.values()))
        notes.append(f"{len(outside)} query id(s) judged in {qrels_file} are not in "
                     f"{topics_file} (first at {first}): their judgements are not used")
    counts = {"queries": len(topics), "positives": len(positives), "unjudged": unjudged,
              "qrels_queries_not_in_topics": len(outside),
              "labels": sum(len(p["relevant"]) for p in positives),
              "non_relevant": non_relevant, "negatives": len(negatives)}
    negs = [{"id": t.id, "query": t.text, "source": t.where} for t in negatives]
    return positives, negs, counts, notes


def _dump_entries(key: str, entries: list[dict]) -> str:
    """``key:`` then each entry as a YAML list item, preceded by a ``# source`` comment."""
    if not entries:
        return f"{key}: []\n"
    out = [f"{key}:\n"]
    for e in entries:
        body = yaml.safe_dump([{k: v for k, v in e.items() if k != "source"}], sort_keys=False,
                              allow_unicode=True, width=1_000_000)
        out.append(f"  # {e['source']}\n" + "".join("  " + ln for ln in body.splitlines(True)))
    return "".join(out)


def write_golden(directory: Path, *, corpus: str | None, positives: list[dict],
                 negatives: list[dict], head: str, settings: dict[str, str] | None = None) -> None:
    """Write ``queries.yaml`` and ``negatives.yaml`` (golden/README.md) into ``directory``.

    ``corpus``: the sets' ``corpus:`` field (None: left out, any corpus may be evaluated).
    An empty ``negatives`` is written as ``negatives: []``: abstention rates are then not
    measured (absent from the row, not 0), as for CoSQA. ``settings``: top-level keys of the
    queries file (``unindexed``, ``subtree``: golden/README.md), written after ``corpus:``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    top = f"corpus: {json.dumps(corpus)}\n" if corpus else ""
    policy = "".join(f"{k}: {json.dumps(v)}\n" for k, v in (settings or {}).items())
    (directory / "queries.yaml").write_text(head + top + policy
                                            + _dump_entries("queries", positives),
                                            encoding="utf-8")
    none = ("" if negatives else "# no negatives: abstention rates are not measured (n/a, not 0)\n")
    (directory / "negatives.yaml").write_text(
        head + none + top + _dump_entries("negatives", negatives), encoding="utf-8")


def fingerprint(fmt: str, name: str, files: dict[str, Path | None], **extra: Any) -> str:
    """SHA-256 hex over the reader version, ``fmt``, ``name``, ``extra`` (e.g. the split) and,
    for each role in ``files`` (sorted), its content (None: the optional file is absent).

    Raises:
        DatasetError: a file cannot be read.
    """
    h = hashlib.sha256(json.dumps({"reader_version": READER_VERSION, "format": fmt,
                                   "name": name, **extra}, sort_keys=True).encode())
    for role in sorted(files):
        path = files[role]
        h.update(b"\0" + role.encode() + b"\0")
        if path is None:
            h.update(b"absent")
            continue
        try:
            with Path(path).open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            raise DatasetError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return h.hexdigest()


def _manifest_of(folder: Path, fp: str) -> dict[str, Any] | None:
    """The manifest of a complete conversion of ``fp`` in ``folder``, else None."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("fingerprint") == fp else None


def materialise(cache_root: Path, *, fmt: str, name: str, fp: str,
                write: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any], bool]:
    """The dataset's cache folder: reused when it holds ``fp``'s conversion, else built by
    ``write(tmp)`` (which returns the manifest) in a temporary folder and renamed into
    place, so a crash leaves no half-written folder and earlier conversions untouched.

    The folder's name is ``<name>-<fmt>-<fp[:16]>`` through :func:`rag.core.names.safe_component`.

    Returns:
        ``(folder, manifest, reused)``.

    Raises:
        DatasetError: from ``write``; OSError: the cache cannot be written.
    """
    from rag.core.names import safe_component

    folder = Path(cache_root) / safe_component(f"{name}-{fmt}-{fp[:16]}", what="dataset.name",
                                               encode=True)
    done = _manifest_of(folder, fp)
    if done is not None:
        return folder, done, True
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        manifest = {"format": fmt, "name": name, "reader_version": READER_VERSION,
                    "fingerprint": fp, **write(tmp)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n",
                                    encoding="utf-8")
        done = _manifest_of(folder, fp)
        if done is not None:  # another process (a parallel sweep job) finished first
            shutil.rmtree(tmp, ignore_errors=True)
            return folder, done, True
        if folder.exists():  # a damaged copy (no readable manifest): replace it
            shutil.rmtree(folder)
        try:
            os.rename(tmp, folder)
        except OSError:
            done = _manifest_of(folder, fp)
            if done is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return folder, done, True
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder, manifest, False


def dataset_tags(prepared: Prepared, sources: dict[str, Path]) -> dict[str, str]:
    """Ledger tags naming what was evaluated: format, name, each source path, fingerprint,
    the cache folder and the number of queries left out for want of judgements."""
    m = prepared.manifest
    return {"dataset_format": m["format"], "dataset_name": m["name"],
            **{f"dataset_{k}": str(v) for k, v in sources.items()},
            "dataset_fingerprint": prepared.fingerprint, "dataset_dir": str(prepared.directory),
            "dataset_queries_unjudged": str(m["counts"]["unjudged"])}


def _beir(cfg, cache_root: Path, corpus_root: Callable[[], Path]) -> Prepared:
    from rag.core.paths import expand_path
    from rag.datasets.beir import prepare_beir

    d = cfg.dataset
    return prepare_beir(expand_path(d.path, base=Path.cwd()), split=str(d.split),
                        name=str(d.name), cache_root=cache_root,
                        max_document_bytes=int(cfg.corpus.max_file_bytes))


def _trec(cfg, cache_root: Path, corpus_root: Callable[[], Path]) -> Prepared:
    from rag.core.paths import expand_path
    from rag.corpus.walk import walk_settings
    from rag.datasets.trec import corpus_checker, prepare_trec

    d, c, here = cfg.dataset, cfg.corpus, Path.cwd()
    return prepare_trec(expand_path(d.topics, base=here), expand_path(d.qrels, base=here),
                        negatives=expand_path(d.negatives, base=here) if d.negatives else None,
                        name=str(d.name), cache_root=cache_root,
                        check=corpus_checker(corpus_root, walk=walk_settings(c),
                                             window_lines=c.window_lines,
                                             window_overlap=c.window_overlap,
                                             github_export=[expand_path(f, base=here) for f in
                                                            c.github_export or ()]))


def _semble(cfg, cache_root: Path, corpus_root: Callable[[], Path]) -> Prepared:
    from rag.core.paths import expand_path
    from rag.datasets.semble import default_root, prepare_semble

    d = cfg.dataset
    root = expand_path(d.path, base=Path.cwd()) if d.path else default_root()
    # what the benchmark's task sets (corpus.content=code, ranking.file_saturation=0.5) is
    # config, conf/dataset/semble.yaml, so that a key given on the command line wins
    return prepare_semble(root, repo=str(d.repo), name=str(d.name), cache_root=cache_root)


#: dataset.format -> reader(cfg, cache_root, corpus_root) -> Prepared (a new format: one
#: module with its converter plus one entry here)
READERS: dict[str, Callable[..., Prepared]] = {"beir": _beir, "trec": _trec, "semble": _semble}


def prepare_dataset(cfg, corpus_root: Callable[[], Path]) -> Prepared | None:
    """The dataset ``cfg.dataset`` names (:data:`READERS`), converted (or reused) under
    ``${paths.cache_dir}/datasets/``; None for ``dataset.format: none``.

    Args:
        cfg: the run's config (``dataset``, ``paths.cache_dir``, and for TREC ``corpus``).
        corpus_root: the configured corpus's root (called for TREC only: its docnos are
            checked against that corpus).

    Raises:
        DatasetError: see :func:`rag.datasets.beir.prepare_beir`,
            :func:`rag.datasets.trec.prepare_trec` and
            :func:`rag.datasets.semble.prepare_semble`.
    """
    from rag.core.paths import expand_path

    fmt = str(getattr(cfg.dataset.format, "value", cfg.dataset.format))
    if fmt == "none":
        return None
    return READERS[fmt](cfg, expand_path(cfg.paths.cache_dir) / "datasets", corpus_root)
