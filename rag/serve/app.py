"""``rag serve``: the retriever over HTTP, with per-request overrides of every search flag.

* ``POST /search`` — body :class:`SearchRequest`; unknown or invalid fields get 422 naming the
  field; an empty query 422; a query over ``MAX_QUERY_CHARS`` 422.
* ``GET /health`` — the index's size, embedder and corpus fingerprint.

Service defaults come from the composed config, and the seed's environment flags map onto the
same keys as the Hydra overrides (:data:`ENV_FLAGS`). One JSON log line per request records
query *length*, flags, retrieved path/category/score and per-stage latency — never the query
text, a hash of it, chunk text or embeddings.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Literal, Optional

from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, Field

MAX_QUERY_CHARS = 2000
log = logging.getLogger("rag.serve")

# environment flag -> config key (the same keys as Hydra overrides and request fields)
ENV_FLAGS = {
    "RAG_SEARCH_MODE": "search.mode",
    "RAG_PROSE_MODE": "search.prose_mode",
    "RAG_RERANK_ENABLED": "rerank.enabled",
    "RAG_RERANK_KIND": "rerank.kind",
    "RAG_RERANK_MODEL": "rerank.model",
    "RAG_RERANK_CANDIDATES": "rerank.candidates",
    "RAG_TOP_K": "search.top_k",
    "RAG_CANDIDATES": "search.candidates",
    "RAG_MIN_DENSE_SCORE": "abstain.min_dense",
    "RAG_WEAK_DENSE_SCORE": "abstain.weak_dense",
}

Category = Literal["source", "test", "documentation", "example", "config", "other", "issue",
                   "pull_request", "cli_help"]


def env_overrides(environ: dict[str, str] | None = None) -> list[str]:
    """Hydra overrides from the seed's environment flags that are set."""
    environ = dict(os.environ if environ is None else environ)
    return [f"{key}={environ[name]}" for name, key in ENV_FLAGS.items() if environ.get(name)]


class SearchRequest(BaseModel):
    """One search; every field but ``query`` overrides the service default for this request."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    corpus: Optional[str] = None
    mode: Optional[Literal["auto", "bm25", "dense", "hybrid"]] = None
    prose_mode: Optional[Literal["dense", "hybrid"]] = None
    top_k: Optional[int] = Field(default=None, ge=1, le=200)
    candidates: Optional[int] = Field(default=None, ge=1, le=2000)
    rerank: Optional[bool] = None
    min_dense: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    weak_dense: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    types: Optional[list[Category]] = None


def create_app(cfg, index, manifest: dict | None = None):
    """A FastAPI app serving ``index`` with ``cfg``'s search flags as defaults.

    ``manifest`` is the published build's (:mod:`rag.index.versioned`); if it carries
    ``refused`` (the index's embedder or dimension differs from the config), every search is
    answered 409 naming the mismatch and nothing is scored.
    """
    from fastapi import FastAPI, HTTPException

    from rag.index.versioned import age_hours
    from rag.search.pipeline import SearchOptions, SearchPipeline

    manifest = manifest or {}
    refused = manifest.get("refused")
    defaults = SearchOptions.from_config(cfg)
    app = FastAPI(title="rag", description="Retrieval over a code repository.")

    rerankers: list = []

    def get_reranker():
        """The configured reranker (``rerank.kind``), created on first use. A cross-encoder
        is never trained inside a request: without a model, ``rag reranker train`` is named."""
        if not rerankers:
            from rag.config import expand_path
            from rag.search.rerank import RerankerError, build_reranker

            rcfg = cfg if cfg.rerank.enabled else OmegaConf.merge(cfg, {"rerank": {"enabled": True}})
            try:
                rerankers.append(build_reranker(rcfg, getattr(getattr(index, "dense", None),
                                                              "embedder", None),
                                                expand_path(cfg.paths.cache_dir),
                                                train_if_missing=False))
            except RerankerError as exc:
                raise ValueError(str(exc)) from None
        return rerankers[0]

    def index_info() -> dict:
        if "built_at" not in manifest:
            return {"version": None, "built_at": None, "age_s": None, "stale": None}
        age = age_hours(manifest)
        stale = age > cfg.index.max_age_h
        if stale:
            log.warning(json.dumps({"event": "stale_index", "version": manifest["build_id"],
                                    "age_h": round(age, 2), "max_age_h": cfg.index.max_age_h}))
        return {"version": manifest["build_id"], "built_at": manifest["built_at"],
                "age_s": round(age * 3600, 1), "stale": stale}

    @app.get("/health")
    def health() -> dict:
        if refused:
            return {"status": "refusing", "reason": refused}
        return {"status": "ok", "corpus": cfg.corpus.name, "chunks": len(index.chunks),
                "embedder": index.dense.embedder.model_id if index.dense else None,
                "corpus_fingerprint": index.corpus_fingerprint, "index": index_info()}

    @app.post("/search")
    def search(req: SearchRequest) -> dict:
        t0 = time.perf_counter()
        entry: dict = {"event": "search", "query_chars": len(req.query)}
        try:
            if refused:
                raise HTTPException(status_code=409, detail=refused)
            if not req.query.strip():
                raise HTTPException(status_code=422, detail="query: must not be blank")
            if req.corpus not in (None, cfg.corpus.name):
                raise HTTPException(status_code=404, detail=f"corpus {req.corpus!r} is not served "
                                                            f"here (this service: {cfg.corpus.name!r})")
            use_rerank = cfg.rerank.enabled if req.rerank is None else req.rerank
            reranker = None
            if use_rerank:
                try:
                    reranker = get_reranker()
                except ValueError as exc:
                    raise HTTPException(status_code=422, detail=f"rerank: {exc}") from None
            opts = SearchOptions(**{**defaults.__dict__, **{
                k: v for k, v in {"mode": req.mode, "prose_mode": req.prose_mode,
                                  "top_k": req.top_k, "candidates": req.candidates,
                                  "min_dense": req.min_dense, "weak_dense": req.weak_dense,
                                  "types": tuple(req.types) if req.types else None}.items()
                if v is not None}})
            if opts.min_dense > opts.weak_dense:
                raise HTTPException(status_code=422, detail="min_dense must be <= weak_dense")
            if opts.candidates < opts.top_k:
                raise HTTPException(status_code=422, detail="candidates must be >= top_k")
            entry.update(top_k=opts.top_k, mode=opts.mode, types=list(opts.types),
                         rerank=bool(reranker))
            res = SearchPipeline(index, opts, reranker=reranker).search(req.query)
            entry.update(route=res.route, dropped=res.dropped, weak_match=res.weak_match,
                         hits=[{"path": h.path, "category": h.category, "score": round(h.score, 4)}
                               for h in res.hits],
                         stage_ms={k: round(v, 3) for k, v in res.timings_ms.items()})
            return {"hits": [{k: v for k, v in h.as_dict().items() if k != "score"} for h in res.hits],
                    "route": res.route, "dropped": res.dropped, "weak_match": res.weak_match,
                    "reason": res.reason, "timings_ms": res.timings_ms,
                    "index": {"corpus": cfg.corpus.name, "chunks": len(index.chunks),
                              "corpus_fingerprint": index.corpus_fingerprint, **index_info()}}
        except HTTPException as exc:
            entry.update(failure_stage="validate", status=exc.status_code)
            raise
        except Exception:
            entry.update(failure_stage="search", status=500)
            raise
        finally:
            entry["total_ms"] = round((time.perf_counter() - t0) * 1000, 3)
            log.info(json.dumps(entry))

    return app


def serve(host: str, port: int, overrides: list[str]) -> int:
    """Load the index once and serve it with uvicorn (127.0.0.1 by default)."""
    import uvicorn

    from rag.search_cli import _load

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg, index, manifest = _load(env_overrides() + overrides, strict=False)
    if manifest.get("refused"):
        log.error(json.dumps({"event": "index_refused", "reason": manifest["refused"]}))
    app = create_app(cfg, index, manifest)
    # uvicorn's access log would print the request line only (no body), but keep it off:
    # our own JSON line per request is the log of record
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
    return 0
