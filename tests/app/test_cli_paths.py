"""Names and paths from the command line: directories with any legal name reach the config as
data, names that would leave their folder are refused, two directories with the same name get
their own index, and overrides may follow the query and the options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURE_FILES, write_tree
from rag.app.cli import main
from rag.index import versioned
from rag.core.names import SAFE_NAME, safe_component

ODD_NAMES = ["a,b", "x#y", "it's", "p=q", "[br]", "${oc.env:HOME}"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """The rag cache in tmp_path, and $HOME an empty folder (so an interpolated
    ``${oc.env:HOME}`` could never index a real home directory)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def search_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["search", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --- the one function that turns names into folder names ---------------------------------

@pytest.mark.parametrize("name", ["flask-3.1.3", "shop", "rrf_k", "a+b", "V2.0"])
def test_safe_names_are_kept(name):
    assert safe_component(name) == name
    assert safe_component(name, encode=True) == name


@pytest.mark.parametrize("name, reason", [
    ("../../x", "path separator"), ("a/b", "path separator"), ("..", "parent directory"),
    (".", "parent directory"), ("${oc.env:HOME}", "interpolation"), ("a\0b", "NUL"),
    ("", "empty"), ("it's", "only letters"), ("x" * 129, "at most 128")])
def test_unsafe_names_are_refused_with_key_and_value(name, reason):
    with pytest.raises(ValueError) as err:
        safe_component(name, what="corpus.name")
    assert f"corpus.name={name!r}" in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("name", ODD_NAMES + ["../../x", "..", ".", "a/b", "\udcff", "é"])
def test_derived_names_are_encoded_deterministically(name):
    enc = safe_component(name, encode=True)
    assert SAFE_NAME.fullmatch(enc) and "/" not in enc and enc not in (".", "..")
    assert enc == safe_component(name, encode=True)
    assert enc.rsplit("-", 1)[1] != safe_component(name + "!", encode=True).rsplit("-", 1)[1]
    assert safe_component("it's", encode=True).startswith("it_s-")


def test_sweep_report_name_stays_under_reports(tmp_path, monkeypatch):
    import rag.app.report
    from rag.app.config import project_root

    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    written = []
    monkeypatch.setattr(rag.app.report, "write_report",
                        lambda uri, out, **kw: written.append(out) or out)
    monkeypatch.setattr(rag.app.report, "Ledger", lambda *a, **kw: None)  # no store
    for name in ["../../x", "a/b", "..", "${oc.env:HOME}", "rrf_k"]:
        assert rag.app.report.main(["--tracking-uri", f"sqlite:///{db}", "--sweep", name]) == 0
    assert all(p.parent == project_root() / "reports" for p in written)
    assert written[-1].name == "sweep_rrf_k.md"
    assert len({p.name for p in written}) == 5


def test_experiment_artifact_folder_stays_under_the_artifact_root(tmp_path):
    from rag.ledger.mlflow_store import Ledger

    ledger = Ledger(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art")
    exp = ledger.client.get_experiment(ledger.experiment_id("rag-../../../x"))
    assert exp.name == "rag-../../../x"
    location = Path(exp.artifact_location.removeprefix("file://"))
    assert location.parent == (tmp_path / "art").resolve()
    assert location.name == safe_component("rag-../../../x", encode=True)


# --- rag index / rag search on directories with any legal name ----------------------------

@pytest.mark.slow
def test_rag_index_on_an_unchanged_tree_publishes_nothing(env, tmp_path, capsys):
    """Indexing the same tree twice keeps the first build current and says so; a changed file
    publishes a new build; ``--force`` publishes one even when nothing changed."""
    corpus = write_tree(tmp_path / "corpora" / "shop", FIXTURE_FILES)
    root = versioned.index_dir(env, "shop", str(corpus.resolve()))
    assert main(["index", "--path", str(corpus)]) == 0
    first = versioned.current_build_id(root)
    assert f"published build {first}" in capsys.readouterr().out
    assert main(["index", "--path", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert f"nothing changed since build {first}" in out and "published build" not in out
    assert versioned.build_ids(root) == [first] and versioned.current_build_id(root) == first
    assert main(["index", "--path", str(corpus), "--force"]) == 0
    forced = versioned.current_build_id(root)
    assert forced != first and f"published build {forced}" in capsys.readouterr().out
    # other BM25 parameters are another saved matrix; a stale build is refreshed
    for override in ("bm25.k1=1.2", "index.max_age_h=0"):
        assert main(["index", "--path", str(corpus), override]) == 0
        assert "published build" in capsys.readouterr().out, override
    assert main(["index", "--path", str(corpus), "--force"]) == 0
    forced = versioned.current_build_id(root)
    capsys.readouterr()
    path = corpus / "src" / "shop" / "cart.py"  # indexed (build/ is ignored by .gitignore)
    path.write_text(path.read_text() + "\n\ndef added_later():\n    return 1\n")
    assert main(["index", "--path", str(corpus)]) == 0
    changed = versioned.current_build_id(root)
    assert changed not in (first, forced) and "published build" in capsys.readouterr().out
    # a damaged current build is never kept as "unchanged": the next index replaces it
    (root / "builds" / changed / "embeddings.npy").write_bytes(b"broken")
    assert main(["index", "--path", str(corpus)]) == 0
    assert versioned.current_build_id(root) != changed


@pytest.mark.slow
@pytest.mark.parametrize("dirname", ODD_NAMES)
def test_index_and_search_a_directory_with_an_odd_name(env, tmp_path, capsys, dirname):
    corpus = write_tree(tmp_path / "corpora" / dirname, FIXTURE_FILES)
    assert main(["index", "--path", str(corpus)]) == 0
    assert "published build" in capsys.readouterr().out
    out = search_json(capsys, "handleAuthCallback", "-r", str(corpus), "--mode", "bm25")
    assert out["hits"][0]["path"] == "src/shop/payments.py"
    assert out["hits"][0]["symbol"] == "handleAuthCallback"
    # the build records the directory itself, not an interpolation of its name
    root = versioned.index_dir(env, safe_component(dirname, encode=True), str(corpus.resolve()))
    manifest = versioned.read_manifest(root)
    assert manifest["corpus_root"] == str(corpus.resolve())
    assert manifest["build_id"] == out["index"]["version"]
    assert [p.name for p in (env / "indexes").iterdir()] == [root.name]
    assert tree(tmp_path / "home") == set()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "${oc.env:HOME}"])
def test_escaping_corpus_names_are_refused_and_nothing_is_written(env, tmp_path, capsys, name):
    corpus = write_tree(tmp_path / "corpora" / "tiny", FIXTURE_FILES)
    before = tree(tmp_path)
    for argv in (["index", "--path", str(corpus), f"corpus.name={name}"],
                 ["search", "refund", "-r", str(corpus), f"corpus.name={name}"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert str(exc.value).startswith(f"error: corpus.name={name!r} cannot be used as a folder")
    assert tree(tmp_path) == before  # no folder created anywhere, inside or outside the cache


def two_tiny_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """``a/tiny`` and ``b/tiny``: the shop fixture plus one file of their own each."""
    a = write_tree(tmp_path / "a" / "tiny", {**FIXTURE_FILES, "src/shop/alpha.py":
                   'def alpha_refund():\n    """Give the customer a refund in alpha."""\n'})
    b = write_tree(tmp_path / "b" / "tiny", {**FIXTURE_FILES, "src/shop/beta.py":
                   'def beta_refund():\n    """Give the customer a refund in beta."""\n'})
    return a, b


def own_paths(capsys, corpus: Path) -> set[str]:
    out = search_json(capsys, "give the customer a refund", "-r", str(corpus), "--mode", "dense",
                      "--top-k", "40", "abstain.min_dense=0", "abstain.weak_dense=0",
                      "search.candidates=40")
    return {h["path"] for h in out["hits"]}


@pytest.mark.slow
def test_two_directories_with_the_same_name_get_their_own_index(env, tmp_path, capsys):
    a, b = two_tiny_dirs(tmp_path)
    assert main(["index", "--path", str(a)]) == 0
    # b was never indexed: search builds b's own index instead of answering from a's
    for d, own, other in ((b, "src/shop/beta.py", "src/shop/alpha.py"),
                          (a, "src/shop/alpha.py", "src/shop/beta.py"),
                          (b, "src/shop/beta.py", "src/shop/alpha.py")):
        paths = own_paths(capsys, d)
        assert own in paths and other not in paths
        assert paths and all((d / p).is_file() for p in paths)
    roots = sorted(p.name for p in (env / "indexes").iterdir())
    assert len(roots) == 2 and all(r.startswith("tiny-") for r in roots)
    manifests = [versioned.read_manifest(env / "indexes" / r)["corpus_root"] for r in roots]
    assert sorted(manifests) == sorted([str(a.resolve()), str(b.resolve())])


@pytest.mark.slow
def test_a_build_of_another_directory_is_rebuilt_not_served(env, tmp_path, capsys, monkeypatch):
    """Were two directories ever to map to one index folder (the old name-only layout, a hash
    collision), the recorded corpus_root makes search rebuild rather than answer from the
    other directory's files."""
    a, b = two_tiny_dirs(tmp_path)
    name_only = versioned.index_dir
    monkeypatch.setattr(versioned, "index_dir", lambda cache, name, source=None: name_only(cache, name))
    assert main(["index", "--path", str(a)]) == 0
    capsys.readouterr()
    assert main(["search", "give the customer a refund", "-r", str(b), "--json"]) == 0
    err = capsys.readouterr().err
    assert f"corpus_root: index {str(a.resolve())!r}, requested {str(b.resolve())!r}" in err
    assert "rebuilding it for this corpus" in err
    paths = own_paths(capsys, b)
    assert "src/shop/beta.py" in paths and "src/shop/alpha.py" not in paths
    assert versioned.read_manifest(env / "indexes" / "tiny")["corpus_root"] == str(b.resolve())


@pytest.mark.slow
def test_overrides_after_the_query_and_the_options(env, tmp_path, capsys):
    corpus = write_tree(tmp_path / "corpora" / "it's", FIXTURE_FILES)
    query = "send money back for a cancelled order"
    out = search_json(capsys, query, "-r", str(corpus), "abstain.min_dense=0.2",
                      "abstain.weak_dense=0.2", "search.top_k=1")
    assert [h["path"] for h in out["hits"]] == ["src/shop/payments.py"] and out["dropped"] == 0
    # the overrides reached the config: an impossible threshold drops every hit
    out = search_json(capsys, query, "-r", str(corpus), "--top-k", "3", "abstain.min_dense=0.99",
                      "abstain.weak_dense=0.99")
    assert out["hits"] == [] and out["dropped"] == 3
    # before the query, too
    out = search_json(capsys, "search.top_k=2", "abstain.min_dense=0.0", "abstain.weak_dense=0.0",
                      query, "-r", str(corpus))
    assert len(out["hits"]) == 2 and out["hits"][0]["path"] == "src/shop/payments.py"
    # rag index takes overrides after its options as well
    capsys.readouterr()
    assert main(["index", "--path", str(corpus), "corpus.window_lines=30"]) == 0
    assert "published build" in capsys.readouterr().out


def test_two_queries_are_an_error(env, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["search", "refund", "order", "abstain.min_dense=0.2"])
    assert exc.value.code == 2
    assert "one query expected, got 'refund', 'order'" in capsys.readouterr().err


def test_default_corpus_name_is_accepted_and_overrides_are_checked(env):
    from rag.app.search_cli import compose_config, corpus_identity, corpus_name

    cfg = compose_config([])
    assert corpus_name(cfg) == "flask-3.1.3"
    assert corpus_identity(cfg) == {"corpus_sdist": "flask==3.1.3"}
    with pytest.raises(ValueError, match=r"corpus.name='\$\{oc.env:HOME\}' .* interpolation"):
        corpus_name(compose_config(["corpus.name=${oc.env:HOME}"]))


@pytest.mark.parametrize("raw", ["/t/${oc.env:HOME}", "/t/a\\${x}", "/t/a\\\\${x}", "/t/${",
                                 "/t/}${a", "/t/$x", "/t/a\\b", "/t/\\", "/t/a,b#c=d'[e]"])
def test_paths_are_stored_verbatim_in_the_config(raw):
    from omegaconf import OmegaConf

    from rag.app.search_cli import omegaconf_literal

    cfg = OmegaConf.create({"corpus": {"path": None}})
    cfg.corpus.path = omegaconf_literal(raw)
    assert cfg.corpus.path == raw
    assert OmegaConf.to_container(cfg, resolve=True)["corpus"]["path"] == raw
