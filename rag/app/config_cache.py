"""Composed configs cached by what determines them, so a cold ``rag search`` does not import
Hydra and compose the defaults list again (about 0.7 s of a 2 s budget on 2 cores).

What determines a composition (:func:`composition_key`): every file under the config
directory (path and bytes), the schema module (``rag/app/config.py``: the dataclasses and their
defaults), the versions of Hydra and OmegaConf, and the overrides, in order. The cached text
is the composed config *unresolved* (``OmegaConf.to_yaml``), so interpolations such as
``${oc.env:RAG_CACHE_DIR,...}`` are still read from the environment at use, as after a fresh
compose. On a hit the text is merged onto ``OmegaConf.structured(RagConfig)`` (so values get
the schema's types and enums) and put in struct mode, which is what Hydra's ``compose``
returns (tests/app/test_config_cache.py checks they are equal, node types included).

Overrides that reach Hydra itself (``hydra.*``, e.g. ``hydra.searchpath``, which adds config
directories this key does not hash) are never cached, nor a composition that interpolates
with Hydra's own resolvers (``${now:...}``, ``${hydra:...}``: they exist only once Hydra has
composed). An entry carries its key on its first and last line, so an entry cut short (or
empty) is composed again rather than read as a partial config. The cache lives in
``$RAG_CACHE_DIR/configs`` (default ``~/.cache/rag/configs``); a missing, unreadable or
damaged entry is composed again, and a cache that cannot be written is skipped silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Callable

#: bump when the cached text's meaning changes
CACHE_FORMAT = "1"
#: entries kept: on a miss beyond this many, the least recently written are removed
MAX_ENTRIES = 256


def cache_root() -> Path:
    """``$RAG_CACHE_DIR/configs`` (default ``~/.cache/rag/configs``): the schema's own default
    for ``paths.cache_dir``, which cannot be read from a config not yet composed."""
    return Path(os.environ.get("RAG_CACHE_DIR") or "~/.cache/rag").expanduser() / "configs"


def cacheable(overrides: list[str]) -> bool:
    """False when an override reaches Hydra's own config (``hydra.*``)."""
    return not any(o.split("=", 1)[0].lstrip("+~").startswith("hydra") for o in overrides)


def composition_key(conf_dir: Path, overrides: list[str]) -> str:
    """sha256 hex of what decides the composition of ``conf_dir`` with ``overrides`` (see the
    module docstring)."""
    import importlib.metadata

    import rag.app.config

    h = hashlib.sha256()
    h.update(json.dumps({
        "format": CACHE_FORMAT, "conf_dir": str(conf_dir.resolve()), "overrides": list(overrides),
        "hydra": importlib.metadata.version("hydra-core"),
        "omegaconf": importlib.metadata.version("omegaconf"),
    }, sort_keys=True).encode())
    import rag.core.http_contract
    import rag.search.rerank_settings

    # the schema: rag/app/config.py and the modules holding the dataclasses it is built from
    for module in (rag.app.config, rag.core.http_contract, rag.search.rerank_settings):
        h.update(Path(module.__file__).read_bytes())
    for f in sorted(p for p in conf_dir.rglob("*") if p.is_file()):
        h.update(b"\0" + str(f.relative_to(conf_dir)).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


#: the first and last line of an entry (``{key}`` filled in): an entry without both is cut
#: short or is another key's, and is composed again
HEADER = "# rag composed config {key}\n"
FOOTER = "# end {key}\n"
#: interpolations resolved by Hydra's own resolvers, which exist only after Hydra composes:
#: a composition holding one is not cached
HYDRA_RESOLVERS = ("${now:", "${hydra:")


def entry_text(key: str, cfg) -> str:
    """The cache entry for ``cfg``: :data:`HEADER`, ``OmegaConf.to_yaml(cfg)``, :data:`FOOTER`."""
    from omegaconf import OmegaConf

    return HEADER.format(key=key) + OmegaConf.to_yaml(cfg) + FOOTER.format(key=key)


def config_text(key: str, entry: str) -> str:
    """The YAML inside an entry for ``key``.

    Raises:
        ValueError: the entry is empty, cut short or another key's."""
    head, foot = HEADER.format(key=key), FOOTER.format(key=key)
    if not (entry.startswith(head) and entry.endswith(foot)) or len(entry) < len(head) + len(foot):
        raise ValueError("not a whole cache entry for this key")
    return entry[len(head):len(entry) - len(foot)]


def from_text(text: str):
    """The composed config for a cached ``text`` (``OmegaConf.to_yaml`` of one), typed by the
    schema and in struct mode, like Hydra's ``compose`` output.

    Raises:
        omegaconf errors / yaml errors: the text is not such a config.
    """
    from omegaconf import OmegaConf

    from rag.app.config import RagConfig, register_resolvers

    register_resolvers()
    loaded = OmegaConf.create(text)
    cfg = OmegaConf.merge(OmegaConf.structured(RagConfig), loaded)
    OmegaConf.set_struct(cfg, True)
    return cfg


def compose_cached(conf_dir: Path, overrides: list[str], compose: Callable[[], Any], *,
                   accept: Callable[[Any], None] | None = None):
    """The composed config of ``conf_dir`` with ``overrides``: from the cache when an entry
    for :func:`composition_key` exists, else ``compose()`` (Hydra), whose result is cached
    when ``accept(cfg)`` (e.g. the schema's validation) raises nothing — a config that is
    refused leaves nothing behind.

    Errors of ``compose()`` propagate and cache nothing."""
    if not cacheable(overrides):
        return compose()
    try:
        key = composition_key(conf_dir, overrides)
    except OSError:
        return compose()
    path = cache_root() / f"{key}.yaml"
    try:
        return from_text(config_text(key, path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - a damaged entry is composed again (and replaced)
        pass
    cfg = compose()
    try:
        if accept is not None:
            accept(cfg)
        text = entry_text(key, cfg)
    except Exception:  # noqa: BLE001 - refused here or later by the caller: never cached
        return cfg
    if any(r in text for r in HYDRA_RESOLVERS):
        return cfg
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # readers see no entry or a whole one
        _prune(path.parent)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return cfg


def _prune(root: Path, keep: int = MAX_ENTRIES) -> None:
    """Remove the oldest entries of ``root`` beyond ``keep`` (by modification time)."""
    entries = sorted(root.glob("*.yaml"), key=lambda p: p.stat().st_mtime)
    for p in entries[:max(len(entries) - keep, 0)]:
        p.unlink(missing_ok=True)
