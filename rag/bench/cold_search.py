"""Benchmark section ``cli``: a cold ``rag search`` — a new process answering one query on
the already-built index — with its default ONNX query encoder against the torch one, side by
side, alternating which runs first.

Each measurement is one ``rag search QUERY [overrides]`` child process
(:func:`rag.bench.measure.run_child`): wall time from exec to exit, peak memory, and whether
torch was imported (the process is run with ``-X importtime``, whose report names every module
imported). The index is built first (untimed) so that no measurement builds or embeds. The
goal (issue 15): at most 2 s from a cold process.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence

from rag.bench.measure import progress, ratio, run_child, summary

#: the query of the issue's check
QUERY = "how are blueprints registered"
#: the query encoders compared, label -> extra overrides
ENCODERS = {"onnx (default)": (), "torch": ("embedder.query_backend=torch",)}
GOAL_S = 2.0


def bench_cold_search(overrides: Sequence[str], scratch: Path, *, reps: int,
                      query: str = QUERY) -> dict:
    """Cold ``rag search`` wall time per query encoder.

    Returns:
        ``{"query", "reps", label: {"wall": summary (s), "peak_rss_mib": summary,
        "imports_torch": bool, "command"}, "ratio_onnx_to_torch", "goal_s", "meets_goal"}``.

    Raises:
        rag.bench.measure.ChildFailed: a search exited non-zero.
    """
    from rag.app.search_cli import read_overrides

    base = [sys.executable, "-m", "rag", "search", query, *read_overrides(list(overrides))]
    progress("cli: building the index once (untimed)")
    run_child([sys.executable, "-m", "rag", "index", *overrides],
              log=scratch / "logs" / "cli-index.log")
    out: dict = {"query": query, "reps": reps, "goal_s": GOAL_S}
    walls: dict[str, list[float]] = {k: [] for k in ENCODERS}
    peaks: dict[str, list[float]] = {k: [] for k in ENCODERS}
    torch_seen: dict[str, bool] = {k: False for k in ENCODERS}
    for r in range(reps):
        for label in (list(ENCODERS) if r % 2 == 0 else list(ENCODERS)[::-1]):
            cmd = [sys.executable, "-X", "importtime", *base[1:], *ENCODERS[label]]
            slug = re.sub(r"\W+", "_", label).strip("_")
            run = run_child(cmd, log=scratch / "logs" / f"cli-{slug}-{r}.log",
                            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
            walls[label].append(run.wall_s)
            peaks[label].append(run.max_rss_mib)
            torch_seen[label] |= bool(re.search(r"\|\s+torch$", run.log.read_text(
                errors="replace"), re.M))
            progress(f"cli: rag search ({label}) {run.wall_s:.2f} s")
    for label in ENCODERS:
        out[label] = {"wall": summary(walls[label], unit="s"),
                      "peak_rss_mib": summary(peaks[label], unit="MiB"),
                      "imports_torch": torch_seen[label],
                      "command": " ".join(["rag search", repr(query), *overrides,
                                           *ENCODERS[label]])}
    default = list(ENCODERS)[0]
    out["ratio_onnx_to_torch"] = ratio(out[default]["wall"]["median"],
                                       out["torch"]["wall"]["median"])
    out["meets_goal"] = out[default]["wall"]["median"] <= GOAL_S
    return out


def render_cold_search(r: dict) -> list[str]:
    """The section's markdown."""
    lines = ["## Cold `rag search` (`cli`)", "",
             f"`rag search {r['query']!r}` as a new process on the built index, {r['reps']} "
             "time(s) per query encoder, alternating. -X importtime tells whether torch was "
             "imported (it adds a little time to both).", "",
             "| query encoder | wall median (min-max) | peak RSS | imports torch |",
             "|---|---|---|---|"]
    for label in ENCODERS:
        v = r[label]
        w = v["wall"]
        lines.append(f"| {label} | {w['median']:.2f} s ({w['min']:.2f}-{w['max']:.2f}) | "
                     f"{v['peak_rss_mib']['median']:.0f} MiB | "
                     f"{'yes' if v['imports_torch'] else 'no'} |")
    rat = r.get("ratio_onnx_to_torch")
    lines += ["", (f"onnx / torch: {rat:.2f}x. " if rat else "")
              + f"Goal <= {r['goal_s']:.0f} s: {'met' if r['meets_goal'] else 'NOT met'}.", ""]
    return lines
