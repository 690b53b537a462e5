"""``rag search`` and ``rag index``: the retriever by hand, with the same config keys (and so
the same flags) that the ledger measured."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any


def compose_config(overrides: list[str]):
    """The project's Hydra config with ``overrides``, as ``python -m rag.run`` would compose it.

    Raises:
        hydra.errors.ConfigCompositionException / OmegaConf errors: a bad key or value.
    """
    from hydra import compose, initialize_config_dir

    from rag.config import project_root, register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(project_root() / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


def cli_error(exc: BaseException) -> None:
    """Turn a bad-input error — a RunError, a ValueError, or a Hydra/OmegaConf composition
    error naming the bad override — into ``SystemExit("error: ...")``; re-raise anything else."""
    from rag.run import RunError

    if isinstance(exc, (RunError, ValueError)) or type(exc).__module__.startswith(("hydra", "omegaconf")):
        raise SystemExit(f"error: {exc}") from None
    raise exc


def _load(overrides: list[str], *, publish: bool = False, strict: bool = True):
    """(cfg, index, manifest): the published index of the configured corpus.

    With ``publish`` (``rag index``) the corpus is (re)indexed and published as a new build.
    Otherwise the current build is loaded — no corpus read — and refused if its embedder or
    dimension differs from the config (with ``strict=False`` the error is returned in the
    manifest's ``refused`` field instead of raised); with no build yet, one is built and
    published first.
    """
    import logging

    from rag.config import expand_path, validate
    from rag.index import versioned
    from rag.run import RunError, corpus_root, get_embedder, get_index

    for name in ("sentence_transformers", "bm25s", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        cfg = compose_config(overrides)
        validate(cfg)
        embedder = get_embedder(cfg)
        root_dir = versioned.index_dir(expand_path(cfg.paths.cache_dir), cfg.corpus.name)
        backend = str(getattr(cfg.bm25.backend, "value", cfg.bm25.backend))
        if not publish:
            try:
                index, manifest = versioned.load_current(root_dir, embedder, bm25_backend=backend,
                                                         k1=cfg.bm25.k1, b=cfg.bm25.b)
                return cfg, index, manifest
            except versioned.NoIndexError:
                pass  # first use: build and publish below
            except versioned.IndexMismatchError as exc:
                if strict:
                    raise RunError(str(exc)) from exc
                return cfg, None, {"refused": str(exc)}
        root = corpus_root(cfg)
        index = get_index(cfg, root, embedder, progress=sys.stderr.isatty())
        versioned.publish(index, root_dir, embedder_id=embedder.model_id, dim=embedder.dim,
                          normalized=bool(cfg.embedder.normalize), corpus_root=str(root))
        return cfg, index, versioned.read_manifest(root_dir)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)


def search_command(args: Namespace) -> int:
    """Run one query and print the hits as a table or, with ``--json``, in the hit shape."""
    from rag.search.pipeline import SearchOptions, SearchPipeline

    overrides = list(args.overrides)
    if args.mode:
        overrides.append(f"search.mode={args.mode}")
    if args.top_k is not None:
        overrides.append(f"search.top_k={args.top_k}")
    if args.corpus:
        path = Path(args.corpus).expanduser().resolve()
        overrides += [f"corpus.path={path}", f"corpus.name={path.name}"]
    if not args.query.strip():
        raise SystemExit("error: empty query")
    cfg, index, manifest = _load(overrides)
    opts = SearchOptions.from_config(cfg)
    if args.types:
        opts = SearchOptions(**{**opts.__dict__, "types": tuple(args.types)})
    res = SearchPipeline(index, opts).search(args.query)
    from rag.index.versioned import age_hours

    age = age_hours(manifest)
    out: dict[str, Any] = {
        "hits": [{k: v for k, v in h.as_dict().items() if k != "score"} for h in res.hits],
        "index": {"version": manifest["build_id"], "built_at": manifest["built_at"],
                  "age_s": round(age * 3600, 1), "stale": age > cfg.index.max_age_h},
        "route": res.route, "dropped": res.dropped, "weak_match": res.weak_match,
        "top_dense": res.top_dense, "reason": res.reason,
        "timings_ms": {k: round(v, 3) for k, v in res.timings_ms.items()},
    }
    if out["index"]["stale"]:
        print(f"warning: index {manifest['build_id']} is {age:.1f} h old (index.max_age_h="
              f"{cfg.index.max_age_h}); run `rag index` to refresh it", file=sys.stderr)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"route {res.route}  dropped {res.dropped}  weak_match {res.weak_match}  "
          f"({res.timings_ms['total']:.1f} ms)")
    if res.reason:
        print(f"no hits: {res.reason}")
    fmt = lambda v, d: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    print(f"{'#':>2}  {'path:lines':48} {'symbol':32} {'category':13} {'dense':>6} {'bm25':>7} {'rrf':>7}")
    for i, h in enumerate(res.hits, 1):
        loc = f"{h.path}:{h.start_line}-{h.end_line}"
        print(f"{i:>2}  {loc[:48]:48} {(h.symbol or '')[:32]:32} {h.category:13} "
              f"{fmt(h.scores['dense'], 3):>6} {fmt(h.scores['bm25'], 2):>7} {fmt(h.scores['rrf'], 4):>7}")
    return 0


def index_command(args: Namespace) -> int:
    """Build or update the index of a corpus and print what was (re)done."""
    overrides = list(args.overrides)
    if getattr(args, "corpus", None):
        overrides.append(f"corpus={args.corpus}")
    if args.path:
        path = Path(args.path).expanduser().resolve()
        overrides += [f"corpus.path={path}", f"corpus.name={path.name}"]
    cfg, index, manifest = _load(overrides, publish=True)
    s = index.stats
    how = "unchanged since the last build: chunks loaded from the chunk store" \
        if not s.get("corpus_read") else "corpus read and chunked"
    print(f"indexed {s.get('files_indexed')} files, {s.get('chunks')} chunks ({how}); "
          f"chunks embedded: {s.get('chunks_embedded')}, from the embedding cache: "
          f"{s.get('chunks_from_cache')}")
    if s.get("corpus_read"):
        changes = s.get("files_changed")
        if changes is not None:
            print(f"files added {s.get('files_added')}, changed {changes}, "
                  f"removed {s.get('files_removed')} since the previous build; files re-chunked: "
                  f"{s.get('files_rechunked')}")
    print(f"published build {manifest['build_id']} ({manifest['embedder_id'].split('|')[0]}, "
          f"dim {manifest['dim']})")
    return 0
