"""Benchmark section ``dtype``: every embedding backend and dtype against fp32 torch, side by
side on the same chunks, as throughput and as achieved GFLOP/s against the CPU's peak.

The chunks are the default corpus's first ``sample`` chunks of at least ``min_tokens`` word
pieces (so each is cut at ``max_seq_length``: the cost of a full window), taken from a
BM25-only build (nothing is embedded to find them). Each variant is one
:func:`rag.index.embedders.sentence_transformers.encoder` (``embedder.backend`` x ``embedder.dtype``), warmed up on one
batch, then timed over ``reps`` passes of the whole sample; passes of the variants alternate
so a change of machine load hits them alike. FLOPs are :meth:`rag.index.cpu.EncoderShape.flops`
of each chunk's word pieces after truncation; the peak is :meth:`rag.index.cpu.CpuInfo.peak_gflops`
(its estimate is stated in the report). ``bfloat16`` is measured only where the CPU computes
it natively; elsewhere its row says why it was refused (:func:`rag.index.cpu.check_dtype`).
Each variant's vectors are compared with fp32 torch's (mean and minimum cosine).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from rag.bench.measure import progress, ratio, summary

#: (backend, dtype) pairs measured, the first being the reference
VARIANTS = (("torch", "float32"), ("torch", "int8"), ("torch", "bfloat16"),
            ("onnx", "float32"), ("onnx", "int8"))


def sample_texts(cfg: Any, root: Any, embedder: Any, *, sample: int,
                 min_tokens: int) -> list[str]:
    """The first ``sample`` indexed chunk texts (in chunk-id order) of at least ``min_tokens``
    word pieces, else the longest ``sample``."""
    from rag.app.stages import STAGES

    index = STAGES.index(cfg, root, embedder, progress=False, with_dense=False)
    from rag.index.build import indexed_texts

    texts, _ = indexed_texts(index.chunks, str(cfg.index.header))
    counts = embedder.count_tokens(texts)
    long = [t for t, n in zip(texts, counts) if n >= min_tokens]
    if len(long) >= sample:
        return long[:sample]
    order = np.argsort(counts)[::-1][:sample]
    return [texts[i] for i in sorted(order)]


def bench_encoders(cfg: Any, root: Any, *, sample: int, reps: int,
                   variants: Sequence[tuple[str, str]] = VARIANTS) -> dict:
    """Throughput of each (backend, dtype) on the same chunk texts.

    Returns:
        ``{"cpu": {...}, "sample": n, "tokens": total word pieces per pass, "gflop_per_pass",
        "variants": {"torch/float32": {"chunks_per_s": summary, "gflops": median achieved
        GFLOP/s, "peak_share": gflops / peak, "ratio_vs_fp32_torch": median time ratio
        (variant / reference; < 1 is faster), "cosine_mean", "cosine_min"} | {"refused": why}}}``.
    """
    from rag.app.config import expand_path
    from rag.index.cpu import EncoderShape, UnsupportedDtypeError, check_dtype, cpu_info
    from rag.index.dense import resolve_model_path
    from rag.index.embedders.sentence_transformers import encoder

    info = cpu_info()
    e = cfg.embedder
    cache_dir = expand_path(cfg.paths.cache_dir)
    shape = EncoderShape.from_model_dir(resolve_model_path(e.model_path)[0])
    encoders: dict[str, Any] = {}
    out: dict[str, Any] = {"cpu": {"model": info.model, "isa": info.isa, "cores": info.cores,
                                   "native_bf16": info.native_bf16,
                                   "peak_gflops": info.peak_gflops(),
                                   "peak_estimate": info.describe()},
                           "shape": vars(shape), "variants": {}}
    for backend, dtype in variants:
        label = f"{backend}/{dtype}"
        try:
            check_dtype(backend, dtype, info)
        except UnsupportedDtypeError as exc:
            out["variants"][label] = {"refused": str(exc)}
            continue
        progress(f"dtype: loading {label}")
        encoders[label] = encoder(e, backend=backend, dtype=dtype, cache_dir=cache_dir,
                                  role="documents")
    ref_label = "/".join(variants[0])
    ref = encoders[ref_label]
    texts = sample_texts(cfg, root, ref, sample=sample, min_tokens=int(e.max_seq_length))
    tokens = [min(n, int(e.max_seq_length)) for n in ref.count_tokens(texts)]
    flop = sum(shape.flops(n) for n in tokens)
    out.update(sample=len(texts), tokens=sum(tokens), gflop_per_pass=flop / 1e9)
    times: dict[str, list[float]] = {k: [] for k in encoders}
    vectors: dict[str, np.ndarray] = {}
    for label, enc in encoders.items():  # warm-up: one batch each (thread pools, graphs)
        enc.embed(texts[: int(e.batch_size)])
    for rep in range(reps):
        order = list(encoders) if rep % 2 == 0 else list(encoders)[::-1]
        for label in order:
            progress(f"dtype: {label} pass {rep + 1}/{reps}")
            t0 = time.perf_counter()
            vectors[label] = encoders[label].embed(texts)
            times[label].append(time.perf_counter() - t0)
    peak = info.peak_gflops()
    ref_t = float(np.median(times[ref_label]))
    for label, ts in times.items():
        med = float(np.median(ts))
        cos = (vectors[label] * vectors[ref_label]).sum(axis=1)
        gflops = flop / med / 1e9
        out["variants"][label] = {
            "chunks_per_s": summary([len(texts) / t for t in ts], unit="chunks/s"),
            "seconds_per_pass": summary(ts, unit="s"),
            "gflops": gflops, "peak_share": ratio(gflops, peak) if peak else None,
            "ratio_vs_fp32_torch": ratio(med, ref_t),
            "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}
    return out


def render_encoders(r: dict) -> list[str]:
    """The section's markdown."""
    cpu = r["cpu"]
    lines = ["## Embedding backends and dtypes (`dtype`)", "",
             f"{r.get('sample', 0)} chunks of the corpus cut at max_seq_length "
             f"({r.get('tokens', 0):,} word pieces, {r.get('gflop_per_pass', 0):.1f} GFLOP a pass; "
             f"FLOPs: rag/index/cpu.py EncoderShape.flops). CPU: {cpu['model'] or 'unknown'}, "
             f"native bf16: {'yes' if cpu['native_bf16'] else 'no'}. Peak: {cpu['peak_estimate']}.",
             "", "| backend/dtype | chunks/s (median, min-max) | time vs fp32 torch | GFLOP/s | "
                 "of peak | cosine to fp32 torch (mean / min) |",
             "|---|---|---|---|---|---|"]
    for label, v in r["variants"].items():
        if "refused" in v:
            lines.append(f"| {label} | refused: {v['refused']} | | | | |")
            continue
        c = v["chunks_per_s"]
        share = "n/a" if v["peak_share"] is None else f"{v['peak_share']:.0%}"
        lines.append(f"| {label} | {c['median']:.1f} ({c['min']:.1f}-{c['max']:.1f}) | "
                     f"{v['ratio_vs_fp32_torch']:.2f}x | {v['gflops']:.0f} | {share} | "
                     f"{v['cosine_mean']:.4f} / {v['cosine_min']:.4f} |")
    return lines + [""]
