"""``embedder.kind=model2vec``: a static model distilled offline from the local
sentence-transformers model (:class:`rag.index.dense.Model2VecEmbedder`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag.core.errors import RunError

KIND = "model2vec"
USES_POSITIONS = False


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def check(e: Any) -> None:
    """A static model has no runtime or arithmetic to choose.

    Raises:
        ValueError: ``embedder.backend``, ``query_backend`` or ``dtype`` changed.
    """
    backend = str(_value(getattr(e, "backend", "torch")))
    dtype = str(_value(getattr(e, "dtype", "float32")))
    query = _value(getattr(e, "query_backend", None))
    query = backend if query is None else str(query)
    if backend != "torch" or dtype != "float32" or query != "torch":
        raise ValueError("embedder.kind=model2vec is a static model: embedder.backend, "
                         "embedder.query_backend and embedder.dtype keep their defaults "
                         f"(torch, torch, float32), got {backend}, {query}, {dtype}")


def load(e: Any, *, cache_dir: Path) -> Any:
    """The distilled model (cached under ``cache_dir``).

    Raises:
        RunError: ``query_backend=onnx``, or model2vec (with its ``distill`` extra) missing.
    """
    if str(_value(e.query_backend) or "torch") != "torch":
        raise RunError("embedder.query_backend=onnx needs embedder.kind="
                       "sentence_transformers (the ONNX file is that model's export)")
    from rag.index.dense import Model2VecEmbedder

    try:
        return Model2VecEmbedder(name=e.name, model_path=e.model_path, pca_dims=e.pca_dims,
                                 max_seq_length=e.max_seq_length, normalize=e.normalize,
                                 cache_dir=cache_dir)
    except ImportError as exc:
        raise RunError("embedder.kind=model2vec needs the model2vec package with its "
                       f"distill extra ({exc})") from exc
