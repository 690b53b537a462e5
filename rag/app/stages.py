"""Built pipeline stages (embedder, index, reranker) kept for reuse, in one explicit object.

A :class:`StageCache` hands out the stage a config asks for and keeps it, so the jobs of a
sweep run by Hydra's basic launcher (one process) load a model and build an index once.
Every entry is keyed by SHA-256 over the config subtrees that determine the stage (resolved,
as JSON with sorted keys), the model id it was built with and, for an index, a fingerprint of
the corpus directory's files — never a hand-picked tuple of keys, so a key added to a
subtree can never be served a stale stage:

==========  ==========================================================================
stage       determined by
==========  ==========================================================================
embedder    ``embedder`` (+ ``paths.cache_dir``: distilled models, ONNX exports)
index       ``corpus``, ``bm25``, ``index``, whether it embeds, the embedder's model id,
            ``dense`` (the ANN, rag/index/ann.py; when it embeds),
            the corpus root and its stat fingerprint (:func:`rag.index.store.stat_fingerprint`)
reranker    ``rerank`` minus the keys that only gate or size its input (thresholds,
            ``candidates``, ``enabled``), the embedder's model id, ``paths.cache_dir``
==========  ==========================================================================

``rag.app.run`` uses the process-wide :data:`STAGES`; callers that want isolation (tests, a
server) pass their own ``StageCache``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from omegaconf import DictConfig, OmegaConf

from rag.app.config import expand_path
from rag.core.errors import RunError

T = TypeVar("T")

# rerank keys that decide how the reranker is used, not which reranker is built
RERANK_USE_KEYS = ("enabled", "candidates", "min_score", "weak_score", "gate_thresholds")


def _plain(node: Any) -> Any:
    """A config node as plain JSON-able data (resolved; enums as their values)."""
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return node


def stage_key(stage: str, **determinants: Any) -> str:
    """SHA-256 hex of ``stage`` and its determinants (config subtrees, model id, ...), as JSON
    with sorted keys (non-JSON values by ``str``)."""
    blob = json.dumps({"stage": stage, **{k: _plain(v) for k, v in determinants.items()}},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class StageCache:
    """Embedders, indexes and rerankers built for configs, reused while their key matches.

    Args:
        embedder: serve this already-loaded embedder for every config (a caller that has the
            model in memory, e.g. a test session); None loads what ``cfg.embedder`` names.
    """

    def __init__(self, *, embedder: Any = None) -> None:
        self._fixed_embedder = embedder
        self._items: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Forget every built stage."""
        self._items.clear()

    def get(self, key: str, build: Callable[[], T]) -> tuple[T, bool]:
        """``(stage, reused)``: the stage stored under ``key``, else ``build()`` stored."""
        if key in self._items:
            return self._items[key], True
        value = build()
        self._items[key] = value
        return value, False

    def embedder(self, cfg: DictConfig):
        """The embedder ``cfg.embedder`` names, loaded once.

        Raises:
            RunError: the model is not installed, or model2vec lacks its ``distill`` extra.
        """
        if self._fixed_embedder is not None:
            return self._fixed_embedder
        key = stage_key("embedder", embedder=cfg.embedder, cache_dir=cfg.paths.cache_dir)
        return self.get(key, lambda: load_embedder(cfg))[0]

    def index(self, cfg: DictConfig, root: Path, embedder, *, progress: bool = True,
              with_dense: bool | None = None):
        """The index of ``root`` under ``cfg`` (built, or reused while the corpus files and
        the determining config are unchanged; a reused index says so in its stats:
        ``index_reused`` 1, nothing embedded or read).

        Args:
            with_dense: embed the chunks (None: only when a stage of the run needs the dense
                channel, :func:`rag.app.config.needs_dense`; ``rag index`` always embeds).

        Raises:
            RunError: the corpus is empty, or a GitHub export cannot be read.
        """
        from rag.app.config import needs_dense
        from rag.index.store import stat_fingerprint

        dense = needs_dense(cfg) if with_dense is None else with_dense
        key = stage_key("index", corpus=cfg.corpus, bm25=cfg.bm25, index=cfg.index,
                        dense=dense, model_id=embedder.model_id if dense else None,
                        lengths=category_lengths(cfg) if dense else None,
                        dense_index=cfg.get("dense") if dense else None,
                        root=str(root), files=stat_fingerprint(root))
        index, reused = self.get(key, lambda: build_corpus_index(
            cfg, root, embedder, dense=dense, progress=progress))
        if reused:
            index.stats = {**index.stats, "chunks_embedded": 0, "corpus_read": 0,
                           "chunks_from_cache": len(index.chunks), "index_reused": 1}
        return index

    def reranker(self, cfg: DictConfig, embedder):
        """The configured second stage, or None when ``rerank.enabled`` is false; a
        cross-encoder with ``rerank.model: null`` is trained on first use (see
        rag/search/rerank_training.py).

        Raises:
            RunError: the reranker cannot be built or trained.
        """
        if not cfg.rerank.enabled:
            return None
        built = {k: v for k, v in _plain(cfg.rerank).items() if k not in RERANK_USE_KEYS}
        key = stage_key("reranker", rerank=built, model_id=embedder.model_id,
                        cache_dir=cfg.paths.cache_dir)
        return self.get(key, lambda: load_reranker(cfg, embedder))[0]


def index_settings(cfg: DictConfig) -> dict[str, Any]:
    """Everything besides the corpus files and the embedder that decides what a built index
    holds: the ``corpus`` subtree (walk rules, chunker, windows; not its name or labels),
    BM25's tokenizer, ``index.header`` and the walk / chunker / tokenizer code versions (and
    the chunking code's own hash, :func:`rag.corpus.chunk.chunker_code`) — as
    plain JSON. A published build records it (rag/index/versioned.py); ``rag search`` and
    ``rag serve`` rebuild a build whose record differs, so an index made under other walk
    rules (e.g. before secrets were skipped) is never served."""
    import json

    from rag.corpus.chunk import CHUNKER_VERSION, chunker_code
    from rag.index.store import WALK_VERSION
    from rag.index.tokenize import TOKENIZER_VERSION

    corpus = {k: v for k, v in _plain(cfg.corpus).items() if k not in ("name", "golden_dir")}
    if corpus.get("path"):  # a directory wins: the sdist / npm it leaves set name nothing indexed
        corpus.pop("sdist", None)  # (so `rag index --path X`, which clears them, and
        corpus.pop("npm", None)  # `rag serve corpus.path=X` record one build's settings)
    bm25 = _plain(cfg.bm25)
    out = {"corpus": corpus, "bm25_tokenizer": bm25.get("tokenizer"),
           "bm25_idf": bm25.get("idf"), "bm25_path_field": bm25.get("path_field"),
           "header": str(cfg.index.header), "chunker_version": CHUNKER_VERSION,
           "chunker_code": chunker_code(), "walk_version": WALK_VERSION,
           "tokenizer_version": TOKENIZER_VERSION}
    lengths = category_lengths(cfg)
    if lengths:  # chunks embedded at other lengths: another build (none recorded: as before)
        out["max_seq_by_category"] = lengths
    dense_node = _plain(cfg.get("dense")) or {}
    if str(dense_node.get("index", "exact")) != "exact":
        # an ANN build (rag/index/ann.py) records its settings; an exact build records none,
        # so builds published before dense.index existed still match an exact request
        out["dense"] = dense_node
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def category_lengths(cfg: DictConfig) -> dict[str, int]:
    """``embedder.max_seq_by_category`` without its null entries: category -> word pieces
    (empty: every chunk at ``embedder.max_seq_length``)."""
    node = _plain(cfg.embedder).get("max_seq_by_category") or {}
    return {str(k): int(v) for k, v in node.items() if v is not None}


def load_embedder(cfg: DictConfig):
    """Load the embedder ``cfg.embedder`` names (no caching; see :meth:`StageCache.embedder`):
    ``embedder.kind``'s module of rag/index/embedders/ loads it.

    Raises:
        RunError: the model is not installed, or a package its kind needs is missing.
    """
    from rag.index.dense import ModelNotFoundError
    from rag.index.embedders import load

    try:
        return load(cfg.embedder, cache_dir=expand_path(cfg.paths.cache_dir))
    except ModelNotFoundError as exc:
        raise RunError(str(exc)) from exc


def build_corpus_index(cfg: DictConfig, root: Path, embedder, *, dense: bool,
                       progress: bool = True):
    """Build the index of ``root`` under ``cfg`` (no caching; see :meth:`StageCache.index`)."""
    from rag.corpus.walk import walk_settings
    from rag.index.build import EmptyCorpusError, build_index

    c, b = cfg.corpus, cfg.bm25
    extra = []
    if c.github_export:
        from rag.corpus.github import GitHubExportError, load_github_export

        try:
            for f in c.github_export:
                extra += load_github_export(expand_path(f, base=Path.cwd()))
        except GitHubExportError as exc:
            raise RunError(str(exc)) from exc
    try:
        index = build_index(root, embedder=embedder if dense else None, extra_docs=extra,
                            header=str(cfg.index.header),
                            cache_dir=expand_path(cfg.paths.cache_dir),
                            bm25_backend=str(getattr(b.backend, "value", b.backend)),
                            k1=b.k1, b=b.b,
                            bm25_tokenizer=str(getattr(b.tokenizer, "value", b.tokenizer)),
                            bm25_idf=str(getattr(b.idf, "value", b.idf)),
                            bm25_path_field=bool(b.path_field),
                            max_file_bytes=c.max_file_bytes, window_lines=c.window_lines,
                            window_overlap=c.window_overlap, walk=walk_settings(c),
                            chunker=str(c.chunker),
                            chunk_store=expand_path(cfg.paths.cache_dir) / "chunks",
                            max_seq_by_category=category_lengths(cfg), progress=progress)
    except EmptyCorpusError as exc:
        raise RunError(str(exc)) from exc
    index.stats["index_reused"] = 0
    if dense and index.dense is not None:  # dense.index=hnsw|ivf: the ANN over the embeddings
        from rag.index.ann import AnnSettings

        ann = AnnSettings.from_config(cfg.get("dense"))
        if ann.index != "exact":
            index.dense = index.dense.with_ann(ann)
            index.stats["ann_build_s"] = round(index.dense.ann.build_s, 3)
    index.stats["embedder_distill_s"] = round(float(getattr(embedder, "distill_s", 0.0)), 3)
    return index


def load_reranker(cfg: DictConfig, embedder):
    """Build (or train) the configured reranker (no caching; see :meth:`StageCache.reranker`)."""
    from rag.search.rerank import RerankerError, build_reranker
    from rag.search.rerank_training import TrainingDataError

    try:
        return build_reranker(cfg, embedder, expand_path(cfg.paths.cache_dir),
                              log=lambda m: print(m, file=sys.stderr, flush=True))
    except (RerankerError, TrainingDataError) as exc:
        raise RunError(str(exc)) from exc


# the process-wide cache rag.app.run, rag search and the bench use
STAGES = StageCache()
