"""semble 0.7.0 as a subprocess search worker, offline, in its two model-free modes.

Runs under semble's own virtual environment (``.venv-peers/semble/bin/python``); it imports
only the standard library, numpy and semble, never rag.

Protocol (one JSON object per line, UTF-8, each reply flushed):

    python semble_worker.py ROOT

1. Indexes directory ROOT once, as ``SembleIndex.from_path(ROOT)`` would (ROOT resolved,
   content=(ContentType.CODE,), chunk paths relative to ROOT), then prints
   ``{"ready": true, "chunks": N, "files": F, "index_ms": T, "semble_version": "0.7.0"}``.
   If indexing fails it prints ``{"ready": false, "error": "..."}`` and exits with status 2.
2. Reads requests from stdin until EOF:
   ``{"id": ..., "query": "...", "top_k": 10, "mode": "ranked" | "bm25"}``
   (``top_k`` defaults to 10, ``mode`` to ranked) and answers each with
   ``{"id": ..., "results": [{"file_path", "start_line", "end_line", "score"}, ...], "ms": T}``.
   A request that is not valid JSON, or has a bad field, gets ``{"id": ..., "error": "..."}``
   (``id`` null when unreadable) and the worker carries on. Blank lines are ignored.

Modes mirror semble's benchmark ``benchmarks/baselines/ablations.py`` (MinishLab/semble):

- ``ranked`` = its ``semble-bm25``: ``semble.search.search(..., alpha=0.0, rerank=True)``,
  semble's hybrid pipeline fed by BM25 alone, with its file-coherence, query and path
  boosts/penalties (what ``SembleIndex.search(query, top_k, alpha=0.0)`` does on a code index).
- ``bm25`` = its ``bm25`` (raw BM25, no ranking stage): ``semble.search._search_bm25``.

No embedding model is loaded. semble's hybrid search always runs a semantic channel, but with
alpha=0.0 its scores are multiplied by 0 and semantic-only chunks are dropped, so a stand-in
(deterministic hash vectors, never zero) gives the same results as any real model. The index is
built with ``create_index_from_path`` and searched with ``semble.search`` directly, so nothing
touches the Hugging Face hub, semble's cache or its usage stats under HOME; the grammar
libraries semble-grammars unpacks go to ``<venv>/var/semble-grammars/<version>``
(SEMBLE_GRAMMARS_CACHE_DIR).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

# Nothing may reach the network or the hub, whatever imports what.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# semble-grammars extracts its bundled tree-sitter libraries into a cache, by default under
# ~/.cache: keep them inside semble's venv instead (or a temporary folder if that is read-only).
if not os.environ.get("SEMBLE_GRAMMARS_CACHE_DIR"):
    from importlib.metadata import version as _version

    _grammars = os.path.join(sys.prefix, "var", "semble-grammars", _version("semble-grammars"))
    try:
        os.makedirs(_grammars, exist_ok=True)
        if not os.access(_grammars, os.W_OK):
            raise PermissionError(_grammars)
    except OSError:
        import tempfile

        _grammars = tempfile.mkdtemp(prefix="semble-grammars-")
    os.environ["SEMBLE_GRAMMARS_CACHE_DIR"] = _grammars

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from semble.index.create import create_index_from_path  # noqa: E402
from semble.search import _search_bm25, search  # noqa: E402
from semble.types import ContentType  # noqa: E402
from semble.version import __version__ as SEMBLE_VERSION  # noqa: E402

MODES = ("ranked", "bm25")


class HashModel:
    """Stand-in for semble's StaticModel: finite, non-zero, deterministic vectors per text."""

    dim = 16

    def encode(self, texts, **_kwargs):
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=self.dim).digest()
            out[row] = np.frombuffer(digest, dtype=np.uint8).astype(np.float32) + 1.0
        return out


def build(root: str):
    path = Path(root).resolve()
    if not path.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    model = HashModel()
    bm25, semantic, chunks, _manifest = create_index_from_path(
        path, model=model, content=(ContentType.CODE,), display_root=path, previous=None, show_progress_bar=False
    )
    return model, bm25, semantic, chunks


def answer(index, request: dict) -> list[dict]:
    model, bm25, semantic, chunks = index
    query, mode, top_k = request.get("query"), request.get("mode", "ranked"), request.get("top_k", 10)
    if not isinstance(query, str):
        raise ValueError("query must be a string")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError("top_k must be a positive integer")
    if not chunks or not query.strip():  # SembleIndex.search's own guard
        return []
    if mode == "ranked":
        hits = search(query, model, semantic, bm25, chunks, top_k, alpha=0.0, selector=None, rerank=True)
    else:
        hits = _search_bm25(query, bm25, chunks, top_k, None)
    return [
        {
            "file_path": hit.chunk.file_path,
            "start_line": hit.chunk.start_line,
            "end_line": hit.chunk.end_line,
            "score": float(hit.score),
        }
        for hit in hits
    ]


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: semble_worker.py ROOT", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        index = build(argv[1])
    except Exception as exc:  # noqa: BLE001 - reported to the caller, not raised
        emit({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 2
    chunks = index[3]
    emit(
        {
            "ready": True,
            "chunks": len(chunks),
            "files": len({chunk.file_path for chunk in chunks}),
            "index_ms": round((time.perf_counter() - started) * 1000, 1),
            "semble_version": SEMBLE_VERSION,
        }
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        request_id = None
        started = time.perf_counter()
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("request must be a JSON object")
            request_id = request.get("id")
            results = answer(index, request)
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the worker
            emit({"id": request_id, "error": f"{type(exc).__name__}: {exc}"})
            continue
        emit({"id": request_id, "results": results, "ms": round((time.perf_counter() - started) * 1000, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
