"""Golden-set miners (``rag golden mine --from SOURCE``): one module per source in this folder.

A miner's module defines ``SOURCE`` (its ``--from`` name), ``TAG`` (the tag its candidates
carry), ``NOUN`` (what ``examined`` counts: "commits"), ``SKIPS`` (every skip reason, each
counted) and ``from_args(args, *, root, max_candidates, walk, known=None) -> MineResult``
(the shared candidates format, the walker and the writer are rag/golden/mining.py's).
``known`` (None, or a candidate's ``source`` -> a skip reason or None,
:meth:`rag.golden.mining.KnownCandidates.reason`) leaves out what an earlier review decided
before ``max_candidates`` counts, each under its reason; every candidate's ``source`` names
it alone (``mined:git <sha>``, ``mined:docstring <path>#<symbol>``, ``mined:github <url>``). A new miner is one
file here plus its test: :func:`miners` imports every module of the folder, and ``--from``
offers it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType


@functools.cache
def miners() -> dict[str, ModuleType]:
    """``--from`` name -> the miner's module, every module of this package.

    Raises:
        ValueError: a module without the names above, or two miners of one source.
    """
    out: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        missing = [n for n in ("SOURCE", "TAG", "NOUN", "SKIPS", "from_args")
                   if not hasattr(module, n)]
        if missing:
            raise ValueError(f"{module.__name__}: a miner module defines SOURCE, TAG, NOUN, "
                             f"SKIPS and from_args (missing: {', '.join(missing)})")
        if module.SOURCE in out:
            raise ValueError(f"miner {module.SOURCE!r} is defined twice: in "
                             f"{out[module.SOURCE].__name__} and {module.__name__}")
        out[module.SOURCE] = module
    return out
