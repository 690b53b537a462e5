"""rag/core/progress.py: a line every 10 s off a terminal, with counts, rate and ETA worked
out by hand from a fake clock; nothing for a step that ends within 10 s; a bar on a tty."""

from __future__ import annotations

import io

from rag.core.progress import LogProgress, progress_bar, progress_iter


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_line_every_ten_seconds_then_a_last_one():
    clock, out = Clock(), io.StringIO()
    p = LogProgress(1000, desc="embedding", unit="chunk", stream=out, clock=clock)
    clock.t += 5
    p.update(100)          # 5 s: no line yet
    clock.t += 5
    p.update(100)          # 10 s, 200 done: 20 chunks/s, 800 left -> 40 s
    clock.t += 3
    p.update(50)           # 13 s: under 10 s since the last line
    clock.t += 7
    p.update(150)          # 20 s, 400 done: 20 chunks/s, 600 left -> 30 s
    clock.t += 30
    p.update(600)
    p.close()
    assert out.getvalue().splitlines() == [
        "embedding: 200/1000 chunks (20%), 20.0 chunks/s, ETA 0:40",
        "embedding: 400/1000 chunks (40%), 20.0 chunks/s, ETA 0:30",
        "embedding: 1000/1000 chunks (100%), 20.0 chunks/s, ETA 0:00",
        "embedding: 1000/1000 chunks in 0:50"]


def test_units_are_plural_in_english():
    from rag.core.progress import plural

    assert [plural(u) for u in ("chunk", "query", "file", "day", "key", "y")] == \
        ["chunks", "queries", "files", "days", "keys", "ys"]
    clock, out = Clock(), io.StringIO()
    p = LogProgress(40, desc="evaluating", unit="query", stream=out, clock=clock)
    clock.t += 10
    p.update(20)
    assert out.getvalue() == "evaluating: 20/40 queries (50%), 2.0 queries/s, ETA 0:10\n"


def test_a_quick_step_prints_nothing_and_a_tty_gets_a_bar():
    out = io.StringIO()
    assert list(progress_iter(range(5), total=5, desc="chunking", unit="file", stream=out)) == \
        [0, 1, 2, 3, 4]
    assert out.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self):
            return True

    from tqdm import tqdm

    bar = progress_bar(3, desc="x", unit="y", stream=Tty())
    assert isinstance(bar, tqdm) and not bar.disable
    bar.close()
    assert progress_bar(3, desc="x", unit="y", enabled=False).disable
    assert progress_bar(0, desc="x", unit="y").disable
