"""Walk a corpus directory: honour every .gitignore, skip .git, binaries and oversized files.

Every skipped file is counted by reason in :class:`WalkStats`, so a run can say what it did
not index and why.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator

import pathspec

BINARY_SNIFF_BYTES = 8192

CATEGORIES = ("source", "test", "documentation", "example", "config", "other", "issue",
              "pull_request")

_SOURCE_SUFFIXES = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".mjs", ".go", ".rs", ".java", ".kt", ".c",
    ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".scala", ".sh", ".bash",
    ".html", ".htm", ".jinja", ".j2", ".css", ".scss", ".sql", ".lua", ".pl", ".r",
}
_DOC_SUFFIXES = {".md", ".markdown", ".rst", ".txt", ".adoc"}
_CONFIG_SUFFIXES = {".toml", ".ini", ".cfg", ".yaml", ".yml", ".json", ".lock", ".conf"}
_CONFIG_NAMES = {
    "setup.py", "conftest.py", "conf.py", "makefile", "dockerfile", ".editorconfig",
    ".gitignore", ".gitattributes", "manifest.in", "noxfile.py", "tox.ini",
}
_DOC_STEMS = {"readme", "changes", "changelog", "license", "contributing", "authors", "history"}


@dataclass(frozen=True)
class Document:
    """One file of the corpus.

    Attributes:
        path: POSIX path relative to the corpus root, e.g. ``src/flask/app.py``.
        category: one of :data:`CATEGORIES`.
        text: the file decoded as UTF-8 (bad bytes replaced by U+FFFD).
        size: size on disk in bytes.
        replaced_bytes: True when decoding had to replace invalid bytes.
    """

    path: str
    category: str
    text: str
    size: int
    replaced_bytes: bool = False


@dataclass
class WalkStats:
    """Counts of what the walk kept and skipped; ``skipped`` maps reason -> file count."""

    files_indexed: int = 0
    bytes_indexed: int = 0
    skipped: Counter = field(default_factory=Counter)
    decoded_with_replacement: int = 0
    by_category: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        """Plain-dict form for logging (``skipped_<reason>`` keys)."""
        out = {
            "files_indexed": self.files_indexed,
            "bytes_indexed": self.bytes_indexed,
            "files_decoded_with_replacement": self.decoded_with_replacement,
        }
        for reason in ("git_dir", "gitignored", "binary", "too_large", "unreadable", "not_regular",
                       "bad_filename"):
            out[f"files_skipped_{reason}"] = self.skipped.get(reason, 0)
        for cat in CATEGORIES:
            out[f"files_{cat}"] = self.by_category.get(cat, 0)
        return out


def categorize(path: str) -> str:
    """Category of a corpus-relative POSIX path (see :data:`CATEGORIES`).

    Order matters: example beats test (``examples/tutorial/tests/test_auth.py`` is example
    code), test beats source, and named config files beat their suffix.
    """
    p = PurePosixPath(path)
    parts = [s.lower() for s in p.parts[:-1]]
    name = p.name.lower()
    suffix = p.suffix.lower()
    if any(s in ("examples", "example") for s in parts):
        return "example"
    if name in _CONFIG_NAMES or suffix in _CONFIG_SUFFIXES or name.startswith("requirements"):
        return "config"
    if any(s in ("tests", "test", "testing") for s in parts) or name.startswith("test_") \
            or name.endswith("_test.py"):
        return "test"
    if suffix in _DOC_SUFFIXES or p.stem.lower() in _DOC_STEMS or any(s in ("docs", "doc") for s in parts):
        return "documentation"
    if suffix in _SOURCE_SUFFIXES:
        return "source"
    return "other"


def _gitignore_spec(lines: list[str]) -> pathspec.GitIgnoreSpec:
    """A spec from .gitignore lines, dropping any line git would ignore as invalid
    (``!`` alone, a trailing backslash, a bad range such as ``[z-a]``)."""
    good = []
    for line in lines:
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([line])
            spec.match_file("probe")  # compiles the pattern's regex
        except Exception:  # noqa: BLE001 - pathspec raises several error types
            continue
        good.append(line)
    return pathspec.GitIgnoreSpec.from_lines(good)


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


def walk_corpus(root: Path, *, max_file_bytes: int = 1_000_000,
                stats: WalkStats | None = None) -> Iterator[Document]:
    """Yield the corpus's text files in a deterministic order (top-down: each directory's files
    sorted by name, then its subdirectories sorted by name).

    Skips (and counts in ``stats.skipped``): ``.git`` directories (``git_dir``), anything
    matched by a ``.gitignore`` at its own level or above (``gitignored``; patterns are
    gitignore semantics via ``pathspec.GitIgnoreSpec``), files with a NUL byte in the first
    8 KB (``binary``), files over ``max_file_bytes`` (``too_large``), files that cannot be
    read (``unreadable``), and symlinks or devices (``not_regular``).

    Args:
        root: corpus directory.
        max_file_bytes: size cap in bytes.
        stats: filled in place if given.

    Raises:
        FileNotFoundError: ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus directory does not exist: {root}")
    stats = stats if stats is not None else WalkStats()
    specs: list[tuple[str, pathspec.PathSpec]] = []  # (dir relative to root, spec)

    def ignored(rel: str, is_dir: bool) -> bool:
        # git semantics: the deepest .gitignore with a matching pattern decides, and within one
        # file the last matching pattern wins (so a nested "!keep.log" re-includes a file that a
        # parent "*.log" ignores).
        for base, spec in reversed(specs):
            if base and not rel.startswith(base + "/"):
                continue
            sub = rel[len(base) + 1:] if base else rel
            verdict = spec.check_file(sub + "/" if is_dir else sub).include
            if verdict is not None:
                return bool(verdict)
        return False

    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        if ".gitignore" in filenames:
            gi = Path(dirpath) / ".gitignore"
            try:
                lines = gi.read_text(encoding="utf-8", errors="replace").splitlines()
                specs.append((rel_dir, _gitignore_spec(lines)))
            except OSError:
                pass
        kept_dirs = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d == ".git":
                stats.skipped["git_dir"] += 1
            elif ignored(rel, True):
                stats.skipped["gitignored"] += 1
            elif os.path.islink(os.path.join(dirpath, d)):
                stats.skipped["not_regular"] += 1
            else:
                kept_dirs.append(d)
        dirnames[:] = kept_dirs
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            full = Path(dirpath) / f
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:  # a name that is not valid UTF-8 (surrogate-escaped)
                stats.skipped["bad_filename"] += 1
                continue
            if ignored(rel, False):
                stats.skipped["gitignored"] += 1
                continue
            if full.is_symlink() or not full.is_file():
                stats.skipped["not_regular"] += 1
                continue
            try:
                size = full.stat().st_size
                if size > max_file_bytes:
                    stats.skipped["too_large"] += 1
                    continue
                data = full.read_bytes()
            except OSError:
                stats.skipped["unreadable"] += 1
                continue
            if _is_binary(data):
                stats.skipped["binary"] += 1
                continue
            try:
                text = data.decode("utf-8")
                replaced = False
            except UnicodeDecodeError:
                text = data.decode("utf-8", errors="replace")
                replaced = True
                stats.decoded_with_replacement += 1
            category = categorize(rel)
            stats.files_indexed += 1
            stats.bytes_indexed += size
            stats.by_category[category] += 1
            yield Document(path=rel, category=category, text=text, size=size,
                           replaced_bytes=replaced)
