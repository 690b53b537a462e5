"""Approximate nearest-neighbour (ANN) indexes for the dense channel, with FAISS.

``dense.index`` (rag/app/config.py ``DenseConfig``) chooses how :class:`rag.index.dense.DenseChannel`
finds a query's nearest chunks:

* ``exact`` (default) — one matrix-vector product over every chunk; no ANN is built.
* ``hnsw`` — FAISS ``IndexHNSWFlat`` (Malkov & Yashunin, 2016) with inner-product metric:
  ``dense.hnsw_m`` neighbours per node, ``dense.ef_construction`` at build time,
  ``dense.ef_search`` at query time (FAISS searches with ``max(ef_search, k)``).
* ``ivf`` — FAISS ``IndexIVFFlat``: k-means into ``dense.ivf_nlist`` lists (null: about
  ``sqrt(n)``, at most ``n / 39`` so each centroid has the 39 training points FAISS asks for),
  ``dense.ivf_nprobe`` lists scanned per query.

The vectors are L2-normalised, so inner product = cosine. The ANN only chooses *which*
chunks are candidates: :class:`~rag.index.dense.DenseChannel` rescores them with a numpy
product over the candidate rows, so a candidate's score is its exact cosine (up to float32
rounding, ~1e-7: BLAS may sum a 100-row product in another order than the full one) and
``top_dense`` is the best candidate's cosine (exact's whenever the ANN finds the true
nearest chunk).

An ANN is built from the embedding matrix when the index is built (rag/app/stages.py
``build_corpus_index``) and stored in a published build as ``ann.faiss``
(``faiss.write_index``) with :meth:`AnnIndex.info` in its manifest
(rag/index/versioned.py). Every ``dense`` key — the query-time ``ef_search`` / ``ivf_nprobe``
/ ``ann_candidates`` too — is part of the index's identity (the StageCache key and the
build's recorded settings): changing one rebuilds, which is cheap at repository scale.

Memory: ``IndexHNSWFlat`` and ``IndexIVFFlat`` hold their own copy of the vectors
(n x dim x 4 bytes: 1.5 GB at 1M x 384) next to the channel's matrix, plus the HNSW graph
(about n x 2 x M x 4 bytes).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: ``dense.index`` values.
ANN_KINDS = ("exact", "hnsw", "ivf")
#: The file a published build stores the ANN in.
ANN_FILE = "ann.faiss"


class AnnUnavailableError(ImportError):
    """``dense.index`` asks for an ANN and faiss is not installed."""


def _faiss():
    import logging

    # faiss's loader logs (INFO) every SIMD module it does not ship before the one it loads
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise AnnUnavailableError("dense.index=hnsw|ivf needs faiss (pip install faiss-cpu)") from exc
    return faiss


@dataclass(frozen=True)
class AnnSettings:
    """The ``dense`` config node as plain values (see the module docstring)."""

    index: str = "exact"
    hnsw_m: int = 16
    ef_construction: int = 64
    ef_search: int = 256
    ivf_nlist: int | None = None
    ivf_nprobe: int = 32
    # chunks the ANN returns per query at least; a search that asks deeper (the pipeline's
    # candidate pool) gets more
    ann_candidates: int = 100

    @classmethod
    def from_config(cls, node: Any) -> "AnnSettings":
        """From ``cfg.dense`` (a DictConfig or a mapping); None gives the defaults."""
        if node is None:
            return cls()
        get = node.get if hasattr(node, "get") else lambda k, d=None: getattr(node, k, d)
        kind = get("index", "exact")
        nlist = get("ivf_nlist", None)
        return cls(index=str(getattr(kind, "value", kind)), hnsw_m=int(get("hnsw_m", 16)),
                   ef_construction=int(get("ef_construction", 64)),
                   ef_search=int(get("ef_search", 256)),
                   ivf_nlist=None if nlist is None else int(nlist),
                   ivf_nprobe=int(get("ivf_nprobe", 32)),
                   ann_candidates=int(get("ann_candidates", 100)))

    def validate(self) -> None:
        """Raises ValueError naming the bad ``dense.*`` key."""
        if self.index not in ANN_KINDS:
            raise ValueError(f"dense.index must be one of {list(ANN_KINDS)}, got {self.index!r}")
        for key in ("hnsw_m", "ef_construction", "ef_search", "ivf_nprobe", "ann_candidates"):
            if getattr(self, key) < 1:
                raise ValueError(f"dense.{key} must be >= 1, got {getattr(self, key)}")
        if self.ivf_nlist is not None and self.ivf_nlist < 1:
            raise ValueError(f"dense.ivf_nlist must be >= 1 or null (auto), got {self.ivf_nlist}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def auto_nlist(n: int) -> int:
    """IVF lists for ``n`` vectors when ``dense.ivf_nlist`` is null: ``round(sqrt(n))``, at
    most ``n // 39`` (FAISS warns below 39 training points per centroid), at least 1."""
    return max(1, min(int(round(math.sqrt(n))), n // 39))


class AnnIndex:
    """A FAISS index over the rows of an (n, dim) float32 L2-normalised matrix.

    Build with :meth:`build`, reload with :meth:`load`; :meth:`search` returns candidate row
    ids (no scores: the channel rescores them exactly).
    """

    def __init__(self, index: Any, settings: AnnSettings, *, build_s: float = 0.0,
                 nlist: int | None = None) -> None:
        self.index = index
        self.settings = settings
        self.build_s = build_s
        self.nlist = nlist
        self._apply_search_params()

    @property
    def kind(self) -> str:
        return self.settings.index

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _apply_search_params(self) -> None:
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = int(self.settings.ef_search)
        elif self.kind == "ivf":
            self.index.nprobe = int(min(self.settings.ivf_nprobe, self.nlist or self.index.nlist))

    @classmethod
    def build(cls, matrix: np.ndarray, settings: AnnSettings, *, seed: int = 0) -> "AnnIndex":
        """Build the ANN ``settings.index`` names over ``matrix`` (rows L2-normalised).

        Raises:
            ValueError: ``settings.index`` is ``exact`` or unknown.
        """
        settings.validate()
        faiss = _faiss()
        x = np.ascontiguousarray(matrix, dtype=np.float32)
        n, dim = x.shape
        t0 = time.perf_counter()
        nlist = None
        if settings.index == "hnsw":
            index = faiss.IndexHNSWFlat(dim, int(settings.hnsw_m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = int(settings.ef_construction)
            if n:
                index.add(x)
        elif settings.index == "ivf":
            nlist = int(settings.ivf_nlist) if settings.ivf_nlist else auto_nlist(n)
            nlist = max(1, min(nlist, max(n, 1)))
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = seed
            # k-means on at most 64 points per centroid: FAISS's default (256) makes training
            # at 1M x 384 take minutes on 2 cores, for no measurable recall here
            index.cp.max_points_per_centroid = 64
            if n:
                index.train(x)
                index.add(x)
            # the quantizer is owned by its Python object: keep it alive with the index
            # (own_fields=True would make both free it)
            index.__dict__["_quantizer"] = quantizer
        else:
            raise ValueError(f"no ANN to build for dense.index={settings.index!r}")
        return cls(index, settings, build_s=time.perf_counter() - t0, nlist=nlist)

    def search(self, qvec: np.ndarray, k: int) -> np.ndarray:
        """Row ids of (up to) ``k`` approximate nearest rows to ``qvec`` (shape (dim,)),
        best first; FAISS's ``-1`` padding removed."""
        k = int(min(max(k, 1), self.ntotal))
        if k == 0:
            return np.empty(0, dtype=np.int64)
        q = np.ascontiguousarray(qvec, dtype=np.float32).reshape(1, -1)
        _, ids = self.index.search(q, k)
        ids = ids[0]
        return ids[ids >= 0]

    def save(self, path: Path) -> None:
        """Write the index with ``faiss.write_index``."""
        _faiss().write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, settings: AnnSettings, *, nlist: int | None = None,
             build_s: float = 0.0) -> "AnnIndex":
        """Read an index :meth:`save` wrote; ``settings`` (from the build's manifest) set
        its search parameters."""
        index = _faiss().read_index(str(path))
        if settings.index == "ivf":
            nlist = int(index.nlist)
        return cls(index, settings, build_s=build_s, nlist=nlist)

    def info(self) -> dict[str, Any]:
        """What a manifest records: settings, FAISS class and version, size, build time."""
        faiss = _faiss()
        return {"file": ANN_FILE, "settings": self.settings.as_dict(),
                "faiss_class": type(self.index).__name__, "faiss_version": faiss.__version__,
                "ntotal": self.ntotal, "dim": int(self.index.d), "nlist": self.nlist,
                "build_s": round(self.build_s, 3)}


def build_ann(matrix: np.ndarray, settings: AnnSettings) -> AnnIndex | None:
    """The ANN ``settings`` asks for over ``matrix``, or None for ``exact``."""
    settings.validate()
    if settings.index == "exact":
        return None
    return AnnIndex.build(matrix, settings)


def recall_at_k(approx: list[list[int]], exact: list[list[int]], k: int = 10) -> float:
    """Mean over queries of ``|approx[:k] ∩ exact[:k]| / |exact[:k]|`` (queries with an
    empty exact list are left out; 1.0 when none is left)."""
    vals = [len(set(a[:k]) & set(e[:k])) / len(e[:k]) for a, e in zip(approx, exact) if e[:k]]
    return float(np.mean(vals)) if vals else 1.0
