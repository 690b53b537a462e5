"""``retriever=ripgrep``: ripgrep as semble's benchmark runs it, as a
:class:`rag.eval.retriever.Retriever`.

semble's keyword baseline (MinishLab/semble ``benchmarks/baselines/ripgrep.py``) runs, per
query, ``rg --count --no-heading --ignore-case --hidden --glob !.git --fixed-strings QUERY
ROOT`` and ranks the files by their count of matching lines, most first. This adapter runs the
same command with ``--sort path`` added, so that files with equal counts keep one order (path
order) instead of the order rg's threads finish in; with ``retriever.mode=regex`` the query is a
regular expression (semble's ``--no-fixed-strings``). Each file is returned as one chunk
covering the whole file (lines 1..its line count), so a span label is found when its file is —
semble scores ripgrep by file rank (``file_rank``), which is the same thing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rag.peers import PeerUnavailable

MODES = ("fixed", "regex")


def rg_command(rg: str, query: str, root: Path, *, fixed: bool = True) -> list[str]:
    """semble's ripgrep command line for ``query`` over ``root`` (plus ``--sort path``)."""
    cmd = [rg, "--count", "--no-heading", "--ignore-case", "--hidden", "--glob", "!.git",
           "--sort", "path"]
    if fixed:
        cmd.append("--fixed-strings")
    return [*cmd, "--", query, str(root)]


def parse_counts(stdout: str, root: Path) -> list[tuple[str, int]]:
    """``path:count`` lines as ``(path relative to root, count)``, most matches first (ties
    in the order given); lines whose count is not an integer are skipped, as semble does."""
    prefix = str(root).rstrip("/") + "/"
    entries = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        path, _, count = line.rpartition(":")
        try:
            n = int(count)
        except ValueError:
            continue
        entries.append((path[len(prefix):] if path.startswith(prefix) else path, n))
    entries.sort(key=lambda e: -e[1])
    return entries


class RipgrepRetriever:
    """ripgrep over the corpus root; see the module docstring.

    Raises:
        PeerUnavailable: no ``rg`` on PATH (Debian's ``ripgrep``; ``make sysdeps``).
    """

    kind = "ripgrep"

    def __init__(self, *, mode: str = "fixed", top_k: int = 8, timeout_s: float = 30.0,
                 rg: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"retriever.mode must be one of {list(MODES)} for retriever=ripgrep, "
                             f"got {mode!r}")
        found = rg or shutil.which("rg")
        if not found:
            raise PeerUnavailable("retriever=ripgrep: no rg on PATH (install Debian's ripgrep: "
                                  "make sysdeps)")
        self.rg, self.fixed, self.top_k, self.timeout_s = found, mode == "fixed", int(top_k), timeout_s
        self.root: Path | None = None
        self._lines: dict[str, int] = {}
        self.tags = {"retriever_peer": "ripgrep", "retriever_mode": mode}

    def open(self, root: Path) -> None:
        """Search ``root`` from now on."""
        self.root = Path(root)
        self._lines.clear()

    def _line_count(self, rel: str) -> int:
        if rel not in self._lines:
            try:
                with (self.root / rel).open("rb") as f:
                    data = f.read()
                self._lines[rel] = max(1, data.count(b"\n") + (0 if data.endswith(b"\n") else 1))
            except OSError:
                self._lines[rel] = 1
        return self._lines[rel]

    def close(self) -> None:
        """Nothing is kept running."""

    def retrieve(self, query: Any, *, depth: int) -> Any:
        """The files with the most matching lines, each as one whole-file chunk."""
        from rag.core.contract import Hit, SearchResult

        if self.root is None:
            raise RuntimeError("retriever=ripgrep: open(corpus_root) was not called")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(rg_command(self.rg, query.text, self.root, fixed=self.fixed),
                                  capture_output=True, text=True, timeout=self.timeout_s)
            out = proc.stdout if proc.returncode in (0, 1) else ""
            reason = None if proc.returncode in (0, 1) else f"rg exited {proc.returncode}"
        except subprocess.TimeoutExpired:
            out, reason = "", f"rg timed out after {self.timeout_s:g} s"
        entries = parse_counts(out, self.root)[:max(int(depth), 1)]
        ranked = [Hit(chunk_id=rel, path=rel, symbol=None, start_line=1,
                      end_line=self._line_count(rel), category="", score=float(n),
                      scores={"rg_count": float(n)}) for rel, n in entries]
        return SearchResult(hits=ranked[:self.top_k], ranked=ranked, route="ripgrep",
                            top_dense=None, dropped=0, weak_match=False,
                            timings_ms={"total": (time.perf_counter() - t0) * 1000},
                            reason=reason or (None if ranked else "no match"))


def build(cfg: Any, **_: Any) -> RipgrepRetriever:
    """``retriever=ripgrep``: ``retriever.mode`` (``fixed``, default, or ``regex``),
    ``retriever.timeout_s``, ``search.top_k``."""
    r = cfg.retriever
    return RipgrepRetriever(mode=str(r.mode or "fixed"), top_k=int(cfg.search.top_k),
                            timeout_s=float(r.timeout_s))
