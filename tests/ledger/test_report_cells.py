"""The markdown report keeps its tables whole (issue 27, item 8): a ``|`` or a line break in a
run name, a job label or a param, or a run logged by hand with none of rag's params or tags,
never adds or splits a column."""

from __future__ import annotations

from rag.ledger.report import LedgerRow, cell, code, render_ledger


def _table_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("|")]


def _columns(line: str) -> int:
    """Columns of a markdown table line, not counting escaped pipes."""
    return line.replace("\\|", "").count("|") - 1


def test_cells_escape_pipes_and_line_breaks():
    assert cell("a|b") == "a\\|b"
    assert cell("two\nlines\tand  tabs") == "two lines and tabs"
    assert cell(None) == ""
    assert code("x|y`z") == "`x\\|y'z`"


def test_a_pipe_in_a_run_name_or_a_job_label_keeps_every_table_whole():
    rows = [
        LedgerRow(run_id="a" * 32, experiment="rag-x", run_name="try|this\nname", start_time_ms=1,
                  params={"search.mode": "dense|bm25"}, metrics={"mrr": 0.5}),
        LedgerRow(run_id="b" * 32, experiment="rag-x", run_name="", start_time_ms=2,
                  params={"search.mode": "dense"}, metrics={"mrr": 0.4},
                  tags={"sweep_name": "s", "sweep_id": "s|1", "sweep_job": "search.mode=a|b",
                        "sweep_baseline": "search.mode=dense", "is_baseline": "false"}),
    ]
    text = render_ledger(rows, source="sqlite:///x|y", parents={"s|1": "FINISHED"})
    for block in text.split("\n\n"):
        lines = _table_rows(block)
        if lines:
            assert len({_columns(ln) for ln in lines}) == 1, block
    assert "`aaaaaaaa` try\\|this name" in text
    assert "`bbbbbbbb` search.mode=a\\|b" in text


def test_a_hand_logged_run_without_rags_params_renders_as_dashes():
    """A run someone logged with the MLflow client in a rag-* experiment: no params, no tags,
    one metric of its own."""
    hand = LedgerRow(run_id="c" * 32, experiment="rag-x", run_name="by hand | test",
                     start_time_ms=3, metrics={"accuracy": 0.9})
    text = render_ledger([hand], source="s")
    lines = _table_rows(text.split("## Single runs")[1])
    assert len({_columns(ln) for ln in lines}) == 1
    assert "`cccccccc` by hand \\| test" in lines[2]
    assert lines[2].count("—") >= 6


def test_single_runs_of_several_corpora_name_their_corpus():
    def row(run, corpus, mrr):
        return LedgerRow(run_id=run * 32, experiment="rag-semble", run_name="", start_time_ms=1,
                         params={"search.mode": "hybrid"}, metrics={"mrr": mrr},
                         tags={"corpus": corpus})

    text = render_ledger([row("d", "semble-express", 0.9), row("e", "semble-sinatra", 0.8)],
                         source="s")
    lines = _table_rows(text.split("## Single runs")[1])
    assert lines[0].startswith("| run | started (UTC) | corpus | mode |")
    assert "| semble-express | hybrid |" in lines[2] and "| semble-sinatra | hybrid |" in lines[3]
    assert len({_columns(ln) for ln in lines}) == 1
    # one corpus: no column that says the same thing on every line
    text = render_ledger([row("d", "semble-express", 0.9)], source="s")
    assert "| corpus |" not in text.split("## Single runs")[1]
