"""The exit statuses of every ``rag`` command and ``python -m rag.*`` entry point — one table
(docs/cli.md "Exit codes"), so a script can tell "it ran and found something" from "it could not
run" from "it had nothing to return".

=====  ===============  ====================================================================
code   name             meaning
=====  ===============  ====================================================================
0      ``OK``           done (a check found nothing wrong)
1      ``FINDINGS``     it ran, and what it checks for was found: a regression (a gate),
                        labels that no longer resolve (``rag golden check``), a damaged
                        build (``rag index --verify``); also an unexpected internal error
                        (a bug: Python prints its traceback)
2      ``ERROR``        it could not run: a bad command line or option, an unknown config key
                        or a bad value, a bad or missing input (corpus, labels, export file,
                        calibration), a ledger store that cannot be opened; one ``error:``
                        line on stderr, no ledger row written (a gate: could not compare)
3      ``NO_RESULT``    it ran, and had nothing to return: ``rag search`` returned no hit
                        (every hit dropped by the abstention floor, a type filter that leaves
                        nothing, no lexical match)
4      ``INCONCLUSIVE`` it ran, and the evidence decides nothing: a gate whose confidence
                        interval straddles the margin (it says how many more queries would
                        decide it)
130    ``INTERRUPTED``  stopped by Ctrl-C (SIGINT), without a traceback
141    ``BROKEN_PIPE``  the reader of stdout went away (``rag search q | head -1``): the rest
                        of the output is discarded without a traceback, as 128 + SIGPIPE
=====  ===============  ====================================================================

A gate's pass / regression / could-not-compare / inconclusive are 0 / 1 / 2 / 4 in this
table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from enum import IntEnum


class ExitCode(IntEnum):
    """See the module docstring (the table is also in docs/cli.md)."""

    OK = 0
    FINDINGS = 1
    ERROR = 2
    NO_RESULT = 3
    INCONCLUSIVE = 4
    INTERRUPTED = 130
    BROKEN_PIPE = 141


def guarded(main: Callable[[], int | None]) -> int:
    """Call an entry point's ``main`` and return its exit status, handling a closed stdout
    and Ctrl-C once for every command.

    * ``BrokenPipeError`` (the reader of stdout exited, e.g. ``| head -1``) — raised while
      ``main`` prints or when its output is flushed here — becomes :attr:`ExitCode.BROKEN_PIPE`
      with no traceback: stdout is pointed at ``os.devnull`` so that the interpreter's final
      flush cannot raise again (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
    * ``KeyboardInterrupt`` becomes :attr:`ExitCode.INTERRUPTED` with one line on stderr.

    ``SystemExit`` passes through (argparse and :class:`rag.app.search_cli.CliError` use it).
    """
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe on buffered output shows up here
        return int(ExitCode.OK if code is None else code)
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # stdout is not a real file: nothing to flush at exit
        return int(ExitCode.BROKEN_PIPE)
    except KeyboardInterrupt:
        try:
            print("interrupted", file=sys.stderr)
        except OSError:
            pass
        return int(ExitCode.INTERRUPTED)
