"""``embedder.kind=sentence_transformers``: a transformer bi-encoder from a local directory,
run by sentence-transformers (``embedder.backend=torch``) or ONNX Runtime over its export
(``onnx``); the query side may run on the other runtime (``embedder.query_backend``), then a
:class:`rag.index.onnx_embedder.SplitEmbedder` pairs the two, keyed for builds by the document
side's id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag.core.errors import RunError

KIND = "sentence_transformers"
USES_POSITIONS = True


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def check(e: Any) -> None:
    """bfloat16 only on torch and on a CPU with native bfloat16
    (:func:`rag.index.cpu.check_dtype`); a query side on the other runtime only in float32
    (the two runtimes' int8 quantizations are different models).

    Raises:
        ValueError: naming the key (:class:`rag.index.cpu.UnsupportedDtypeError` for dtype).
    """
    from rag.index.cpu import check_dtype

    backend = str(_value(getattr(e, "backend", "torch")))
    dtype = str(_value(getattr(e, "dtype", "float32")))
    query = _value(getattr(e, "query_backend", None))
    query = backend if query is None else str(query)
    check_dtype(backend, dtype)
    if query != backend and dtype != "float32":
        raise ValueError(f"embedder.query_backend={query} with embedder.backend={backend} "
                         f"needs embedder.dtype=float32 (got {dtype}): the two runtimes' "
                         "quantized models differ, so queries and chunks would not share "
                         "one vector space")


def load(e: Any, *, cache_dir: Path) -> Any:
    """The encoder (or the query/document pair) ``e`` names.

    A query side on ONNX over the export (``embedder.onnx_path=export``) whose export is missing
    and cannot be made or written here (:class:`rag.index.onnx_embedder.ExportError`) falls
    back to the torch model, with one warning line, when the chunks are torch's.

    Raises:
        ModelNotFoundError: the model, its tokenizer or the ONNX file is missing.
        RunError: onnxruntime (or, to export once, torch and onnx) is missing; the export
            cannot be made for an ``embedder.backend=onnx`` (no fallback there).
    """
    backend = str(_value(e.backend))
    query = str(_value(e.query_backend) or backend)
    dtype = str(_value(e.dtype))
    if query == backend:
        return encoder(e, backend=backend, dtype=dtype, cache_dir=cache_dir, role="both")
    from rag.index.onnx_embedder import ExportError, SplitEmbedder, sentence_transformer_model_id

    try:
        query_side = encoder(e, backend=query, dtype=dtype, cache_dir=cache_dir, role="query")
    except ExportError as exc:
        if backend != "torch":
            raise
        import sys

        # the export cannot be made here (a full or read-only cache, no onnx): queries are
        # embedded by the torch model itself, the one the build's chunks were embedded with
        print(f"warning: {exc}; embedding queries with torch instead", file=sys.stderr)
        return encoder(e, backend="torch", dtype=dtype, cache_dir=cache_dir, role="both")
    if backend == "torch":  # loaded only when a chunk must be embedded
        doc_id = sentence_transformer_model_id(
            name=e.name, model_path=e.model_path, max_seq_length=e.max_seq_length,
            normalize=e.normalize, dtype=dtype)
        return SplitEmbedder(query_side, lambda: encoder(
            e, backend="torch", dtype=dtype, cache_dir=cache_dir, role="documents"),
            documents_model_id=doc_id)
    documents = encoder(e, backend=backend, dtype=dtype, cache_dir=cache_dir, role="documents")
    return SplitEmbedder(query_side, lambda: documents, documents_model_id=documents.model_id)


def encoder(e: Any, *, backend: str, dtype: str, cache_dir: Path, role: str) -> Any:
    """One encoder of ``embedder`` ``e`` on ``backend`` (``torch``: sentence-transformers;
    ``onnx``: ONNX Runtime over ``embedder.onnx_path``, no torch import once the export exists)
    in ``dtype``. ``role`` (``query``, ``documents`` or ``both``) sets ONNX Runtime's threads:
    one for a query encoder (a query is ~10 word pieces; idle threads would compete for the
    cores), every usable core otherwise.

    Raises:
        ModelNotFoundError: the model, its tokenizer or the ONNX file is missing.
        RunError: onnxruntime (or, to export or quantize once, torch and onnx) is missing.
    """
    from rag.index.dense import SentenceTransformerEmbedder

    if backend == "torch":
        return SentenceTransformerEmbedder(
            name=e.name, model_path=e.model_path, max_seq_length=e.max_seq_length,
            batch_size=e.batch_size, normalize=e.normalize, dtype=dtype)
    try:
        from rag.index.cpu import usable_cores
        from rag.index.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(name=e.name, model_path=e.model_path, onnx_path=e.onnx_path,
                            max_seq_length=e.max_seq_length, batch_size=e.batch_size,
                            normalize=e.normalize, cache_dir=cache_dir, dtype=dtype,
                            threads=1 if role == "query" else usable_cores())
    except ImportError as exc:
        raise RunError(f"embedder.{'query_' if role == 'query' else ''}backend=onnx needs "
                       "onnxruntime and tokenizers (and, to export the model once, torch and "
                       f"onnx): {exc}") from exc
    except ValueError as exc:  # dtype int8 with an onnx_path other than export
        raise RunError(str(exc)) from exc
