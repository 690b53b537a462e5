"""rag golden init / check / stats on fixture repositories: fast, offline, no model loaded."""

from __future__ import annotations

import json
import textwrap
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURE_FILES, PROJECT, write_tree
from rag.app.cli import main
from rag.app.stages import StageCache


def _no_model() -> StageCache:
    """Stages whose embedder is never asked to embed (BM25-only runs)."""
    return StageCache(embedder=types.SimpleNamespace(
        model_id="unused-in-bm25", dim=4, distill_s=0.0,
        count_tokens=lambda texts: [len(t.split()) + 2 for t in texts]))


def _bm25_overrides(tmp_path: Path, repo: Path, *extra: str) -> list[str]:
    return [f"corpus.path={repo}", f"paths.cache_dir={tmp_path / 'cache'}",
            "tracking.enabled=false", "search.mode=bm25", *extra]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project root of its own (RAG_PROJECT_ROOT) sharing the real conf/, with a golden/flask
    that labels flask-3.1.3, as in the checkout."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "conf").symlink_to(PROJECT / "conf")
    write_tree(root / "golden" / "flask", {
        "queries.yaml": "corpus: flask-3.1.3\nqueries:\n  - id: q\n    query: x\n"
                        "    relevant:\n      - path: README.md\n",
        "negatives.yaml": "corpus: flask-3.1.3\nnegatives: []\n"})
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(root))
    return root


# ------------------------------------------------------------------------------------- init

def test_init_writes_a_set_that_loads_and_a_bm25_run_accepts(tmp_path, fixture_repo, compose,
                                                            capsys):
    import rag.app.run as run_mod
    from rag.eval.golden import load_golden
    from rag.golden.label_check import corpus_view

    out = tmp_path / "labels"
    assert main(["golden", "init", "--path", str(fixture_repo), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"corpus.path={fixture_repo}" in printed and f"eval.golden_dir={out}" in printed
    assert "rag golden check" in printed
    q = (out / "queries.yaml").read_text()
    assert "corpus: repo\n" in q and "corpus: repo\n" in (out / "negatives.yaml").read_text()
    # commented examples of every label kind, and a negative with grep evidence
    assert "#       symbol: " in q and "#       lines: [" in q
    assert "grep -rli sourdough: no file of the corpus mentions it" in (out / "negatives.yaml").read_text()
    view = corpus_view(fixture_repo, name="repo")
    golden = load_golden(out, corpus_paths=view.paths,
                         corpus_symbols={(p, s) for p, ss in view.symbols.items() for s in ss})
    assert [q.id for q in golden.positives] == ["example-file"] and golden.negatives == []
    assert golden.positives[0].relevant[0].path in view.paths
    # the commented symbol example names a real symbol of the corpus
    sym = [ln.split("symbol:")[1].split("#")[0].strip() for ln in q.splitlines() if "symbol:" in ln][0]
    assert any(sym in ss for ss in view.symbols.values())
    metrics = run_mod.run_job(compose(_bm25_overrides(tmp_path, fixture_repo,
                                                      f"eval.golden_dir={out}")), stages=_no_model())
    assert metrics["n_positives"] == 1 and metrics["n_negatives"] == 0


def test_init_and_check_name_a_pinned_release(tmp_path, project, monkeypatch, capsys):
    """--sdist REQ (and --npm SPEC) name the corpus as a run names it: the set goes to
    golden/<name>-<version>/, which python -m rag.run corpus.sdist=REQ finds by itself, and
    the printed commands quote the requirement for Hydra and the shell."""
    import rag.app.run as run_mod

    cache = tmp_path / "cache"
    monkeypatch.setenv("RAG_CACHE_DIR", str(cache))
    # the release as a fetch leaves it (offline: no pip download)
    release = write_tree(cache / "corpora" / "demo-1.2.0" / "demo-1.2.0",
                         {"README.md": "# demo\n", "src/demo/core.py": "def run():\n    pass\n"})
    (release.parent / ".complete").write_text("demo-1.2.0.tar.gz\n")
    assert main(["golden", "init", "--sdist", "demo==1.2.0"]) == 0
    printed = capsys.readouterr().out
    out = project / "golden" / "demo-1.2.0"
    assert (out / "queries.yaml").read_text().startswith("# ") and \
        "corpus: demo-1.2.0" in (out / "queries.yaml").read_text()
    assert "python -m rag.run \"corpus.sdist='demo==1.2.0'\" eval.golden_dir=" in printed
    assert f"rag golden check --sdist demo==1.2.0 --golden {out}" in printed
    assert f"rag golden show FILE --path {release}" in printed
    assert main(["golden", "check", "--sdist", "demo==1.2.0", "--golden", str(out)]) == 0
    from rag.app.search_cli import compose_config

    assert run_mod.golden_dir_for(compose_config(["corpus.sdist='demo==1.2.0'"])) == out
    # an npm pin: the printed run unsets the default corpus's sdist
    pkg = write_tree(cache / "corpora" / "npm-demo-js-2.0.0" / "package",
                     {"index.js": "function run() {}\n"})
    (pkg.parent / ".complete").write_text("demo-js-2.0.0.tgz\n")
    assert main(["golden", "init", "--npm", "demo-js@2.0.0"]) == 0
    assert "python -m rag.run corpus.npm=demo-js@2.0.0 corpus.sdist=null eval.golden_dir=" in \
        capsys.readouterr().out
    assert compose_config(["corpus.npm=demo-js@2.0.0", "corpus.sdist=null"]).corpus.name == \
        "demo-js-2.0.0"
    # check without --golden on a release nobody labelled: said, not golden/flask checked
    write_tree(cache / "corpora" / "other-1.0" / "other-1.0", {"a.py": "x = 1\n"})
    (cache / "corpora" / "other-1.0" / ".complete").write_text("other-1.0.tar.gz\n")
    assert main(["golden", "check", "--sdist", "other==1.0"]) == 2
    assert "no golden set for corpus 'other-1.0'" in capsys.readouterr().err
    # a requirement that pins no release is refused, before anything is fetched
    for req in ("demo", "demo>=1", "--index-url=http://x/ demo==1"):
        assert main(["golden", "init", f"--sdist={req}"]) == 2
        assert "pin one release, NAME==VERSION" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["golden", "init", "--sdist", "demo==1.2.0", "--path", str(release)])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_init_refuses_to_overwrite_without_force(tmp_path, fixture_repo, capsys):
    out = tmp_path / "labels"
    assert main(["golden", "init", "--path", str(fixture_repo), "--out", str(out)]) == 0
    (out / "queries.yaml").write_text("# mine\n")
    capsys.readouterr()
    assert main(["golden", "init", "--path", str(fixture_repo), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exist" in err and "--force" in err
    assert (out / "queries.yaml").read_text() == "# mine\n"
    assert main(["golden", "init", "--path", str(fixture_repo), "--out", str(out), "--force"]) == 0
    assert "example-file" in (out / "queries.yaml").read_text()
    assert main(["golden", "init", "--path", str(tmp_path / "nope")]) == 2
    assert main(["golden", "init", "--corpus", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--corpus 'nope': not a corpus config name; known: " in err and "flask" in err
    # a directory given where a name goes: pointed to --path
    assert main(["golden", "init", "--corpus", str(fixture_repo)]) == 2
    assert "not a corpus config name (a directory is --path DIR)" in capsys.readouterr().err


def test_bare_corpus_path_run_finds_the_scaffold(tmp_path, project, fixture_repo, compose, capsys):
    """`rag golden init --path DIR` then `python -m rag.run corpus.path=DIR`: the run takes
    golden/<DIR's name>/ because the default corpus's golden/flask labels another corpus."""
    import rag.app.run as run_mod

    assert main(["golden", "init", "--path", str(fixture_repo)]) == 0
    out = project / "golden" / "repo"
    assert (out / "queries.yaml").is_file()
    assert "finds" in capsys.readouterr().out
    cfg = compose(_bm25_overrides(tmp_path, fixture_repo))
    assert run_mod.golden_dir_for(cfg) == out
    metrics = run_mod.run_job(cfg, stages=_no_model())
    assert metrics["n_positives"] == 1
    # the row's config names the labels it was scored on, not golden/flask
    assert cfg.eval.golden_dir == str(out) and cfg.corpus.golden_dir == str(out)
    # an explicit eval.golden_dir always wins (here: refused for the mismatch, as before)
    cfg = compose(_bm25_overrides(tmp_path, fixture_repo, "eval.golden_dir=golden/flask"))
    assert run_mod.golden_dir_for(cfg) == project / "golden" / "flask"
    with pytest.raises(run_mod.RunError, match="labels corpus 'flask-3.1.3'"):
        run_mod.run_job(cfg, stages=_no_model())
    # labels the configured golden_dir would accept are never replaced
    cfg = compose(_bm25_overrides(tmp_path, fixture_repo, "corpus.name=flask-3.1.3"))
    assert run_mod.golden_dir_for(cfg) == project / "golden" / "flask"
    # without golden/<name> the run is refused as before
    other = write_tree(tmp_path / "other", {"a.py": "def f():\n    pass\n"})
    cfg = compose(_bm25_overrides(tmp_path, other))
    assert run_mod.golden_dir_for(cfg) == project / "golden" / "flask"
    # a PyPI sdist named on the command line finds golden/<name>-<version>/ the same way
    own = project / "golden" / "marshmallow-4.4.0"
    own.mkdir(parents=True)
    (own / "queries.yaml").write_text("corpus: marshmallow-4.4.0\nqueries: []\n")
    cfg = compose(["corpus.sdist='marshmallow==4.4.0'"])
    assert cfg.corpus.name == "marshmallow-4.4.0" and run_mod.golden_dir_for(cfg) == own
    # a dataset brings its own labels: a hand-made golden/<name>/ never replaces them
    cfg = compose(["corpus=cosqa", f"paths.cache_dir={tmp_path / 'c2'}"])
    hand = project / "golden" / str(cfg.corpus.name)
    hand.mkdir(parents=True, exist_ok=True)
    (hand / "queries.yaml").write_text(f"corpus: {cfg.corpus.name}\nqueries: []\n")
    assert run_mod.golden_dir_for(cfg) != hand


# ------------------------------------------------------------------------------------ check

LABELS = textwrap.dedent('''\
    corpus: repo
    queries:
      - id: sym-auth-callback
        query: handleAuthCallback
        tags: [symbol]
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
      - id: prose-voucher
        query: how do customers use a voucher to pay less
        tags: [prose]
        relevant:
          - path: src/shop/cart.py
            symbol: apply_discount_code
      - id: prose-refund
        query: give the money back
        tags: [prose]
        relevant:
          - path: src/shop/payments.py
            symbol: refund_order
      - id: prose-deploy
        query: how should I deploy the shop in production
        tags: [prose, docs]
        relevant:
          - path: docs/guide.md
          - path: tests/test_cart.py
      - id: span-refunds
        query: refunds within 30 days
        relevant:
          - path: pyproject.toml
            lines: [1, 3]
          - path: docs/guide.md
            lines: [9, 11]
        not_relevant:
          - path: src/shop/payments.py
            symbol: refund_order
    ''')


@pytest.fixture
def labels(tmp_path) -> Path:
    return write_tree(tmp_path / "labels", {"queries.yaml": LABELS,
                                            "negatives.yaml": "corpus: repo\nnegatives: []\n"})


def _new_version(tmp_path: Path) -> Path:
    """The fixture repository, one version on: test_cart.py deleted, handleAuthCallback
    renamed, refund_order moved to its own module, cart.py and guide.md moved, pyproject.toml
    shortened to 2 lines."""
    files = dict(FIXTURE_FILES)
    del files["tests/test_cart.py"]
    pay = files.pop("src/shop/payments.py")
    head, refund = pay.split("def refund_order", 1)
    files["src/shop/payments.py"] = head.replace("handleAuthCallback", "handle_auth_callback")
    files["src/shop/refunds.py"] = "def refund_order" + refund
    files["lib/shop/cart.py"] = files.pop("src/shop/cart.py")
    files["docs/user/guide.md"] = files.pop("docs/guide.md")
    files["pyproject.toml"] = '[project]\nname = "shop"\n'
    return write_tree(tmp_path / "repo", files)


def test_check_is_clean_on_the_labelled_corpus(fixture_repo, labels, capsys):
    assert main(["golden", "check", "--path", str(fixture_repo), "--golden", str(labels)]) == 0
    out = capsys.readouterr().out
    assert "ok: every label resolves" in out and "8 labels" in out


def test_check_lists_a_broken_golden_set_one_problem_a_line(tmp_path, fixture_repo, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "queries.yaml").write_text(
        "queries:\n"
        "  - {id: a, query: refunds, relevent: [{path: src/shop/payments.py}]}\n"
        "  - {id: a, query: carts, relevant: [{path: src/shop/cart.py}]}\n")
    (bad / "negatives.yaml").write_text("negatives: []\n")
    assert main(["golden", "check", "--path", str(fixture_repo), "--golden", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: cannot read the golden set: ") and err[0].endswith(
        "problem(s):")
    problems = [ln.strip() for ln in err[1:]]
    assert len(problems) >= 3 and all(ln.startswith(str(bad / "queries.yaml")) for ln in problems)
    assert any("'relevent': did you mean 'relevant'?" in ln for ln in problems)
    assert any("duplicate id 'a'" in ln for ln in problems)


def test_check_reports_label_rot_with_suggestions(tmp_path, labels, capsys):
    repo = _new_version(tmp_path)
    assert main(["golden", "check", "--path", str(repo), "--golden", str(labels), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["corpus"] == "repo" and rep["labels"] == 8 and rep["queries"] == 5
    got = {p["label"]: p for p in rep["problems"] if p["in_field"] == "relevant"}
    assert set(got) == {"src/shop/payments.py#handleAuthCallback",
                        "src/shop/cart.py#apply_discount_code",
                        "src/shop/payments.py#refund_order", "docs/guide.md",
                        "tests/test_cart.py", "pyproject.toml#L1-3", "docs/guide.md#L9-11"}
    # not_relevant labels rot too
    [nr] = [p for p in rep["problems"] if p["in_field"] == "not_relevant"]
    assert nr["label"] == "src/shop/payments.py#refund_order"
    assert nr["suggestions"][0]["label"] == "src/shop/refunds.py#refund_order"
    # a span past the new end of its file; a span of a moved file
    assert got["pyproject.toml#L1-3"]["kind"] == "lines_out_of_range"
    assert got["docs/guide.md#L9-11"]["suggestions"][0]["label"] == "docs/user/guide.md"

    def first(label):
        return got[label]["suggestions"][0]["label"] if got[label]["suggestions"] else None

    # a renamed symbol: the new name in the same file
    assert got["src/shop/payments.py#handleAuthCallback"]["kind"] == "symbol_missing"
    assert first("src/shop/payments.py#handleAuthCallback") == "src/shop/payments.py#handle_auth_callback"
    # a symbol moved to another file
    assert first("src/shop/payments.py#refund_order") == "src/shop/refunds.py#refund_order"
    # moved files: the new path (with its symbol)
    assert got["src/shop/cart.py#apply_discount_code"]["kind"] == "path_missing"
    assert first("src/shop/cart.py#apply_discount_code") == "lib/shop/cart.py#apply_discount_code"
    assert first("docs/guide.md") == "docs/user/guide.md"
    # a deleted file: reported, nothing like it to suggest
    assert got["tests/test_cart.py"]["kind"] == "path_missing"
    assert got["tests/test_cart.py"]["suggestions"] == []
    assert all(p["where"].startswith(str(labels / "queries.yaml") + ":") for p in rep["problems"])
    # each problem names its label's own line (as the run's loader does), not its query's
    text_lines = (labels / "queries.yaml").read_text().splitlines()
    for p in rep["problems"]:
        n = int(p["where"].rsplit(":", 1)[1])
        assert f"path: {p['label'].split('#')[0]}" in text_lines[n - 1], (p, text_lines[n - 1])
    # the same as text
    assert main(["golden", "check", "--path", str(repo), "--golden", str(labels)]) == 1
    text = capsys.readouterr().out
    assert "maybe src/shop/payments.py#handle_auth_callback" in text
    assert "maybe docs/user/guide.md" in text and "8 label(s) do not resolve" in text


def test_check_could_not_check_exits_2(tmp_path, fixture_repo, labels, capsys):
    assert main(["golden", "check", "--path", str(tmp_path / "missing"),
                 "--golden", str(labels)]) == 2
    assert "not a directory" in capsys.readouterr().err
    bad = write_tree(tmp_path / "bad", {"queries.yaml": "corpus: repo\nqueries: [\n",
                                        "negatives.yaml": "negatives: []\n"})
    assert main(["golden", "check", "--path", str(fixture_repo), "--golden", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["golden", "check", "--path", str(fixture_repo),
                 "--golden", str(tmp_path / "none")]) == 2


def test_check_span_past_the_end_of_its_file():
    from rag.golden.label_check import CorpusView, check_label

    view = CorpusView(name="x", root=Path("."), lines={"a.py": 10}, symbols={"a.py": ["f"]})
    lab = types.SimpleNamespace(path="a.py", symbol=None, lines=(8, 12))
    p = check_label(view, lab, where="q.yaml:3", query_id="q")
    assert p.kind == "lines_out_of_range" and p.label == "a.py#L8-12"
    assert check_label(view, types.SimpleNamespace(path="a.py", symbol=None, lines=(1, 10)),
                       where="q.yaml:3", query_id="q") is None


# ------------------------------------------------------------------------------------ stats

STATS_QUERIES = textwrap.dedent('''\
    corpus: repo
    queries:
      - id: a
        query: handleAuthCallback
        tags: [symbol]
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
      - id: b
        query: voucher
        tags: [prose, docs]
        relevant:
          - path: src/shop/cart.py
            symbol: apply_discount_code
            grade: 2
          - path: docs/guide.md
      - id: c
        query: deploy
        tags: [prose]
        source: mined:git 0123abc
        relevant:
          - path: docs/guide.md
          - path: pyproject.toml
          - path: src/shop/cart.py
      - id: d
        query: refunds within 30 days
        source: hand
        relevant:
          - path: docs/guide.md
            lines: [9, 11]
        not_relevant:
          - path: src/shop/payments.py
            symbol: refund_order
      - id: e
        query: who can get money back
        source: mined:docstring
        relevant:
          - path: src/shop/payments.py
            symbol: refund_order
    ''')
STATS_NEGATIVES = textwrap.dedent('''\
    corpus: repo
    negatives:
      - {id: n1, query: football, tags: [off_topic]}
      - {id: n2, query: cooking, tags: [off_topic]}
      - {id: n3, query: kubernetes shop operator, tags: [near_miss]}
    ''')


@pytest.fixture
def stats_set(tmp_path) -> Path:
    return write_tree(tmp_path / "stats", {"queries.yaml": STATS_QUERIES,
                                           "negatives.yaml": STATS_NEGATIVES})


def test_stats_counts(stats_set, tmp_path, capsys):
    assert main(["golden", "stats", "--golden", str(stats_set), "--json",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["queries"] == 5 and st["labels"] == 8 and st["negatives"] == 3
    assert st["by_tag"] == {"docs": 1, "prose": 2, "symbol": 1} and st["untagged"] == 2
    assert st["by_unit"] == {"file": 4, "symbol": 3, "span": 1}
    assert st["by_source"] == {"hand": 3, "mined:docstring": 1, "mined:git": 1}
    assert st["several_labels"] == 2 and st["labels_per_query"] == {"1": 3, "2": 1, "3": 1}
    assert st["graded_labels"] == 1 and st["not_relevant_labels"] == 1
    assert st["negatives_by_tag"] == {"near_miss": 1, "off_topic": 2}
    assert st["power"] is None and "no pilot row" in st["power_note"]
    assert main(["golden", "stats", "--golden", str(stats_set),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    text = capsys.readouterr().out
    assert "label units: file 4, symbol 3, span 1" in text
    assert "by source:   hand 3, mined:docstring 1, mined:git 1" in text
    # an explicit pilot row that cannot be read is an error
    assert main(["golden", "stats", "--golden", str(stats_set), "--run", "abc",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 2


def test_stats_power_from_a_per_query_table(stats_set):
    from rag.eval.golden import load_golden
    from rag.eval.significance import minimum_detectable_effect, required_queries
    from rag.app.golden_cli import golden_stats, render_stats

    mrr = np.array([1.0, 0.5, 0.0, 1.0, 0.333, 0.25, 1.0, 0.0, 0.2, 1.0])
    frame = pd.DataFrame({"mrr": mrr}, index=[f"q{i}" for i in range(10)])
    st = golden_stats(load_golden(stats_set), frame, run_id="0123456789abcdef")
    pw = st["power"]
    sd_d = float(np.std(mrr, ddof=1))  # sqrt(2 (1 - 0.5)) = 1
    assert pw["sd_difference"] == pytest.approx(sd_d)
    assert pw["positives_needed"] == required_queries(sd_d, 0.05)
    assert pw["mde_at_pilot_size"] == pytest.approx(minimum_detectable_effect(sd_d, 10))
    assert pw["have"] == 5 and pw["enough"] is False and pw["effect"] == 0.05
    line = render_stats(st)[-1]
    assert f"{pw['positives_needed']} positives detect ΔMRR 0.05" in line
    assert "0123456789ab" in line
