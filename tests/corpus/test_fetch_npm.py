"""fetch_npm (rag/corpus/fetch.py) with a fake ``npm`` on PATH — offline and fast — and the zod
golden set's shape (loaded without a corpus). The real tarball is only fetched by the
``integration`` test at the end."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT
from rag.corpus.fetch import CorpusFetchError, fetch_npm, main, parse_npm_spec

# A stand-in for `npm pack SPEC --pack-destination DIR --ignore-scripts`: logs its argv (one
# JSON line per call) and writes NAME-VERSION.tgz holding package/{package.json,src/index.ts},
# as the registry's tarballs do; FAKE_NPM_MODE=fail exits 1 like npm offline, =garbage writes
# a .tgz that is not a tar archive.
FAKE_NPM = textwrap.dedent('''\
    #!{python}
    import io, json, os, sys, tarfile
    with open(os.environ["FAKE_NPM_LOG"], "a") as log:
        log.write(json.dumps(sys.argv[1:]) + "\\n")
    mode = os.environ.get("FAKE_NPM_MODE", "ok")
    if mode == "fail":
        sys.stderr.write("npm error code ENOTFOUND\\nnpm error network request failed\\n")
        sys.exit(1)
    spec = sys.argv[2]
    dest = sys.argv[sys.argv.index("--pack-destination") + 1]
    name, version = spec.rsplit("@", 1)
    out = os.path.join(dest, name.lstrip("@").replace("/", "-") + "-" + version + ".tgz")
    if mode == "garbage":
        open(out, "wb").write(b"not a tarball")
        sys.exit(0)
    files = {{"package/package.json": json.dumps({{"name": name, "version": version}}),
             "package/src/index.ts": "export function hello(): string {{ return 'hi'; }}\\n"}}
    with tarfile.open(out, "w:gz") as tf:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    print(os.path.basename(out))
    ''')


@pytest.fixture
def fake_npm(tmp_path, monkeypatch):
    """A fake npm first on PATH; returns a function giving the argv of every call so far."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable))
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "npm-calls.jsonl"
    log.touch()
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    monkeypatch.delenv("FAKE_NPM_MODE", raising=False)
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def test_fetch_npm_packs_once_and_serves_the_cache(fake_npm, tmp_path, capsys):
    cache = tmp_path / "cache"
    root = fetch_npm("demo@1.2.3", cache)
    # the first use says it downloads, and where to
    target = cache / "corpora" / "npm-demo-1.2.3"
    assert capsys.readouterr().err == (f"fetching 'demo@1.2.3' into {target} (first use of "
                                       "this corpus; reused after)\n")
    assert root == cache / "corpora" / "npm-demo-1.2.3" / "package"
    assert (root / "src" / "index.ts").read_text().startswith("export function hello")
    assert json.loads((root / "package.json").read_text())["version"] == "1.2.3"
    (call,) = fake_npm()
    assert call[:2] == ["pack", "demo@1.2.3"] and "--ignore-scripts" in call
    assert Path(call[call.index("--pack-destination") + 1]).parent.parent == cache / "corpora"
    # second call: served from the cache, npm is not run again
    assert fetch_npm("demo@1.2.3", cache) == root
    assert len(fake_npm()) == 1 and capsys.readouterr().err == ""
    # nothing half-written left beside it
    assert sorted(p.name for p in (cache / "corpora").iterdir()) == ["npm-demo-1.2.3"]


def test_fetch_npm_scoped_package_and_prerelease(fake_npm, tmp_path):
    root = fetch_npm("@acme/widgets@2.0.0-rc.1", tmp_path)
    assert root.parent.name == "npm-acme+widgets-2.0.0-rc.1"
    assert (root / "src" / "index.ts").is_file()


def test_missing_npm_is_one_clear_error_naming_the_command(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(CorpusFetchError) as exc:
        fetch_npm("demo@1.2.3", tmp_path / "cache")
    msg = str(exc.value)
    assert "npm is not installed" in msg
    assert "npm pack demo@1.2.3 --pack-destination" in msg and "--ignore-scripts" in msg
    assert not (tmp_path / "cache" / "corpora" / "npm-demo-1.2.3").exists()


def test_npm_failure_offline_names_the_command_and_leaves_no_cache(fake_npm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NPM_MODE", "fail")
    cache = tmp_path / "cache"
    with pytest.raises(CorpusFetchError) as exc:
        fetch_npm("demo@1.2.3", cache)
    msg = str(exc.value)
    assert "pack demo@1.2.3 --pack-destination" in msg and "(exit 1)" in msg
    assert "ENOTFOUND" in msg
    assert list((cache / "corpora").iterdir()) == []
    # a later, successful fetch is not blocked by the failed one
    monkeypatch.setenv("FAKE_NPM_MODE", "ok")
    assert (fetch_npm("demo@1.2.3", cache) / "src" / "index.ts").is_file()


def test_an_archive_that_is_not_a_tarball_is_refused(fake_npm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NPM_MODE", "garbage")
    with pytest.raises(CorpusFetchError, match="could not unpack"):
        fetch_npm("demo@1.2.3", tmp_path)
    assert list((tmp_path / "corpora").iterdir()) == []


@pytest.mark.parametrize("spec", [
    "zod",                          # no version
    "zod@latest",                   # a tag moves
    "zod@^3.25.0",                  # a range
    "zod@3",                        # not an exact version
    "zod@3.25.76 --registry=x",     # an extra argument
    "--registry=http://evil@1.0.0", # an option
    "../evil@1.0.0",                # a path
    "file:../pkg@1.0.0",
    "git+https://github.com/colinhacks/zod.git",
    "Zod@3.25.76",                  # npm names are lower case
    "",
])
def test_a_spec_that_is_not_pinned_is_refused_before_npm_runs(fake_npm, tmp_path, spec):
    with pytest.raises(CorpusFetchError, match="not pinned"):
        fetch_npm(spec, tmp_path)
    assert fake_npm() == []


def test_parse_npm_spec():
    assert parse_npm_spec("zod@3.25.76") == {"name": "zod", "version": "3.25.76"}
    assert parse_npm_spec("@types/node@20.1.0") == {"name": "@types/node", "version": "20.1.0"}


def test_command_line(fake_npm, tmp_path, capsys):
    assert main(["--npm", "demo@1.2.3", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "corpora" / "npm-demo-1.2.3" / "package")
    assert main(["--npm", "demo@next", "--cache-dir", str(tmp_path)]) == 1
    assert "error: npm spec 'demo@next' is not pinned" in capsys.readouterr().err


# ------------------------------------------------------------------ the zod golden set

ZOD_GOLDEN = PROJECT / "golden" / "zod"


def _zod_golden():
    from rag.eval.golden import load_golden

    return load_golden(ZOD_GOLDEN, corpus_paths=None)


def test_zod_golden_set_loads_and_has_the_required_slices():
    golden = _zod_golden()
    assert golden.corpus == "zod-3.25.76"
    tags = Counter(t for q in golden.positives for t in q.tags)
    own_prose = [q for q in golden.positives
                 if "prose" in q.tags and not {"docs", "keyword"} & set(q.tags)]
    assert len(golden.positives) >= 60
    assert tags["symbol"] >= 20
    assert len(own_prose) >= 30
    assert tags["docs"] >= 10
    assert len(golden.negatives) >= 15
    neg_tags = Counter(t for n in golden.negatives for t in n.tags)
    assert neg_tags["off_topic"] >= 1 and neg_tags["near_miss"] >= 10
    assert all(n.note for n in golden.negatives)  # every negative carries its grep evidence
    # labels point at the TypeScript source or the shipped docs/config, never the build output
    for q in golden.positives:
        for lab in q.relevant:
            assert lab.path.startswith("src/") or lab.path in {"README.md", "package.json", "LICENSE"}, \
                (q.id, lab.path)


def test_zod_corpus_config_names_the_same_corpus():
    from rag.corpus.fetch import _npm_slug

    from rag.app.config import default_corpus_name

    conf = yaml.safe_load((PROJECT / "conf" / "corpus" / "zod.yaml").read_text())
    # the name is derived from the pin (no name: key), so another pin is another corpus
    assert "name" not in conf
    assert default_corpus_name(None, None, npm=conf["npm"]) == _zod_golden().corpus
    assert parse_npm_spec(conf["npm"]) == {"name": "zod", "version": "3.25.76"}
    assert _npm_slug(conf["npm"]) == "npm-zod-3.25.76"


@pytest.mark.integration
def test_zod_label_paths_exist_in_the_real_tarball():
    """Fetches zod@3.25.76 with npm on first use (cached in $RAG_CACHE_DIR like the sdists)."""
    import shutil

    from rag.app.config import expand_path

    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (make sysdeps)")
    root = fetch_npm("zod@3.25.76", expand_path(os.environ.get("RAG_CACHE_DIR", "~/.cache/rag")))
    assert len(list((root / "src").rglob("*.ts"))) >= 200
    missing = sorted({lab.path for q in _zod_golden().positives for lab in q.relevant
                      if not (root / lab.path).is_file()})
    assert missing == []
