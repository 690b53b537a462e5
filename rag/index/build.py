"""Build the in-memory index of a corpus: walk, chunk, BM25, embeddings (cached by content hash)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from rag.core.progress import progress_iter

from rag.corpus.chunk import CHUNKER_VERSION, Chunk, chunk_document, split_lines
from rag.corpus.languages import language_stats
from rag.corpus.walk import Document, WalkStats, drop_secret_documents, walk_corpus
from rag.index import store
from rag.index.bm25 import BM25Channel, build_bm25
from rag.index.dense import DenseChannel, Embedder, EmbeddingCache, embed_with_cache
from rag.index.tokenize import TOKENIZER_VERSION


class EmptyCorpusError(ValueError):
    """The corpus directory has no indexable text file."""


@dataclass
class Index:
    """A searchable corpus.

    Attributes:
        chunks: sorted by chunk id, so index order equals the (doc id) tie-break order.
        bm25: the lexical channel.
        dense: the dense channel (None if no embedder was given).
        corpus_fingerprint: SHA-256 over (path, file SHA-256) of every indexed document.
        stats: walk, chunk and embedding counts and timings (flat, for logging).
        line_counts: path -> number of lines of each indexed document (golden span labels
            must end within their file); empty when unknown.
        label_chunks: the symbol chunker's chunks of the corpus when the index was cut by
            another chunker (``corpus.chunker=window``): golden symbol labels are resolved
            to their lines on these (None: on :attr:`chunks`). Never indexed.
    """

    chunks: list[Chunk]
    bm25: BM25Channel
    dense: DenseChannel | None
    corpus_fingerprint: str
    stats: dict[str, Any] = field(default_factory=dict)
    line_counts: dict[str, int] = field(default_factory=dict)
    label_chunks: list[Chunk] | None = None

    def category_mask(self, types) -> np.ndarray:
        """Boolean mask, shape (n_chunks,), of the chunks whose category is in ``types``."""
        wanted = set(types)
        return np.fromiter((c.category in wanted for c in self.chunks), dtype=bool,
                           count=len(self.chunks))

    @cached_property
    def chunk_paths(self) -> list[str]:
        """The path of each chunk, in index order (length n_chunks)."""
        return [c.path for c in self.chunks]

    @property
    def paths(self) -> set[str]:
        """Every indexed document path."""
        return {c.path for c in self.chunks}

    @property
    def symbols(self) -> set[tuple[str, str]]:
        """Every (path, symbol) pair that names a chunk (of the symbol chunker: a symbol
        label names the same lines whatever ``corpus.chunker`` cut the index)."""
        chunks = self.label_chunks if self.label_chunks is not None else self.chunks
        return {(c.path, c.symbol) for c in chunks if c.symbol}


def corpus_fingerprint(docs: list[Document]) -> str:
    """SHA-256 hex over ``path\\0sha256(text)\\n`` for every document in path order."""
    h = hashlib.sha256()
    for d in sorted(docs, key=lambda d: d.path):
        h.update(d.path.encode() + b"\0" + hashlib.sha256(d.text.encode()).hexdigest().encode()
                 + b"\n")
    return h.hexdigest()


def _no_header(c: Chunk) -> str:
    return c.text


def _symbol_header(c: Chunk) -> str:
    return f"{c.symbol}\n{c.text}" if c.symbol else c.text


def _path_symbol_header(c: Chunk) -> str:
    return c.indexed_text


# index.header -> the text both channels index for a chunk (an ablation axis)
HEADERS: dict[str, Any] = {"none": _no_header, "symbol": _symbol_header,
                           "path_symbol": _path_symbol_header}


def indexed_texts(chunks: list[Chunk], header: str = "path_symbol") -> tuple[list[str], list[str]]:
    """(texts, cache keys) of ``chunks`` under ``header`` (:data:`HEADERS`).

    ``path_symbol`` is ``"path: symbol\n"`` + body and keys the embedding cache by the chunk's
    own content hash; the others key it by SHA-256 of the header name and the text, so no
    embedding of one header mode is ever served for another.

    Raises:
        ValueError: unknown ``header``.
    """
    if header not in HEADERS:
        raise ValueError(f"index.header must be one of {sorted(HEADERS)}, got {header!r}")
    texts = [HEADERS[header](c) for c in chunks]
    if header == "path_symbol":
        return texts, [c.content_hash for c in chunks]
    return texts, [hashlib.sha256(f"{header}\0{t}".encode("utf-8")).hexdigest() for t in texts]


def build_index(root: Path, *, embedder: Embedder | None, cache_dir: Path | None,
                bm25_backend: str = "bm25s", k1: float = 1.5, b: float = 0.75,
                max_file_bytes: int = 1_000_000, window_lines: int = 60,
                window_overlap: int = 10, progress: bool = True,
                chunk_store: Path | None = None,
                extra_docs: list[Document] | None = None, header: str = "path_symbol",
                bm25_tokenizer: str = "code", bm25_idf: str = "okapi",
                bm25_path_field: bool = False, walk: dict[str, Any] | None = None,
                chunker: str = "symbol",
                max_seq_by_category: dict[str, int] | None = None) -> Index:
    """Walk ``root``, chunk every document, build the BM25 channel and embed the chunks.

    Args:
        root: corpus directory.
        embedder: the dense model; None builds a BM25-only index.
        cache_dir: directory of the embedding cache (required when ``embedder`` is given).
        bm25_backend, k1, b, bm25_tokenizer, bm25_idf, bm25_path_field: BM25 settings (see
            :func:`rag.index.bm25.build_bm25`; ``bm25_path_field`` appends each chunk's
            path field).
        max_file_bytes, window_lines, window_overlap: walk and chunker settings.
        chunker: ``symbol`` or ``window`` (:data:`rag.corpus.chunk.CHUNKERS`), part of the
            chunk store's key; under ``window`` the symbol chunker's chunks are kept too
            (:attr:`Index.label_chunks`, from the chunk store when it has them).
        walk: further :func:`rag.corpus.walk.walk_corpus` keyword arguments (``exclude``,
            ``include``, ``index_secrets``; see :func:`rag.corpus.walk.walk_settings`); part
            of the chunk store's key.
        progress: show progress (a bar on a terminal, a line every 10 s in a log).
        max_seq_by_category: word pieces embedded per chunk of these categories (others:
            the embedder's ``max_seq_length``); each length has its own embedding cache
            (:class:`rag.index.dense.TruncatedEmbedder`).
        header: what precedes each chunk's body in both channels (:data:`HEADERS`).
        extra_docs: documents that are not files of ``root`` (GitHub issues and pull
            requests, see :mod:`rag.corpus.github`), indexed with the corpus.
        chunk_store: directory of persisted chunk sets (:mod:`rag.index.store`); when the
            corpus is unchanged since the last build, its chunks are loaded from there and no
            file is read (``stats["corpus_read"] == 0``).

    Raises:
        FileNotFoundError: ``root`` is not a directory.
        EmptyCorpusError: nothing indexable was found (the message gives the skip counts).
    """
    t0 = time.perf_counter()
    extra_docs = list(extra_docs or [])
    walk_kw = {**(walk or {}), "max_file_bytes": max_file_bytes}
    kw = dict(root=root, walk_kw=walk_kw, extra_docs=extra_docs, window_lines=window_lines,
              window_overlap=window_overlap, chunk_store=chunk_store, progress=progress)
    chunks, walk_stats, corpus_fp, line_counts, stored, t_walk = _chunk_corpus(
        chunker=chunker, **kw)
    # symbol labels name the symbol chunker's lines, whatever cut the index
    label_chunks = None if chunker == "symbol" else _chunk_corpus(chunker="symbol", **kw)[0]
    t_chunk = time.perf_counter()
    texts, keys = indexed_texts(chunks, header)
    bm25 = build_bm25(texts, backend=bm25_backend, k1=k1, b=b, tokenizer=bm25_tokenizer,
                      idf=bm25_idf, paths=[c.path for c in chunks] if bm25_path_field else None)
    t_bm25 = time.perf_counter()
    stats: dict[str, Any] = dict(walk_stats)
    stats.update(corpus_read=int(not stored), chunks=len(chunks), chunker_version=CHUNKER_VERSION,
                 chunker=chunker, header=header,
                 tokenizer_version=TOKENIZER_VERSION, bm25_tokenizer=bm25_tokenizer,
                 bm25_idf=bm25_idf, bm25_path_field=int(bool(bm25_path_field)),
                 walk_s=round(t_walk - t0, 3), chunk_s=round(t_chunk - t_walk, 3),
                 bm25_build_s=round(t_bm25 - t_chunk, 3),
                 # lang/<language>/chunks ... and symbol_coverage (rag/corpus/languages.py)
                 **language_stats(chunks))
    dense = None
    if embedder is not None:
        if cache_dir is None:
            raise ValueError("cache_dir is required with an embedder")
        matrix, es = _embed_by_length(embedder, chunks, texts, keys, cache_dir=cache_dir,
                                      lengths=max_seq_by_category or {}, progress=progress)
        dense = DenseChannel(embedder, matrix)
        stats.update(chunks_embedded=es["embedded"], chunks_from_cache=es["cached"],
                     chunks_truncated=es["truncated"],
                     chunks_truncated_share=round(es["truncated"] / max(1, len(chunks)), 4),
                     # distinct texts among the chunks: identical texts are embedded once
                     chunks_distinct_texts=len(set(keys)),
                     tokens_embedded=es["tokens_embedded"], embed_s=round(es["seconds"], 3))
    else:
        stats.update(chunks_embedded=0, chunks_from_cache=0)
    return Index(chunks=chunks, bm25=bm25, dense=dense,
                 corpus_fingerprint=corpus_fp, stats=stats, line_counts=line_counts,
                 label_chunks=label_chunks)


def _embed_by_length(embedder: Embedder, chunks: list, texts: list[str], keys: list[str], *,
                     cache_dir: Path, lengths: dict[str, int],
                     progress: bool) -> tuple[Any, dict[str, Any]]:
    """Embed every chunk, each at its category's length (``lengths``; others at the
    embedder's ``max_seq_length``), one embedding cache per (document model, length).

    Returns:
        (matrix (len(chunks), dim) float32 in chunk order, totals: embedded, cached,
        truncated, tokens_embedded — word pieces fed to the model, after truncation, for the
        chunks embedded now — and seconds).
    """
    from rag.index.dense import TruncatedEmbedder

    base = embedder.max_seq_length
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(chunks):
        groups.setdefault(int(lengths.get(c.category, base)), []).append(i)
    matrix = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
    totals = dict(embedded=0, cached=0, truncated=0, tokens_embedded=0, seconds=0.0)
    for length, idx in sorted(groups.items(), reverse=True):
        view = embedder if length == base else TruncatedEmbedder(embedder, length)
        # keyed by the model that embeds the chunks (a SplitEmbedder's queries use another)
        cache = EmbeddingCache(cache_dir / "embeddings",
                               getattr(view, "documents_model_id", view.model_id), view.dim)
        try:
            part, es = embed_with_cache(view, [texts[i] for i in idx], [keys[i] for i in idx],
                                        cache, progress=progress)
        finally:
            cache.close()
        matrix[idx] = part
        totals["embedded"] += es.embedded
        totals["cached"] += es.cached
        totals["truncated"] += es.truncated
        totals["tokens_embedded"] += es.tokens_embedded
        totals["seconds"] += es.seconds
    return matrix, totals


def _chunk_corpus(*, root: Path, walk_kw: dict[str, Any], extra_docs: list[Document],
                  chunker: str, window_lines: int, window_overlap: int,
                  chunk_store: Path | None, progress: bool):
    """(chunks sorted by id, walk stats, corpus fingerprint, line counts, loaded from the
    store?, time the walk ended) of ``root`` cut by ``chunker``: from the chunk store when the
    corpus is unchanged, else walked and chunked (and stored)."""
    settings = {"walk": walk_kw, "window_lines": window_lines,
                "window_overlap": window_overlap, "chunker": chunker,
                "extra_docs": corpus_fingerprint(extra_docs) if extra_docs else None}
    stored = None
    if chunk_store is not None:
        fingerprint = store.stat_fingerprint(root) if root.is_dir() else ""
        spath = store.store_path(chunk_store, root, settings)
        stored = store.load(spath, fingerprint)
    if stored is not None:
        chunks, walk_stats, corpus_fp, line_counts = stored
        return chunks, walk_stats, corpus_fp, line_counts, True, time.perf_counter()
    walked = WalkStats()
    extra_docs = drop_secret_documents(extra_docs, walked, bool(walk_kw.get("index_secrets")))
    docs = list(walk_corpus(root, stats=walked, **walk_kw)) + extra_docs
    for d in extra_docs:
        walked.by_category[d.category] += 1
    if not docs:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(walked.skipped.items()) if v)
        raise EmptyCorpusError(
            f"corpus {root} has no indexable text file (skipped: {skipped or 'nothing found'})")
    t_walk = time.perf_counter()
    shas = {d.path: hashlib.sha256(d.text.encode()).hexdigest() for d in docs}
    line_counts = {d.path: len(split_lines(d.text)) for d in docs}
    before = store.previous_build(spath) if chunk_store is not None else None
    chunks = []
    rechunked = 0
    for doc in progress_iter(docs, total=len(docs), desc="chunking", unit="file",
                             enabled=progress):
        if before is not None and before[0].get(doc.path) == shas[doc.path]:
            chunks.extend(before[1].get(doc.path, []))  # unchanged: its chunks as they were
            continue
        rechunked += 1
        chunks.extend(chunk_document(doc, window_lines=window_lines, overlap=window_overlap,
                                     chunker=chunker))
    chunks.sort(key=lambda c: c.id)
    if not chunks:
        raise EmptyCorpusError(f"corpus {root} has files but every one is blank")
    walk_stats, corpus_fp = walked.as_dict(), corpus_fingerprint(docs)
    walk_stats = {**walk_stats, "files_rechunked": rechunked}
    if chunk_store is not None:
        if before is not None:  # what changed since the previous build of this corpus
            prev = before[0]
            walk_stats.update(
                files_added=len(shas.keys() - prev.keys()),
                files_removed=len(prev.keys() - shas.keys()),
                files_changed=sum(1 for p, h in shas.items() if p in prev and prev[p] != h))
        store.save(spath, fingerprint, chunks, walk_stats, corpus_fp, shas,
                   line_counts=line_counts)
    return chunks, walk_stats, corpus_fp, line_counts, False, t_walk
