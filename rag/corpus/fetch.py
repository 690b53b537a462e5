"""Fetch a pinned source distribution with pip and unpack it once into a cache directory.

``python -m rag.corpus.fetch flask==3.1.3`` prints the unpacked directory.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path


class CorpusFetchError(RuntimeError):
    """pip could not download the sdist, or the archive could not be unpacked."""


def _slug(requirement: str) -> str:
    """The folder name of a requirement's unpacked sdist: ``flask==3.1.3`` -> ``flask-3.1.3``;
    anything that is not a safe folder name (``..``, a separator) is encoded
    (:func:`rag.names.safe_component`), so it never leaves ``corpora/``."""
    from rag.names import safe_component

    return safe_component(requirement.replace("==", "-").replace(" ", ""), what="corpus.sdist",
                          encode=True)


def fetch_sdist(requirement: str, cache_dir: Path) -> Path:
    """Download ``requirement`` as an sdist with pip and unpack it under ``cache_dir/corpora``.

    Runs ``pip download --no-deps --no-binary :all: REQUIREMENT`` once; later calls return the
    unpacked directory without touching the network. The unpack goes to a temporary directory
    that is renamed into place, so an interrupted fetch leaves nothing half-written.

    Args:
        requirement: a pinned pip requirement, e.g. ``"flask==3.1.3"``.
        cache_dir: root of the rag cache (``paths.cache_dir``).

    Returns:
        The corpus root: the single top-level directory of the archive (e.g. ``flask-3.1.3/``).

    Raises:
        CorpusFetchError: pip failed (offline, no such version) or the archive is unusable.
    """
    corpora = cache_dir / "corpora"
    target = corpora / _slug(requirement)
    if target.is_dir() and (target / ".complete").exists():
        return _single_root(target)
    corpora.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=corpora, prefix=".fetch-") as tmp:
        tmp_path = Path(tmp)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", str(tmp_path / "dl"), requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CorpusFetchError(
                f"could not download {requirement!r} with pip (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()[-2000:]}"
            )
        archives = sorted((tmp_path / "dl").iterdir())
        if len(archives) != 1:
            raise CorpusFetchError(f"expected one archive for {requirement!r}, got {archives}")
        unpacked = tmp_path / "unpacked"
        _unpack(archives[0], unpacked)
        (unpacked / ".complete").write_text(archives[0].name + "\n")
        if target.exists():
            shutil.rmtree(target)
        unpacked.rename(target)
    return _single_root(target)


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    name = archive.name
    if name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
    else:
        raise CorpusFetchError(f"unknown archive type: {archive}")


def _single_root(target: Path) -> Path:
    dirs = [p for p in target.iterdir() if p.is_dir()]
    return dirs[0] if len(dirs) == 1 else target


def main(argv: list[str] | None = None) -> int:
    """Command line: fetch one sdist and print where it was unpacked."""
    from rag.config import expand_path

    parser = argparse.ArgumentParser(
        prog="python -m rag.corpus.fetch",
        description="Download a pinned source distribution with pip and unpack it once.",
    )
    parser.add_argument("requirement", nargs="?", default="flask==3.1.3",
                        help="pinned pip requirement (default: flask==3.1.3)")
    parser.add_argument("--cache-dir", default=None,
                        help="cache root (default: $RAG_CACHE_DIR or ~/.cache/rag)")
    args = parser.parse_args(argv)
    import os
    cache = expand_path(args.cache_dir or os.environ.get("RAG_CACHE_DIR", "~/.cache/rag"))
    try:
        print(fetch_sdist(args.requirement, cache))
    except CorpusFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
