"""Small git work trees for tests (trace links, the CLI's commit-pinned links)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import write_tree


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def git_repo(root: Path, files: dict[str, str], *, remote: str | None = None) -> Path:
    """A work tree with ``files`` committed once (and ``remote.origin.url`` when given)."""
    write_tree(root, files)
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.org", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "c")
    if remote:
        git(root, "remote", "add", "origin", remote)
    return root
