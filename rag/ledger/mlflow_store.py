"""All MLflow access lives here: create the experiment, log one ledger row, read rows back.

A ledger row is one MLflow run: params = the flattened resolved config (spelled as the YAML
config spells it: ``true``, ``null``), metrics = the evaluation (headline first, then the
groups of :mod:`rag.ledger.metric_groups`), tags = fingerprints (git commit, corpus, golden
set, model), input dataset = the golden set (name, digest = its fingerprint), artifacts = the
resolved config, the per-query table, the calibration JSON, the TREC run and qrels files and
the row's figures. The run carries the evaluation's real start time and ends when the row is
logged. Rows are only ever added; nothing here edits or deletes one, except that
:meth:`Ledger.mark_killed` sets the status of a row left RUNNING by a killed process to KILLED
and :meth:`Ledger.mark_failed` that of a row whose logging failed to FAILED.

A tracking server (``http(s)://``) is reached within a retry budget on every request
(:func:`server_retries`, :func:`server_http_env`: ``tracking.server_retries``, default
:data:`SERVER_RETRIES`), so a server that stops answering ends a command in seconds with one
line (:meth:`Ledger.failure`), never after MLflow's minutes of retries.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import unquote

PARAM_MAX_CHARS = 500

# The TREC run file of a row. Named .txt because the MLflow UI previews .txt artifacts (it
# shows nothing for .trec); rows logged before are read under their old name.
RUN_FILE = "run.trec.txt"
RUN_FILE_NAMES = (RUN_FILE, "run.trec")
QRELS_FILE = "qrels.txt"
# the ranking as returned, chunk by chunk (rag/eval/evaluate.py chunk_run_lines / _jsonl)
CHUNK_RUN_FILE = "run.chunks.trec.txt"
CHUNK_RUN_JSONL = "run.chunks.jsonl"
# Every row is tagged as an evaluation run (mlflow.utils.mlflow_tags.MLFLOW_RUN_TYPE): the
# bundled UI (3.17) expands the parent of runs whose runType is "evaluation" in the runs table
RUN_TYPE_TAG = "mlflow.runType"
RUN_TYPE_EVALUATION = "evaluation"
# MLflow's dataset digest column holds at most 36 characters (MAX_DATASET_DIGEST_SIZE)
DATASET_DIGEST_CHARS = 36

# A row still RUNNING this many hours after it started was left by a killed process:
# ``python -m rag.report --mark-killed-after-h`` (no value) marks such rows KILLED.
STALE_RUNNING_H = 24.0

# How long opening a store waits for another process that is creating the same SQLite store.
INIT_LOCK_TIMEOUT_S = 300.0

_SQLITE_MAGIC = b"SQLite format 3\x00"

# Messages of the transient errors two processes meet when they create or migrate one new
# store at the same time (alembic, SQLAlchemy and MLflow wrap them in various types).
_TRANSIENT_STORE_ERRORS = (
    "database is locked", "database is busy",
    "online migration expected to match one row",  # alembic: another process moved the version
    "already exists",  # table / index / _alembic_tmp_* created by the other process
    "duplicate column name",  # a migration step the other process already applied
    "unique constraint failed",  # both inserted the default experiment
    "out-of-date database schema",  # tables exist but the other process is still migrating
)


class LedgerError(RuntimeError):
    """The tracking store cannot be reached, created or read, or a row lacks an artifact.

    The message is one self-contained line (it names the store or the row), fit to print
    after ``error:``.
    """


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def param_value(v: Any) -> str:
    """One config value as the YAML config (and a Hydra override) spells it: ``true`` /
    ``false``, ``null``, lists and mappings in flow style (``[dense, bm25]``), numbers and
    strings as they are."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple, dict)):
        import yaml

        return yaml.safe_dump(v if not isinstance(v, tuple) else list(v), default_flow_style=True,
                              width=float("inf"), sort_keys=False).strip()
    return str(v)


def params_from_config(cfg: Mapping[str, Any]) -> dict[str, str]:
    """Flattened config as MLflow params, spelled by :func:`param_value`; a value longer than
    500 characters is left to the config artifact (its param says so)."""
    out = {}
    for k, v in flatten(cfg).items():
        s = param_value(v)
        out[k] = s if len(s) <= PARAM_MAX_CHARS else "<see config.yaml artifact>"
    return out


def is_true(value: str | None) -> bool:
    """A boolean param as logged now (``true``) or by older rows (``True``)."""
    return str(value).lower() == "true"


def golden_input(*, name: str, fingerprint: str, source: str,
                 profile: Mapping[str, Any] | None = None) -> Any:
    """The golden set as an MLflow input dataset (``mlflow.entities.DatasetInput``, context
    ``eval``): shown on the run page and in the runs table's *Dataset* column.

    Args:
        name: the golden set's name (its directory's name, e.g. ``flask``).
        fingerprint: the golden fingerprint (sha256 hex); its first
            :data:`DATASET_DIGEST_CHARS` characters are the digest (MLflow's column width).
        source: where the labels are (a directory).
        profile: counts shown with the dataset (positives, negatives, tags).
    """
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    class GoldenSet(MetaDataset):
        @property
        def profile(self) -> Any:
            return dict(profile) if profile else None

        def to_dict(self) -> dict[str, str]:
            out = super().to_dict()
            if profile:
                out["profile"] = json.dumps(dict(profile))
            return out

    ds = GoldenSet(LocalArtifactDatasetSource(source), name=name,
                   digest=fingerprint[:DATASET_DIGEST_CHARS])
    return DatasetInput(ds._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, "eval")])


def git_commit(root: Path) -> str:
    """``git rev-parse HEAD`` of ``root`` (suffix ``-dirty`` if the tree has changes), or ``unknown``."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        # generated files (reports/) do not make a checkout dirty
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no", "--", ".", ":(exclude)reports"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _is_lock_error(exc: BaseException) -> bool:
    return "database is locked" in str(exc) or "database is busy" in str(exc)


#: What a store says when two writers inserted the same new row at once: MLflow's
#: ``log_inputs`` looks a dataset up by (experiment, name, digest) and inserts it when absent,
#: so parallel sweep jobs logging one golden set race on its first insert (SQLite, PostgreSQL).
#: Retried, the lookup finds the winner's row and the call succeeds.
_INSERT_RACE_ERRORS = ("unique constraint failed", "duplicate key value violates unique constraint")


def _is_lock_or_insert_race(exc: BaseException) -> bool:
    text = _messages(exc)
    return _is_lock_error(exc) or any(m in text for m in _INSERT_RACE_ERRORS)


def _messages(exc: BaseException) -> str:
    """The lower-cased messages of ``exc`` and of the exceptions it was raised from."""
    out, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(str(e).lower())
        e = e.__cause__ or e.__context__
    return "\n".join(out)


def is_transient_store_error(exc: BaseException) -> bool:
    """True for a lock or a schema-creation/migration race on a new store (worth retrying);
    False for anything else (a file that is not a database, a missing directory, ...)."""
    text = _messages(exc)
    return any(m in text for m in _TRANSIENT_STORE_ERRORS)


def _retry(fn: Callable[[], Any], transient: Callable[[BaseException], bool], *,
           attempts: int, delay_s: float) -> Any:
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - MLflow wraps the sqlite error in several types
            if not transient(exc) or i == attempts - 1:
                raise
            time.sleep(min(delay_s * (2 ** i), 5.0))
    raise AssertionError("unreachable")


def with_lock_retry(fn, *args, attempts: int = 20, delay_s: float = 0.25, **kwargs):
    """Call ``fn``, retrying with exponential backoff (capped at 5 s per wait) while SQLite
    reports "database is locked" — parallel sweep workers share one ledger file."""
    return _retry(lambda: fn(*args, **kwargs), _is_lock_error, attempts=attempts, delay_s=delay_s)


def with_insert_race_retry(fn, *args, attempts: int = 20, delay_s: float = 0.25, **kwargs):
    """:func:`with_lock_retry` that also retries a unique-constraint failure
    (:data:`_INSERT_RACE_ERRORS`): for get-or-create calls such as ``log_inputs``, where a
    parallel job inserting the same row first is a race, not an error."""
    return _retry(lambda: fn(*args, **kwargs), _is_lock_or_insert_race, attempts=attempts,
                  delay_s=delay_s)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of ``exc``'s message (SQLAlchemy appends a background link),
    at most ``limit`` characters; the exception's type name if it has no message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the working directory when the
    URI is), or None for another scheme or an in-memory database."""
    if not uri.startswith("sqlite:///"):
        return None
    raw = unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    if raw in ("", ":memory:"):
        return None
    return Path(raw)


def _check_sqlite_file(uri: str, db: Path, *, create: bool) -> None:
    """Refuse what SQLite cannot be: a directory, a file that is not a database, a missing
    file (unless ``create``), a parent directory that cannot be made. Raises LedgerError."""
    where = f"cannot open the ledger at {uri}"
    if db.is_dir():
        raise LedgerError(f"{where}: {db} is a directory, not an SQLite database")
    if db.exists():
        try:
            with db.open("rb") as fh:
                head = fh.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise LedgerError(f"{where}: cannot read {db}: {exc.strerror or exc}") from exc
        if head and head != _SQLITE_MAGIC:  # an empty file is a new database to SQLite
            raise LedgerError(f"{where}: {db} is not an SQLite database")
        return
    if not create:
        raise LedgerError(f"{where}: no such file {db} (run `python -m rag.run` first)")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(f"{where}: cannot create the directory {db.parent}: "
                          f"{exc.strerror or exc}") from exc


def _check_mlflow_tables(uri: str, db: Path) -> None:
    """A reader must not turn another SQLite database into an MLflow store: refuse one with no
    ``experiments`` table (opened read-only). Raises LedgerError, also for a corrupt file."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open the ledger at {uri}: {db}: {exc}") from exc
    if "experiments" not in names:
        what = "is empty," if not names else "is an SQLite database but"
        raise LedgerError(f"cannot open the ledger at {uri}: {db} {what} not an MLflow store "
                          "(no experiments table)")


@contextlib.contextmanager
def _init_lock(db: Path | None, uri: str, timeout_s: float = INIT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<db>-init.lock`` (next to the database; the
    ``mlflow.db-*`` pattern is git-ignored) while a store is opened, so that one process at a
    time creates or migrates a new SQLite store. Without a place to write the lock (a
    read-only directory) or without ``fcntl``, nothing is held: the retry still applies.

    Raises:
        LedgerError: another process held the lock for ``timeout_s`` seconds.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        fcntl = None  # type: ignore[assignment]
    fd = None
    if db is not None and fcntl is not None:
        try:
            fd = os.open(f"{db}-init.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            fd = None
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LedgerError(f"cannot open the ledger at {uri}: another process "
                                      f"held {db}-init.lock for {timeout_s:.0f} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


#: Retries of one request to a tracking server (``http(s)://``) when ``tracking.server_retries``
#: (or ``$RAG_TRACKING_SERVER_RETRIES``) is not set. With :data:`SERVER_BACKOFF_FACTOR` and
#: :data:`SERVER_TIMEOUT_S`, a request to a server that answers 5xx or refuses the connection
#: gives up after about 2 s, and one to a server that never answers after about 32 s
#: (MLflow's own defaults — 7 retries, factor 2, 120 s per request — wait minutes: 507 s
#: were measured against a dead server).
SERVER_RETRIES = 2
#: urllib3's backoff factor between retries (waits 0, 2, 4, ... s; MLflow adds up to
#: :data:`SERVER_BACKOFF_JITTER` s at random)
SERVER_BACKOFF_FACTOR = 1
SERVER_BACKOFF_JITTER = 0.5
#: seconds one request waits for a connection or an answer
SERVER_TIMEOUT_S = 10
#: MLflow refuses more retries than this (``_MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT``)
SERVER_RETRIES_MAX = 10
#: the environment variable that sets the budget where no config is read (``rag report``,
#: ``rag ledger``, ``rag diff``); ``tracking.server_retries`` wins in ``python -m rag.run``
SERVER_RETRIES_ENV = "RAG_TRACKING_SERVER_RETRIES"


def server_retries(value: int | str | None = None) -> int:
    """The retry budget of one request to a tracking server: ``value`` (the config's
    ``tracking.server_retries``), else ``$RAG_TRACKING_SERVER_RETRIES``, else
    :data:`SERVER_RETRIES`.

    Raises:
        LedgerError: not a whole number from 0 to :data:`SERVER_RETRIES_MAX`.
    """
    where = "tracking.server_retries"
    if value is None or value == "":
        value, where = os.environ.get(SERVER_RETRIES_ENV) or SERVER_RETRIES, f"${SERVER_RETRIES_ENV}"
    try:
        n = int(str(value).strip())
    except ValueError:
        n = -1
    if not 0 <= n <= SERVER_RETRIES_MAX:
        raise LedgerError(f"{where}={value!r}: the retries of a request to a tracking server "
                          f"must be a whole number from 0 to {SERVER_RETRIES_MAX}")
    return n


def server_http_env(retries: int) -> dict[str, str]:
    """The ``MLFLOW_HTTP_REQUEST_*`` variables (mlflow/environment_variables.py, read by
    ``mlflow.utils.rest_utils.http_request`` on every request) of a budget of ``retries``
    retries per request: at most ``retries + 1`` attempts, each waiting
    :data:`SERVER_TIMEOUT_S`, with :data:`SERVER_BACKOFF_FACTOR` between them."""
    return {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(retries)),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": str(SERVER_BACKOFF_FACTOR),
            "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": str(SERVER_BACKOFF_JITTER),
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(SERVER_TIMEOUT_S)}


def is_server_uri(uri: str) -> bool:
    """True for a tracking server (``http://``, ``https://``): it keeps its own artifacts."""
    return uri.lower().startswith(("http://", "https://"))


_BUDGET_LOCK = __import__("threading").RLock()
_BUDGET_DEPTH = [0]  # how many threads are inside http_budget (the first sets, the last restores)
_BUDGET_SAVED: dict[str, str | None] = {}


@contextlib.contextmanager
def http_budget(uri: str, retries: int) -> Iterator[None]:
    """For the duration, requests to a tracking server use the budget of
    :func:`server_http_env` (a server URI only): ``retries`` always (rag's one setting), the
    timeout and backoff unless the user set them in the environment; urllib3's "Retrying ..."
    warnings are silenced (the error line says it once).
    Re-entrant and safe across threads: the first to enter sets the variables, the last to
    leave restores them."""
    if not is_server_uri(uri):
        yield
        return
    import logging

    pool_log = logging.getLogger("urllib3.connectionpool")
    with _BUDGET_LOCK:
        if _BUDGET_DEPTH[0] == 0:
            env = server_http_env(retries)
            _BUDGET_SAVED.clear()
            _BUDGET_SAVED.update({k: os.environ.get(k) for k in env})
            _BUDGET_SAVED["_level"] = str(pool_log.level)
            for k, v in env.items():  # the retries are rag's; the user's timeout, backoff kept
                if k == "MLFLOW_HTTP_REQUEST_MAX_RETRIES":
                    os.environ[k] = v
                else:
                    os.environ.setdefault(k, v)
            pool_log.setLevel(logging.ERROR)
        _BUDGET_DEPTH[0] += 1
    try:
        yield
    finally:
        with _BUDGET_LOCK:
            _BUDGET_DEPTH[0] -= 1
            if _BUDGET_DEPTH[0] == 0:
                pool_log.setLevel(int(_BUDGET_SAVED.pop("_level", "0") or 0))
                for k, v in _BUDGET_SAVED.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                _BUDGET_SAVED.clear()


class BudgetedClient:
    """An ``MlflowClient`` whose every method call runs inside :func:`http_budget`: no call to
    a tracking server waits longer than its retry budget. Attributes other than methods are
    the client's own."""

    def __init__(self, client: Any, uri: str, retries: int) -> None:
        self._client, self._uri, self._retries = client, uri, retries

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with http_budget(self._uri, self._retries):
                return attr(*args, **kwargs)

        call.__name__ = name
        return call


def _unreachable(uri: str, exc: BaseException) -> str | None:
    """One line for a tracking server that did not answer (refused, timed out, unknown host),
    or None when ``exc`` is another error."""
    import re

    text = _messages(exc)
    if not is_server_uri(uri) or not any(m in text for m in (
            "max retries exceeded", "failed to establish a new connection", "timed out",
            "connectionerror", "connection refused", "name or service not known")):
        return None
    why = re.search(r"\[errno -?\d+\] ([^'\")]+)", text)
    status = re.search(r"too many (\d{3}) error responses", text)  # it answered, with 5xx
    reason = (why.group(1).strip() if why else f"it answered HTTP {status.group(1)}" if status
              else "timed out" if "timed out" in text else "no answer")
    return (f"cannot reach the tracking server at {uri}: {reason} "
            "(is `mlflow server` running there?)")


def open_client(uri: str, *, create: bool = True, attempts: int = 8, delay_s: float = 0.25,
                retries: int | None = None):
    """An ``MlflowClient`` on ``uri`` whose store has been created (or migrated) and read once.

    Creating the schema of a new SQLite store is serialised across processes by a file lock
    (:func:`_init_lock`), and a lock or migration race with a process that does not take it
    ("database is locked", alembic's "Online migration expected to match one row", a table
    that already exists, ...) is retried with exponential backoff (``attempts`` tries from
    ``delay_s`` seconds, waits capped at 5 s).

    A tracking server (``http(s)://``) is contacted here, and by every call of the client
    returned (a :class:`BudgetedClient`), with the retry budget of :func:`server_retries`
    (:func:`server_http_env`), so that a server that does not answer fails in seconds.

    Args:
        create: create a missing SQLite file (False: a missing file is an error — readers).
        retries: retries per request to a tracking server (default :func:`server_retries`).

    Raises:
        LedgerError: the store cannot be reached or created (one line naming ``uri``): not a
            database, a directory that cannot be made, a schema MLflow refuses, a lock that is
            never released, a server that does not answer, ...
    """
    from mlflow.tracking import MlflowClient

    retries = server_retries(retries)
    if "://" not in uri and not uri.startswith("sqlite:"):
        # MLflow would read a bare path as its file store (deprecated; rag never writes one)
        raise LedgerError(f"cannot open the ledger at {uri}: a path, not a tracking URI (a "
                          f"ledger is an SQLite database, sqlite:///{Path(uri).resolve()}, or "
                          "a tracking server, http://HOST:PORT)")
    db = sqlite_path(uri)
    if db is not None:
        _check_sqlite_file(uri, db, create=create)

    def touch():
        client = MlflowClient(tracking_uri=uri)  # builds the store: creates/migrates the schema
        client.search_experiments(max_results=1)  # and reads it (a server URI is contacted here)
        return BudgetedClient(client, uri, retries) if is_server_uri(uri) else client

    try:
        with _init_lock(db, uri), http_budget(uri, retries):
            if db is not None and not create:
                _check_mlflow_tables(uri, db)
            return _retry(touch, is_transient_store_error, attempts=attempts, delay_s=delay_s)
    except LedgerError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow, SQLAlchemy, alembic, OS and HTTP errors
        raise LedgerError(_unreachable(uri, exc)
                          or f"cannot open the ledger at {uri}: {one_line(exc)}") from exc


class _RowFailed(Exception):
    """:meth:`Ledger.log_row` failed after creating run ``run_id`` (``marked``: set FAILED)."""

    def __init__(self, run_id: str, marked: bool) -> None:
        super().__init__(run_id)
        self.run_id, self.marked = run_id, marked


def _is_store_error(exc: BaseException) -> bool:
    """An error of the store or of the way to it (MLflow, SQLAlchemy, HTTP, OS), not a bug."""
    from mlflow.exceptions import MlflowException

    try:
        from requests.exceptions import RequestException
    except ImportError:  # pragma: no cover - mlflow depends on requests
        RequestException = OSError  # type: ignore[misc,assignment]
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # pragma: no cover
        SQLAlchemyError = OSError  # type: ignore[misc,assignment]
    return isinstance(exc, (MlflowException, RequestException, SQLAlchemyError, OSError))


def log_file(client: Any, run_id: str, name: str, path: Path) -> None:
    """Log the file ``path`` as the artifact ``name`` of a run (``figures/x.png``: file
    ``x.png`` in folder ``figures``); the file must already be called ``name``'s last part."""
    folder, _, base = name.rpartition("/")
    if base != path.name:
        raise ValueError(f"artifact {name!r}: the file is called {path.name!r}")
    with_lock_retry(client.log_artifact, run_id, str(path), folder or None)


class Ledger:
    """A handle on one MLflow tracking store, opened (created if need be) when constructed.

    Opening is safe when several processes use a new store at once: see :func:`open_client`.

    Args:
        uri: tracking URI (absolute, e.g. ``sqlite:////abs/mlflow.db``).
        artifact_root: directory under which each new experiment stores its artifacts (a local
            store; a tracking server keeps its own).
        create: create a missing SQLite store (False for readers such as reports).
        retries: retries of each request to a tracking server (``tracking.server_retries``;
            default :func:`server_retries`); every call of :attr:`client` keeps to it.

    Raises:
        LedgerError: the store cannot be reached or created (one line naming ``uri``).
    """

    def __init__(self, uri: str, artifact_root: Path | None = None, *, create: bool = True,
                 retries: int | None = None) -> None:
        import logging

        import mlflow.tracking  # noqa: F401 - configures its loggers on import: quiet them after

        for name in ("mlflow", "alembic"):  # "Creating initial MLflow database tables..."
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = uri
        self.artifact_root = artifact_root
        self.retries = server_retries(retries)
        self.client = open_client(uri, create=create, retries=self.retries)

    @classmethod
    def open(cls, uri: str, artifact_root: Path | None = None, *, create: bool = True,
             retries: int | None = None) -> "Ledger":
        """Same as ``Ledger(uri, artifact_root, create=create)``; reads as what it does."""
        return cls(uri, artifact_root, create=create, retries=retries)

    def failure(self, exc: BaseException, doing: str) -> LedgerError:
        """One line for an error met while ``doing`` something on the store (``log a
        row``): a server that did not answer within the retry budget, or the store's first
        message line."""
        return LedgerError(_unreachable(self.uri, exc)
                           or f"cannot {doing} in the ledger at {self.uri}: {one_line(exc)}")

    def check_writable(self, experiment: str) -> str:
        """Before a sweep's first job: the store is reachable, its schema ready (checked when
        it was opened) and it takes a write — experiment ``experiment`` is created if absent
        and its tag ``rag.write_checked`` set to now (UTC, ISO 8601); no run is created.
        Returns the experiment's id.

        Raises:
            LedgerError: it cannot be written (one line naming the store).
        """
        from datetime import datetime, timezone

        db = sqlite_path(self.uri)
        if db is not None:
            for path in (db, db.parent):
                if path.exists() and not os.access(path, os.W_OK):
                    raise LedgerError(f"cannot write the ledger at {self.uri}: {path} is "
                                      "read-only")
        try:
            exp_id = with_lock_retry(self.experiment_id, experiment)
            with_lock_retry(self.client.set_experiment_tag, exp_id, "rag.write_checked",
                            datetime.now(timezone.utc).isoformat(timespec="seconds"))
        except LedgerError:
            raise
        except Exception as exc:  # noqa: BLE001 - MLflow, SQLAlchemy, HTTP and OS errors
            raise self.failure(exc, f"write experiment {experiment!r}") from None
        return exp_id

    def mark_failed(self, run_id: str) -> bool:
        """Set a run left RUNNING by a failure to FAILED, if the store still answers (within
        the retry budget); True when it was marked."""
        try:
            with_lock_retry(self.client.set_terminated, run_id, status="FAILED")
            return True
        except Exception:  # noqa: BLE001 - the store is what failed: the row stays RUNNING
            return False

    def experiment_id(self, name: str) -> str:
        """Id of experiment ``name``, created (with an absolute artifact location) if absent.

        On a tracking server (``http(s)://``) ``artifact_root`` is not used: the server
        chooses the location (its ``--artifacts-destination``, reached through the server), so
        that every client's artifacts land in one place, not on the machine of whoever created
        the experiment. Creating races with a parallel job are resolved by reading the
        winner's id; an experiment deleted in the UI is restored (a ledger never loses rows).
        """
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":  # deleted in the UI: bring it back, keep its rows
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        location = None
        if self.artifact_root is not None and not is_server_uri(self.uri):
            from rag.core.names import safe_component  # the experiment name becomes a folder

            location = (Path(self.artifact_root) / safe_component(name, what="experiment",
                                                                  encode=True)).resolve().as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except Exception:  # noqa: BLE001 - another process created it first
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def log_row(self, *, experiment: str, run_name: str | None, params: Mapping[str, str],
                metrics: Mapping[str, float], tags: Mapping[str, str],
                artifacts: Mapping[str, str | Path], start_time_ms: int | None = None,
                inputs: Iterable[Any] = ()) -> str:
        """Log one finished ledger row and return its run id.

        Metrics are logged in :func:`rag.ledger.metric_groups.ordered` order (headline first:
        the MLflow UI lists a run's metrics in logged order); NaN ones are skipped (MLflow
        stores them, but reports cannot compare them). If logging fails part-way the run is
        marked FAILED (when the store still answers), so reports (which read FINISHED runs
        only) never show a half-written row.

        Args:
            artifacts: name -> its text, or -> a :class:`~pathlib.Path` of a file (e.g. a
                PNG); a name with ``/`` (``figures/scores.png``) is logged in that folder.
            start_time_ms: when the evaluation started (ms since the epoch; default now), so
                the row's duration is the evaluation's; it ends when logging ends.
            inputs: ``mlflow.entities.DatasetInput`` s (:func:`golden_input`).

        Raises:
            LedgerError: the store failed (a tracking server that stopped answering within
                the retry budget, a full disk, ...): one line saying whether the row was
                marked FAILED or is left RUNNING.
        """
        try:
            return self._log_row(experiment=experiment, run_name=run_name, params=params,
                                 metrics=metrics, tags=tags, artifacts=artifacts,
                                 start_time_ms=start_time_ms, inputs=inputs)
        except _RowFailed as failed:
            exc = failed.__cause__ or failed
            left = (f"row {failed.run_id[:8]} marked FAILED" if failed.marked
                    else f"row {failed.run_id[:8]} left RUNNING (`python -m rag.report "
                    "--mark-killed-after-h 0` marks it once the store answers)")
            raise LedgerError(f"{self.failure(exc, 'log a row')}; {left}") from None
        except LedgerError:
            raise
        except Exception as exc:  # noqa: BLE001 - the run was never created: no row
            if not _is_store_error(exc):
                raise
            raise LedgerError(f"{self.failure(exc, 'log a row')}; no row written") from None

    def _log_row(self, *, experiment: str, run_name: str | None, params: Mapping[str, str],
                 metrics: Mapping[str, float], tags: Mapping[str, str],
                 artifacts: Mapping[str, str | Path], start_time_ms: int | None,
                 inputs: Iterable[Any]) -> str:
        from mlflow.entities import Metric, Param, RunTag

        from rag.ledger.metric_groups import ordered

        c = self.client
        exp_id = with_lock_retry(self.experiment_id, experiment)
        run = with_lock_retry(c.create_run, exp_id, run_name=run_name, tags=dict(tags),
                              start_time=start_time_ms)
        rid = run.info.run_id
        try:
            now = int(time.time() * 1000)
            ms = [Metric(k, float(metrics[k]), now, 0) for k in ordered(metrics)
                  if metrics[k] is not None and not math.isnan(float(metrics[k]))]
            ps = [Param(k, v) for k, v in params.items()]
            # MLflow caps one log_batch at 1000 metrics and 100 params
            # mlflow.runType=evaluation: the MLflow UI unfolds a sweep's parent run in the runs
            # table when its children carry it, so a sweep's rows are visible without a click
            with_lock_retry(c.log_batch, rid, tags=[RunTag("rag.ledger", "1"),
                                                    RunTag(RUN_TYPE_TAG, RUN_TYPE_EVALUATION)])
            for i in range(0, len(ms), 900):
                with_lock_retry(c.log_batch, rid, metrics=ms[i:i + 900])
            for i in range(0, len(ps), 90):
                with_lock_retry(c.log_batch, rid, params=ps[i:i + 90])
            if inputs:
                with_insert_race_retry(c.log_inputs, rid, datasets=list(inputs))
            for name, content in artifacts.items():
                if isinstance(content, Path):  # a binary file (e.g. a PNG), logged as is
                    log_file(c, rid, name, content)
                else:
                    with_lock_retry(c.log_text, rid, content, name)
        except BaseException as exc:
            marked = self.mark_failed(rid)
            if isinstance(exc, Exception) and _is_store_error(exc):
                raise _RowFailed(rid, marked) from exc
            raise
        try:
            with_lock_retry(c.set_terminated, rid, status="FINISHED")
        except Exception as exc:  # noqa: BLE001
            if not _is_store_error(exc):
                raise
            raise _RowFailed(rid, self.mark_failed(rid)) from exc
        return rid

    def download_run_file(self, run_id: str) -> tuple[str, str]:
        """``(name, text)`` of a row's TREC run file: :data:`RUN_FILE`, or ``run.trec`` for a
        row logged before it was renamed.

        Raises:
            LedgerError: the row has neither (one line naming the row).
        """
        for name in RUN_FILE_NAMES:
            try:
                return name, self.download_text(run_id, name)
            except LedgerError:
                continue
        raise LedgerError(f"ledger row {run_id[:8]} has no readable run file "
                          f"({' or '.join(RUN_FILE_NAMES)})")

    def download_bytes(self, run_id: str, name: str) -> bytes | None:
        """The bytes of one artifact of a run (e.g. a PNG), or None when it has none."""
        import mlflow.artifacts
        from urllib.parse import urlparse

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        try:
            root = urlparse(self.client.get_run(run_id).info.artifact_uri or "")
            if root.scheme in ("", "file"):
                local = Path(unquote(root.path)) / name
                return local.read_bytes() if local.is_file() else None
            with http_budget(self.uri, self.retries):
                return Path(mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=name, tracking_uri=self.uri)).read_bytes()
        except Exception:  # noqa: BLE001 - absent or unreadable: the caller goes without
            return None

    def experiments(self, prefix: str) -> list[Any]:
        """Experiments whose name starts with ``prefix + '-'``."""
        return [e for e in self.client.search_experiments()
                if e.name.startswith(prefix + "-")]

    def rows(self, experiment_ids: Iterable[str], *, where: str | None = None) -> list[Any]:
        """Finished ledger rows of the experiments, oldest first (every page, however many);
        sweep parent runs are not rows.

        Args:
            where: an extra MLflow search filter ANDed on (e.g. ``tags.sweep_id = 'abc'``).
        """
        ids = list(experiment_ids)
        if not ids:
            return []
        f = "attributes.status = 'FINISHED'" + (f" and {where}" if where else "")
        return [r for r in self.search_all(ids, f) if r.data.tags.get("rag.sweep_parent") != "1"]

    def search_all(self, ids: list[str], filter_string: str) -> list[Any]:
        """Every run of the experiments matching ``filter_string``, oldest first, reading all
        pages of MLflow's ``search_runs`` (1,000 runs per page)."""
        out, token = [], None
        while True:
            page = self.client.search_runs(ids, filter_string=filter_string,
                                           order_by=["attributes.start_time ASC"],
                                           max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def unfinished(self, experiment_ids: Iterable[str]) -> list[Any]:
        """Ledger rows of the experiments that never finished, oldest first: RUNNING (the
        process was killed after creating the row, or is still logging it), KILLED (marked by
        :meth:`mark_killed`) or FAILED (logging failed part-way). Sweep parent runs are not
        rows (reports flag an unfinished sweep in its own section)."""
        ids = list(experiment_ids)
        if not ids:
            return []
        return [r for r in self.search_all(ids, "attributes.status != 'FINISHED'")
                if r.data.tags.get("rag.sweep_parent") != "1"]

    def mark_killed(self, experiment_ids: Iterable[str], *, older_than_h: float,
                    now_ms: int | None = None) -> list[str]:
        """Mark KILLED every run of the experiments (rows and sweep parents) that has been
        RUNNING for more than ``older_than_h`` hours — left by a killed process. Nothing else
        of a row changes (MLflow sets its end time). Returns the ids marked, oldest first.

        Raises:
            ValueError: ``older_than_h`` is negative or not finite.
        """
        if not math.isfinite(older_than_h) or older_than_h < 0:
            raise ValueError(f"the grace period must be a finite number of hours >= 0, "
                             f"not {older_than_h}")
        ids = list(experiment_ids)
        if not ids:
            return []
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        cutoff = now_ms - older_than_h * 3_600_000
        marked = []
        for r in self.search_all(ids, "attributes.status = 'RUNNING'"):
            if (r.info.start_time or 0) < cutoff:
                with_lock_retry(self.client.set_terminated, r.info.run_id, status="KILLED")
                marked.append(r.info.run_id)
        return marked

    def sweep_parents(self, experiment_ids: Iterable[str]) -> dict[str, str]:
        """sweep id -> status (RUNNING, FINISHED, FAILED) of each sweep's parent run."""
        ids = list(experiment_ids)
        if not ids:
            return {}
        runs = self.search_all(ids, "tags.`rag.sweep_parent` = '1'")
        return {r.data.tags.get("sweep_id", ""): r.info.status for r in runs}

    def resolve_run_id(self, ref: str) -> str:
        """A full run id from a full id or a unique prefix (as shown in reports; any case).

        Raises:
            LookupError: an empty ``ref``; no row, or several rows, match it (a sweep's
                parent run is named as one, with its rows' ids).
        """
        ref = ref.strip().lower()
        if not ref:
            raise LookupError("empty run id: give a ledger row's id or a unique prefix of it")
        if len(ref) == 32 and all(c in "0123456789abcdef" for c in ref):
            # a whole id (what sweeps and pages pass): one lookup, not a scan of every row
            with contextlib.suppress(Exception):
                run = self.client.get_run(ref)
                if (run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"
                        and run.data.tags.get("rag.sweep_parent") != "1"
                        and self.client.get_experiment(
                            run.info.experiment_id).lifecycle_stage == "active"):
                    return ref
        ids = [r.info.run_id for e in self.client.search_experiments()
               for r in self.rows([e.experiment_id]) if r.info.run_id.startswith(ref)]
        if len(ids) == 1:
            return ids[0]
        if not ids:
            exps = [e.experiment_id for e in self.client.search_experiments()]
            left = [r for r in self.unfinished(exps) if r.info.run_id.startswith(ref)]
            if len(left) == 1:
                why = {"FAILED": "logging it failed part-way"}.get(
                    left[0].info.status, "its process was interrupted")
                raise LookupError(f"ledger row {left[0].info.run_id[:8]} never finished (status "
                                  f"{left[0].info.status}: {why}); it has no results")
            parents = [r for e in exps for r in self.search_all(
                [e], "tags.`rag.sweep_parent` = '1'") if r.info.run_id.startswith(ref)]
            if len(parents) == 1:
                sweep = parents[0].data.tags.get("sweep_id", "")
                rows = [r.info.run_id[:8] for r in self.rows(exps)
                        if sweep and r.data.tags.get("sweep_id") == sweep]
                raise LookupError(
                    f"{ref!r} is the parent run of sweep {sweep!r}, not a ledger row; its rows: "
                    + (", ".join(rows) if rows else "none finished"))
        raise LookupError(f"no ledger row matches run id {ref!r} in {self.uri} (another ledger: "
                          "--tracking-uri URI or $MLFLOW_TRACKING_URI)" if not ids
                          else f"run id prefix {ref!r} is ambiguous: {', '.join(i[:12] for i in ids)}")

    def download_text(self, run_id: str, name: str) -> str:
        """The text of one artifact of a run.

        Raises:
            LedgerError: the run has no such artifact, or it cannot be read (one line).
        """
        import mlflow.artifacts

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        try:
            # a local artifact store is read in place: no copy, and no thread pool (MLflow's
            # downloader cannot start one at interpreter exit, where an interrupted sweep is
            # compared with its baseline)
            from urllib.parse import unquote, urlparse

            root = urlparse(self.client.get_run(run_id).info.artifact_uri or "")
            if root.scheme in ("", "file"):
                local = Path(unquote(root.path)) / name
                if local.is_file():
                    return local.read_text(encoding="utf-8")
            with http_budget(self.uri, self.retries):
                return Path(mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=name, tracking_uri=self.uri)).read_text()
        except Exception as exc:  # noqa: BLE001 - MlflowException, OSError, UnicodeDecodeError
            raise LedgerError(f"ledger row {run_id[:8]} has no readable artifact {name} "
                              f"({one_line(exc, 160)})") from exc
