"""A persisted chunk set per (corpus directory, chunker settings), so a later run or a
parallel sweep worker does not re-read and re-chunk an unchanged corpus.

Validity is checked by a *stat fingerprint* (every file's path, size and mtime under the
corpus, ``.git`` excluded), which costs directory listings but no file reads. The store is one
JSON file written to a temporary name and renamed into place, so an interrupted write leaves
the previous good one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rag.corpus.chunk import CHUNKER_VERSION, Chunk, chunker_code

STORE_VERSION = "2"
# bump when the walk's rules (what is skipped, how files are categorised) change
# 5: secret literals in indexed files are redacted (rag/corpus/secrets.py)
# 6: corpus.content (code only) and more literals redacted (Heroku keys; a config file's
#    unquoted password)
# 7: the code languages rag windows or chunks since chunker 7 (Haskell, Zig, ...) are source
#    files, kept by corpus.content=code
WALK_VERSION = "7"


def stat_fingerprint(root: Path) -> str:
    """SHA-256 over (relative path, size, mtime_ns, ctime_ns, inode) of every file under
    ``root`` but ``.git``, and over what git lists there (:func:`rag.corpus.walk.listing_key`:
    a ``git add`` or a changed ``.git/info/exclude`` changes what is indexed). ctime cannot be
    set back by ``touch -r``/``cp -p``/``rsync -t``, so an edit that keeps size and mtime still
    changes the fingerprint. Every directory's name counts too, empty or not: the walk reads
    directory names (``mkdir build/CMakeFiles`` makes ``build/`` a build output)."""
    from rag.corpus.walk import listing_key

    h = hashlib.sha256(listing_key(root).encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for d in dirnames:  # directory names count: an empty build/CMakeFiles makes build/
            rel = os.path.relpath(os.path.join(dirpath, d), root)  # an output
            h.update(f"{rel}/\0dir\n".encode("utf-8", "surrogateescape"))
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            rel = os.path.relpath(p, root)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n"
                     .encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def store_path(store_dir: Path, root: Path, settings: dict[str, Any]) -> Path:
    """The store file for ``root`` under ``settings`` (walk and chunker options)."""
    key = json.dumps({"root": str(root.resolve()), "settings": settings,
                      "chunker": CHUNKER_VERSION, "chunker_code": chunker_code(),
                      "walk": WALK_VERSION, "store": STORE_VERSION},
                     sort_keys=True)
    return store_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def load(path: Path, fingerprint: str
         ) -> tuple[list[Chunk], dict[str, Any], str, dict[str, int]] | None:
    """(chunks, walk stats, corpus fingerprint, path -> line count) if the store exists and
    matches (and has line counts), else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("stat_fingerprint") != fingerprint or data.get("version") != STORE_VERSION:
        return None
    try:
        return ([Chunk(**c) for c in data["chunks"]], data["walk_stats"],
                data["corpus_fingerprint"], data["line_counts"])
    except (KeyError, TypeError):  # written by another version of Chunk: rebuild
        return None


def previous_build(path: Path) -> tuple[dict[str, str], dict[str, list[Chunk]]] | None:
    """(path -> text SHA-256, path -> chunks) of the stored, possibly outdated, build; None if
    there is none or it cannot be read. Lets a rebuild re-chunk only the files that changed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != STORE_VERSION:
            return None
        by_path: dict[str, list[Chunk]] = {}
        for c in data["chunks"]:
            by_path.setdefault(c["path"], []).append(Chunk(**c))
        return data.get("files") or {}, by_path
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: Path, fingerprint: str, chunks: list[Chunk], walk_stats: dict[str, Any],
         corpus_fingerprint: str, files: dict[str, str] | None = None,
         line_counts: dict[str, int] | None = None) -> None:
    """Write the store atomically (temporary file, then rename). ``files`` maps each path to
    the SHA-256 of its text, so the next build can say what was added, changed or removed;
    ``line_counts`` each path's number of lines (golden span labels are checked on it).

    Raises:
        CacheWriteError: the store cannot be written (out of space, read-only cache), naming
            the path; the temporary file is removed and the previous store stays.
    """
    from rag.core.errors import CacheWriteError, os_problem

    text = json.dumps({"version": STORE_VERSION, "stat_fingerprint": fingerprint,
                       "corpus_fingerprint": corpus_fingerprint,
                       "walk_stats": walk_stats, "files": files or {},
                       "line_counts": line_counts or {},
                       "chunks": [asdict(c) for c in chunks]})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise CacheWriteError(f"cannot write the chunk store {exc.filename or path}: "
                              f"{os_problem(exc)}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
