"""rag/app/config_cache.py: a cached composition is the composition Hydra makes, keyed by what
determines it."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from conftest import PROJECT

CASES = [[], ["search.mode=bm25", "search.top_k=5"], ["corpus=zod"],
         ["embedder=minilm_seq128"], ["abstain.min_dense=0.3", "eval.min_overlap=0.5"]]


def _node_types(cfg, prefix=""):
    """{dotted key: (node class, value type)} of every node, unresolved."""
    out = {}
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    for k, _ in items:
        node = cfg._get_node(k)
        key = f"{prefix}{k}"
        out[key] = (type(node).__name__, type(node._value()).__name__)
        if isinstance(node, (DictConfig, ListConfig)) and not node._is_none() \
                and not node._is_interpolation():
            out |= _node_types(node, key + ".")
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "configs"


@pytest.mark.slow
@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o) or "defaults")
def test_a_cached_composition_equals_hydras(cache, compose, overrides):
    from rag.app.search_cli import compose_config

    fresh = compose(overrides)  # Hydra, no cache
    first = compose_config(overrides)  # a miss: composed and written
    assert len(list(cache.glob("*.yaml"))) == 1
    second = compose_config(overrides)  # a hit: read back
    for got in (first, second):
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(fresh)
        assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(fresh, resolve=True)
        assert _node_types(got) == _node_types(fresh)
        assert OmegaConf.is_struct(got)
        with pytest.raises(Exception, match="nosuch"):
            got.search.nosuch = 1  # struct mode, as Hydra's compose returns it
    assert type(second.search.mode).__name__ == "SearchMode"


def test_interpolations_are_resolved_at_use_not_when_cached(cache, monkeypatch, tmp_path):
    from rag.app.search_cli import compose_config

    compose_config([])
    cfg = compose_config([])  # read back
    assert len(list(cache.glob("*.yaml"))) == 1
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "other"))
    assert cfg.paths.cache_dir == str(tmp_path / "other")  # ${oc.env:RAG_CACHE_DIR,...} at use


def test_the_key_follows_the_config_files_the_schema_and_the_overrides(tmp_path):
    from rag.app.config_cache import composition_key

    conf = tmp_path / "conf"
    shutil.copytree(PROJECT / "conf", conf)
    base = composition_key(conf, [])
    assert composition_key(conf, []) == base
    assert composition_key(conf, ["search.top_k=5"]) != base
    assert composition_key(conf, ["search.top_k=5", "search.mode=bm25"]) != \
        composition_key(conf, ["search.mode=bm25", "search.top_k=5"])  # order decides Hydra's merge
    (conf / "search" / "new.yaml").write_text("top_k: 3\n")
    added = composition_key(conf, [])
    assert added != base
    (conf / "search" / "new.yaml").write_text("top_k: 4\n")
    assert composition_key(conf, []) not in (base, added)


def test_hydra_overrides_are_not_cached_and_a_bad_entry_is_composed_again(cache, compose):
    from rag.app.config_cache import cacheable
    from rag.app.search_cli import compose_config

    assert not cacheable(["hydra.searchpath=[file:///x]"]) and not cacheable(["+hydra.job.name=x"])
    assert cacheable(["search.top_k=3"])
    compose_config([])
    (entry,) = cache.glob("*.yaml")
    whole = entry.read_text()
    key = entry.stem
    fresh = OmegaConf.to_yaml(compose([]))
    # damaged: a bad value, empty, cut at a line break (a partial config the schema's defaults
    # would fill in), another key's entry — each is composed again and replaced
    lines = whole.splitlines(keepends=True)
    for damaged in ("search: {top_k: not-a-number}\n", "",
                    "".join(lines[:len(lines) // 2]),
                    whole.replace(key, "0" * len(key))):
        entry.write_text(damaged)
        cfg = compose_config([])
        assert OmegaConf.to_yaml(cfg) == fresh
        assert entry.read_text() == whole


def test_a_bad_override_caches_nothing_and_an_unwritable_cache_is_skipped(cache, compose,
                                                                         tmp_path, monkeypatch):
    from rag.app.search_cli import compose_config

    with pytest.raises(ValueError, match="search.top_k"):
        compose_config(["search.top_k=many"])
    assert not cache.exists() or not list(cache.glob("*.yaml"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("RAG_CACHE_DIR", str(blocker))  # configs/ cannot be made under a file
    assert OmegaConf.to_yaml(compose_config([])) == OmegaConf.to_yaml(compose([]))


def test_old_entries_are_pruned(tmp_path):
    import os

    from rag.app.config_cache import _prune

    for i in range(6):
        p = tmp_path / f"{i}.yaml"
        p.write_text("a: 1\n")
        os.utime(p, (1000 + i, 1000 + i))
    _prune(tmp_path, keep=4)
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == ["2.yaml", "3.yaml", "4.yaml", "5.yaml"]


def test_a_composition_the_schema_refuses_is_not_cached(cache):
    """corpus.name=../x composes but is refused by _load: nothing is written for it."""
    from rag.app.search_cli import compose_config

    cfg = compose_config(["corpus.name=../x"])
    assert cfg.corpus.name == "../x"
    assert not cache.exists() or not list(cache.glob("*.yaml"))


def test_hydras_own_resolvers_are_not_cached(cache, compose):
    """${now:...} exists only once Hydra has composed: such a composition is composed by Hydra
    every time (a cached one would fail to resolve in a new process)."""
    from rag.app.search_cli import compose_config

    overrides = ["corpus.exclude_extra=[build_${now:%Y}]"]
    first = compose_config(overrides)
    assert not cache.exists() or not list(cache.glob("*.yaml"))
    assert OmegaConf.to_container(compose_config(overrides).corpus, resolve=True) == \
        OmegaConf.to_container(first.corpus, resolve=True)
