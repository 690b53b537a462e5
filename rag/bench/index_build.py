"""Benchmark section 3: index build throughput.

* **chunking** (walk + read + chunk) and **BM25** (tokenize + build) in chunks per second, from
  :func:`rag.index.build.build_index` without chunk store or embedder (every file read and
  chunked);
* **embedding**: :func:`rag.index.dense.embed_with_cache` into an empty cache (what a first
  build does: encode, count word pieces for the truncation report, store in SQLite) against the
  model's own ``SentenceTransformer.encode`` on the same texts with the same batch size — our
  overhead as a ratio of the two times; the vectors are compared too;
* **warm re-run**: ``build_index`` exactly as ``python -m rag.run`` calls it (chunk store and
  embedding cache of ``paths.cache_dir``): chunks embedded must be 0; and once more with the
  chunk store off (every file re-read and re-chunked, embeddings still from the cache).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from rag.bench.measure import progress, ratio, spread, summary


def bench_build(cfg, root: Path, embedder, chunks: Sequence, *, reps: int, embed_sample: int,
                embed_reps: int, warm_reps: int) -> dict:
    """Section 3 (see the module docstring).

    Args:
        cfg: the composed config (corpus, bm25 and paths settings).
        root: the corpus directory.
        embedder: the configured :class:`rag.index.dense.SentenceTransformerEmbedder`.
        chunks: the corpus's chunks (the embedding sample is drawn from them).
        embed_sample: chunks embedded per measurement.
    """
    from rag.app.config import expand_path
    from rag.index.build import build_index
    from rag.index.dense import EmbeddingCache, embed_with_cache

    c, b = cfg.corpus, cfg.bm25
    from rag.corpus.walk import walk_settings

    kw = dict(max_file_bytes=c.max_file_bytes, walk=walk_settings(c), window_lines=c.window_lines,
              window_overlap=c.window_overlap, k1=b.k1, b=b.b, progress=False)
    chunk_rate, bm25_rate, files = [], [], 0
    n_chunks = 0
    for r in range(reps):
        idx = build_index(root, embedder=None, cache_dir=None, chunk_store=None, **kw)
        s = idx.stats
        n_chunks, files = s["chunks"], s.get("files_indexed", 0)
        chunk_rate.append(n_chunks / max(s["walk_s"] + s["chunk_s"], 1e-9))
        bm25_rate.append(n_chunks / max(s["bm25_build_s"], 1e-9))
    progress(f"build: chunking and BM25 x {reps}")

    sample = spread(chunks, embed_sample)
    texts = [ch.indexed_text for ch in sample]
    hashes = [ch.content_hash for ch in sample]
    model = embedder.model
    ours_s, encode_s = [], []
    max_diff = 0.0
    embedded = 0
    with tempfile.TemporaryDirectory(prefix="rag-bench-emb-") as tmp:
        for r in range(embed_reps):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                if side == 0:
                    cache = EmbeddingCache(Path(tmp) / f"cache{r}", embedder.model_id, embedder.dim)
                    t0 = time.perf_counter()
                    mine, stats = embed_with_cache(embedder, texts, hashes, cache, progress=False)
                    ours_s.append(time.perf_counter() - t0)
                    cache.close()
                    embedded = stats.embedded
                else:
                    t0 = time.perf_counter()
                    ref = model.encode(texts, batch_size=embedder.batch_size,
                                       normalize_embeddings=embedder.normalize,
                                       convert_to_numpy=True, show_progress_bar=False)
                    encode_s.append(time.perf_counter() - t0)
            max_diff = max(max_diff, float(np.abs(np.asarray(ref, dtype=np.float32) - mine).max()))
            progress(f"build: embedding {len(texts)} chunks, rep {r + 1}/{embed_reps} "
                     f"(ours {ours_s[-1]:.1f} s, encode() {encode_s[-1]:.1f} s)")
    ours_rate = [len(texts) / s for s in ours_s]
    enc_rate = [len(texts) / s for s in encode_s]

    cache_dir = expand_path(cfg.paths.cache_dir)
    warm = {"store": [], "nostore": []}
    warm_stats = {}
    for r in range(warm_reps):
        for key, store in (("store", cache_dir / "chunks"), ("nostore", None)):
            t0 = time.perf_counter()
            idx = build_index(root, embedder=embedder, cache_dir=cache_dir, chunk_store=store, **kw)
            warm[key].append(time.perf_counter() - t0)
            warm_stats[key] = {k: idx.stats.get(k) for k in
                               ("chunks", "chunks_embedded", "chunks_from_cache", "corpus_read")}
    progress(f"build: warm re-runs x {warm_reps}")
    ours_time = summary(ours_s, unit="s")
    enc_time = summary(encode_s, unit="s")
    return {
        "chunks": n_chunks, "files": files, "reps": reps,
        "chunking": summary(chunk_rate, unit="chunks/s"),
        "bm25": summary(bm25_rate, unit="chunks/s"),
        "embedding": {"sample_chunks": len(texts), "reps": embed_reps,
                      "batch_size": embedder.batch_size,
                      "max_seq_length": embedder.max_seq_length,
                      "ours_rate": summary(ours_rate, unit="chunks/s"),
                      "encode_rate": summary(enc_rate, unit="chunks/s"),
                      "ours_time": ours_time, "encode_time": enc_time,
                      "overhead_ratio": ratio(ours_time["median"], enc_time["median"]),
                      "chunks_embedded": embedded,
                      "max_abs_diff_vs_encode": max_diff},
        "warm": {"with_chunk_store": summary(warm["store"], unit="s"),
                 "without_chunk_store": summary(warm["nostore"], unit="s"),
                 "stats_with_chunk_store": warm_stats.get("store"),
                 "stats_without_chunk_store": warm_stats.get("nostore")},
    }
