"""Issues and pull requests from gh JSON exports become documents linked by their URL."""

from __future__ import annotations

import json

import pytest

from rag.corpus.github import GitHubExportError, load_github_export

ISSUES = [{"number": 7, "title": "Refund button crashes", "url": "https://github.com/o/shop/issues/7",
           "body": "Clicking refund on a cancelled order raises KeyError.",
           "labels": [{"name": "bug"}], "state": "OPEN", "createdAt": "2026-01-02T00:00:00Z"}]
PRS = [{"number": 9, "title": "Add voucher stacking", "url": "https://github.com/o/shop/pull/9",
        "body": "Allow two discount codes per cart.", "labels": [], "state": "MERGED",
        "createdAt": "2026-02-03T00:00:00Z"}]


def test_export_documents_and_search_by_type(tmp_path, fixture_repo):
    from rag.index.build import build_index
    from rag.search.pipeline import SearchOptions, SearchPipeline

    (tmp_path / "issues.json").write_text(json.dumps(ISSUES))
    (tmp_path / "prs.json").write_text(json.dumps(PRS))
    docs = load_github_export(tmp_path / "issues.json") + load_github_export(tmp_path / "prs.json")
    assert [(d.path, d.category) for d in docs] == [
        ("https://github.com/o/shop/issues/7", "issue"), ("https://github.com/o/shop/pull/9", "pull_request")]
    assert "labels: bug" in docs[0].text and "# Refund button crashes (#7)" in docs[0].text
    index = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False, extra_docs=docs)
    assert index.stats["files_issue"] == 1 and index.stats["files_pull_request"] == 1
    res = SearchPipeline(index, SearchOptions(mode="bm25", types=("issue",))).search("refund crashes")
    assert [h.path for h in res.hits] == ["https://github.com/o/shop/issues/7"]
    res = SearchPipeline(index, SearchOptions(mode="bm25")).search("voucher stacking")
    assert res.hits[0].path == "https://github.com/o/shop/pull/9"


def test_bad_exports_name_the_problem(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps([{"number": 1, "title": "t"}, {"title": "u"}]))
    with pytest.raises(GitHubExportError) as err:
        load_github_export(tmp_path / "x.json")
    assert "record 0: missing ['url']" in str(err.value) and "record 1: missing ['number', 'url']" in str(err.value)
    (tmp_path / "y.json").write_text("{not json")
    with pytest.raises(GitHubExportError, match="not a JSON export"):
        load_github_export(tmp_path / "y.json")
    with pytest.raises(GitHubExportError, match="file not found"):
        load_github_export(tmp_path / "missing.json")
