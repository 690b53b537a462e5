"""The second shipped corpus: itsdangerous 2.2.0 (sdist, fetched with pip once) and its golden
set. Select with ``pytest -m integration``."""

from __future__ import annotations

import os

import pytest

from conftest import PROJECT

pytestmark = pytest.mark.integration


def test_itsdangerous_labels_validate_against_its_corpus(compose):
    from rag.app.config import expand_path
    from rag.corpus.fetch import fetch_sdist
    from rag.eval.golden import load_golden
    from rag.index.build import build_index

    cfg = compose(["corpus=itsdangerous", "eval.golden_dir=golden/itsdangerous"])
    assert cfg.corpus.name == "itsdangerous-2.2.0"
    root = fetch_sdist(cfg.corpus.sdist, expand_path(os.environ.get("RAG_CACHE_DIR", "~/.cache/rag")))
    index = build_index(root, embedder=None, cache_dir=None, progress=False)
    golden = load_golden(PROJECT / "golden/itsdangerous", corpus_paths=index.paths,
                         corpus_symbols=index.symbols)
    assert golden.corpus == cfg.corpus.name
    assert len(golden.positives) == 24 and len(golden.negatives) == 9
    assert ("src/itsdangerous/url_safe.py", "URLSafeTimedSerializer") in index.symbols
