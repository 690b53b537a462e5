"""``rag ledger export --format csv|json|parquet``: the ledger as one table, one line per row,
read back with pandas; and its refusals (exit 2, one ``error:`` line)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from conftest import run_rag

from rag.app.cli import main as rag_cli

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms


@pytest.fixture
def ledger_uri(tmp_path):
    """Three finished rows in two experiments and one sweep parent run (not a row)."""
    from rag.ledger.mlflow_store import Ledger, params_from_config

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    rows = [("rag-shop", "bm25", 0.50, T0, {"search": {"mode": "bm25"}, "eval": {"check_links": True}}),
            ("rag-shop", "dense", 0.75, T0 + 60_000, {"search": {"mode": "dense"},
                                                      "eval": {"check_links": False}}),
            ("rag-zod", "auto", 0.25, T0 + 120_000, {"search": {"mode": "auto"},
                                                     "corpus": {"url_template": None}})]
    ids = []
    for exp, name, mrr, start, cfg in rows:
        ids.append(ledger.log_row(
            experiment=exp, run_name=name, params=params_from_config(cfg),
            metrics={"tag.prose.mrr": mrr / 2, "index/chunks": 12.0, "mrr": mrr,
                     "recall_at_8": 1.0},
            tags={"corpus": exp[4:], "golden_fingerprint": "g" * 64}, artifacts={},
            start_time_ms=start))
    exp = ledger.experiment_id("rag-shop")
    ledger.client.create_run(exp, run_name="sweep x", tags={"rag.sweep_parent": "1"})
    return uri, ids


def test_csv_has_one_line_per_row_headline_first(ledger_uri, tmp_path, capsys):
    uri, ids = ledger_uri
    out = tmp_path / "ledger.csv"
    assert rag_cli(["ledger", "export", "--format", "csv", "--out", str(out),
                    "--tracking-uri", uri]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 3  # a header, then one line per row; the sweep parent is no row
    # read as text: pandas would turn "true" into a bool and "null" into NaN
    df = pd.read_csv(out, dtype={"params.eval.check_links": str,
                                 "params.corpus.url_template": str}, keep_default_na=False,
                     na_values=[""])
    assert df.run_id.tolist() == ids  # oldest first
    assert df.experiment.tolist() == ["rag-shop", "rag-shop", "rag-zod"]
    assert df["metrics.mrr"].tolist() == [0.50, 0.75, 0.25]
    metric_cols = [c for c in df.columns if c.startswith("metrics.")]
    assert metric_cols == ["metrics.mrr", "metrics.recall_at_8", "metrics.tag.prose.mrr",
                           "metrics.index/chunks"]
    # params as the config spells them; a row without a key has an empty cell
    assert df["params.eval.check_links"].tolist()[:2] == ["true", "false"]
    assert pd.isna(df["params.eval.check_links"][2])
    assert df["params.corpus.url_template"].tolist()[2] == "null"
    assert df.start_time[0] == "2026-01-01T00:00:00+00:00"
    assert (df.duration_s >= 0).all() and df.status.eq("FINISHED").all()
    assert "wrote 3 ledger row(s)" in capsys.readouterr().err


def test_csv_to_stdout_and_one_experiment(ledger_uri, capsys):
    uri, ids = ledger_uri
    assert rag_cli(["ledger", "export", "--tracking-uri", uri, "--experiment", "zod"]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) == 2 and ids[2] in text and ids[0] not in text


def test_json_and_parquet_round_trip(ledger_uri, tmp_path):
    uri, ids = ledger_uri
    csv_df = pd.read_csv(io.StringIO(_export(uri, "csv", tmp_path / "a.csv")))
    js = tmp_path / "a.json"
    assert rag_cli(["ledger", "export", "--format", "json", "--out", str(js),
                    "--tracking-uri", uri]) == 0
    records = json.loads(js.read_text())
    assert len(js.read_text().splitlines()) == 2 + 3  # "[", one object per line, "]"
    assert [r["run_id"] for r in records] == ids
    assert records[2]["params.eval.check_links"] is None  # empty cells are null
    jdf = pd.read_json(js, orient="records", dtype=False)
    assert jdf.columns.tolist() == csv_df.columns.tolist()
    assert jdf["metrics.mrr"].tolist() == [0.50, 0.75, 0.25]
    pq = tmp_path / "a.parquet"
    assert rag_cli(["ledger", "export", "--format", "parquet", "--out", str(pq),
                    "--tracking-uri", uri]) == 0
    pdf = pd.read_parquet(pq)
    assert pdf.columns.tolist() == csv_df.columns.tolist()
    assert pdf.run_id.tolist() == ids
    assert pdf["metrics.tag.prose.mrr"].tolist() == [0.25, 0.375, 0.125]
    assert pdf["params.search.mode"].tolist() == ["bm25", "dense", "auto"]


def _export(uri, fmt, out):
    assert rag_cli(["ledger", "export", "--format", fmt, "--out", str(out),
                    "--tracking-uri", uri]) == 0
    return out.read_text()


@pytest.mark.parametrize("argv, message", [
    (["--format", "parquet"], "--format parquet writes a binary file: give --out FILE"),
    (["--experiment", "nope"], "--experiment 'nope': no such experiment in the ledger "
                               "(known: rag-shop, rag-zod; the corpora of a dataset such as "
                               "semble's are rows of one experiment, rag-<dataset name>: "
                               "select them by the table's tags.corpus column)"),
])
@pytest.mark.slow
def test_refusals_are_one_error_line(ledger_uri, argv, message, capsys):
    uri, _ = ledger_uri
    assert rag_cli(["ledger", "export", "--tracking-uri", uri, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {message}"]


def test_a_missing_store_is_not_created(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert rag_cli(["ledger", "export", "--tracking-uri", uri]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot open the ledger at {uri}")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow
def test_export_to_a_closed_stdout_exits_141_silently(ledger_uri):
    uri, _ = ledger_uri
    proc = run_rag("ledger", "export", "--tracking-uri", uri, closed_stdout=True, timeout=300)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr[-2000:]
