"""The golden-set loop of docs/golden-sets.md, run through the ``rag`` command in its order
on a fixture repository with history: init -> mine --from git -> pool (rag ranks the
candidates itself) -> review --script -> check -> stats. What each step must leave behind is
worked out by hand from the scripted history below."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import FIXTURE_FILES
from rag.app.cli import main

from test_mining import Repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _history(root):
    r = Repo(root)
    for rel, text in FIXTURE_FILES.items():
        if rel not in (".gitignore", "build/generated.py", "debug.log"):
            r.write(rel, text)
    c = {"root": r.commit("Add the shop package with its cart, payments and guide")}
    # apply_discount_code's body (cart.py line 22) and a test beside it
    r.edit("src/shop/cart.py", 22, ['    return cart.total_price() * decimal.Decimal("0.8")'])
    r.write("tests/test_cart.py", "def test_add_item():\n    assert True\n\n\n"
                                  "def test_discount():\n    assert True\n")
    c["discount"] = r.commit("fix(cart): apply a twenty percent voucher discount (#12)")
    r.edit("src/shop/payments.py", 11, ['    return {"refunded": order_id, "status": "done"}'])
    c["refund"] = r.commit("Report the refund status to the customer")
    r.write(".github/workflows/ci.yml", "on: [push, pull_request]\n")
    c["ci"] = r.commit("ci: run the tests on pull requests")
    return r, c


def test_init_mine_pool_review_check_stats(tmp_path, capsys):
    r, c = _history(tmp_path / "shop")
    repo, golden, cache = r.root, tmp_path / "golden", tmp_path / "cache"
    assert main(["golden", "init", "--path", str(repo), "--out", str(golden)]) == 0
    assert main(["golden", "mine", "--from", "git", "--path", str(repo),
                 "--golden", str(golden)]) == 0
    err = capsys.readouterr().err
    # 4 commits: the CI one is skipped by reason; the root commit labels 6 symbols, the
    # guide's 3 sections and pyproject.toml: over --max-labels 8
    assert "examined 4 commits: 2 candidates; skipped: merge 0, revert 0, test_only 0, " \
           "dependency_bump 0, ci 1," in err and "too_many_labels 1" in err
    cands = yaml.safe_load((golden / "candidates-git.yaml").read_text())["candidates"]
    by = {x["commit"]: x for x in cands}
    # the PR number and prefix go, the test file is never a label
    assert by[c["discount"]]["query"] == "apply a twenty percent voucher discount"
    assert by[c["discount"]]["relevant"] == [{"path": "src/shop/cart.py",
                                             "symbol": "apply_discount_code"}]
    assert by[c["refund"]]["relevant"] == [{"path": "src/shop/payments.py",
                                           "symbol": "refund_order"}]

    assert main(["golden", "pool", "--golden", str(golden), "--path", str(repo),
                 "--modes", "bm25", "grep", "--queries", str(golden / "queries.yaml"),
                 str(golden / "candidates-git.yaml"), "--depth", "3",
                 f"paths.cache_dir={cache}"]) == 0
    captured = capsys.readouterr()
    # init's placeholder query is left out (named), the 2 candidates are pooled
    assert "pooled 2 ranking(s) at depth 3 over 2 queries" in captured.out
    assert "left out 1 example query(ies) from rag golden init (example-file)" in captured.err
    pool_lines = (golden / "pool.jsonl").read_text().splitlines()
    assert len(pool_lines) == 3  # the header and one line per query

    # review only the proposals, in the candidates file's order (newest first): the refund's
    # query makes no golden query (discarded), the discount's label is right
    assert [x["commit"] for x in cands] == [c["refund"], c["discount"]]
    (tmp_path / "keys.txt").write_text("d\ny\n")
    assert main(["golden", "review", "--golden", str(golden), "--pool",
                 str(golden / "pool.jsonl"), "--only", "proposed",
                 "--script", str(tmp_path / "keys.txt"), "--reviewer", "alice"]) == 0
    out = capsys.readouterr().out
    assert "judged 1 pair(s) (1 relevant, 0 not relevant), skipped 0, edited 0 query " \
           "text(s), discarded 1 candidate(s)" in out
    # moved, not copied: the candidates file is empty, queries.yaml has both; the discarded
    # candidate is remembered by its source
    left = yaml.safe_load((golden / "candidates-git.yaml").read_text())
    assert left["candidates"] == []
    assert left["discarded"] == [{"source": f"mined:git {c['refund']}",
                                  "query": "Report the refund status to the customer"}]
    queries = {q["id"]: q for q in yaml.safe_load((golden / "queries.yaml").read_text())["queries"]}
    moved = queries[by[c["discount"]]["id"]]
    # the label says how it was made: the miner's proposal, accepted by alice
    assert moved["relevant"] == [{"path": "src/shop/cart.py", "symbol": "apply_discount_code",
                                  "source": f"mined:git {c['discount']} by alice"}]
    assert moved["source"] == f"mined:git {c['discount']}" and "commit" not in moved

    assert main(["golden", "check", "--path", str(repo), "--golden", str(golden)]) == 0
    assert main(["golden", "stats", "--golden", str(golden),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    out = capsys.readouterr().out
    assert "(corpus shop): 2 queries, 2 labels" in out
    # queries by their source, and each label by its own: the accepted proposal is mined:git
    assert "by source:   hand 1, mined:git 1 (queries); labels (relevant and not_relevant): " \
           "mined:git 1, unmarked 1" in out

    # mining again over the reviewed file proposes neither the discarded candidate nor the
    # accepted one, says so by reason, and keeps the discarded list
    assert main(["golden", "mine", "--from", "git", "--path", str(repo),
                 "--golden", str(golden)]) == 2
    assert "not proposed again" in capsys.readouterr().err
    assert main(["golden", "mine", "--from", "git", "--path", str(repo),
                 "--golden", str(golden), "--force"]) == 0
    assert "already_golden 1, discarded_in_review 1" in capsys.readouterr().err
    again = yaml.safe_load((golden / "candidates-git.yaml").read_text())
    assert again["candidates"] == [] and again["discarded"] == left["discarded"]
    assert again["skipped"]["already_golden"] == 1 == again["skipped"]["discarded_in_review"]
