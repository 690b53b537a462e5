"""What this CPU can do for an encoder: its instruction-set flags, whether it computes
bfloat16 natively, and an estimate of its peak fp32 FLOP rate.

Everything is read from ``/proc/cpuinfo`` (Linux); elsewhere the flags are empty (no native
bfloat16 is assumed) and the clock is unknown. Nothing here imports torch.

Peak fp32 rate (the roofline's compute ceiling, Williams, Waterman & Patterson, "Roofline",
CACM 52(4), 2009): ``cores x GHz x FLOPs per cycle per core``, where FLOPs per cycle =
FMA units x fp32 lanes per vector x 2 (a fused multiply-add is two FLOPs). Two FMA units are
assumed (every AVX2 core from Intel Haswell and AMD Zen 2 on issues two 256-bit FMAs a cycle;
Zen 1 issues one, so the estimate is then twice too high):

=================  ==============  ==================
flags              lanes (fp32)    FLOPs/cycle/core
=================  ==============  ==================
``avx512f``        16              64
``avx2`` + ``fma`` 8               32
otherwise (SSE)    4               16 (no FMA: 1 add + 1 mul port)
=================  ==============  ==================

The clock is the ``cpu MHz`` the kernel reports (its mean over the listed CPUs): under a
hypervisor that is the nominal (TSC) frequency, not the boost clock, so a core that boosts
runs faster than this estimate assumes (and achieved/peak can read above what it is).
``cores`` are the logical CPUs this process may run on (``os.sched_getaffinity``); two
hyperthreads of one physical core share its FMA units.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: /proc/cpuinfo flags that mean native bfloat16 arithmetic (x86: AVX-512 BF16, AMX-BF16;
#: ARM: the ``bf16`` feature of Armv8.6)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as far as the encoder cares.

    Attributes:
        model: ``model name`` (or ``""``).
        flags: the first CPU's ``flags`` (x86) or ``Features`` (ARM).
        mhz: mean ``cpu MHz`` over the listed CPUs, or None when not reported.
        cores: logical CPUs this process may run on.
    """

    model: str
    flags: frozenset[str]
    mhz: float | None
    cores: int

    @property
    def native_bf16(self) -> bool:
        """Whether the CPU computes bfloat16 natively (any of :data:`BF16_FLAGS`)."""
        return any(f in self.flags for f in BF16_FLAGS)

    @property
    def fp32_flops_per_cycle(self) -> int:
        """fp32 FLOPs per cycle per core (see the module docstring's table)."""
        if "avx512f" in self.flags:
            return 2 * 16 * 2
        if "avx2" in self.flags and "fma" in self.flags:
            return 2 * 8 * 2
        return 4 * 2 * 2

    @property
    def isa(self) -> str:
        """The vector instruction set the peak estimate assumes: ``avx512``, ``avx2+fma`` or
        ``sse``."""
        return {64: "avx512", 32: "avx2+fma"}.get(self.fp32_flops_per_cycle, "sse")

    def peak_gflops(self) -> float | None:
        """Estimated peak fp32 GFLOP/s of the cores this process may use:
        ``cores x GHz x FLOPs/cycle``; None when the clock is unknown."""
        if not self.mhz:
            return None
        return self.cores * self.mhz / 1000.0 * self.fp32_flops_per_cycle

    def describe(self) -> str:
        """One line: how the peak was estimated."""
        peak = self.peak_gflops()
        ghz = "unknown GHz" if not self.mhz else f"{self.mhz / 1000:.2f} GHz"
        return (f"{self.cores} cores x {ghz} (/proc/cpuinfo 'cpu MHz') x "
                f"{self.fp32_flops_per_cycle} fp32 FLOPs/cycle ({self.isa}, 2 FMA units assumed)"
                + ("" if peak is None else f" = {peak:.0f} GFLOP/s"))


def parse_cpuinfo(text: str, *, cores: int) -> CpuInfo:
    """A :class:`CpuInfo` from the text of ``/proc/cpuinfo``.

    Args:
        text: the file's content (blocks of ``key : value`` lines, one block per CPU).
        cores: the logical CPU count to record.
    """
    model, flags, mhz = "", None, []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and flags is None:
            flags = frozenset(value.split())
        elif key == "cpu MHz":
            try:
                mhz.append(float(value))
            except ValueError:
                pass
    return CpuInfo(model=model, flags=flags or frozenset(),
                   mhz=sum(mhz) / len(mhz) if mhz else None, cores=cores)


def usable_cores() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_info(path: Path = CPUINFO) -> CpuInfo:
    """This machine's :class:`CpuInfo` (empty flags and no clock when ``path`` is unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        text = ""
    return parse_cpuinfo(text, cores=usable_cores())


class UnsupportedDtypeError(ValueError):
    """``embedder.dtype`` asks for arithmetic this CPU or backend does not do natively."""


def check_dtype(backend: str, dtype: str, info: CpuInfo | None = None) -> None:
    """Refuse an ``embedder.backend`` / ``embedder.dtype`` pair that would run emulated.

    ``bfloat16`` needs native bfloat16 (:data:`BF16_FLAGS`): without it torch emulates it
    in software, measured 6x slower than float32 on the project's AVX2 machine
    (experiments/indexing.md); and ONNX Runtime's CPU provider has no bfloat16 kernels for
    this graph, so ``backend=onnx`` refuses it everywhere.

    Raises:
        UnsupportedDtypeError: one line naming the key.
    """
    if dtype != "bfloat16":
        return
    if backend == "onnx":
        raise UnsupportedDtypeError("embedder.dtype=bfloat16 needs embedder.backend=torch (ONNX "
                                    "Runtime's CPU provider runs this graph in float32 or int8)")
    info = info or cpu_info()
    if not info.native_bf16:
        raise UnsupportedDtypeError(
            "embedder.dtype=bfloat16: this CPU has no native bfloat16 (none of "
            f"{'/'.join(BF16_FLAGS)} in /proc/cpuinfo flags; {info.model or 'unknown CPU'}), so "
            "torch would emulate it about 6x slower than float32; use embedder.dtype=float32")


@dataclass(frozen=True)
class EncoderShape:
    """The sizes of a BERT-style encoder that set its arithmetic (``config.json`` of a
    Hugging Face model: ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``)."""

    layers: int
    hidden: int
    intermediate: int

    @classmethod
    def from_model_dir(cls, path: Path) -> "EncoderShape":
        """Read ``config.json`` in ``path``.

        Raises:
            FileNotFoundError: no config.json; KeyError: a size is missing from it.
        """
        import json

        c = json.loads((Path(path) / "config.json").read_text())
        return cls(layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                   intermediate=int(c["intermediate_size"]))

    def flops(self, tokens: int) -> float:
        """Forward-pass FLOPs of one text of ``tokens`` word pieces.

        Per layer and token: the Q, K, V and output projections (4 d^2 multiply-adds) and the
        feed-forward block (2 d d_ff), plus attention's scores and weighted sum (2 n d), each
        multiply-add two FLOPs: ``2 (4 d^2 + 2 d d_ff + 2 n d)``; embeddings, layer norms and
        softmax are left out (under 1% here). This is Kaplan et al.'s ``2N + 2 n_layer n_ctx
        d_attn`` per token ("Scaling Laws for Neural Language Models", 2020, Table 1) with the
        attention term counted for both of its matrix products.
        """
        d, f, n = self.hidden, self.intermediate, int(tokens)
        return float(self.layers * n * 2 * (4 * d * d + 2 * d * f + 2 * n * d))
