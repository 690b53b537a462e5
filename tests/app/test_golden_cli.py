"""rag golden power / expected on a real (fixture) ledger row, and expected.yaml checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rag.app.stages import StageCache

from conftest import run_overrides
from rag.eval.expected import ExpectedError, check_expected, load_expected


@pytest.fixture
def row(tmp_path, fixture_repo, fixture_golden, compose, embedder, monkeypatch):
    import rag.app.run as run_mod

    stages = StageCache(embedder=embedder)
    metrics = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                    "search.mode=dense")), stages=stages)
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])[0]
    return uri, run.info.run_id, metrics


@pytest.mark.slow
def test_golden_power_from_a_pilot_row(row, capsys):
    from rag.app.cli import main
    from rag.eval.significance import minimum_detectable_effect, required_queries

    uri, run_id, metrics = row
    assert main(["golden", "power", "--run", run_id[:8], "--tracking-uri", uri, "--effect", "0.1",
                 "--json"]) == 0
    got = {m["metric"]: m for m in json.loads(capsys.readouterr().out)["metrics"]}
    mrr = got["mrr"]
    assert mrr["pilot_positives"] == 3 and mrr["mean"] == pytest.approx(metrics["mrr"])
    sd_d = mrr["sd"] * np.sqrt(2 * (1 - 0.5))
    assert mrr["sd_difference"] == pytest.approx(sd_d)
    if sd_d > 0:
        assert mrr["positives_needed"] == required_queries(sd_d, 0.1)
        assert mrr["mde_at_pilot_size"] == pytest.approx(minimum_detectable_effect(sd_d, 3))
    for r in got.values():  # no variance: nothing sized, and the JSON holds no NaN
        assert (r["positives_needed"] is None) == (r["sd"] == 0)
        assert (r["mde_at_pilot_size"] is None) == (r["sd"] == 0)
    # the text: a metric without variance in the pilot says so instead of "detects nan"
    assert main(["golden", "power", "--run", run_id[:8], "--tracking-uri", uri]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text and any(r["sd"] == 0 for r in got.values())  # recall: all 1
    for m, r in got.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(m + " "))
        assert ("no variance to size a study" in line) == (r["sd"] == 0), line
    for argv, why in [(["--effect", "0"], "--effect must be a finite number > 0"),
                      (["--effect", "nan"], "--effect must be a finite number > 0"),
                      (["--metric", "nope"], "metric 'nope' is not a column")]:
        assert main(["golden", "power", "--run", run_id, "--tracking-uri", uri, *argv]) == 2
        assert why in capsys.readouterr().err


@pytest.mark.slow
def test_golden_expected_round_trip(row, tmp_path, capsys):
    from rag.app.cli import main

    uri, run_id, metrics = row
    out = tmp_path / "labels" / "expected.yaml"
    out.parent.mkdir()
    assert main(["golden", "expected", "--run", run_id, "--tracking-uri", uri, "--out", str(out)]) == 0
    header, exp = load_expected(out)
    # (run in-process, outside Hydra: no command-line overrides were recorded)
    assert header["source_run"] == run_id and header["overrides"] == []
    # the row's per-query values are pinned beside it (what `rag gate` pairs against)
    from rag.eval.expected import load_pinned_per_query

    assert header["per_query"] == "expected_per_query.csv"
    pinned = load_pinned_per_query(out, header)
    assert pinned is not None and pinned.startswith("query_id,kind,tags,judgement_digest,")
    assert "query," not in pinned.splitlines()[0]  # no query text pinned
    assert {e.metric for e in exp} >= {"mrr", "recall_at_8", "dropped_rate", "abstain_rate"}
    assert check_expected(metrics, exp) == []
    assert check_expected({**metrics, "mrr": metrics["mrr"] + 0.01}, exp) == [
        f"mrr: {metrics['mrr'] + 0.01:.4f} outside {round(metrics['mrr'], 4):.4f} ± 0.005"]
    cal = json.loads((out.parent / "calibration.json").read_text())
    assert cal["provenance"]["corpus"] == "shop"
    assert main(["golden", "expected", "--run", run_id, "--tracking-uri", uri, "--out", str(out),
                 "--tolerance", "-1"]) == 2
    assert "--tolerance must be a finite number >= 0" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics:\n  mrr: high\n")
    with pytest.raises(ExpectedError, match=r"bad.yaml: metrics.mrr: value must be a number"):
        load_expected(bad)
