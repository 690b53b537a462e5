"""Embedder kinds (``embedder.kind``): one module per kind in this folder.

A kind's module defines:

* ``KIND``: its name in ``embedder.kind``;
* ``load(e, *, cache_dir: Path) -> Embedder``: the embedder the ``embedder`` config node ``e``
  describes (the Protocol :class:`rag.index.dense.Embedder`: ``model_id``, ``dim``,
  ``max_seq_length``, ``embed(texts) -> float32 (n, dim)``, ``count_tokens(texts)``); raises :class:`rag.core.errors.RunError` when a package it needs is missing
  and :class:`rag.index.dense.ModelNotFoundError` when the model is;
* ``check(e) -> None``: refuse settings this kind cannot run (ValueError naming the key),
  before anything is loaded;
* ``USES_POSITIONS``: whether the model has a position limit (``max_seq_length`` is checked
  against its ``max_position_embeddings``).

A new backend (an OpenAI-compatible HTTP embedder, say) is one file here plus its test:
:func:`kinds` imports every module of the folder, ``embedder.kind`` is checked against it
(on the command line before Hydra runs, every value of a sweep too; in ``validate`` after
composition) and the configuration reference lists it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any


@functools.cache
def kinds() -> dict[str, ModuleType]:
    """``embedder.kind`` -> its module, every module of this package, by name.

    Raises:
        ValueError: a module without ``KIND``/``load``, or two modules of one kind.
    """
    out: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = getattr(module, "KIND", None)
        missing = [n for n in ("KIND", "USES_POSITIONS", "check", "load")
                   if not hasattr(module, n)]
        if missing or not isinstance(kind, str):
            raise ValueError(f"{module.__name__}: an embedder module defines KIND (a str), "
                             "USES_POSITIONS, check(e) and load(e, *, cache_dir) (missing: "
                             f"{', '.join(missing) or 'KIND is not a str'})")
        if kind in out:
            raise ValueError(f"embedder.kind {kind!r} is defined twice: in {out[kind].__name__} "
                             f"and {module.__name__}")
        out[kind] = module
    return out


def kind_of(name: str) -> ModuleType:
    """The module of ``embedder.kind`` ``name``.

    Raises:
        ValueError: no such kind (the registered ones are listed).
    """
    try:
        return kinds()[name]
    except KeyError:
        raise ValueError(f"embedder.kind={name!r}: not a registered embedder kind (one of "
                         f"{', '.join(sorted(kinds()))}; one module each in "
                         "rag/index/embedders/)") from None


def load(e: Any, *, cache_dir: Path) -> Any:
    """The embedder the ``embedder`` config node ``e`` names (see the module docstring).

    Raises:
        ValueError: unknown ``embedder.kind``; RunError / ModelNotFoundError from the kind.
    """
    return kind_of(str(getattr(e.kind, "value", e.kind))).load(e, cache_dir=cache_dir)
