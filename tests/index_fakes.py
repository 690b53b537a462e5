"""Small published indexes without a model: a hashing embedder and generation-stamped builds,
for the integrity, concurrency and live-reload tests (tests/index/, tests/app/serve/)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

#: chunks per generated build
N_CHUNKS = 6
DIM = 8
SETTINGS = {"fixture": "index_fakes"}


class HashEmbedder:
    """A deterministic embedder (the Embedder protocol): each text's vector is drawn from a
    generator seeded by its SHA-256, L2-normalised; no model."""

    model_id = "hash-embedder|v1"
    dim = DIM
    max_seq_length = 256
    name = "hash"

    def embed(self, texts) -> np.ndarray:
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.strip().encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), DIM)

    def count_tokens(self, texts) -> list[int]:
        return [len(t.split()) for t in texts]


def generation_index(gen: int):
    """An :class:`rag.index.build.Index` whose every part says which generation it is: chunk
    texts ``gen <gen> ...``, the corpus fingerprint ``gen-<gen>``, and embedding rows whose
    first value is ``gen / 100`` (before normalisation, so each row encodes it and the rows'
    directions barely change between generations)."""
    from rag.corpus.chunk import Chunk
    from rag.index.bm25 import build_bm25
    from rag.index.build import Index, indexed_texts
    from rag.index.dense import DenseChannel

    chunks = []
    for i in range(N_CHUNKS):
        path, text = f"src/mod{i}.py", f"gen {gen} refund order item{i} gen{gen}marker\n"
        digest = hashlib.sha256(f"{path}\n{text}".encode()).hexdigest()
        chunks.append(Chunk(id=f"{path}:1-1", path=path, symbol=None, start_line=1, end_line=1,
                            category="source", kind="window", text=text, content_hash=digest))
    texts, _ = indexed_texts(chunks)
    matrix = np.full((N_CHUNKS, DIM), 1.0, dtype=np.float32)
    matrix[:, 0] = gen / 100.0
    matrix[:, 1] = np.arange(N_CHUNKS, dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    stats = {"chunks": N_CHUNKS, "header": "path_symbol", "bm25_tokenizer": "code"}
    return Index(chunks=chunks, bm25=build_bm25(texts), dense=DenseChannel(HashEmbedder(), matrix),
                 corpus_fingerprint=f"gen-{gen}", stats=stats)


def publish_generation(root: Path, gen: int, **kw) -> Path:
    """Publish :func:`generation_index` ``gen`` under ``root``; the build folder."""
    from rag.index import versioned

    return versioned.publish(generation_index(gen), root, embedder_id=HashEmbedder.model_id,
                             dim=DIM, normalized=True, corpus_root="/fixture",
                             settings=dict(SETTINGS), **kw)


def generation_of(index, manifest) -> int:
    """The one generation every part of a loaded build says; AssertionError when they differ
    (a mixed build)."""
    gens = {int(manifest["corpus_fingerprint"].split("-")[1]),
            int(index.corpus_fingerprint.split("-")[1])}
    gens |= {int(c.text.split()[1]) for c in index.chunks}
    m = index.dense.matrix
    first = 100.0 * m[:, 0] / m[:, 2]  # columns 2.. hold 1 before normalising
    gens |= {int(round(float(x))) for x in first}
    assert len(gens) == 1, f"a mixed build: {sorted(gens)}"
    assert len(index.chunks) == m.shape[0] == index.bm25.n_chunks == N_CHUNKS
    return gens.pop()
