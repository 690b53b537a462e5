"""Fetch a pinned source release with its ecosystem's ordinary client and unpack it once into
a cache directory: a Python sdist with pip (:func:`fetch_sdist`), an npm package tarball with
``npm pack`` (:func:`fetch_npm`).

``python -m rag.corpus.fetch flask==3.1.3`` prints the unpacked directory;
``python -m rag.corpus.fetch --npm zod@3.25.76`` does the same for an npm package.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Callable


class CorpusFetchError(RuntimeError):
    """The client (pip, npm) could not download the release, is not installed, or the
    archive could not be unpacked."""


# A pinned npm spec: a package name (optionally scoped, npm's naming rules: lowercase letters,
# digits, '-', '.', '_', '~', not starting with '.' or '_') at an exact semver version — no
# range, tag ("latest"), URL, git or file spec, so the corpus cannot drift between fetches.
_NPM_NAME = r"(?:@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*"
_SEMVER = (r"(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)"
           r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")
NPM_SPEC = re.compile(rf"(?P<name>{_NPM_NAME})@(?P<version>{_SEMVER})")


def _slug(requirement: str) -> str:
    """The folder name of a requirement's unpacked sdist: ``flask==3.1.3`` -> ``flask-3.1.3``;
    anything that is not a safe folder name (``..``, a separator) is encoded
    (:func:`rag.core.names.safe_component`), so it never leaves ``corpora/``."""
    from rag.core.names import safe_component

    return safe_component(requirement.replace("==", "-").replace(" ", ""), what="corpus.sdist",
                          encode=True)


def _npm_slug(spec: str) -> str:
    """The folder name of an npm package's unpacked tarball: ``zod@3.25.76`` ->
    ``npm-zod-3.25.76``, ``@scope/pkg@1.0.0`` -> ``npm-scope+pkg-1.0.0`` (the ``npm-``
    prefix keeps it apart from a pip sdist of the same name and version)."""
    from rag.core.names import safe_component

    m = parse_npm_spec(spec)
    name = m["name"].lstrip("@").replace("/", "+")
    return safe_component(f"npm-{name}-{m['version']}", what="corpus.npm", encode=True)


def parse_npm_spec(spec: str) -> dict[str, str]:
    """``{"name": ..., "version": ...}`` of a pinned npm spec ``name@x.y.z``.

    Raises:
        CorpusFetchError: not a package name at an exact version (a range such as ``^3``, a
            tag such as ``latest``, no version, a URL, a git or file spec, an option).
    """
    m = NPM_SPEC.fullmatch(str(spec).strip()) if isinstance(spec, str) else None
    if m is None or len(m["name"]) > 214:
        raise CorpusFetchError(
            f"npm spec {spec!r} is not pinned: expected NAME@X.Y.Z with an exact version "
            "(e.g. zod@3.25.76 or @scope/pkg@1.2.3); ranges, tags, URLs and paths are refused")
    return {"name": m["name"], "version": m["version"]}


def _run_client(cmd: list[str], what: str) -> None:
    """Run a download command, turning every failure into one :class:`CorpusFetchError`
    that shows the command: the executable is missing, or it exits non-zero (offline, no such
    version), with the tail of its error output."""
    shown = shlex.join(cmd)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise CorpusFetchError(f"could not fetch {what}: {cmd[0]!r} not found on PATH "
                               f"(command: {shown})") from exc
    if proc.returncode != 0:
        raise CorpusFetchError(f"could not fetch {what}: `{shown}` failed "
                               f"(exit {proc.returncode}): "
                               f"{_last_problem(proc.stderr or proc.stdout)}")


def _last_problem(output: str) -> str:
    """One line of a failed download's output that says why (its traceback and log pointers
    dropped): the last line naming an errno (``OSError: [Errno 28] No space left on device``)
    if there is one, else its last three lines that are not indented, a traceback header or
    npm's log pointer, joined by ``; `` (``npm error code ENOTFOUND; npm error network request
    failed``); at most 500 characters."""
    lines = [ln.strip() for ln in output.splitlines()
             if ln.strip() and not ln[:1].isspace() and not ln.startswith("Traceback")
             and "complete log of this run" not in ln]
    errno_lines = [ln for ln in lines if "[Errno" in ln]
    line = errno_lines[-1] if errno_lines else "; ".join(lines[-3:]) or "no output"
    return line[:500]


def _fetch_once(target: Path, what: str, download: Callable[[Path], None]) -> Path:
    """The cached corpus at ``target``, downloading and unpacking it first if needed.

    ``download(dl)`` must leave exactly one archive in the (existing, empty) folder ``dl``.
    The unpack goes to a temporary directory beside ``target`` that is renamed into place,
    with a ``.complete`` marker, so an interrupted fetch leaves nothing half-written and a
    complete one is never fetched again.
    """
    if target.is_dir() and (target / ".complete").exists():
        return _single_root(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # the first use of a corpus downloads it: say so before the download and the index build
    print(f"fetching {what} into {target} (first use of this corpus; reused after)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        tmp_path = Path(tmp)
        dl = tmp_path / "dl"
        dl.mkdir()
        download(dl)
        archives = sorted(dl.iterdir())
        if len(archives) != 1:
            raise CorpusFetchError(f"expected one archive for {what}, got {archives}")
        unpacked = tmp_path / "unpacked"
        _unpack(archives[0], unpacked)
        (unpacked / ".complete").write_text(archives[0].name + "\n")
        if target.exists():
            shutil.rmtree(target)
        unpacked.rename(target)
    return _single_root(target)


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
    def download(dl: Path) -> None:
        _run_client([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                     ":all:", "--disable-pip-version-check", "-q", "-d", str(dl), requirement],
                    f"{requirement!r} with pip")

    return _fetch_once(cache_dir / "corpora" / _slug(requirement), repr(requirement), download)


def fetch_npm(spec: str, cache_dir: Path) -> Path:
    """Download the npm package ``spec`` (``name@x.y.z``) as its registry tarball with
    ``npm pack`` and unpack it under ``cache_dir/corpora/npm-<name>-<version>``.

    Runs ``npm pack SPEC --pack-destination DIR --ignore-scripts`` once (no install, no
    lifecycle script, no dependency); later calls return the unpacked directory without
    running npm. Cached and unpacked like :func:`fetch_sdist`.

    Args:
        spec: a pinned npm spec, e.g. ``"zod@3.25.76"`` or ``"@scope/pkg@1.2.3"``.
        cache_dir: root of the rag cache (``paths.cache_dir``).

    Returns:
        The corpus root: the tarball's single top-level directory (npm's ``package/``).

    Raises:
        CorpusFetchError: the spec is not pinned to an exact version, npm is not on PATH,
            npm failed (offline, no such version), or the archive is unusable; the message
            shows the npm command.
    """
    target = cache_dir / "corpora" / _npm_slug(spec)
    spec = spec.strip()

    def download(dl: Path) -> None:
        npm = shutil.which("npm")
        cmd = [npm or "npm", "pack", spec, "--pack-destination", str(dl), "--ignore-scripts"]
        if npm is None:
            raise CorpusFetchError(
                f"could not fetch {spec!r}: npm is not installed (not on PATH); it is needed to "
                f"run `{shlex.join(cmd)}` (Debian: apt-get install nodejs npm, or make sysdeps)")
        _run_client(cmd, f"{spec!r} with npm")

    return _fetch_once(target, repr(spec), download)


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    name = archive.name
    if name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        try:
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise CorpusFetchError(f"could not unpack {archive.name}: {exc}") from exc
    elif name.endswith(".zip"):
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(dest)
        except (zipfile.BadZipFile, OSError) as exc:
            raise CorpusFetchError(f"could not unpack {archive.name}: {exc}") from exc
    else:
        raise CorpusFetchError(f"unknown archive type: {archive}")


def _single_root(target: Path) -> Path:
    dirs = [p for p in target.iterdir() if p.is_dir()]
    return dirs[0] if len(dirs) == 1 else target


def main(argv: list[str] | None = None) -> int:
    """Command line: fetch one sdist (or, with ``--npm``, one npm package) and print where it
    was unpacked."""
    from rag.core.paths import expand_path

    parser = argparse.ArgumentParser(
        prog="python -m rag.corpus.fetch",
        description="Download a pinned source release (pip sdist, or npm tarball with --npm) "
                    "and unpack it once.",
    )
    parser.add_argument("requirement", nargs="?", default=None,
                        help="pinned pip requirement (default: flask==3.1.3), or with --npm a "
                             "pinned npm spec such as zod@3.25.76")
    parser.add_argument("--npm", action="store_true",
                        help="the requirement is an npm spec NAME@X.Y.Z, fetched with npm pack")
    parser.add_argument("--cache-dir", default=None,
                        help="cache root (default: $RAG_CACHE_DIR or ~/.cache/rag)")
    args = parser.parse_args(argv)
    import os
    cache = expand_path(args.cache_dir or os.environ.get("RAG_CACHE_DIR", "~/.cache/rag"))
    try:
        if args.npm:
            if not args.requirement:
                parser.error("--npm needs a spec, e.g. zod@3.25.76")
            print(fetch_npm(args.requirement, cache))
        else:
            print(fetch_sdist(args.requirement or "flask==3.1.3", cache))
    except CorpusFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def corpus_root(cfg) -> Path:
    """The corpus directory: ``corpus.path`` if set, else the fetched sdist or npm tarball
    (fetched once into ``paths.cache_dir``), for a composed config ``cfg``.

    Raises:
        RunError: ``corpus.path`` is not a directory, or the fetch failed (one line).
    """
    from rag.core.paths import expand_path
    from rag.core.errors import RunError

    if cfg.corpus.path:
        root = expand_path(cfg.corpus.path, base=Path.cwd())
        if not root.is_dir():
            raise RunError(f"corpus.path={cfg.corpus.path!r}: {root} is not a directory")
        return root
    try:
        if cfg.corpus.npm:
            return fetch_npm(cfg.corpus.npm, expand_path(cfg.paths.cache_dir))
        return fetch_sdist(cfg.corpus.sdist, expand_path(cfg.paths.cache_dir))
    except CorpusFetchError as exc:
        raise RunError(str(exc)) from exc
