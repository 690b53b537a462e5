"""Secret literals by content (rag/corpus/secrets.py): every token format in code, docs and
config files is redacted where text enters the pipeline, so it is in no chunk, no file of the
cache, no ``rag search --json`` output and no ``/search`` text; placeholders and ordinary code
are left alone. Every fake token is built at run time from a seeded generator, so this file
holds no token-shaped literal."""

from __future__ import annotations

import json
import logging
import random
import string
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_overrides, write_tree
from rag.corpus.secrets import (REDACTION_KINDS, TOKEN_RULES, has_literal_values,
                                redact_secrets, shannon_entropy)
from rag.corpus.walk import (Document, WalkStats, describe_redactions, drop_secret_documents,
                             walk_corpus)

_ALNUM = string.ascii_letters + string.digits


def _fake(seed: int) -> dict[str, str]:
    """One fake of every format, from ``random.Random(seed)``: the right shape, no real
    token (the prefixes are split so that no token-shaped literal is in this file)."""
    r = random.Random(seed)

    def rnd(n: int, alphabet: str = _ALNUM) -> str:
        return "".join(r.choice(alphabet) for _ in range(n))

    digits = string.digits
    return {
        "ghp": "gh" + "p_" + rnd(36), "gho": "gh" + "o_" + rnd(36),
        "ghu": "gh" + "u_" + rnd(36), "ghs": "gh" + "s_" + rnd(36),
        "ghr": "gh" + "r_" + rnd(36),
        "github_pat": "github" + "_pat_" + rnd(22) + "_" + rnd(59),
        "xoxb": "xo" + "xb-" + rnd(12, digits) + "-" + rnd(13, digits) + "-" + rnd(24),
        "xoxp": "xo" + "xp-" + "-".join(rnd(12, digits) for _ in range(3)) + "-" + rnd(32),
        "sk_live": "sk" + "_live_" + rnd(24), "rk_live": "rk" + "_live_" + rnd(24),
        "google": "AI" + "za" + rnd(35, _ALNUM + "-_"),
        "jwt": "ey" + "JhbGciOiJIUzI1NiJ9." + "ey" + rnd(40) + "." + rnd(43),
        "password": rnd(4) + "#" + rnd(2, digits) + "!" + rnd(3),  # 11 characters
        "secret": rnd(40),
    }


FAKE = _fake(27)
KIND = {"ghp": "github_token", "gho": "github_token", "ghu": "github_token",
        "ghs": "github_token", "ghr": "github_token", "github_pat": "github_token",
        "xoxb": "slack_token", "xoxp": "slack_token", "sk_live": "stripe_key",
        "rk_live": "stripe_key", "google": "google_api_key", "jwt": "jwt",
        "password": "password", "secret": "generic_secret"}
# the generic rules need a credential name; the token formats are found whatever the name
NAME = {"password": ("password", "DB_PASSWORD", "PASSWORD", "password"),
        "secret": ("API_TOKEN", "CLIENT_SECRET", "SECRET_KEY", "api_key")}


def _files(fmt: str) -> dict[str, str]:
    """``fmt``'s fake in a .py, a README.md, a settings.py and a config.yaml, each the way
    such a file holds a value (quoted in code, unquoted in a shell line and in YAML)."""
    value = FAKE[fmt]
    py, env, settings, yml = NAME.get(fmt, ("GITHUB_TOKEN", "TOKEN", "VALUE", "value"))
    return {
        "src/client.py": f'import os\n\n{py} = "{value}"\n\n\ndef headers():\n'
                         f'    return {{"Authorization": "token " + {py}}}\n',
        "README.md": f"# Client\n\nSet the credential first:\n\n    export {env}={value}\n\n"
                     "Then run `make`.\n",
        "app/settings.py": f"DEBUG = False\nSERVICE = {{'{settings}': '{value}', 'timeout': 3}}\n",
        "config.yaml": f"service:\n  url: https://api.example.org\n  {yml}: {value}\n",
    }


def _every_kind_repo() -> dict[str, str]:
    """One repository holding every format (each file's name made unique by its format)."""
    out = {}
    for fmt in FAKE:
        for rel, text in _files(fmt).items():
            out[f"{fmt}/{rel}"] = text
    out["plain.py"] = "def add(a, b):\n    return a + b\n"
    return out


# --------------------------------------------------------------------------- the rules


def test_entropy_by_hand():
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("aabb") == pytest.approx(1.0)
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    # p = 1/2, 1/4, 1/4: 0.5 * 1 + 2 * 0.25 * 2
    assert shannon_entropy("aabc") == pytest.approx(1.5)


def test_every_kind_is_registered_once():
    assert set(KIND.values()) <= set(REDACTION_KINDS)
    assert len(REDACTION_KINDS) == len(set(REDACTION_KINDS))
    assert {r.kind for r in TOKEN_RULES} | {"password"} == set(REDACTION_KINDS)


@pytest.mark.parametrize("fmt", sorted(FAKE))
@pytest.mark.parametrize("rel", ["src/client.py", "README.md", "app/settings.py",
                                 "config.yaml"])
def test_each_format_is_redacted_in_code_docs_and_config(fmt: str, rel: str):
    text = _files(fmt)[rel]
    red, found = redact_secrets(text)
    assert FAKE[fmt] not in red
    assert found == Counter({KIND[fmt]: 1})
    assert f"[REDACTED:{KIND[fmt]}]" in red
    # nothing else changes: the text minus the value, the marker in its place
    assert red == text.replace(FAKE[fmt], f"[REDACTED:{KIND[fmt]}]")


def test_tokens_of_other_lengths_are_redacted_whole():
    """GitHub says its token lengths may grow, and fakes come in any length or shape: a
    prefix with 30+ characters (a Slack prefix with 10+ holding a digit) is redacted whole (a 36-character pattern would leave a 78-character
    github_pat_ untouched, or a 40-character ghp_ with its tail showing)."""
    r = random.Random(3)
    long_ghp = "gh" + "p_" + "".join(r.choice(_ALNUM) for _ in range(40))
    short_pat = "github" + "_pat_" + "".join(r.choice(_ALNUM + "_") for _ in range(67))
    key = "AI" + "za" + "".join(r.choice(_ALNUM) for _ in range(37))
    slack = "xo" + "xb-" + "fake-token-" + "".join(r.choice(string.digits) for _ in range(6))
    for value in (long_ghp, short_pat, key, slack):
        red, found = redact_secrets(f"Set `{value}` first.\n")
        assert red.count("[REDACTED:") == 1 and value[6:] not in red and sum(found.values()) == 1


# weak but real: short, low in entropy, or words — a password name makes them secrets
WEAK_PASSWORDS = ["hun" + "ter2", "s3c" + "r3t", "password" + "123", "P@ss" + "w0rd",
                  "post" + "gres", "correct-horse-" + "battery-staple", "peanuts"]


@pytest.mark.parametrize("value", WEAK_PASSWORDS)
def test_hard_coded_passwords_are_redacted_whatever_their_entropy(value: str):
    for text in (f'password = "{value}"\n', f"    'PASSWORD': '{value}',\n",
                 f'login(user, password="{value}")\n', f'"db_password": "{value}"\n'):
        red, found = redact_secrets(text)
        assert value not in red and found == Counter(password=1), text


_SHA = "".join(random.Random(1).choice("0123456789abcdef") for _ in range(40))
_UUID = "6f1c2a9e-4b7d-4e21-9c3a-0d5e8f7b1a24"
ORDINARY = [
    'password = os.environ["DB_PASSWORD"]\n',
    "token = None\n",
    'api_key = "your-api-key"\n',
    "password: ${DB_PASSWORD}\n",
    'SECRET_KEY = "dev"\n',
    'password = "password"\n',
    'token = "STRING_LITERAL"\n',
    'unk_token = "[UNK]"\n',
    'csrf_token = "' + FAKE["secret"][:30] + '"\n',
    'next_page_token = "' + FAKE["secret"][:30] + '"\n',
    'password_field = "password_hash"\n',
    "api_key = settings.API_KEY\n",
    "token: z.string().min(8),\n",
    "secret = secrets.token_hex(32)\n",
    'private_key = "keys/server.pem"\n',
    'token_url = "https://auth.example.org/token"\n',
    "max_tokens = 1000\n",
    "token = tok\n",
    "password: postgres\n",
    "FILTERS = {'pass': 'bandpass', 'stop': 'bandstop'}\n",
    "    var credential: URLCredential?\n",
    "$ mix phx.gen.schema Accounts.User users password:string:redact\n",
    f'def test_commit():\n    commit = "{_SHA}"\n    assert resolve("HEAD") == commit\n',
    f'def test_ids():\n    request_id = "{_UUID}"\n    assert uuid.UUID(request_id).version == 4\n',
    f"The build at {_SHA} ({_UUID}) passed.\n",
    "Use a `ghp_…` token, or `xoxb-your-token`.\n",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_placeholders_and_ordinary_code_are_not_redacted(text: str):
    assert redact_secrets(text) == (text, Counter())


def test_a_heroku_name_makes_a_uuid_a_key():
    """A UUID is an id (ORDINARY) unless a Heroku name is assigned it (gitleaks'
    heroku-api-key), in code, shell and YAML alike."""
    for text in (f'HEROKU_API_KEY = "{_UUID}"\n', f"export HEROKU_API_KEY={_UUID}\n",
                 f"deploy:\n  heroku_api_key: {_UUID}\n", f"heroku.key => '{_UUID}'\n"):
        red, found = redact_secrets(text)
        assert found == Counter(heroku_key=1) and red == text.replace(_UUID,
                                                                      "[REDACTED:heroku_key]")
    for text in (f"heroku_app_id = {_UUID[:-1]}\n", "HEROKU_API_KEY=${HEROKU_API_KEY}\n"):
        assert redact_secrets(text) == (text, Counter())


@pytest.mark.parametrize("path, literal", [
    ("config.yaml", True), ("deploy/app.yml", True), ("setup.cfg", True), ("tox.ini", True),
    ("pyproject.toml", True), ("conf/app.properties", True), (".env", True),
    (".env.production", True), ("prod.env", True), ("src\\settings.conf", True),
    ("settings.py", False), ("README.md", False), ("config.json", False), ("Makefile", False),
    ("yaml", False)])
def test_which_files_hold_literal_values(path: str, literal: bool):
    assert has_literal_values(path) is literal


def test_a_config_files_unquoted_password_is_a_literal_code_s_is_not():
    """``password: hunterhunter`` in YAML (or ``DB_PASSWORD=...`` in a .env) assigns a string;
    in code ``password = hunterhunter`` names a variable. Placeholders, templates, camelCase
    and words naming a credential stay ordinary in config files too."""
    weak = "hunter" + "hunter"
    for text in (f"db:\n  password: {weak}\n", f"DB_PASSWORD={weak}\n",
                 f"[db]\npassword = {weak}\n"):
        red, found = redact_secrets(text, literal_values=True)
        assert found == Counter(password=1) and weak not in red, text
        assert redact_secrets(text) == (text, Counter())  # the same line read as code
    for text in ("password: ${DB_PASSWORD}\n", "password: changeme\n",
                 "password: PasswordInput\n", "password_field: hunterhunter\n",
                 "token: tokenValue\n", "secret_key: some_secret_name\n"):
        assert redact_secrets(text, literal_values=True) == (text, Counter()), text


def test_the_walk_reads_config_values_as_literals(tmp_path: Path):
    weak = "hunter" + "hunter"
    root = write_tree(tmp_path / "repo", {"deploy/config.yaml": f"db:\n  password: {weak}\n",
                                          "app.py": f"password = {weak}\n"})
    stats = WalkStats()
    docs = {d.path: d.text for d in walk_corpus(root, stats=stats)}
    assert weak not in docs["deploy/config.yaml"] and weak in docs["app.py"]
    assert stats.as_dict()["secrets_redacted_password"] == 1


# --------------------------------------------------------------------------- the walk


EXPECTED_KINDS = Counter({k: 4 * sum(1 for f in FAKE if KIND[f] == k) for k in set(KIND.values())})


def test_walk_redacts_counts_by_kind_and_loses_no_file(tmp_path: Path, caplog):
    root = write_tree(tmp_path / "repo", _every_kind_repo())
    stats = WalkStats()
    with caplog.at_level(logging.INFO, logger="rag.corpus.walk"):
        docs = {d.path: d for d in walk_corpus(root, stats=stats)}
    assert len(docs) == 4 * len(FAKE) + 1 and stats.skipped.get("secret", 0) == 0
    assert stats.files_redacted == 4 * len(FAKE)
    # 6 GitHub, 2 Slack, 2 Stripe, 1 each of the others, in 4 files each
    assert stats.redacted == EXPECTED_KINDS
    assert EXPECTED_KINDS["github_token"] == 24 and sum(EXPECTED_KINDS.values()) == 56
    d = stats.as_dict()
    assert d["secrets_redacted"] == 56 and d["files_redacted"] == 56
    assert d["secrets_redacted_github_token"] == 24 and d["secrets_redacted_slack_token"] == 8
    assert d["secrets_redacted_gitlab_token"] == 0  # every kind is reported, zero or not
    for fmt, value in FAKE.items():
        for rel, text in _files(fmt).items():
            doc = docs[f"{fmt}/{rel}"]
            assert value not in doc.text
            assert doc.text == text.replace(value, f"[REDACTED:{KIND[fmt]}]")
            assert doc.size == len(text.encode())  # the size on disk
    assert docs["plain.py"].text == "def add(a, b):\n    return a + b\n"
    # logged by path and kind, never by value
    assert "ghp/src/client.py" in caplog.text and "github_token" in caplog.text
    assert not any(v in caplog.text for v in FAKE.values())


def test_redactions_are_described_in_one_line():
    stats = WalkStats()
    stats.note_redacted("a.py", Counter(github_token=2))
    stats.note_redacted("conf/b.yaml", Counter(password=1))
    assert describe_redactions(stats.as_dict()) == (
        "secret literals redacted: 3 in 2 file(s) (github_token 2, password 1); each replaced "
        "by [REDACTED:<kind>], the rest of the file indexed")
    assert describe_redactions(WalkStats().as_dict()) is None


def test_index_secrets_keeps_the_literals(tmp_path: Path):
    root = write_tree(tmp_path / "repo", _files("ghp"))
    stats = WalkStats()
    texts = [d.text for d in walk_corpus(root, stats=stats, index_secrets=True)]
    assert any(FAKE["ghp"] in t for t in texts) and stats.files_redacted == 0


def test_documents_that_are_not_files_are_redacted_too():
    issue = Document(path="issues/7.md", category="issue", size=0,
                     text=f"CI fails with SLACK_TOKEN={FAKE['xoxb']}\n")
    plain = Document(path="issues/8.md", category="issue", size=0, text="Works for me.\n")
    stats = WalkStats()
    kept = drop_secret_documents([issue, plain], stats)
    assert [d.text for d in kept] == ["CI fails with SLACK_TOKEN=[REDACTED:slack_token]\n",
                                      "Works for me.\n"]
    assert kept[1] is plain and stats.redacted == Counter(slack_token=1)
    assert stats.redactions == [("issues/7.md", ("slack_token",))]
    assert drop_secret_documents([issue], WalkStats(), index_secrets=True) == [issue]


def test_no_chunk_of_an_index_holds_a_secret(tmp_path: Path):
    from rag.index.build import build_index

    root = write_tree(tmp_path / "repo", _every_kind_repo())
    idx = build_index(root, embedder=None, cache_dir=None, progress=False,
                      chunk_store=tmp_path / "store")
    assert idx.stats["files_indexed"] == 4 * len(FAKE) + 1
    assert idx.stats["secrets_redacted"] == 56 and idx.stats["secrets_redacted_jwt"] == 4
    assert not any(v in c.text for c in idx.chunks for v in FAKE.values())
    assert sum(c.text.count("[REDACTED:") for c in idx.chunks) >= 56
    # nor the chunk store written beside it
    for p in (tmp_path / "store").rglob("*"):
        if p.is_file():
            data = p.read_text(encoding="utf-8", errors="replace")
            assert not any(v in data for v in FAKE.values()), p


def test_walk_version_changed_with_the_redaction():
    """Builds and chunk stores made before literals were redacted hold them: the walk's
    version is part of both keys (rag/index/store.py, rag/app/stages.index_settings), so
    they are not reused."""
    from rag.index.store import WALK_VERSION

    assert int(WALK_VERSION) >= 5


# --------------------------------------------------------------------------- served


def _leaks(blob: str) -> list[str]:
    return [k for k, v in FAKE.items() if v in blob]


@pytest.mark.slow
def test_rag_search_json_and_cache_hold_no_secret(tmp_path: Path, monkeypatch, capsys):
    from rag.app.cli import main

    repo = write_tree(tmp_path / "repo", _every_kind_repo())
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    for query in ("GITHUB_TOKEN headers Authorization", "service password",
                  FAKE["ghp"], FAKE["xoxb"]):
        rc = main(["search", query, "-r", str(repo), "--mode", "bm25", "--top-k", "20",
                   "embedder.query_backend=torch", "--json"])
        captured = capsys.readouterr()
        assert rc in (0, 3) and not _leaks(captured.out + captured.err)
        if rc == 0:
            assert json.loads(captured.out)["hits"]
    # the published build and everything else under the cache
    builds = list((tmp_path / "cache").rglob("chunks.json"))
    assert builds
    chunks = json.loads(builds[0].read_text())
    assert sum(c["text"].count("[REDACTED:") for c in chunks) >= 56
    for p in (tmp_path / "cache").rglob("*"):
        if p.is_file():
            assert not _leaks(p.read_bytes().decode("utf-8", errors="replace")), p


@pytest.mark.slow
def test_service_search_with_text_serves_no_secret(tmp_path: Path, fixture_golden, compose,
                                                   embedder):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app
    from rag.app.stages import StageCache

    repo = write_tree(tmp_path / "repo", _every_kind_repo())
    cfg = compose(run_overrides(tmp_path, repo, fixture_golden))
    index = StageCache().index(cfg, repo, embedder, progress=False)
    client = TestClient(create_app(cfg, index))
    seen = 0
    for query in ("GITHUB_TOKEN headers Authorization", "service password credential",
                  "export the credential first", "REDACTED"):
        r = client.post("/search", json={"query": query, "mode": "bm25", "top_k": 20,
                                         "with_text": True})
        assert r.status_code == 200, r.text
        assert not _leaks(r.text)
        seen += sum(h["text"].count("[REDACTED:") for h in r.json()["hits"])
    assert seen > 0
