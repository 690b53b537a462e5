"""Timing helpers shared by the benchmark sections: summaries of repeated measurements, the
machine and library versions, child processes with their peak memory.

Every figure the benchmark reports is a :func:`summary` of repeated measurements: the median,
with the minimum and maximum (and the count), never a single number on its own.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

#: Distributions whose versions the report lists (``importlib.metadata`` names).
LIBRARIES = ("numpy", "scipy", "torch", "sentence-transformers", "transformers", "bm25s",
             "rank-bm25", "pytrec-eval-terrier", "ranx", "numba", "threadpoolctl", "mlflow",
             "hydra-core", "fastapi", "uvicorn")


def summary(values: Sequence[float], *, unit: str, p95: bool = False) -> dict:
    """Median, min, max and count of repeated measurements (optionally the 95th percentile,
    numpy's linear interpolation).

    Args:
        values: one number per measurement, in ``unit``.
        unit: e.g. ``"ms"``, ``"s"``, ``"chunks/s"``.

    Raises:
        ValueError: no measurement.
    """
    if len(values) == 0:
        raise ValueError("summary of no measurement")
    arr = np.asarray(values, dtype=float)
    out = {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max()),
           "n": int(arr.size), "unit": unit}
    if p95:
        out["p95"] = float(np.percentile(arr, 95))
    return out


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, None when the denominator is 0 or missing."""
    if not denominator or numerator is None:
        return None
    return float(numerator) / float(denominator)


def spread(items: Sequence, k: int | None) -> list:
    """``k`` items spread evenly over ``items`` (first and last included); all of them when
    ``k`` is None or not smaller than ``len(items)``."""
    items = list(items)
    if k is None or k >= len(items):
        return items
    idx = np.linspace(0, len(items) - 1, k).round().astype(int)
    return [items[i] for i in idx]


def ms_since(t0: float) -> float:
    """Milliseconds elapsed since ``t0`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - t0) * 1000.0


def time_calls(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall time of ``repeats`` calls of ``fn``, in seconds each."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def library_versions() -> dict[str, str]:
    """Installed version of each of :data:`LIBRARIES` ("not installed" when absent)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine() -> dict:
    """Core count, CPU model, memory, Python, platform, load average and the UTC time."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    try:
        torch_threads = __import__("torch").get_num_threads()
    except ImportError:
        torch_threads = None
    return {"cores": os.cpu_count(), "cpu": cpu,
            "memory_gib": round(mem_gib, 1) if mem_gib else None,
            "python": platform.python_version(), "platform": platform.platform(),
            "torch_threads": torch_threads, "load_average_start": _load(),
            "cpu_pressure_start": cpu_pressure(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (another process on the cores shows here)."""
    return _load()


def cpu_pressure() -> dict[str, float] | None:
    """Linux pressure stall information for the CPU (``/proc/pressure/cpu``, "some" line):
    the share of the last 10/60/300 s in which some runnable task waited for a core, in %.
    Near 0 on an idle machine; tens of % while another workload shares the cores."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    return {k: float(fields[k]) for k in ("avg10", "avg60", "avg300") if k in fields}


def progress(msg: str) -> None:
    """One progress line on stderr, with the elapsed time since the benchmark started."""
    print(f"[bench {time.perf_counter() - _T0:6.0f} s] {msg}", file=sys.stderr, flush=True)


_T0 = time.perf_counter()


@dataclass
class ChildRun:
    """One finished child process: wall time, peak memory and exit status."""

    wall_s: float
    max_rss_mib: float
    returncode: int
    log: Path


class ChildFailed(RuntimeError):
    """A benchmarked command exited non-zero (the message ends with its log's tail)."""


def _vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set size of a running process since its last exec (Linux ``VmHWM``)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_child(cmd: list[str], *, log: Path, env: dict[str, str] | None = None,
              timeout_s: float = 1800.0) -> ChildRun:
    """Run ``cmd`` to completion, output to ``log``; measure its wall time and peak memory.

    The peak is the child's ``VmHWM`` (peak resident set size since its exec, Linux), read
    every 50 ms until it exits. ``wait4``'s ``ru_maxrss`` is not used on Linux: it counts the
    forked copy of this (large) benchmark process before the exec. Elsewhere it is the
    fallback.

    Raises:
        ChildFailed: non-zero exit, or still running after ``timeout_s`` (then killed).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    peak_kib = 0
    with open(log, "w") as fh:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        deadline = t0 + timeout_s
        while True:
            hwm = _vm_hwm_kib(proc.pid)
            if hwm:
                peak_kib = max(peak_kib, hwm)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, 9)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if not peak_kib:
        peak_kib = usage.ru_maxrss if sys.platform != "darwin" else usage.ru_maxrss / 1024
    run = ChildRun(wall_s=wall, max_rss_mib=peak_kib / 1024.0, returncode=proc.returncode, log=log)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise ChildFailed(f"{' '.join(cmd[:6])} ... exited {proc.returncode} after {wall:.0f} s "
                          f"(log {log}):\n{tail}")
    return run
