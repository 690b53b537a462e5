"""``rag search`` and ``rag index``: the retriever by hand, with the same config keys (and so
the same flags) that the ledger measured."""

from __future__ import annotations

import json
import re
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any


def compose_config(overrides: list[str]):
    """The project's Hydra config with ``overrides``, as ``python -m rag.run`` would compose it
    (from rag/app/config_cache.py's cache when the same composition was made before).

    Raises:
        ValueError: an override key the schema does not know (naming the closest key, as
            ``python -m rag.run`` does), or a value it cannot take.
        hydra.errors.ConfigCompositionException / OmegaConf errors: a bad value.
    """
    from rag.app.config import (check_config_files, check_override_keys, check_override_values,
                                project_root, register_configs, validate)
    from rag.app.config_cache import compose_cached

    # a folder of the user's (hydra.searchpath=...): an alias bomb there is refused, not hung
    check_config_files(list(overrides), project=False)
    check_override_keys(list(overrides))
    check_override_values(list(overrides))  # a bad value or group option: one line, exit 2
    conf = project_root() / "conf"

    def compose_with_hydra():
        from hydra import compose, initialize_config_dir

        register_configs()
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return compose("config", overrides=overrides)

    def valid(cfg) -> None:  # what _load refuses is never cached
        validate(cfg)
        corpus_name(cfg)

    return compose_cached(conf, list(overrides), compose_with_hydra, accept=valid)


def omegaconf_literal(value: str) -> str:
    """``value`` escaped so that OmegaConf reads it back verbatim: every ``${`` becomes
    ``\\${`` (and the backslashes right before it are doubled), so a directory literally
    named ``${oc.env:HOME}`` stays that name instead of being interpolated."""
    return re.sub(r"(\\*)(\$\{)", lambda m: m.group(1) * 2 + "\\${", value)


def set_corpus_dir(cfg, path: Path, *, keep_name: bool = False) -> None:
    """Point ``cfg`` (a composed config) at the directory ``path`` as data, never through the
    override grammar: ``corpus.path`` is ``path`` (escaped, see :func:`omegaconf_literal`),
    ``corpus.sdist`` and ``corpus.npm`` are cleared, and unless ``keep_name`` ``corpus.name`` is the directory's
    own name made safe (:func:`rag.core.names.safe_component` with ``encode=True``: ``flask`` stays
    ``flask``, ``a,b`` becomes ``a_b-<hash>``)."""
    from rag.core.names import safe_component

    cfg.corpus.path = omegaconf_literal(str(path))
    cfg.corpus.sdist = None
    cfg.corpus.npm = None
    if not keep_name:
        cfg.corpus.name = safe_component(path.name or "root", what="corpus.name", encode=True)


def corpus_name(cfg) -> str:
    """``corpus.name`` checked as a folder name: no interpolation (but the schema's own
    default, if it is one), no ``..``, separators, ...

    Raises:
        ValueError: naming the key and the value (see :func:`rag.core.names.safe_component`).
    """
    import dataclasses

    from omegaconf import OmegaConf

    from rag.app.config import CorpusConfig
    from rag.core.names import safe_component

    if OmegaConf.is_interpolation(cfg.corpus, "name"):
        raw = OmegaConf.to_container(cfg.corpus, resolve=False)["name"]
        default = {f.name: f.default for f in dataclasses.fields(CorpusConfig)}["name"]
        if raw != default:
            raise ValueError(f"corpus.name={raw!r} cannot be used as a folder name: it is an "
                             "interpolation (${...})")
    return safe_component(str(cfg.corpus.name), what="corpus.name")


def corpus_identity(cfg) -> dict[str, str]:
    """The manifest fields that identify the configured corpus: ``corpus_root`` (the resolved
    ``corpus.path``, as :func:`rag.app.run.corpus_root` resolves it) or ``corpus_sdist`` (the sdist
    requirement, or ``npm:NAME@VERSION`` for an npm package)."""
    from rag.app.config import expand_path

    if cfg.corpus.path:
        return {"corpus_root": str(expand_path(cfg.corpus.path, base=Path.cwd()))}
    if cfg.corpus.npm:
        return {"corpus_sdist": f"npm:{cfg.corpus.npm}"}
    return {"corpus_sdist": str(cfg.corpus.sdist)}


def _has_override(overrides: list[str], key: str) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides)


class CliError(SystemExit):
    """A bad-input failure of a ``rag`` command: its one ``error: ...`` line has been printed to
    stderr; the exit status is :attr:`rag.core.exit_codes.ExitCode.ERROR` (2, could not run).
    ``str()`` is the line."""

    def __init__(self, message: str) -> None:
        from rag.core.exit_codes import ExitCode

        super().__init__(int(ExitCode.ERROR))
        self.message = message

    def __str__(self) -> str:
        return self.message


def fail(message: str) -> CliError:
    """Print ``error: message`` to stderr and return the :class:`CliError` to raise."""
    line = f"error: {message}"
    print(line, file=sys.stderr)
    return CliError(line)


def cli_error(exc: BaseException) -> None:
    """Turn a bad-input error — a RunError, a ValueError, or a Hydra/OmegaConf composition
    error naming the bad override — into one ``error:`` line and exit status 2
    (:class:`CliError`); re-raise anything else."""
    from rag.core.errors import RunError

    if isinstance(exc, (RunError, ValueError)) or type(exc).__module__.startswith(("hydra", "omegaconf")):
        raise fail(str(exc)) from None
    raise exc


#: config keys (a group, or a dotted prefix) that ``rag search`` and ``rag serve`` never read,
#: each with what does read it; ``None`` marks a key under such a prefix that they do read. An
#: override of an unread key would change nothing, so it is refused, naming the key
#: (:func:`check_overrides`), instead of being silently ignored.
UNREAD_KEYS: dict[str, str | None] = {
    "eval": "evaluation settings, read by `python -m rag.run`",
    "tracking": "the ledger, written by `python -m rag.run`",
    "tracking.uri": None,  # where abstain.calibration is looked up
    "sweep": "sweeps, run by `python -m rag.run -m`",
    "suite": "suites, run by `python -m rag.run -m`",
    "dataset": "external datasets are converted by `python -m rag.run`; search a directory "
               "with -r DIR",
    "retriever": "what a run evaluates; this command always searches with rag's own pipeline",
    "corpus.golden_dir": "the golden set a run evaluates",
    "rerank.gate_thresholds": "thresholds a run only evaluates (its rerank_gate/* metrics)",
    "abstain.target_false_weak": "a target of the thresholds a run suggests",
    "abstain.target_dropped": "a target of the thresholds a run suggests",
}

#: what ``rag serve`` (and ``rag search`` without ``--check-links``) does not read besides: the
#: link check's settings
UNREAD_WITHOUT_LINK_CHECK: dict[str, str | None] = {
    **UNREAD_KEYS, "links": "the link check of `rag search --check-links` and of runs"}


def _unread_reason(key: str, unread: dict[str, str | None]) -> str | None:
    """Why ``key`` (dotted) is not read: the entry of its longest prefix in ``unread``."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in unread:
            return unread[prefix]
    return None


def _override_key(override: str) -> str:
    """The dotted key (or group) an override sets: ``+~`` and ``@package`` dropped."""
    return re.split(r"[=@]", override.lstrip("+~"), maxsplit=1)[0].replace("/", ".")


def read_overrides(overrides: list[str], *,
                   unread: dict[str, str | None] = UNREAD_WITHOUT_LINK_CHECK) -> list[str]:
    """The ``overrides`` ``rag search`` / ``rag serve`` read (those :func:`check_overrides`
    would not refuse by key): what a caller holding a run's overrides (the benchmark) passes
    on to them."""
    return [o for o in overrides if not _unread_reason(_override_key(o), unread)]


def check_overrides(overrides: list[str], *, command: str,
                    unread: dict[str, str | None] = UNREAD_KEYS) -> None:
    """Refuse an override ``command`` (``rag search``, ``rag serve``) would not honour: one of a
    key or a group in ``unread`` (``eval.ndcg_k=5``, ``tracking=mlflow``, ``retriever=http``),
    or a ``system=`` whose composed ``retriever.kind`` is not ``pipeline`` (``system=ripgrep``:
    a peer this command does not run).

    Raises:
        SystemExit (:class:`CliError`): one ``error:`` line naming the key (exit 2); a bad
            override as :func:`compose_config` refuses it.
    """
    for o in overrides:
        key = _override_key(o)
        reason = _unread_reason(key, unread)
        if reason:
            raise fail(f"{key}: {command} does not read it ({reason}); drop the override")
    # a system (conf/system/, a global package) may name a peer: composed only then (a
    # composition costs a cold `rag search` ~0.5 s)
    systems = [o for o in overrides if _override_key(o).split(".")[0] == "system"]
    if not systems:
        return
    try:
        cfg = compose_config(list(overrides))
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)
    kind = str(getattr(cfg.retriever.kind, "value", cfg.retriever.kind))
    if kind != "pipeline":
        raise fail(f"retriever.kind={kind} (from {' '.join(systems)}): {command} always "
                   "searches with rag's own pipeline; evaluate a peer with `python -m rag.run`")


def check_rerank_overrides(cfg, overrides: list[str], *, command: str) -> None:
    """Refuse a ``rerank.*`` override while ``rerank.enabled`` is false (``rag search``: no
    request can enable reranking later, so it would change nothing).

    Raises:
        SystemExit (:class:`CliError`): one ``error:`` line naming the key (exit 2).
    """
    if cfg.rerank.enabled:
        return
    for o in overrides:
        key = _override_key(o)
        if key.startswith("rerank.") and key != "rerank.enabled":
            raise fail(f"{key}: rerank.enabled is false, so {command} does not rerank and the "
                       "override changes nothing (add rerank.enabled=true, or choose "
                       "rerank=late_interaction / rerank=cross_encoder)")


def search_reranker(cfg, index):
    """The second stage ``cfg.rerank`` configures for ``rag search`` / ``rag serve``, loaded now
    (None when ``rerank.enabled`` is false): late interaction reads the token vectors of the
    torch model beside the ONNX query encoder (loaded here, once); a cross-encoder is never
    trained here (without a model, ``rag reranker train`` is named).

    Raises:
        SystemExit (:class:`CliError`): the reranker cannot be built or loaded, one ``error:``
            line (exit 2).
    """
    from rag.app.config import expand_path
    from rag.search.rerank import RerankerError, build_reranker

    if not cfg.rerank.enabled:
        return None
    dense = getattr(index, "dense", None)
    try:
        reranker = build_reranker(cfg, getattr(dense, "embedder", None),
                                  expand_path(cfg.paths.cache_dir), train_if_missing=False)
        load = getattr(reranker, "load", None)
        return load() if load is not None else reranker
    except RerankerError as exc:
        raise fail(str(exc)) from None


#: the query encoder ``rag search`` and ``rag serve`` use unless told otherwise: the fp32 ONNX
#: export of the torch model (the same top 8 on every Flask and zod golden query,
#: experiments/query_encoder.md), which needs no torch and embeds a query in about a third of
#: the CPU (rag serve at 8 concurrent clients: p50 41 vs 101 ms, docs/performance.md)
SERVING_QUERY_BACKEND = "onnx"


def default_query_backend(cfg, overrides: list[str], backend: str) -> None:
    """Set ``embedder.query_backend`` to ``backend`` on the composed ``cfg`` unless the
    caller chose one (an ``embedder.query_backend`` override), the embedder is not a
    sentence-transformers model, runs in another dtype than float32 (the other runtime's
    quantization is another model), or an abstention calibration is configured (its
    thresholds were fitted with the torch query encoder, and
    :func:`rag.eval.transfer.check_model` refuses them for another)."""
    from rag.ledger.calibration import AUTO

    # the shipped calibration (auto) was fitted on the fp32 model whose ONNX export this is:
    # the same vectors (experiments/query_encoder.md); another row's is checked by model id
    if _has_override(overrides, "embedder.query_backend") or (
            cfg.abstain.calibration and str(cfg.abstain.calibration) != AUTO):
        return
    if str(getattr(cfg.embedder.kind, "value", cfg.embedder.kind)) != "sentence_transformers":
        return
    if str(getattr(cfg.embedder.dtype, "value", cfg.embedder.dtype)) != "float32":
        return
    cfg.embedder.query_backend = backend


def _load(overrides: list[str], *, publish: bool = False, strict: bool = True,
          corpus_dir: Path | None = None, query_backend: str | None = None,
          force: bool = False):
    """(cfg, index, manifest): the published index of the configured corpus.

    ``corpus_dir`` (``-r DIR`` / ``--path DIR``) is set on the composed config as data
    (:func:`set_corpus_dir`); ``corpus.name`` from it unless ``overrides`` set one. The index
    lives under :func:`rag.index.versioned.index_dir` keyed by the corpus name and the resolved
    directory (or sdist), so two directories that share a name never share an index.

    With ``publish`` (``rag index``) the corpus is (re)indexed and published as a new build —
    unless the current build already holds exactly that (:func:`rag.index.versioned.
    unchanged_build`: same files, settings, embedder, BM25 and commit, verified, and not
    older than ``index.max_age_h``), when nothing is published and the manifest returned
    carries ``"unchanged": True``; ``force`` publishes anyway.
    Otherwise the current build is loaded — no corpus read — and refused if its embedder or
    dimension differs from the config (with ``strict=False`` the error is returned in the
    manifest's ``refused`` field instead of raised); with no build yet, or a build recorded
    for another corpus directory, one is built and published first.

    ``query_backend`` (``rag search``: ``onnx``) is the default ``embedder.query_backend``
    (:func:`default_query_backend`): with ``onnx`` queries are embedded by an ONNX export of
    the model (``embedder.onnx_path``, by default an fp32 export with the torch model's
    vectors) and torch is never imported unless chunks must be embedded or the export made
    (a build); the build's chunk embeddings are the torch model's either way.
    """
    import logging

    from rag.app.config import expand_path, validate
    from rag.index import versioned
    from rag.corpus.fetch import corpus_root
    from rag.core.errors import RunError
    from rag.app.stages import STAGES, index_settings

    for name in ("sentence_transformers", "bm25s", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        cfg = compose_config(overrides)
        if corpus_dir is not None:
            set_corpus_dir(cfg, corpus_dir, keep_name=_has_override(overrides, "corpus.name"))
        if query_backend is not None:
            default_query_backend(cfg, overrides, query_backend)
        validate(cfg)
        name = corpus_name(cfg)  # refused before anything is created
        identity = corpus_identity(cfg)
        source = identity.get("corpus_root") or identity["corpus_sdist"]
        root_dir = versioned.index_dir(expand_path(cfg.paths.cache_dir), name, source)
        embedder = STAGES.embedder(cfg)
        backend = str(getattr(cfg.bm25.backend, "value", cfg.bm25.backend))
        if not publish:
            try:
                index, manifest = versioned.load_current(root_dir, embedder, bm25_backend=backend,
                                                         k1=cfg.bm25.k1, b=cfg.bm25.b,
                                                         expect=identity)
                # a link template decides no index content: applied at answer time instead
                changed = [c for c in versioned.settings_changes(manifest, index_settings(cfg))
                           if c != "corpus.url_template"]
                if not changed:
                    return cfg, index, manifest
                # walk rules, chunker, tokenizer or header differ: never serve it
                same = _overrides_of_build(manifest, changed)
                print(f"warning: the published build {manifest.get('build_id')} was made with "
                      f"other settings ({', '.join(changed)}); rebuilding it"
                      + (f" (to search that build instead, add {' '.join(same)})"
                         if same else ""), file=sys.stderr)
            except versioned.NoIndexError:
                pass  # first use: build and publish below
            except versioned.CorpusMismatchError as exc:
                print(f"warning: {exc}; rebuilding it for this corpus", file=sys.stderr)
            except versioned.IndexMismatchError as exc:
                if strict:
                    raise RunError(str(exc)) from exc
                return cfg, None, {"refused": str(exc)}
        root = corpus_root(cfg)
        # a bar on a terminal, a line every 10 s otherwise (rag/core/progress.py)
        index = STAGES.index(cfg, root, embedder, progress=True, with_dense=True)
        from rag.core.trace_links import resolve_source

        # the commit its hits' links are pinned to, resolved once for this build
        source = resolve_source(root, url_template=cfg.corpus.url_template or None)
        # the chunks' model (a split embedder's queries use an encoder declared compatible)
        record = dict(embedder_id=getattr(embedder, "documents_model_id", embedder.model_id),
                      dim=embedder.dim, normalized=bool(cfg.embedder.normalize),
                      corpus_root=str(root), corpus_sdist=identity.get("corpus_sdist"),
                      settings=index_settings(cfg), source=source.as_dict())
        if not force and (same := versioned.unchanged_build(
                root_dir, index, max_age_h=float(cfg.index.max_age_h), **record)):
            return cfg, index, {**same, "unchanged": True}
        versioned.publish(index, root_dir, **record)
        return cfg, index, versioned.read_manifest(root_dir)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)


def calibration_model_id(embedder: Any) -> str:
    """The model id a calibration is matched against for this query embedder: the document
    model's id when queries are embedded by the fp32 ONNX export of that same model (the same
    cosines to 1e-4: experiments/query_encoder.md), so the calibration fitted with the torch
    model applies to `rag search` and `rag serve` as it does to the ledger's rows; the
    embedder's own id otherwise (another runtime's quantisation is another model)."""
    own = str(getattr(embedder, "model_id", ""))
    docs = getattr(embedder, "documents_model_id", None)
    return str(docs) if docs and "onnx(export-fp32:" in own else own


def search_abstention(cfg, index, *, has_reranker: bool = False):
    """(search options, learned gate or None): the config's search flags with the abstention
    that ``abstain.signal`` / ``abstain.calibration`` ask for — the same setup the ledger's run
    uses (:func:`rag.eval.transfer.abstention_setup`), so `rag search` and `rag serve` abstain as the
    measured row did. ``has_reranker``: a second stage runs (a learned gate may read it).

    Raises:
        SystemExit (:class:`CliError`): the calibration cannot be read or applied.
    """
    from rag.app.config import ledger_uri
    from rag.core.errors import RunError
    from rag.eval.transfer import abstention_setup
    from rag.search.pipeline import SearchOptions

    try:
        from rag.eval.transfer import TransferError
        from rag.ledger.calibration import resolve_calibration

        dense = getattr(index, "dense", None)
        model_id = calibration_model_id(dense.embedder) if dense is not None else ""
        try:
            cal = resolve_calibration(cfg.abstain.calibration, ledger_uri(cfg), model_id)
        except TransferError as exc:
            raise RunError(str(exc)) from None
        from rag.ledger.calibration import AUTO

        if (cal is None and dense is not None and str(cfg.abstain.calibration) == AUTO
                and cfg.abstain.min_dense is None and cfg.abstain.weak_dense is None):
            print(f"note: no abstention calibration ships for {model_id.split('|')[0]} "
                  "(models/abstention/): the seed's bands 0.45 / 0.55 apply; give "
                  "abstain.calibration=<row> or the bands (docs/configuration.md)",
                  file=sys.stderr)
        options, gate, _ = abstention_setup(
            cfg, SearchOptions.from_config(cfg), cal, model_id=model_id,
            golden_fingerprint="", has_reranker=has_reranker, has_dense=dense is not None,
            has_lexical=getattr(index, "bm25", None) is not None)
        return options, gate
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)


def link_source(cfg, manifest: dict[str, Any]):
    """The :class:`rag.core.trace_links.SourceRef` a build's hits link with: the commit its manifest
    recorded (``source``) and ``corpus.url_template`` if set, else the recorded template."""
    from rag.core.trace_links import SourceRef

    return SourceRef.from_dict(manifest.get("source")).with_template(cfg.corpus.url_template)


def index_info(manifest: dict[str, Any], *, max_age_h: float, now: float | None = None) -> dict:
    """What a search answer says about the build that served it: ``version``, ``built_at``
    (epoch seconds), ``age_s``, ``stale`` (older than ``max_age_h`` hours, ``index.max_age_h``:
    still served, flagged) and the ``commit`` / ``dirty`` its links are pinned to. ``now``:
    epoch seconds (default: the clock). All None for a manifest without a build time."""
    from rag.index.versioned import age_hours

    src = manifest.get("source") or {}
    if "built_at" not in manifest:
        return {"build_id": manifest.get("build_id"), "version": None, "built_at": None,
                "age_s": None, "stale": None, "commit": None, "dirty": None}
    age = age_hours(manifest, now)
    return {"build_id": manifest["build_id"], "version": manifest["build_id"],
            "built_at": manifest["built_at"],
            "age_s": round(age * 3600, 1), "stale": age > float(max_age_h),
            "commit": src.get("commit"), "dirty": src.get("dirty")}


def hit_dicts(hits, source) -> list[dict[str, Any]]:
    """The hits as they are answered (``rag search --json``, ``rag serve``): the seed's hit
    shape without ``score``, plus ``url`` (:func:`rag.core.trace_links.hit_url`; None when it has
    none)."""
    from rag.core.trace_links import hit_url

    return [{**{k: v for k, v in h.as_dict().items() if k != "score"}, "url": hit_url(h, source)}
            for h in hits]


def top_k_overrides(overrides: list[str], top_k: int) -> list[str]:
    """The overrides ``--top-k N`` stands for: ``search.top_k=N``, and the candidate pools
    that must hold N (``search.candidates``, and ``rerank.candidates`` when a reranker runs)
    raised to N where the composed config has fewer and ``overrides`` does not set them."""
    out = [f"search.top_k={top_k}"]
    pools = [k for k in ("search.candidates", "rerank.candidates")
             if not _has_override(overrides, k)]
    if not pools or top_k < 1:
        return out
    try:
        cfg = compose_config([o for o in overrides if not _has_override([o], "search.top_k")])
    except Exception:  # noqa: BLE001 - a bad override is reported by the load that follows
        return out
    if "search.candidates" in pools and top_k > cfg.search.candidates:
        out.append(f"search.candidates={top_k}")
    if "rerank.candidates" in pools and cfg.rerank.enabled and top_k > cfg.rerank.candidates:
        out.append(f"rerank.candidates={top_k}")
    return out


def search_command(args: Namespace, *, now: float | None = None) -> int:
    """Run one query and print the hits as a table or, with ``--json``, in the hit shape.

    ``--check-links`` sends bounded HEAD requests to the URLs of the first ``links.top_n``
    hits (rag/core/trace_links.py) and reports them (``links`` in the JSON); it never changes the
    exit status. ``now`` (epoch seconds) is the clock the index's age is read with.

    Returns:
        :attr:`~rag.core.exit_codes.ExitCode.OK` when hits were returned or abstention dropped them
        (an answer: nothing here is relevant enough), :attr:`~rag.core.exit_codes.ExitCode.NO_RESULT`
        when nothing was ranked at all (no lexical match, a type filter that leaves nothing).
    """
    from rag.core.exit_codes import ExitCode
    from rag.search.pipeline import SearchOptions, SearchPipeline

    overrides = list(args.overrides)
    if args.mode:
        overrides.append(f"search.mode={args.mode}")
    if args.top_k is not None:
        overrides += top_k_overrides(overrides, args.top_k)
    path = Path(args.corpus).expanduser().resolve() if args.corpus else None
    if not args.query.strip():
        raise fail("empty query")
    check_links = bool(getattr(args, "check_links", False))
    check_overrides(overrides, command="rag search",
                    unread=UNREAD_KEYS if check_links else UNREAD_WITHOUT_LINK_CHECK)
    cfg, index, manifest = _load(overrides, corpus_dir=path, query_backend=SERVING_QUERY_BACKEND)
    check_rerank_overrides(cfg, overrides, command="rag search")
    reranker = search_reranker(cfg, index)
    opts, gate = search_abstention(cfg, index, has_reranker=reranker is not None)
    if args.types:
        opts = SearchOptions(**{**opts.__dict__, "types": tuple(args.types)})
    res = SearchPipeline(index, opts, reranker=reranker, gate=gate).search(args.query)
    source = link_source(cfg, manifest)
    info = index_info(manifest, max_age_h=cfg.index.max_age_h, now=now)
    out: dict[str, Any] = {
        "hits": hit_dicts(res.hits, source),
        "index": info,
        "route": res.route, "dropped": res.dropped, "weak_match": res.weak_match,
        "top_dense": res.top_dense, "reason": res.reason,
        "timings_ms": {k: round(v, 3) for k, v in res.timings_ms.items()},
    }
    if info["stale"]:
        print(f"warning: index {info['version']} is {info['age_s'] / 3600:.1f} h old "
              f"(index.max_age_h={cfg.index.max_age_h:g}); still served, flagged stale: true; "
              "run `rag index` to refresh it", file=sys.stderr)
    report = None
    if check_links:
        from rag.core.trace_links import check_from_config

        top = out["hits"][:int(cfg.links.top_n)]
        report = check_from_config(list(dict.fromkeys(h["url"] for h in top if h["url"])),
                                   cfg.links)
        out["links"] = report.as_dict()
    _print_result(res, out, as_json=args.json)  # a closed stdout: rag.core.exit_codes.guarded
    if report is not None and not args.json:
        print("\n".join(report.lines()))
    return int(ExitCode.NO_RESULT if not res.hits and not res.dropped else ExitCode.OK)


def _overrides_of_build(manifest: dict[str, Any], changed: list[str]) -> list[str]:
    """``KEY=VALUE`` overrides that would reproduce a published build's settings, for each
    changed setting that is a config key with a plain value (``corpus.content=code`` for a
    build of ``dataset=semble``'s code-only corpus); empty when any changed setting is not
    one (then no override list would give that build)."""
    built = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    out = []
    for name in changed:
        group, _, key = name.partition(".")
        value = built.get(group, {}).get(key) if key and isinstance(built.get(group), dict) \
            else None
        if value is None or not isinstance(value, (str, int, float, bool)) \
                or isinstance(value, str) and (not value or any(c in value for c in " ,=[]{}'\"")):
            return []
        out.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def _print_result(res, out: dict[str, Any], *, as_json: bool) -> None:
    """The result as JSON, or as a table (no table when nothing was returned); each hit's URL,
    when it has one, on the line below it."""
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"route {res.route}  dropped {res.dropped}  weak_match {res.weak_match}  "
          f"({res.timings_ms['total']:.1f} ms)")
    if not res.hits:
        print(f"no hits: {res.reason or 'nothing retrieved'}")
        return
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    # a column per stage that scored any hit (every registered channel, rrf, rerank)
    stages = [s for s in dict.fromkeys(k for h in res.hits for k in h.scores)
              if any(h.scores.get(s) is not None for h in res.hits)]
    locs = [f"{h.path}:{h.start_line}-{h.end_line}" for h in res.hits]
    # columns as wide as their longest value, within a bound; a longer value keeps its end
    # (the file name and lines, the method name), which tells hits apart
    wl = min(max(len("path:lines"), *map(len, locs)), 72)
    ws = min(max(len("symbol"), *(len(h.symbol or "") for h in res.hits)), 40)
    tail = lambda v, w: v if len(v) <= w else "…" + v[len(v) - w + 1:]  # noqa: E731
    print(f"{'#':>2}  {'path:lines':{wl}} {'symbol':{ws}} {'category':13} "
          + " ".join(f"{s:>{max(7, len(s))}}" for s in stages))
    for i, (h, d, loc) in enumerate(zip(res.hits, out["hits"], locs), 1):
        print(f"{i:>2}  {tail(loc, wl):{wl}} {tail(h.symbol or '', ws):{ws}} {h.category:13} "
              + " ".join(f"{fmt(h.scores.get(s)):>{max(7, len(s))}}" for s in stages))
        if d.get("url"):
            print(f"    {d['url']}")


def index_command(args: Namespace) -> int:
    """Build or update the index of a corpus and print what was (re)done."""
    overrides = list(args.overrides)
    if getattr(args, "corpus", None):
        overrides.append(f"corpus={args.corpus}")
    path = Path(args.path).expanduser().resolve() if args.path else None
    cfg, index, manifest = _load(overrides, publish=True, corpus_dir=path,
                                 force=bool(getattr(args, "force", False)))
    s = index.stats
    how = "unchanged since the last build: chunks loaded from the chunk store" \
        if not s.get("corpus_read") else "corpus read and chunked"
    from rag.corpus.languages import describe_languages

    print(f"indexed {s.get('files_indexed')} files, {s.get('chunks')} chunks ({how}); "
          f"chunks embedded: {s.get('chunks_embedded')}, from the embedding cache: "
          f"{s.get('chunks_from_cache')}; truncated at {cfg.embedder.max_seq_length} word "
          f"pieces: {100 * float(s.get('chunks_truncated_share', 0)):.1f}%")
    if (langs := describe_languages(s)) is not None:
        print(langs)
    from rag.corpus.walk import describe_redactions

    if (redacted := describe_redactions(s)) is not None:
        print(redacted)
    if s.get("corpus_read"):
        changes = s.get("files_changed")
        if changes is not None:
            print(f"files added {s.get('files_added')}, changed {changes}, "
                  f"removed {s.get('files_removed')} since the previous build; files re-chunked: "
                  f"{s.get('files_rechunked')}")
    model = f"{manifest['embedder_id'].split('|')[0]}, dim {manifest['dim']}"
    if manifest.get("unchanged"):
        print(f"nothing changed since build {manifest['build_id']} ({model}: same files, "
              "settings, embedder, BM25 and commit, verified, younger than index.max_age_h): "
              "it stays current, nothing published (--force publishes a new build)")
    else:
        print(f"published build {manifest['build_id']} ({model})")
    _prepare_query_encoder(cfg)
    return 0


def _prepare_query_encoder(cfg) -> None:
    """Make the ONNX export `rag search` embeds queries with (``embedder.onnx_path=export``)
    now, while torch is loaded anyway, so that no later query imports it. Best effort: a
    failure is a warning (`rag search` would then try again)."""
    e = cfg.embedder
    if str(getattr(e.kind, "value", e.kind)) != "sentence_transformers" or e.onnx_path != "export":
        return
    try:
        from rag.app.config import expand_path
        from rag.index.onnx_embedder import resolve_onnx_path

        resolve_onnx_path(e.onnx_path, model_path=e.model_path,
                          cache_dir=expand_path(cfg.paths.cache_dir))
    except Exception as exc:  # noqa: BLE001 - optional speed-up, reported
        print(f"warning: could not export the query encoder to ONNX ({type(exc).__name__}: "
              f"{exc}); `rag search` will embed queries with torch or export it then",
              file=sys.stderr)
