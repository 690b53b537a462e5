"""semble's repository-search benchmark in (MinishLab/semble ``benchmarks/``, MIT licence):
hand-annotated queries over pinned repositories, one repository evaluated as one corpus.

A semble dataset directory (``../shared/data/semble`` in this project) holds:

* ``repos.json`` — a JSON list of ``{name, language, url, revision, benchmark_root}``;
  ``benchmark_root`` is the subtree semble indexes (absent or null: the whole repository).
* ``annotations/<name>.json`` — a JSON list of ``{query, relevant, secondary, category}``;
  ``relevant`` / ``secondary`` hold paths (relative to the repository root) or
  ``{path, start_line, end_line}`` spans; ``category`` (``symbol``, ``semantic``,
  ``architecture``, ...) may be missing, and is then inferred as semble infers it
  (benchmarks/data.py ``infer_category``: one word -> symbol, ``how ...`` -> architecture,
  else semantic).
* ``snapshots/<name>.tar.gz`` — the ``benchmark_root`` subtree (``git archive``), unpacking to
  one top folder; or ``snapshots/<name>/``, a checkout of the repository (its
  ``benchmark_root`` is indexed) or the subtree itself.

:func:`prepare_semble` converts one repository (``dataset.repo``) once, keyed by the content of
its ``repos.json`` entry, its annotation file and its snapshot (rag/datasets/common.py), into
``corpus/`` (the subtree, unpacked with tarfile's ``data`` filter after every member was
checked: an absolute path, a ``..`` part, a link leaving the tree or a device is refused,
naming the member) and ``golden/``:

* every annotation is a positive (query id ``<repo>-<NNN>``, 1-based position in the file),
  tagged with its category; semble has no negatives, so abstention rates are n/a;
* ``relevant`` and ``secondary`` targets are all relevant, grade 1 (semble's gains are binary);
  a path becomes corpus-relative (``benchmark_root/`` stripped), a span becomes ``lines``;
* the golden set's ``subtree:`` is ``benchmark_root``: chunk-level metrics compare a chunk's
  path with ``subtree/label path``, the path as annotated, exactly as semble compares its
  subtree-relative chunk paths with annotated paths (its suffix rule is looser for a shorter
  target: ``request.rb`` would match ``auth/abstract/request.rb``, ``lib/rack/request.rb`` does
  not);
* a target whose file is not in the subtree (outside ``benchmark_root``, or not in the
  snapshot) is kept under ``unresolved:`` with its path as annotated: it counts in the ideal
  DCG of ``semble_ndcg_at_10`` and as a relevant unit nothing can retrieve in rag's own
  metrics, exactly as semble keeps it (benchmarks/metrics.py ``ndcg_at_k`` takes the number
  of targets, found or not). Such targets are counted in the manifest and printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.datasets.common import (CORPUS_DIR, GOLDEN_DIR, DatasetError, Prepared, dataset_tags,
                                 fingerprint, materialise, read_text, write_golden)

REPOS_FILE = "repos.json"
ANNOTATIONS_DIR = "annotations"
SNAPSHOTS_DIR = "snapshots"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# bump when the conversion writes something else: every repository is converted again
SEMBLE_READER = 2


@dataclass(frozen=True)
class RepoSpec:
    """One entry of ``repos.json`` (semble's benchmarks/data.py ``RepoSpec``)."""

    name: str
    language: str
    url: str = ""
    revision: str = ""
    benchmark_root: str | None = None


def _json(path: Path, what: str) -> Any:
    """The JSON value of ``path``.

    Raises:
        DatasetError: missing, not UTF-8, or not JSON (``file:line: not JSON: ...``).
    """
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: not JSON ({what}): {exc.msg} "
                           f"(column {exc.colno})") from None


def read_repos(root: Path) -> dict[str, RepoSpec]:
    """``root/repos.json`` as name -> :class:`RepoSpec`, in file order.

    Raises:
        DatasetError: the file is missing or not JSON, not a list, or an entry lacks a
            ``name`` / ``language``, has an unsafe name or ``benchmark_root``, or repeats a
            name (each naming the entry's position).
    """
    path = Path(root) / REPOS_FILE
    data = _json(path, "semble repos.json")
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of repositories, got "
                           f"{type(data).__name__}")
    out: dict[str, RepoSpec] = {}
    for i, item in enumerate(data, 1):
        where = f"{path}: entry {i}"
        if not isinstance(item, dict):
            raise DatasetError(f"{where}: expected an object, got {type(item).__name__}")
        name, language = item.get("name"), item.get("language")
        if not isinstance(name, str) or not _NAME.match(name):
            raise DatasetError(f"{where}: 'name' must match {_NAME.pattern}, got {name!r}")
        if not isinstance(language, str) or not language:
            raise DatasetError(f"{where} ({name}): needs a 'language' string")
        broot = item.get("benchmark_root")
        if broot is not None:
            parts = str(broot).strip("/").split("/") if isinstance(broot, str) else None
            if not parts or any(p in ("", ".", "..") for p in parts) or str(broot).startswith("/"):
                raise DatasetError(f"{where} ({name}): 'benchmark_root' must be a relative "
                                   f"path inside the repository, got {broot!r}")
            broot = "/".join(parts)
        if name in out:
            raise DatasetError(f"{where}: repository {name!r} is listed twice")
        out[name] = RepoSpec(name=name, language=language, url=str(item.get("url") or ""),
                             revision=str(item.get("revision") or ""), benchmark_root=broot)
    if not out:
        raise DatasetError(f"{path}: lists no repository")
    return out


def repo_names(root: Path | str) -> list[str]:
    """The repositories of a semble dataset that have an annotation file, in ``repos.json``
    order (what ``+suite=semble`` sweeps ``dataset.repo`` over).

    Raises:
        DatasetError: see :func:`read_repos`; or no repository has annotations.
    """
    root = Path(root)
    names = [n for n in read_repos(root) if (root / ANNOTATIONS_DIR / f"{n}.json").is_file()]
    if not names:
        raise DatasetError(f"{root / ANNOTATIONS_DIR}: no annotation file for any repository "
                           f"of {root / REPOS_FILE}")
    return names


def infer_category(query: str) -> str:
    """semble's category of an unlabelled query (benchmarks/data.py ``infer_category``)."""
    if " " not in query.strip():
        return "symbol"
    low = query.lower()
    return "architecture" if low.startswith("how ") else "semantic"


def _target(raw: Any, where: str) -> tuple[str, int | None, int | None]:
    """(path, start, end) of one annotated target (a path, or ``{path, start_line, end_line}``).

    Raises:
        DatasetError: neither form, an empty or absolute path, or a bad span.
    """
    if isinstance(raw, str):
        path, start, end = raw, None, None
    elif isinstance(raw, dict) and isinstance(raw.get("path"), str):
        path = raw["path"]
        start, end = raw.get("start_line"), raw.get("end_line")
        try:  # semble coerces int-like strings (benchmarks/data.py _coerce_int)
            start = None if start is None else int(start)
            end = None if end is None else int(end)
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: start_line/end_line must be integers, got "
                               f"{raw.get('start_line')!r}, {raw.get('end_line')!r}") from None
        if (start is None) != (end is None) or (start is not None and not 1 <= start <= end):
            raise DatasetError(f"{where}: a span needs 1 <= start_line <= end_line, got "
                               f"{start!r}..{end!r}")
    else:
        raise DatasetError(f"{where}: a target is a path or {{path, start_line, end_line}}, "
                           f"got {raw!r}")
    path = path.replace("\\", "/").strip()
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise DatasetError(f"{where}: target path must be relative to the repository, got "
                           f"{path!r}")
    return path, start, end


def read_annotations(path: Path) -> list[dict[str, Any]]:
    """An annotation file as ``[{query, category, targets: [(path, start, end)], index}]``
    (``relevant`` then ``secondary``, in file order; ``index`` 1-based).

    Raises:
        DatasetError: not JSON, not a list, an entry without a non-empty ``query``, a bad
            target, or an entry with no target at all — naming the file and the entry.
    """
    data = _json(path, "semble annotations")
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of annotations, got "
                           f"{type(data).__name__}")
    out = []
    for i, item in enumerate(data, 1):
        where = f"{path}: entry {i}"
        if not isinstance(item, dict):
            raise DatasetError(f"{where}: expected an object, got {type(item).__name__}")
        query = item.get("query")
        if not isinstance(query, str) or not query.strip():
            raise DatasetError(f"{where}: needs a non-empty 'query' string")
        targets = []
        for key in ("relevant", "secondary"):
            raw = item.get(key) or []
            if not isinstance(raw, list):
                raise DatasetError(f"{where}: {key!r} must be a list")
            targets += [_target(t, f"{where} {key}[{j}]") for j, t in enumerate(raw)]
        if not targets:
            raise DatasetError(f"{where}: query {query!r} has no relevant or secondary target")
        category = item.get("category")
        category = category if isinstance(category, str) and category else infer_category(query)
        out.append({"query": query.strip(), "category": category, "targets": targets,
                    "index": i, "secondary": len(item.get("secondary") or [])})
    if not out:
        raise DatasetError(f"{path}: holds no annotation")
    return out


def snapshot_of(root: Path, spec: RepoSpec) -> Path:
    """The snapshot of ``spec``: ``snapshots/<name>.tar.gz`` (or ``.tgz`` / ``.tar``), else the
    directory ``snapshots/<name>/``.

    Raises:
        DatasetError: neither exists.
    """
    base = Path(root) / SNAPSHOTS_DIR
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if (f := base / f"{spec.name}{suffix}").is_file():
            return f
    if (d := base / spec.name).is_dir():
        return d
    raise DatasetError(f"{base / (spec.name + '.tar.gz')}: not found (the snapshot of "
                       f"repository {spec.name!r}; a directory {base / spec.name}/ works too)")


def check_members(tar: tarfile.TarFile, path: Path) -> str:
    """The single top folder every member of a snapshot tarball lies in, after refusing any
    member that could write outside it.

    Raises:
        DatasetError: naming the tarball and the member: an absolute name, a ``..`` part, a
            hard or symbolic link whose target leaves the tree, a device or FIFO, or members
            under more than one top folder.
    """
    tops: set[str] = set()
    for m in tar.getmembers():
        name = m.name
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
            raise DatasetError(f"{path}: member {name!r} has an absolute path: refused")
        if ".." in parts:
            raise DatasetError(f"{path}: member {name!r} has a '..' part: refused")
        if m.isdev() or m.isfifo():
            raise DatasetError(f"{path}: member {name!r} is a device or FIFO: refused")
        if m.issym() or m.islnk():
            target = m.linkname.replace("\\", "/")
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target)
                                        if m.issym() else target)
            if (target.startswith("/") or joined == ".." or joined.startswith("../")
                    or joined.split("/")[0] != name.split("/")[0]):
                raise DatasetError(f"{path}: member {name!r} links to {m.linkname!r}, outside "
                                   "the snapshot: refused")
        top = next((p for p in parts if p not in ("", ".")), "")
        if top:
            tops.add(top)
    if len(tops) != 1:
        raise DatasetError(f"{path}: expected every member under one top folder, found "
                           f"{sorted(tops)[:5] or 'none'}")
    return tops.pop()


def unpack_snapshot(path: Path, dest: Path) -> None:
    """Unpack a snapshot tarball's top folder into ``dest`` (created), members checked by
    :func:`check_members` and extracted with tarfile's ``data`` filter.

    Raises:
        DatasetError: a refused member, or a file that is not a readable tarball.
    """
    try:
        with tarfile.open(path) as tar:
            top = check_members(tar, path)
            work = dest.parent / f".{dest.name}.unpack"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            try:
                tar.extractall(work, filter="data")
            except tarfile.FilterError as exc:
                raise DatasetError(f"{path}: {exc}: refused") from None
            os.replace(work / top, dest)
            shutil.rmtree(work, ignore_errors=True)
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, DatasetError):
            raise
        raise DatasetError(f"{path}: not a readable tarball ({exc})") from None


def _copy_tree(src: Path, dest: Path) -> None:
    """Copy a checkout's subtree (no ``.git``; symlinks kept as links)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))


def _tree_digest(src: Path) -> Path:
    """A file (in a temporary folder) whose content names every file of ``src`` with its
    SHA-256, so a snapshot directory is fingerprinted by content like a tarball."""
    import tempfile

    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for f in sorted(filenames):
            p = Path(dirpath) / f
            rel = p.relative_to(src).as_posix()
            h.update(rel.encode() + b"\0")
            if p.is_symlink():
                h.update(b"link:" + os.readlink(p).encode())
            elif p.is_file():
                with p.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
    out = Path(tempfile.mkdtemp(prefix="rag-semble-")) / "tree.sha256"
    out.write_text(h.hexdigest())
    return out


def _subtree_of(snapshot: Path, spec: RepoSpec) -> Path:
    """The folder of a directory snapshot to index: its ``benchmark_root`` when the directory
    is a checkout of the whole repository, else the directory itself (the subtree)."""
    if spec.benchmark_root and (snapshot / spec.benchmark_root).is_dir():
        return snapshot / spec.benchmark_root
    return snapshot


def convert(spec: RepoSpec, tasks: list[dict[str, Any]], corpus: Path, *,
            corpus_name: str, annotations: Path) -> tuple[list[dict], dict[str, Any], list[str]]:
    """Golden entries of one repository's annotations over its unpacked subtree ``corpus``.

    Returns:
        ``(positives, counts, notes)``; every target is a ``relevant`` label (corpus-relative
        path, ``lines`` for a span) or, when its file is not in the subtree, an
        ``unresolved`` label with its path as annotated.
    """
    prefix = f"{spec.benchmark_root}/" if spec.benchmark_root else ""
    positives = []
    missing: list[str] = []
    labels = 0
    for t in tasks:
        relevant, unresolved = [], []
        for path, start, end in t["targets"]:
            rel = path[len(prefix):] if prefix and path.startswith(prefix) else (
                path if not prefix else None)
            ok = rel is not None and (corpus / rel).is_file() and not (corpus / rel).is_symlink()
            label: dict[str, Any] = {"path": rel if ok else path}
            if start is not None:
                label["lines"] = [start, end]
            (relevant if ok else unresolved).append(label)
            labels += 1
            if not ok:
                missing.append(f"{annotations.name} entry {t['index']}: {path}")
        entry: dict[str, Any] = {
            "id": f"{spec.name}-{t['index']:03d}", "query": t["query"], "tags": [t["category"]],
            "relevant": relevant,
            "source": f"{annotations}: entry {t['index']} ({t['secondary']} secondary)"}
        if unresolved:
            entry["unresolved"] = unresolved
        positives.append(entry)
    counts = {"queries": len(tasks), "positives": len(positives), "unjudged": 0,
              "labels": labels, "labels_unresolved": len(missing), "negatives": 0}
    notes = ["no negatives: abstention rates are not measured"]
    if missing:
        shown = "; ".join(missing[:5]) + (f"; and {len(missing) - 5} more" if len(missing) > 5 else "")
        notes.append(f"{len(missing)} of {labels} labels name a file not in the subtree "
                     f"(kept in the ideal DCG, as semble keeps them): {shown}")
    return positives, counts, notes


#: where the shared data live relative to a folder beside them (DEVELOPERS: ../shared/data/)
SHARED_SUBDIR = Path("shared") / "data" / "semble"
#: overrides every place searched (a semble dataset folder)
ENV_VAR = "RAG_SEMBLE_DIR"


def _origin_checkout(root: Path) -> Path | None:
    """The local checkout a clone was made from (``remote.origin.url`` of ``root/.git/config``
    when it is a local path), read as text: no git process."""
    try:
        text = (root / ".git" / "config").read_text(encoding="utf-8")
    except OSError:
        return None
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == '[remote "origin"]' and line.replace(" ", "").startswith("url="):
            url = line.split("=", 1)[1].strip()
            url = url[len("file://"):] if url.startswith("file://") else url
            if url.startswith("/"):
                return Path(url)
    return None


def default_places() -> list[Path]:
    """Where ``dataset.path``'s default is looked for, in order: ``$RAG_SEMBLE_DIR``; then
    ``shared/data/semble`` beside the project root and beside each folder above it; beside
    the checkout a clone was made from (its ``remote.origin.url``, a local path); beside the
    current directory and each folder above it."""
    import os

    from rag.core.paths import project_root

    out: list[Path] = []
    if os.environ.get(ENV_VAR):
        out.append(Path(os.environ[ENV_VAR]).expanduser())
    root = project_root()
    origin = _origin_checkout(root)
    for base in (root, *([origin] if origin else []), Path.cwd().resolve()):
        out += [p / SHARED_SUBDIR for p in base.parents]
    return list(dict.fromkeys(out))


def default_root() -> Path | None:
    """The first of :func:`default_places` holding a ``repos.json`` (the shared copy of
    semble's benchmark, ``../shared/data/semble`` in this project), or None."""
    return next((p for p in default_places() if (p / REPOS_FILE).is_file()), None)


def missing_default_message() -> str:
    """What to say when no default folder is found: every place searched."""
    places = ", ".join(str(p) for p in default_places()[:6])
    return (f"dataset=semble needs dataset.path=DIR (a semble dataset folder: {REPOS_FILE}, "
            f"{ANNOTATIONS_DIR}/, {SNAPSHOTS_DIR}/; or set {ENV_VAR}); none found at {places}")


def prepare_semble(root: Path, *, repo: str, name: str, cache_root: Path) -> Prepared:
    """Repository ``repo`` of the semble dataset at ``root`` as a rag corpus and golden set,
    converted once into ``cache_root/<name>-<repo>-semble-<hash>``.

    Args:
        root: the dataset directory (repos.json, annotations/, snapshots/).
        repo: a ``name`` of repos.json.
        name: the dataset's name (``dataset.name``); the corpus is ``<name>-<repo>``.
        cache_root: ``${paths.cache_dir}/datasets``.

    Returns:
        :class:`rag.datasets.common.Prepared` with ``corpus_root`` set and ``dataset_repo``,
        ``dataset_language`` among its tags.

    Raises:
        DatasetError: naming the file and entry: see :func:`read_repos`,
            :func:`read_annotations`, :func:`snapshot_of`, :func:`check_members`; or a
            repository not in repos.json (the known names listed).
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory (dataset.path must be a semble dataset "
                           f"folder with {REPOS_FILE}, {ANNOTATIONS_DIR}/ and {SNAPSHOTS_DIR}/)")
    specs = read_repos(root)
    if repo not in specs:
        raise DatasetError(f"{root / REPOS_FILE}: no repository named {repo!r} (dataset.repo); "
                           f"known: {', '.join(specs)}")
    spec = specs[repo]
    ann = root / ANNOTATIONS_DIR / f"{repo}.json"
    if not ann.is_file():
        raise DatasetError(f"{ann}: not found (the annotations of repository {repo!r})")
    snapshot = snapshot_of(root, spec)
    corpus_name = f"{name}-{repo}"
    digest = _tree_digest(_subtree_of(snapshot, spec)) if snapshot.is_dir() else None
    try:
        fp = fingerprint("semble", corpus_name, {"annotations": ann,
                                                 "snapshot": digest or snapshot},
                         spec=spec.__dict__, semble_reader=SEMBLE_READER)
    finally:
        if digest is not None:
            shutil.rmtree(digest.parent, ignore_errors=True)

    def write(tmp: Path) -> dict[str, Any]:
        tasks = read_annotations(ann)
        corpus = tmp / CORPUS_DIR
        if snapshot.is_dir():
            _copy_tree(_subtree_of(snapshot, spec), corpus)
        else:
            unpack_snapshot(snapshot, corpus)
        positives, counts, notes = convert(spec, tasks, corpus, corpus_name=corpus_name,
                                           annotations=ann)
        # a labelled file the walk skips stays a target (semble indexes what it likes)
        write_golden(tmp / GOLDEN_DIR, corpus=corpus_name, positives=positives, negatives=[],
                     settings={"unindexed": "keep", **({"subtree": spec.benchmark_root}
                                                       if spec.benchmark_root else {})},
                     head=f"# converted by rag/datasets/semble.py from {ann} and {snapshot}; "
                          "'source' comments name the entries read\n")
        files = sum(1 for p in corpus.rglob("*") if p.is_file())
        counts["files"] = files
        return {"sources": {"path": str(root), "repo": repo}, "counts": counts, "notes": notes,
                "repo": spec.__dict__}

    folder, manifest, reused = materialise(cache_root, fmt="semble", name=corpus_name, fp=fp,
                                           write=write)
    prepared = Prepared(corpus_root=folder / CORPUS_DIR, golden_dir=folder / GOLDEN_DIR,
                        directory=folder, fingerprint=fp, reused=reused, manifest=manifest)
    prepared.tags = {**dataset_tags(prepared, {"path": root}), "dataset_repo": repo,
                     "dataset_language": spec.language,
                     "dataset_labels_unresolved": str(manifest["counts"]["labels_unresolved"])}
    return prepared
