"""Second-stage rerankers over the top ``search.candidates`` chunks.

* :class:`LateInteractionReranker` — ColBERT-style late interaction with the bi-encoder's own
  token embeddings, no training: ``score(q, d) = (1/|q|) * sum_i max_j cos(q_i, d_j)`` over the
  query's and the chunk's token vectors (Khattab & Zaharia, "ColBERT", SIGIR 2020). Chunk token
  embeddings are cached on disk by (model id, content hash), like the dense vectors.
* :class:`CrossEncoderReranker` — a sentence-transformers ``CrossEncoder`` reads the query and
  the chunk together (Nogueira & Cho, "Passage Re-ranking with BERT", 2019). Its head emits one
  logit; the score used, recorded and thresholded is ``sigmoid(logit)``, a probability.

:func:`build_reranker` makes either from the ``rerank`` config group.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np


class RerankerError(RuntimeError):
    """The configured reranker cannot be built (missing model, wrong embedder)."""


class Reranker(Protocol):
    """Scores (query, chunk) pairs; higher is better. ``kind`` names the scorer,
    ``score_unit`` says what a score is, ``model_id`` identifies the weights."""

    kind: str
    score_unit: str
    model_id: str

    def score(self, query: str, chunks: Sequence) -> list[float]: ...

    def load(self) -> "Reranker":
        """Load whatever is loaded on first use now; returns self (RerankerError if it
        cannot be)."""
        ...


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
    """MaxSim over all-MiniLM-L6-v2 token embeddings (see module docstring).

    Args:
        embedder: the sentence-transformers embedder (``embedder.backend=torch``) whose token
            vectors are read, or a :class:`rag.index.onnx_embedder.SplitEmbedder` whose
            queries run elsewhere (ONNX, ``rag search`` and ``rag serve``'s default) and whose
            document side is that model: its torch model is then loaded on first use, once
            (:attr:`model`), beside the query encoder.
        cache_dir: where chunk token vectors are kept (one SQLite file per model id).

    The token cache is keyed by the document model's id (``documents_model_id`` of a split
    embedder), so a split embedder and the plain torch one share it.
    """

    kind = "late_interaction"
    score_unit = "maxsim: mean over query tokens of the best token cosine, in [-1, 1]"

    def __init__(self, embedder, cache_dir: Path) -> None:
        self.embedder = embedder
        self._model = None
        self._model_lock = threading.Lock()
        cache_dir.mkdir(parents=True, exist_ok=True)
        from rag.index.dense import _safe_name

        model_id = getattr(embedder, "documents_model_id", embedder.model_id) + "|token_embeddings"
        self.model_id = model_id
        # rag serve scores requests on a thread pool: one connection shared across threads,
        # every use under a lock
        self._db = sqlite3.connect(cache_dir / f"{_safe_name(model_id)}.sqlite", timeout=60,
                                   check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS tok (hash TEXT PRIMARY KEY, n INTEGER NOT NULL,"
                         " dim INTEGER NOT NULL, vec BLOB NOT NULL)")
        self._db.commit()

    @property
    def model(self):
        """The ``SentenceTransformer`` token vectors come from, loaded on first use (once,
        under a lock: requests of ``rag serve`` arrive on several threads).

        Raises:
            RerankerError: the embedder has no sentence-transformers model on torch (e.g.
                ``embedder.backend=onnx`` on both sides), or it cannot be loaded.
        """
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = _token_model(self.embedder)
        return self._model

    def load(self) -> "LateInteractionReranker":
        """Load the model now (``rag serve`` at start-up, so a bad configuration is refused
        before the first request, and the first request is not the slow one); returns self.

        Raises:
            RerankerError: see :attr:`model`.
        """
        self.model  # noqa: B018 - loads it
        return self

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        out = self.model.encode(texts, output_value="token_embeddings",
                                convert_to_numpy=False, show_progress_bar=False,
                                batch_size=16)
        return [t.detach().cpu().numpy().astype(np.float32) for t in out]

    def token_embeddings(self, chunks: Sequence) -> list[np.ndarray]:
        """Token vectors of each chunk's indexed text, from the cache or computed (float16 on
        disk)."""
        hashes = [c.content_hash for c in chunks]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(hashes), 900):
                part = hashes[start:start + 900]
                q = f"SELECT hash, n, dim, vec FROM tok WHERE hash IN ({','.join('?' * len(part))})"
                for h, n, dim, blob in self._db.execute(q, part).fetchall():
                    found[h] = np.frombuffer(blob, dtype=np.float16).reshape(n, dim).astype(np.float32)
        todo = [c for c in chunks if c.content_hash not in found]
        if todo:
            vecs = self._encode([c.indexed_text for c in todo])
            rows = []
            for c, v in zip(todo, vecs):
                found[c.content_hash] = v
                rows.append((c.content_hash, v.shape[0], v.shape[1], v.astype(np.float16).tobytes()))
            with self._lock:
                self._db.executemany("INSERT OR IGNORE INTO tok VALUES (?, ?, ?, ?)", rows)
                self._db.commit()
        return [found[h] for h in hashes]

    def score(self, query: str, chunks: Sequence) -> list[float]:
        """MaxSim score of ``query`` against each chunk."""
        qtok = self._encode([query])[0]
        return [maxsim(qtok, d) for d in self.token_embeddings(chunks)]


def _token_model(embedder):
    """The ``SentenceTransformer`` of ``embedder`` (a split embedder's document side, loaded
    now by its ``model`` property).

    Raises:
        RerankerError: there is none, or it cannot be loaded.
    """
    from sentence_transformers import SentenceTransformer

    try:
        model = getattr(embedder, "model", None)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be loaded (ModelNotFoundError, OSError)
        raise RerankerError(f"rerank.kind=late_interaction: cannot load the token encoder of "
                            f"{embedder.model_id.split('|')[0]} ({type(exc).__name__}: {exc})") from None
    if not isinstance(model, SentenceTransformer):
        raise RerankerError(_NEEDS_TRANSFORMER)
    return model


_NEEDS_TRANSFORMER = ("rerank.kind=late_interaction reads token embeddings from a "
                      "sentence-transformers model on torch: it needs embedder=minilm (or "
                      "another sentence_transformers embedder) with embedder.backend=torch; "
                      "embedder.query_backend may stay onnx")


def late_interaction_source(embedder) -> bool:
    """Whether late interaction can read token vectors from ``embedder``: a
    sentence-transformers embedder, or a split one (queries on another runtime) — whose document
    side is checked only when it is loaded (:meth:`LateInteractionReranker.load`)."""
    from rag.index.dense import SentenceTransformerEmbedder

    return isinstance(embedder, SentenceTransformerEmbedder) or \
        hasattr(embedder, "documents_model_id")


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-x))``, elementwise, overflow-safe (float64)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` with a single-logit head.

    ``predict`` is called with an identity activation so the model's raw logits come back
    whatever activation its config names; :func:`sigmoid` is then applied here, explicitly:
    ``score(q, d) = sigmoid(logit(q, d))`` in (0, 1). Pairs are truncated to ``max_length``
    tokens (query first).

    Args:
        model: a local directory or a published model name (needs a reachable hub).
        batch_size: pairs per forward pass.
        max_length: tokens per (query, chunk) pair.

    Raises:
        RerankerError: the model cannot be loaded, or its head has more than one output.
    """

    kind = "cross_encoder"
    score_unit = "probability: sigmoid(logit) of the cross-encoder's single output"

    def __init__(self, model: str, *, batch_size: int = 32, max_length: int = 256,
                 model_id: str | None = None) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        from rag.index.dense import _quiet_transformers

        _quiet_transformers()
        try:
            self.model = CrossEncoder(model, max_length=max_length, device="cpu")
        except Exception as exc:  # OSError from a missing path, hub errors offline, bad configs
            raise RerankerError(f"rerank.model={model!r}: cannot load a CrossEncoder ({exc})") from exc
        if self.model.num_labels != 1:
            raise RerankerError(f"rerank.model={model!r} has {self.model.num_labels} outputs; a "
                                "reranker needs a single-logit head (num_labels=1)")
        self._identity = torch.nn.Identity()
        self.batch_size = batch_size
        self.model_id = model_id or model

    def load(self) -> "CrossEncoderReranker":
        """Nothing to do (the model is loaded when built); returns self, as
        :meth:`LateInteractionReranker.load` does."""
        return self

    def logits(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw logits, shape (len(texts),), float64."""
        if not texts:
            return np.zeros(0)
        out = self.model.predict([(query, t) for t in texts], batch_size=self.batch_size,
                                 activation_fn=self._identity, show_progress_bar=False,
                                 convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64).reshape(-1)

    def score(self, query: str, chunks: Sequence) -> list[float]:
        """``sigmoid(logit)`` of ``query`` against each chunk's indexed text."""
        return sigmoid(self.logits(query, [c.indexed_text for c in chunks])).tolist()


def build_reranker(cfg, embedder, cache_dir: Path, *, train_if_missing: bool = True, log=None):
    """The reranker the ``rerank`` config group names, or None when ``rerank.enabled`` is false.

    ``cross_encoder`` with ``rerank.model: null`` uses the reranker ``rag reranker train``
    writes under ``cache_dir/rerankers``; if it is not there and ``train_if_missing``, it is
    trained now with ``rerank.train`` (minutes; progress to ``log``).

    Late interaction over a split embedder (``embedder.query_backend=onnx``, the default of
    ``rag search`` and ``rag serve``) reads the tokens of its document side, the torch model,
    loaded on first use; call :meth:`LateInteractionReranker.load` to load it now.

    Raises:
        RerankerError: late interaction without a transformer embedder; no trained model and
            ``train_if_missing`` false; a model that cannot be loaded.
    """
    r = cfg.rerank
    if not r.enabled:
        return None
    kind = str(getattr(r.kind, "value", r.kind))
    if kind == "late_interaction":
        if embedder is None or not late_interaction_source(embedder):
            raise RerankerError(_NEEDS_TRANSFORMER)
        return LateInteractionReranker(embedder, cache_dir / "token_embeddings")
    if r.model:
        from rag.index.dense import _dir_fingerprint

        path = Path(str(r.model)).expanduser()
        model_id = (f"{path.resolve()}@{_dir_fingerprint(path.resolve())}" if path.is_dir()
                    else str(r.model))
        return CrossEncoderReranker(str(path) if path.is_dir() else str(r.model),
                                    batch_size=r.batch_size, max_length=r.max_length,
                                    model_id=model_id)
    from rag.search import rerank_training as rt

    out = rt.default_model_dir(cache_dir, r.train)
    card = rt.read_card(out)
    if card is None:
        if not train_if_missing:
            raise RerankerError(f"no trained reranker at {out}: run `rag reranker train` first "
                                "(or set rerank.model to a CrossEncoder path or name)")
        card = rt.train_reranker(rt.TrainSettings.from_config(r.train), out, log=log)
    return CrossEncoderReranker(str(out), batch_size=r.batch_size, max_length=r.max_length,
                                model_id=f"{out.name}@{card['model_fingerprint']}")
