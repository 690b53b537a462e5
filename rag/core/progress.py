"""Progress on long steps (embedding, chunking, evaluating): a tqdm bar on a terminal, and one
plain line every ``every_s`` seconds (with counts, rate and ETA) when the output is a log file
or a pipe — so ``make run 2>&1 | cat`` and CI logs show that a 110 s embedding is moving,
without a bar's carriage-return frames. A step that ends within ``every_s`` prints nothing
off a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")

#: seconds between two progress lines off a terminal
EVERY_S = 10.0


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def plural(unit: str) -> str:
    """English plural of a counted unit: ``chunk`` -> ``chunks``, ``query`` -> ``queries``
    (a consonant before the y), ``day`` -> ``days``."""
    if len(unit) > 1 and unit.endswith("y") and unit[-2] not in "aeiou":
        return unit[:-1] + "ies"
    return unit + "s"


class LogProgress:
    """tqdm's ``update``/``close`` for a non-terminal stream: a line such as
    ``embedding: 1024/5272 chunks (19%), 48.2 chunks/s, ETA 1:28`` every ``every_s``
    seconds, and ``embedding: 5272/5272 chunks in 1:49`` at the end when any line was
    written. ``clock``: seconds (monotonic), injectable for tests."""

    def __init__(self, total: int, *, desc: str, unit: str, stream: TextIO,
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.desc, self.unit, self.stream = total, desc, unit, stream
        self.units = plural(unit)
        self.every_s, self.clock = every_s, clock
        self.n = 0
        self.start = self.last = clock()
        self.lines = 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self._line(now)

    def _line(self, now: float) -> None:
        spent = max(now - self.start, 1e-9)
        rate = self.n / spent
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = f", ETA {_clock((self.total - self.n) / rate)}" if rate > 0 and self.total else ""
        print(f"{self.desc}: {self.n}/{self.total} {self.units}{share}, {rate:.1f} "
              f"{self.units}/s{eta}", file=self.stream, flush=True)
        self.lines += 1

    def close(self) -> None:
        if self.lines:
            print(f"{self.desc}: {self.n}/{self.total} {self.units} in "
                  f"{_clock(self.clock() - self.start)}", file=self.stream, flush=True)
            self.lines = 0

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_bar(total: int, *, desc: str, unit: str, enabled: bool = True,
                 stream: TextIO | None = None) -> Any:
    """An object with ``update(n)`` and ``close()``: a tqdm bar when ``stream`` (default
    stderr) is a terminal, a :class:`LogProgress` otherwise, a disabled tqdm when not
    ``enabled`` or there is nothing to do."""
    from tqdm.auto import tqdm

    stream = stream or sys.stderr
    if not enabled or not total:
        return tqdm(total=total, disable=True)
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(total=total, desc=desc, unit=unit, file=stream)
    return LogProgress(total, desc=desc, unit=unit, stream=stream)


def progress_iter(items: Iterable[T], *, total: int, desc: str, unit: str,
                  enabled: bool = True, stream: TextIO | None = None) -> Iterator[T]:
    """``items`` with :func:`progress_bar` progress, one step per item."""
    bar = progress_bar(total, desc=desc, unit=unit, enabled=enabled, stream=stream)
    try:
        for x in items:
            yield x
            bar.update(1)
    finally:
        bar.close()
