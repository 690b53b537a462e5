"""``rag index --verify``: check the published builds of a corpus against their manifests —
every file's size and SHA-256, the ``.npy`` header and length against the chunk count and
dimension, the chunk count, finite embeddings and their recorded statistics, the saved BM25
matrix's chunk count (:func:`rag.index.versioned.verify_build`) — and build nothing."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path


def verify_command(args: Namespace) -> int:
    """Verify every own build of the configured corpus's index, newest first: one ``ok`` line
    on stdout per whole build, one ``error:`` line on stderr per damaged one (naming the file).

    Returns:
        :attr:`~rag.core.exit_codes.ExitCode.OK` when every build is whole,
        :attr:`~rag.core.exit_codes.ExitCode.FINDINGS` when one is damaged (or ``current``
        names a build that is gone).

    Raises:
        SystemExit (:class:`rag.app.search_cli.CliError`): a bad config, or nothing published
            for the corpus (exit 2, one line).
    """
    from rag.app.config import expand_path, validate
    from rag.app.search_cli import (_has_override, cli_error, compose_config, corpus_identity,
                                    corpus_name, fail, set_corpus_dir)
    from rag.core.exit_codes import ExitCode
    from rag.index import versioned

    overrides = list(args.overrides)
    if getattr(args, "corpus", None):
        overrides.append(f"corpus={args.corpus}")
    path = Path(args.path).expanduser().resolve() if getattr(args, "path", None) else None
    try:
        cfg = compose_config(overrides)
        if path is not None:
            set_corpus_dir(cfg, path, keep_name=_has_override(overrides, "corpus.name"))
        validate(cfg)
        identity = corpus_identity(cfg)
        source = identity.get("corpus_root") or identity["corpus_sdist"]
        root_dir = versioned.index_dir(expand_path(cfg.paths.cache_dir), corpus_name(cfg), source)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised by cli_error
        cli_error(exc)
    current = versioned.current_build_id(root_dir)
    ids = list(reversed(versioned.build_ids(root_dir)))
    if current is None and not ids:
        raise fail(f"no index published under {root_dir}; run `rag index` first")
    damaged = 0
    if current is not None and current not in ids:
        print(f"error: build {current}: `current` names {root_dir / 'builds' / current}, which "
              "is missing or has no manifest; rebuild it with `rag index`", file=sys.stderr)
        damaged += 1
    for build_id in ids:
        mark = " (current)" if build_id == current else ""
        try:
            report = versioned.verify_build(root_dir / "builds" / build_id, hashes=True)
        except versioned.DamagedBuildError as exc:
            print(f"error: {exc}{mark}; rebuild it with `rag index`", file=sys.stderr)
            damaged += 1
            continue
        how = (f"{report['files']} files, sizes and SHA-256 as recorded" if report["recorded"]
               else "checked by shape only: published before builds recorded their file sizes "
                    "and hashes (`rag index` publishes one that records them)")
        print(f"ok build {build_id}{mark}: {how}")
    return int(ExitCode.FINDINGS if damaged else ExitCode.OK)
