"""The TypeScript default corpus: zod 3.25.76 (npm tarball, fetched with `npm pack` once),
chunked by symbol with tree-sitter, and its golden set. Select with ``pytest -m integration``."""

from __future__ import annotations

import os
import shutil

import pytest

from rag.app.stages import StageCache

from conftest import PROJECT

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("npm") is None,
                                 reason="npm is not installed (make test installs Debian's npm)")]


@pytest.fixture(scope="module")
def zod(request):
    from hydra import compose, initialize_config_dir

    from rag.app.config import expand_path, register_configs
    from rag.corpus.fetch import fetch_npm
    from rag.corpus.walk import walk_settings
    from rag.index.build import build_index

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["corpus=zod"])
    root = fetch_npm(cfg.corpus.npm, expand_path(os.environ.get("RAG_CACHE_DIR", "~/.cache/rag")))
    index = build_index(root, embedder=None, cache_dir=None, progress=False,
                        walk=walk_settings(cfg.corpus))
    return cfg, root, index


def test_zod_is_chunked_by_symbol_and_its_labels_validate(zod):
    from rag.eval.golden import load_golden
    from rag.search.route import looks_like_symbol

    cfg, root, index = zod
    assert cfg.corpus.name == "zod-3.25.76" and cfg.eval.golden_dir == "golden/zod"
    assert (root / "src" / "v3" / "types.ts").is_file()
    s = index.stats
    # every .ts file of src/ chunked by symbol; the compiled copies left out by the corpus config
    assert s["lang/typescript/files_symbol"] >= 240 and s["lang/typescript/files_windowed"] == 0
    assert not any(p.startswith(("v3/", "v4/", "v4-mini/")) for p in index.paths)
    assert ("src/v3/types.ts", "ZodType.safeParse") in index.symbols
    golden = load_golden(PROJECT / "golden/zod", corpus_paths=index.paths,
                         corpus_symbols=index.symbols)
    pos, neg = golden.positives, golden.negatives
    assert golden.corpus == cfg.corpus.name
    assert len(pos) >= 60 and len(neg) >= 15
    assert sum("symbol" in q.tags for q in pos) >= 20
    assert sum("prose" in q.tags for q in pos) >= 30 and sum("docs" in q.tags for q in pos) >= 10
    assert all(looks_like_symbol(q.query) for q in pos if "symbol" in q.tags)


def test_zod_main_job_matches_its_expected_scores(zod, compose, embedder):
    import rag.app.run as run_mod
    from rag.eval.expected import check_expected, load_expected

    metrics = run_mod.run_job(compose(["corpus=zod", "tracking.enabled=false"]),
                              stages=StageCache(embedder=embedder))
    header, expectations = load_expected(PROJECT / "golden/zod/expected.yaml")
    assert header["overrides"] == ["corpus=zod"] and len(expectations) >= 8
    assert check_expected(metrics, expectations) == []
