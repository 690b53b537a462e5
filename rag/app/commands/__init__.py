"""The ``rag`` subcommands, one module each (docs/architecture.md, "Where the next one goes").

A module here defines ``NAME`` (the subcommand), ``ORDER`` (its place in ``rag --help``),
``add_parser(sub)`` — which adds the subparser to ``sub`` (argparse's subparsers action) and
returns it — and ``run(args, rest, parser) -> int``, the exit status
(rag/core/exit_codes.py; ``parser``: the parser of the command as typed, whose ``error``
shows that command's usage; ``rest``: the arguments argparse did not recognise, which a command
that passes them on (``rag run``, ``rag report``) uses and the others refuse with
:func:`no_rest`). :func:`commands` lists them; rag/app/cli.py registers each, with
``set_defaults(func=run)``: no if/elif on names. A module holds the command line only; what
the command does lives in the layer it belongs to.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import pkgutil
from types import ModuleType


@functools.cache
def commands() -> tuple[ModuleType, ...]:
    """Every command module of this package, in ``ORDER``.

    Raises:
        ValueError: a module lacks one of ``NAME``, ``ORDER``, ``add_parser``, ``run``, or two
            modules declare one ``NAME``.
    """
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        missing = [a for a in ("NAME", "ORDER", "add_parser", "run") if not hasattr(module, a)]
        if missing:
            raise ValueError(f"{module.__name__}: a command module needs {', '.join(missing)}")
        found.append(module)
    names = [m.NAME for m in found]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"commands declared twice: {', '.join(dupes)}")
    return tuple(sorted(found, key=lambda m: (m.ORDER, m.NAME)))


def no_rest(rest: list[str], parser: argparse.ArgumentParser) -> None:
    """Refuse arguments argparse did not recognise (``parser.error``: exit 2)."""
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
