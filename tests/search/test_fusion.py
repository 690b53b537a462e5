"""Score-based fusion (rag/search/fusion.py): values computed by hand."""

import math

import pytest

from rag.search.fusion import FUSIONS, NORMS, fuse, normalise, rrf, wsum

# two channels' (item, score) candidates, best first
RUNS = {"dense": [("a", 1.0), ("b", 0.75), ("c", 0.5)],
        "bm25": [("c", 12.0), ("d", 8.0), ("a", 4.0)]}


def test_min_max_wsum_by_hand():
    # dense: a 1, b 0.5, c 0; bm25: c 1, d 0.5, a 0
    got = dict(wsum(RUNS))
    assert got == {"a": pytest.approx(1.0), "b": pytest.approx(0.5),
                   "c": pytest.approx(1.0), "d": pytest.approx(0.5)}
    # ties broken by the item: a before c, b before d
    assert [i for i, _ in wsum(RUNS)] == ["a", "c", "b", "d"]


def test_weighted_wsum_and_a_zero_weight():
    got = dict(wsum(RUNS, weights={"dense": 0.7, "bm25": 0.3}))
    # a: 0.7*1 + 0.3*0; c: 0.7*0 + 0.3*1; b: 0.7*0.5; d: 0.3*0.5
    assert got == {"a": pytest.approx(0.7), "c": pytest.approx(0.3),
                   "b": pytest.approx(0.35), "d": pytest.approx(0.15)}
    only_dense = wsum(RUNS, weights={"bm25": 0.0})
    # a weight-0 channel is left out, as under rrf: d (BM25's alone) is not fused at all
    assert only_dense == [("a", 1.0), ("b", 0.5), ("c", 0.0)]
    assert [i for i, _ in fuse("combmnz", RUNS, weights={"bm25": 0.0})] == ["a", "b", "c"]


def test_max_norm_and_combmnz_by_hand():
    got = dict(wsum(RUNS, norm="max"))
    # dense / 1.0, bm25 / 12
    assert got["a"] == pytest.approx(1.0 + 4 / 12)
    assert got["c"] == pytest.approx(0.5 + 1.0)
    assert got["d"] == pytest.approx(8 / 12)
    mnz = dict(fuse("combmnz", RUNS))
    # a and c were returned by both channels: x2
    assert mnz == {"a": pytest.approx(2.0), "c": pytest.approx(2.0),
                   "b": pytest.approx(0.5), "d": pytest.approx(0.5)}


def test_zmuv_by_hand():
    s = [0.9, 0.6, 0.3]
    mean, sd = 0.6, math.sqrt(((0.3) ** 2 + 0 + 0.3 ** 2) / 3)  # population std
    assert normalise(s, "zmuv") == pytest.approx([(x - mean) / sd for x in s])
    assert normalise([2.0, 2.0], "zmuv") == pytest.approx([0.0, 0.0])


def test_max_norm_of_a_channel_whose_best_is_not_positive_keeps_its_order():
    # s / max would flip or flatten these: min-max instead
    assert normalise([-0.1, -0.3], "max") == pytest.approx([1.0, 0.0])
    assert normalise([0.5, -0.5], "max") == pytest.approx([1.0, -1.0])  # best > 0: s / max
    assert normalise([0.0, -1.0], "max") == pytest.approx([1.0, 0.0])


def test_constant_channel_counts_fully_under_min_max_and_max():
    assert normalise([3.0, 3.0], "min-max") == pytest.approx([1.0, 1.0])
    assert normalise([0.0], "max") == pytest.approx([1.0])
    assert normalise([], "min-max").size == 0
    assert wsum({"dense": [], "bm25": [("x", 5.0)]}) == [("x", pytest.approx(1.0))]


def test_fuse_rrf_is_rrf_over_ranks():
    ranks = {n: [i for i, _ in pairs] for n, pairs in RUNS.items()}
    assert fuse("rrf", RUNS, k=10, weights={"bm25": 0.5}) == rrf(ranks, k=10,
                                                                   weights={"bm25": 0.5})


def test_registries_and_errors():
    assert set(FUSIONS) == {"rrf", "wsum", "combmnz"}
    assert set(NORMS) == {"min-max", "max", "zmuv"}
    with pytest.raises(ValueError, match="fusion.method must be one of"):
        fuse("borda", RUNS)
    with pytest.raises(ValueError, match="fusion.norm must be one of"):
        fuse("wsum", RUNS, norm="sigmoid")
    with pytest.raises(ValueError, match="weights must be >= 0"):
        fuse("wsum", RUNS, weights={"dense": -0.1})
    with pytest.raises(ValueError, match="finite"):
        wsum({"dense": [("a", float("inf"))]})
