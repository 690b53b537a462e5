"""rag/search/ranking/stage.py: the stage's formula, file saturation and options, by hand."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from rag.search.ranking import SCORE_PREFIX, RankingOptions, RankingStage
from rag.search.ranking.options import DEFAULT_PRIORS, DEFAULT_WEIGHTS, ablation_sweep

from test_ranking_features import CHUNKS


#: conf/ranking/code_only.yaml's priors: documentation x 0.3 as well
CODE_ONLY_PRIORS = {**DEFAULT_PRIORS, "documentation": 0.3}


def index():
    return SimpleNamespace(chunks=CHUNKS)


def test_added_definition_and_scaled_priors_by_hand():
    stage = RankingStage(RankingOptions(features=("definition", "category_prior"),
                                        priors=CODE_ONLY_PRIORS))
    order, values = stage.rank("ExecuteC", [(2, 1.0), (5, 0.5)], index())
    # best first-stage score m = 1; definition adds m x 3 x 1 to chunk 1 (outside the pool);
    # the priors scale the docs chunk by 0.3 and the test by 0.3
    assert order == [(1, pytest.approx(3.0)), (2, pytest.approx(0.3)), (5, pytest.approx(0.15))]
    assert values[SCORE_PREFIX + "definition"] == {1: 1.0}
    assert values[SCORE_PREFIX + "category_prior"] == {2: 0.3, 5: 0.3}
    assert values["ranking"] == {1: pytest.approx(3.0), 2: pytest.approx(0.3),
                                 5: pytest.approx(0.15)}
    assert values["first_stage"] == {2: 1.0, 5: 0.5}
    assert stage.score_keys == ("rank:definition", "rank:category_prior", "first_stage",
                                "ranking")


def test_weights_scale_add_and_scale_features():
    opts = RankingOptions(features=("definition", "category_prior"),
                          weights={**DEFAULT_WEIGHTS, "definition": 1.0, "category_prior": 2.0},
                          priors=CODE_ONLY_PRIORS)
    order, _ = RankingStage(opts).rank("ExecuteC", [(2, 2.0), (5, 0.5)], index())
    # chunk 1: 0 + 2 x 1 x 1 = 2; docs: 2 x 0.3^2 = 0.18; test: 0.5 x 0.09 = 0.045
    assert order == [(1, pytest.approx(2.0)), (2, pytest.approx(0.18)),
                     (5, pytest.approx(0.045))]


def test_file_saturation_alone_and_ties_by_chunk_index():
    stage = RankingStage(RankingOptions(features=(), file_saturation=0.5))
    order, values = stage.rank("x", [(0, 1.0), (1, 0.9), (3, 0.6)], index())
    # chunk 1 is the second chunk of command.go: 0.9 x 0.5 = 0.45 falls below tree.go's 0.6
    assert order == [(0, 1.0), (3, 0.6), (1, pytest.approx(0.45))]
    assert values == {"first_stage": {0: 1.0, 1: 0.9, 3: 0.6},
                      "ranking": {0: 1.0, 1: 0.9, 3: 0.6}}
    off = RankingStage(RankingOptions(features=()))  # the default: off
    assert off.options.file_saturation == 1.0
    assert off.rank("x", [(3, 0.5), (0, 0.5)], index())[0] == [(0, 0.5), (3, 0.5)]
    assert off.rank("x", [(0, 1.0), (1, 0.9), (3, 0.6)], index())[0] == [(0, 1.0), (1, 0.9),
                                                                          (3, 0.6)]


def test_a_first_stage_with_non_positive_scores_is_shifted_order_kept():
    stage = RankingStage(RankingOptions(features=(), file_saturation=1.0))
    order, _ = stage.rank("x", [(0, 0.5), (3, -0.5)], index())
    # low -0.5, span 1: 0.5 -> 1.001, -0.5 -> 0.001
    assert order == [(0, pytest.approx(1.001)), (3, pytest.approx(0.001))]


@pytest.mark.parametrize("change, match", [
    ({"features": ("nope",)}, "unknown feature 'nope'"),
    ({"weights": {"definition": float("nan")}}, "ranking.weights.definition"),
    ({"priors": {"test": 0.0}}, r"ranking.priors.test must be a finite number > 0"),
    ({"file_saturation": 0.0}, r"file_saturation must be in \(0, 1\]"),
])
def test_bad_options_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        RankingStage(replace(RankingOptions(), **change))


def test_ablation_sweep_baseline_each_removed_each_alone_then_none():
    sets = ablation_sweep(("a", "b", "c"))
    assert sets == [("a", "b", "c"), ("b", "c"), ("a", "c"), ("a", "b"), ("a",), ("b",),
                    ("c",), ()]
    assert ablation_sweep(("a",)) == [("a",), ()]
    # by default the weight-0 features (chunk_length) are not ablated: they move nothing
    assert "chunk_length" not in ablation_sweep()[0]
