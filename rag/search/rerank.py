"""Second-stage rerankers over the top ``search.candidates`` chunks.

* :class:`LateInteractionReranker` — ColBERT-style late interaction with the bi-encoder's own
  token embeddings, no training: ``score(q, d) = (1/|q|) * sum_i max_j cos(q_i, d_j)`` over the
  query's and the chunk's token vectors (Khattab & Zaharia, "ColBERT", SIGIR 2020). Chunk token
  embeddings are cached on disk by (model id, content hash), like the dense vectors.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np


class Reranker(Protocol):
    """Scores (query, chunk) pairs; higher is better. ``kind`` names the scorer."""

    kind: str

    def score(self, query: str, chunks: Sequence) -> list[float]: ...


def maxsim(query_tokens: np.ndarray, doc_tokens: np.ndarray) -> float:
    """Late-interaction score of one pair.

    Args:
        query_tokens: (m, dim) token vectors of the query.
        doc_tokens: (n, dim) token vectors of the document.

    Returns:
        Mean over query tokens of the best cosine with any document token, in [-1, 1];
        0.0 when either side has no token.
    """
    if len(query_tokens) == 0 or len(doc_tokens) == 0:
        return 0.0
    q = query_tokens / np.maximum(np.linalg.norm(query_tokens, axis=1, keepdims=True), 1e-12)
    d = doc_tokens / np.maximum(np.linalg.norm(doc_tokens, axis=1, keepdims=True), 1e-12)
    return float((q @ d.T).max(axis=1).mean())


class LateInteractionReranker:
    """MaxSim over all-MiniLM-L6-v2 token embeddings (see module docstring)."""

    kind = "late_interaction"

    def __init__(self, embedder, cache_dir: Path) -> None:
        self.embedder = embedder
        cache_dir.mkdir(parents=True, exist_ok=True)
        from rag.index.dense import _safe_name

        model_id = embedder.model_id + "|token_embeddings"
        self.model_id = model_id
        self._db = sqlite3.connect(cache_dir / f"{_safe_name(model_id)}.sqlite", timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS tok (hash TEXT PRIMARY KEY, n INTEGER NOT NULL,"
                         " dim INTEGER NOT NULL, vec BLOB NOT NULL)")
        self._db.commit()

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        out = self.embedder.model.encode(texts, output_value="token_embeddings",
                                         convert_to_numpy=False, show_progress_bar=False,
                                         batch_size=16)
        return [t.detach().cpu().numpy().astype(np.float32) for t in out]

    def token_embeddings(self, chunks: Sequence) -> list[np.ndarray]:
        """Token vectors of each chunk's indexed text, from the cache or computed (float16 on
        disk)."""
        hashes = [c.content_hash for c in chunks]
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(hashes), 900):
            part = hashes[start:start + 900]
            q = f"SELECT hash, n, dim, vec FROM tok WHERE hash IN ({','.join('?' * len(part))})"
            for h, n, dim, blob in self._db.execute(q, part):
                found[h] = np.frombuffer(blob, dtype=np.float16).reshape(n, dim).astype(np.float32)
        todo = [c for c in chunks if c.content_hash not in found]
        if todo:
            vecs = self._encode([c.indexed_text for c in todo])
            rows = []
            for c, v in zip(todo, vecs):
                found[c.content_hash] = v
                rows.append((c.content_hash, v.shape[0], v.shape[1], v.astype(np.float16).tobytes()))
            self._db.executemany("INSERT OR IGNORE INTO tok VALUES (?, ?, ?, ?)", rows)
            self._db.commit()
        return [found[h] for h in hashes]

    def score(self, query: str, chunks: Sequence) -> list[float]:
        """MaxSim score of ``query`` against each chunk."""
        qtok = self._encode([query])[0]
        return [maxsim(qtok, d) for d in self.token_embeddings(chunks)]
