"""No silent mislabelling (issue 11): unknown keys, the corpus's own name, golden sets of
another corpus, MLFLOW_TRACKING_URI and paths.output_dir."""

from __future__ import annotations


import pytest

from conftest import PROJECT
from rag.app.config import default_corpus_name, ledger_uri, output_path, validate


def test_unknown_keys_are_refused_with_the_closest_known(compose):
    with pytest.raises(ValueError, match=r"unknown config key 'search.mdoe'; did you mean 'search.mode'"):
        validate(compose(["+search.mdoe=bm25"]))
    with pytest.raises(ValueError, match=r"unknown config key 'searchh'; did you mean 'search'"):
        validate(compose(["+searchh.mode=bm25"]))
    validate(compose(["search.mode=bm25"]))  # a known key passes
    validate(compose(["+sweep=routing"]))  # so does every sweep file's key


def test_corpus_name_is_the_corpus_own(compose, tmp_path):
    assert compose([]).corpus.name == "flask-3.1.3"
    repo = tmp_path / "myrepo"
    repo.mkdir()
    assert compose([f"corpus.path={repo}"]).corpus.name == "myrepo"
    assert compose([f"corpus.path={repo}", "corpus.name=other"]).corpus.name == "other"
    assert default_corpus_name(None, "requests==2.32.3") == "requests-2.32.3"
    # a pinned corpus's name follows its pin: another version is another corpus
    assert compose(["corpus=zod"]).corpus.name == "zod-3.25.76"
    assert compose(["corpus=zod", "corpus.npm=zod@4.0.0"]).corpus.name == "zod-4.0.0"
    assert compose(["corpus.sdist='flask==3.0.0'"]).corpus.name == "flask-3.0.0"
    odd = default_corpus_name(str(tmp_path / "it's"), None)
    assert odd.startswith("it_s-") and "'" not in odd
    with pytest.raises(ValueError, match="corpus.path=DIR, corpus.sdist=REQUIREMENT or corpus.npm"):
        default_corpus_name(None, None)


def test_output_dir_moves_every_written_path(compose, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAG_OUTPUT_DIR", raising=False)
    cfg = compose([f"paths.output_dir={tmp_path}"])
    assert ledger_uri(cfg) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert output_path(cfg, cfg.tracking.artifact_root) == tmp_path / "mlartifacts"
    assert output_path(cfg, cfg.tracking.report_path) == tmp_path / "reports" / "ledger.md"
    default = compose([])
    assert ledger_uri(default) == f"sqlite:///{PROJECT / 'mlflow.db'}"


def test_mlflow_tracking_uri_is_honoured(compose, tmp_path, monkeypatch):
    from rag.app.config import default_tracking_uri

    monkeypatch.delenv("RAG_OUTPUT_DIR", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'team.db'}")
    assert ledger_uri(compose([])) == f"sqlite:///{tmp_path / 'team.db'}"
    assert default_tracking_uri(None) == f"sqlite:///{tmp_path / 'team.db'}"
    assert default_tracking_uri("sqlite:///x.db") == f"sqlite:///{PROJECT / 'x.db'}"
    # an explicit tracking.uri still wins
    assert ledger_uri(compose(["tracking.uri=sqlite:////abs/l.db"])) == "sqlite:////abs/l.db"


@pytest.mark.slow
def test_golden_set_of_another_corpus_fails_in_one_line(tmp_path, fixture_repo):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", f"corpus.path={fixture_repo}",
         f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 2
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, proc.stderr
    assert "'flask-3.1.3'" in err[0] and "'repo'" in err[0] and "eval.golden_dir" in err[0]
    db = tmp_path / "mlflow.db"  # the store may be opened before evaluation; no row in it
    if db.exists():
        import sqlite3

        with sqlite3.connect(db) as con:
            assert con.execute("select count(*) from runs").fetchone()[0] == 0


def test_plain_typo_on_the_command_line_names_the_closest_key():
    from rag.app.config import check_override_keys

    with pytest.raises(ValueError, match=r"'search.mdoe'; did you mean 'search.mode'"):
        check_override_keys(["search.mdoe=bm25"])
    with pytest.raises(ValueError, match=r"'searchh.mode'; did you mean 'search.mode'"):
        check_override_keys(["searchh.mode=bm25"])
    # groups, sweeps, hydra keys, options and known keys pass
    check_override_keys(["+sweep=routing", "rerank=cross_encoder", "hydra/launcher=joblib",
                         "hydra.launcher.n_jobs=2", "--cfg", "job", "search.mode=bm25",
                         "~rerank.model", "abstain.calibration=abc"])


def test_escaping_corpus_name_is_refused_by_the_runner(compose):
    with pytest.raises(ValueError, match="corpus.name='../../x' cannot be used as a folder name"):
        validate(compose(["corpus.name=../../x"]))


def test_schema_keys_read_from_the_dataclasses_equal_the_structured_configs_keys():
    """schema_keys walks the dataclasses instead of building OmegaConf.structured(RagConfig)
    (the slow part of every cold command); both must list the same dotted keys, dict fields
    with default items included."""
    from omegaconf import DictConfig, OmegaConf

    from rag.app.config import RagConfig, schema_keys

    def keys(node, prefix=""):
        out = set()
        for k, v in node.items_ex(resolve=False):
            out.add(f"{prefix}{k}")
            if isinstance(v, DictConfig):
                out |= keys(v, f"{prefix}{k}.")
        return out

    import dataclasses

    # a mapping field whose keys are a vocabulary declares them (metadata "keys"): a key such
    # as fusion.weights.bm25 is valid before the mapping holds it
    declared = {f"{group.name}.{f.name}.{k}"
                for group in dataclasses.fields(RagConfig)
                if dataclasses.is_dataclass(group.default_factory)
                for f in dataclasses.fields(group.default_factory)
                for k in f.metadata.get("keys", tuple)()}
    assert {"fusion.weights.bm25", "ranking.priors.test"} <= declared
    got = schema_keys()
    assert got == keys(OmegaConf.structured(RagConfig)) | declared
    assert {"search.top_k", "embedder.backend", "bm25.k1"} <= got


@pytest.mark.parametrize("override, match", [
    ("fusion.weights={bm25:-1}", r"fusion.weights.bm25: a registered channel"),
    ("fusion.identifier_weights.bm25=-0.5", r"fusion.identifier_weights.bm25"),
    ("fusion.weights={bm26:1}", r"fusion.weights.bm26"),
    ("search.fallback=bm26", r"search.fallback must be a channel of"),
    ("fusion.method=borda", r"fusion.method must be one of \['combmnz', 'rrf', 'wsum'\]"),
    ("fusion.norm=sigmoid", r"fusion.norm must be one of \['max', 'min-max', 'zmuv'\]"),
    ("ranking.features=[definition,nope]", r"ranking: unknown feature 'nope'"),
    ("ranking.file_saturation=0", r"ranking.file_saturation must be in \(0, 1\]"),
    ("ranking.priors.test=0", r"ranking.priors.test must be a finite number > 0"),
])
def test_bad_fusion_fallback_and_ranking_settings_are_named(compose, override, match):
    with pytest.raises(ValueError, match=match):
        validate(compose([override]))


def test_the_ranking_defaults_have_one_source(compose):
    from rag.search.ranking.options import RankingOptions

    cfg = compose([])
    assert RankingOptions.from_config(cfg.ranking) == RankingOptions()
    assert RankingOptions.from_config(compose(["ranking=disabled"]).ranking).enabled is False
    validate(compose(["+sweep=ranking", "fusion.weights={dense:0.5}"]))


def test_every_fusion_option_composes_into_the_search_options(compose):
    from pathlib import Path

    from rag.search.fusion import DEFAULT_METHOD, DEFAULT_NORM
    from rag.search.pipeline import SearchOptions

    base = SearchOptions.from_config(compose([]))
    assert (base.fusion_method, base.fusion_norm) == (DEFAULT_METHOD, DEFAULT_NORM)
    got = {}
    for f in sorted((Path(PROJECT) / "conf" / "fusion").glob("*.yaml")):
        cfg = compose([f"fusion={f.stem}"])
        validate(cfg)
        o = SearchOptions.from_config(cfg)
        got[f.stem] = (o.fusion_method, o.fusion_norm, dict(o.fusion_weights))
        # every option keeps the default's identifier weights
        assert o.identifier_weights == base.identifier_weights
    assert got == {"rrf": ("rrf", "min-max", {}), "wsum": ("wsum", "min-max", {}),
                   "wsum_zmuv": ("wsum", "zmuv", {}), "combmnz": ("combmnz", "min-max", {}),
                   "wsum_dense": ("wsum", "min-max", {"bm25": 0.3, "dense": 0.7})}


def test_rerank_candidates_is_checked_only_where_a_reranker_runs(compose):
    top = compose([]).search.candidates + 1
    over = [f"search.top_k={top}", f"search.candidates={top}"]
    validate(compose([*over, "rerank=disabled"]))  # rerank.candidates is not read
    with pytest.raises(ValueError, match=rf"rerank.candidates \(\d+\) must be >= search.top_k \({top}\)"):
        validate(compose([*over, "rerank=cross_encoder"]))


def test_top_k_flag_grows_the_pools_it_needs_and_no_other(compose):
    from rag.app.search_cli import top_k_overrides

    pool = compose([]).search.candidates
    assert top_k_overrides([], 5) == ["search.top_k=5"]  # the default pool holds 5
    assert top_k_overrides([], pool + 1) == [f"search.top_k={pool + 1}",
                                             f"search.candidates={pool + 1}"]
    # a pool the user set stays as set (and validation names it if it is too small)
    assert top_k_overrides(["search.candidates=3"], pool + 1) == [f"search.top_k={pool + 1}"]
    rr = compose(["rerank=cross_encoder"]).rerank.candidates
    k = max(pool, rr) + 1
    assert top_k_overrides(["rerank=cross_encoder"], k) == [
        f"search.top_k={k}", f"search.candidates={k}", f"rerank.candidates={k}"]
    # with every override applied, the config validates
    validate(compose(["rerank=cross_encoder", *top_k_overrides(["rerank=cross_encoder"], k)]))
