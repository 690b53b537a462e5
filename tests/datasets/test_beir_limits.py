"""A BEIR document too large to index (issue 27, item 8): a 50 MB document is not written to
the converted corpus (the walk would skip it as too large), it is noted with its line and
size, and a label naming it is one clear error naming the setting — not a label that
"names a file the index does not hold"."""

from __future__ import annotations

import json

import pytest

from conftest import write_tree
from rag.datasets.beir import prepare_beir
from rag.datasets.common import DatasetError


def _folder(root, big: str, *, label_big: bool):
    corpus = [{"_id": "small", "text": "a small document about flask"},
              {"_id": "big", "text": big}]
    qrels = ["q1\tsmall\t1"] + (["q2\tbig\t1"] if label_big else [])
    return write_tree(root, {
        "corpus.jsonl": "".join(json.dumps(d) + "\n" for d in corpus),
        "queries.jsonl": json.dumps({"_id": "q1", "text": "flask"}) + "\n"
                         + json.dumps({"_id": "q2", "text": "big"}) + "\n",
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n"})


def test_a_labelled_50_mb_document_is_one_clear_error(tmp_path):
    src = _folder(tmp_path / "b", "x" * (50 * 1024 * 1024), label_big=True)
    with pytest.raises(DatasetError) as err:
        prepare_beir(src, split="test", name="b", cache_root=tmp_path / "c")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.endswith(
        "qrels/test.tsv:3: document 'big' (corpus.jsonl:2) is 52,428,800 bytes, over "
        "corpus.max_file_bytes (1,000,000): the corpus walk would skip it as too large, so it "
        "cannot be a label; pass corpus.max_file_bytes=52428800 to index it")


def test_an_unlabelled_document_over_the_cap_is_left_out_and_noted(tmp_path):
    src = _folder(tmp_path / "b", "y" * 2000, label_big=False)
    p = prepare_beir(src, split="test", name="b", cache_root=tmp_path / "c",
                     max_document_bytes=1000)
    assert p.manifest["counts"]["too_large"] == 1
    assert sorted(f.name for f in (p.corpus_root / "_ids").iterdir()) == ["small"]
    assert any("corpus.jsonl:2 (2,000 bytes)" in n for n in p.manifest["notes"])
    # raised, the cap is another conversion, and the document is written
    q = prepare_beir(src, split="test", name="b", cache_root=tmp_path / "c",
                     max_document_bytes=2000)
    assert q.directory != p.directory and "too_large" not in q.manifest["counts"]
    assert (q.corpus_root / "_ids" / "big").stat().st_size == 2000
