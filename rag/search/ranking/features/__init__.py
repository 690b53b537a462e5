"""The ranking features' registry (:data:`FEATURES`): one module per feature, each calling
:func:`register` on import.

* ``definition`` (definition.py) — an identifier query's definition.
* ``embedded_identifier`` (embedded_identifier.py) — definitions of identifiers in prose.
* ``path_match`` (path_match.py) — query words in the file stem or its directory.
* ``file_coherence`` (file_coherence.py) — several strong chunks in one file.
* ``file_semantic`` (file_semantic.py) — the query's cosine with each candidate file's
  centroid (weight 0 by default: logged for the learned combiner and attribution).
* ``category_prior`` (category_prior.py) — tests, examples, re-exports, compat and .d.ts
  stubs demoted (documentation and config too under conf/ranking/code_only.yaml).
* ``chunk_length`` (chunk_length.py) — the chunk's length (weight 0 by default: logged for
  the learned combiner and attribution).
"""

from __future__ import annotations

from importlib import import_module

FEATURES: dict[str, object] = {}


def register(feature: object) -> object:
    """Add ``feature`` (a :class:`rag.search.ranking.feature.Feature`) under its name.

    Raises:
        ValueError: the name is taken.
    """
    name = getattr(feature, "name")
    if name in FEATURES:
        raise ValueError(f"ranking feature {name!r} is registered twice")
    FEATURES[name] = feature
    return feature


for _module in ("definition", "embedded_identifier", "path_match", "file_coherence",
                "file_semantic", "category_prior", "chunk_length"):
    import_module(f"{__name__}.{_module}")

#: every registered feature, in the order the stage applies them
FEATURE_NAMES: tuple[str, ...] = tuple(FEATURES)
