"""Span labels that remember their text: ``digest:`` (rag.eval.golden.span_digest), written by
``rag golden check --pin``, lets ``rag golden check`` find a span whose text moved inside its
file; ``rag golden export --format beir`` writes a document for every span label."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pytest

from conftest import FIXTURE_FILES, write_tree
from rag.app.cli import main
from rag.eval.golden import GoldenError, load_golden, span_digest

LABELS = textwrap.dedent('''\
    corpus: repo
    queries:
      # refunds: answered by the guide's section
      - id: prose-refund
        query: refunds within 30 days
        relevant:
          - path: docs/guide.md
            lines: [9, 11]   # the Refunds section
            grade: 2
      - id: sym-callback
        query: handleAuthCallback
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
''')


def _sha12(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]


def test_span_digest_normalises_line_ends_and_trailing_blanks():
    text = "a\nb  \nc\n"
    assert span_digest(text, (2, 3)) == _sha12("b\nc")
    assert span_digest("a\r\nb\t\r\nc", (2, 3)) == _sha12("b\nc")
    assert span_digest(text, (1, 1)) == _sha12("a")
    assert span_digest(text, (3, 4)) is None          # past the end


@pytest.fixture
def labels(tmp_path):
    return write_tree(tmp_path / "labels", {"queries.yaml": LABELS,
                                            "negatives.yaml": "corpus: repo\nnegatives: []\n"})


def test_pin_then_a_span_moved_inside_its_file_is_found(tmp_path, fixture_repo, labels, capsys):
    assert main(["golden", "check", "--path", str(fixture_repo), "--golden", str(labels),
                 "--pin"]) == 0
    assert "pinned 1 span digest(s)" in capsys.readouterr().out
    text = (labels / "queries.yaml").read_text()
    want = _sha12("## Refunds\n\nCustomers can get their money back within 30 days.")
    # the digest follows lines:, comments and order kept
    assert f"lines: [9, 11]   # the Refunds section\n        digest: {want}\n" in text
    assert "# refunds: answered by the guide's section" in text
    assert load_golden(labels).positives[0].relevant[0].digest == want
    # pinning again adds nothing
    assert main(["golden", "check", "--path", str(fixture_repo), "--golden", str(labels),
                 "--pin"]) == 0
    assert "pinned 0 span digest(s)" in capsys.readouterr().out
    assert (labels / "queries.yaml").read_text() == text

    # three lines inserted above the section: the label's lines now hold other text
    files = dict(FIXTURE_FILES)
    files["docs/guide.md"] = files["docs/guide.md"].replace(
        "Welcome.\n", "Welcome.\n\nSee also the FAQ.\nAnd the changelog.\n")
    repo = write_tree(tmp_path / "repo2", files)
    assert main(["golden", "check", "--path", str(repo), "--golden", str(labels), "--json"]) == 1
    [p] = json.loads(capsys.readouterr().out)["problems"]
    assert p["kind"] == "span_changed" and p["label"] == "docs/guide.md#L9-11"
    assert [s["label"] for s in p["suggestions"]] == ["docs/guide.md#L12-14"]
    assert p["suggestions"][0]["lines"] == [12, 14]

    # the section reworded: reported, nowhere to suggest
    files["docs/guide.md"] = FIXTURE_FILES["docs/guide.md"].replace("30 days", "14 days")
    repo = write_tree(tmp_path / "repo3", files)
    assert main(["golden", "check", "--path", str(repo), "--golden", str(labels)]) == 1
    out = capsys.readouterr().out
    assert "no longer hold the labelled text" in out and "no likely new location" in out


def test_pin_refused_while_labels_rot(tmp_path, labels, capsys):
    files = dict(FIXTURE_FILES)
    del files["docs/guide.md"]
    repo = write_tree(tmp_path / "repo", files)
    before = (labels / "queries.yaml").read_text()
    assert main(["golden", "check", "--path", str(repo), "--golden", str(labels), "--pin"]) == 1
    assert "nothing pinned" in capsys.readouterr().out
    assert (labels / "queries.yaml").read_text() == before


@pytest.mark.parametrize("old, new, message", [
    ("lines: [9, 11]   # the Refunds section", "lines: [9, 11]\n        digest: 'XYZ'",
     "digest must be 12 lowercase hex"),
    ("symbol: handleAuthCallback", "symbol: handleAuthCallback\n        digest: 0123456789ab",
     "a digest belongs to a span label"),
])
def test_bad_digest_is_refused(tmp_path, old, new, message):
    text = LABELS.replace(old, new)
    d = write_tree(tmp_path / "g", {"queries.yaml": text,
                                    "negatives.yaml": "corpus: repo\nnegatives: []\n"})
    with pytest.raises(GoldenError) as exc:
        load_golden(d)
    assert any(message in p for p in exc.value.problems)


def test_beir_export_writes_a_document_per_span_label(tmp_path, fixture_repo, labels):
    out = tmp_path / "beir"
    assert main(["golden", "export", "--format", "beir", "--golden", str(labels),
                 "--out", str(out), "--corpus", str(fixture_repo)]) == 0
    docs = {json.loads(line)["_id"]: json.loads(line)["text"]
            for line in (out / "corpus.jsonl").read_text().splitlines()}
    assert docs["docs/guide.md#L9-11"] == (
        "## Refunds\n\nCustomers can get their money back within 30 days.\n")
    qrels = (out / "qrels" / "test.tsv").read_text().splitlines()
    assert all(line.split("\t")[1] in docs for line in qrels[1:])
