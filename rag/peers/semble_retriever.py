"""``retriever=semble``: PyPI ``semble`` 0.7.0 (MinishLab) as a :class:`rag.eval.retriever.Retriever`.

semble runs in a virtual environment of its own (``.venv-peers/semble``, made by ``make
peers`` from ``peers/semble/requirements.txt``: its huggingface_hub, tokenizers and tree-sitter
pins clash with rag's), as the subprocess :mod:`rag.peers.semble_worker` (its docstring
states the JSON-lines protocol). The worker indexes the corpus root once, when the run
opens the retriever on it (:meth:`SembleRetriever.open`), and answers every query in
``retriever.mode``:

* ``ranked`` (default): semble's BM25 fed through its ranking stage (semble's benchmark
  mode ``semble-bm25``: file coherence, identifier and path boosts, test/example penalties);
* ``bm25``: semble's BM25 alone (its ``bm25`` mode).

Neither needs an embedding model (semble's default mode needs potion-code-16M, which no
package ships). The ranking semble's benchmark scores is its answer to ``top_k=10``; semble's
ranking stage re-ranks a pool of ``5 * top_k`` candidates, so a deeper request can reorder the
first ten. The adapter therefore returns semble's ``top_k=10`` answer first, exactly, then the
rest of its answer to ``top_k=depth`` (chunks not already returned), so semble's NDCG@10 is
semble's own and rag's metrics to ``eval.depth`` see a full ranking.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from rag.peers import PeerUnavailable

WORKER = Path(__file__).with_name("semble_worker.py")
#: the interpreter of semble's virtual environment, relative to the project root
DEFAULT_PYTHON = ".venv-peers/semble/bin/python"
MODES = ("ranked", "bm25")
#: the cut-off of semble's benchmark (benchmarks/baselines/ablations.py ``_TOP_K``)
SEMBLE_TOP_K = 10


class SembleRetriever:
    """semble through its worker; see the module docstring.

    Args:
        python: semble's venv interpreter.
        mode: ``ranked`` or ``bm25``.
        top_k: hits a caller receives.

    Raises:
        PeerUnavailable: the interpreter is missing or has no semble (``make peers``).
        ValueError: an unknown mode.
    """

    kind = "semble"

    def __init__(self, python: Path, *, mode: str = "ranked", top_k: int = 8) -> None:
        if mode not in MODES:
            raise ValueError(f"retriever.mode must be one of {list(MODES)} for retriever=semble, "
                             f"got {mode!r}")
        self.python = Path(python)
        if not self.python.is_file():
            raise PeerUnavailable(f"retriever=semble: {self.python} not found: semble 0.7.0 is "
                                  "not installed (make peers)")
        self.mode, self.top_k = mode, int(top_k)
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] = {}
        self.tags = {"retriever_peer": "semble", "retriever_mode": mode}

    def open(self, root: Path) -> None:
        """Start the worker on ``root`` (chunk paths are relative to it) and wait until it
        has indexed it.

        Raises:
            PeerUnavailable: the worker could not start or index (its error named).
        """
        self.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
        try:
            self.proc = subprocess.Popen([str(self.python), str(WORKER), str(root)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                         env=env, bufsize=1)
        except OSError as exc:
            raise PeerUnavailable(f"retriever=semble: cannot start {self.python}: {exc}") from None
        atexit.register(self.close)
        line = self.proc.stdout.readline()
        try:
            self.ready = json.loads(line) if line else {}
        except json.JSONDecodeError:
            self.ready = {}
        if not self.ready.get("ready"):
            err = self.ready.get("error") or (self.proc.stderr.read()[-500:].strip() if
                                              self.proc.poll() is not None else line.strip())
            self.close()
            raise PeerUnavailable(f"retriever=semble: the worker did not index {root}: {err}")
        self.tags.update(retriever_semble_version=str(self.ready.get("semble_version")),
                         retriever_index_ms=f"{float(self.ready.get('index_ms', 0)):.0f}")

    def _ask(self, qid: str, text: str, top_k: int) -> tuple[list[dict[str, Any]], float]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": qid, "query": text, "top_k": top_k,
                                          "mode": self.mode}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()[-500:].strip() if self.proc.poll() is not None else ""
            raise RuntimeError(f"retriever=semble: the worker ended ({err or 'no output'})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"retriever=semble: query {qid}: {reply['error']}")
        return reply["results"], float(reply.get("ms", 0.0))

    def retrieve(self, query: Any, *, depth: int) -> Any:
        """semble's answer to ``query`` (module docstring: its top 10, then deeper)."""
        from rag.core.contract import Hit, SearchResult

        if self.proc is None:
            raise RuntimeError("retriever=semble: open(corpus_root) was not called")
        t0 = time.perf_counter()
        first, ms = self._ask(query.id, query.text, SEMBLE_TOP_K)
        results = list(first)
        if depth > SEMBLE_TOP_K:
            seen = {(r["file_path"], r["start_line"], r["end_line"]) for r in first}
            deeper, more = self._ask(query.id, query.text, int(depth))
            ms += more
            results += [r for r in deeper
                        if (r["file_path"], r["start_line"], r["end_line"]) not in seen]
        ranked = [Hit(chunk_id=f"{r['file_path']}:{r['start_line']}-{r['end_line']}",
                      path=str(r["file_path"]).replace("\\", "/"), symbol=None,
                      start_line=int(r["start_line"]), end_line=int(r["end_line"]),
                      category="", score=float(r["score"]), scores={"semble": float(r["score"])})
                  for r in results]
        total = (time.perf_counter() - t0) * 1000
        return SearchResult(hits=ranked[:self.top_k], ranked=ranked, route=f"semble-{self.mode}",
                            top_dense=None, dropped=0, weak_match=False,
                            timings_ms={"total": total, "semble": ms},
                            reason=None if ranked else "no result")

    def close(self) -> None:
        """Stop the worker (closing its stdin ends it; killed after 5 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a worker that will not stop is killed
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass


def build(cfg: Any, **_: Any) -> SembleRetriever:
    """``retriever=semble``: ``retriever.python`` (default :data:`DEFAULT_PYTHON` under the
    project root), ``retriever.mode`` (default ``ranked``), ``search.top_k``."""
    from rag.core.paths import project_root

    r = cfg.retriever
    # not resolved: a venv's bin/python is a symlink, and only through it is the venv used
    python = Path(str(r.python or DEFAULT_PYTHON)).expanduser()
    python = python if python.is_absolute() else project_root() / python
    return SembleRetriever(python, mode=str(r.mode or "ranked"), top_k=int(cfg.search.top_k))
