"""The Hydra callback around a multirun (conf/config.yaml ``hydra.callbacks.sweep``): the
store checked (reachable, writable, schema ready) and the sweep's parent run(s) and
``sweep.json`` written before the jobs, the prebuild of every index (rag/app/prebuild.py), and
at the end the significance, summaries and report (rag/ledger/sweep.py holds what is computed
from the ledger). Application layer: it reads the whole composed config.

Hydra turns an exception raised by a callback into a warning and runs the jobs anyway
(``hydra._internal.callbacks.Callbacks._notify`` catches ``Exception``), which would log rows
that belong to no sweep. So every failure here is caught by :meth:`SweepCallback._fatal`:
one ``error:`` line, the parent runs marked FAILED where the store still answers, and
``SystemExit`` (not an ``Exception``: it passes through Hydra) with status 2. A job that could
not run (:class:`rag.core.errors.RunError`) notes it in the multirun directory
(:func:`rag.ledger.sweep.record_job_outcome`); at the end the sweep is marked incomplete (its
parent FAILED) and the command exits 2.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from rag.ledger.sweep import (OUTCOMES_DIR, SWEEP_FILE, log_sweep_summary, new_sweep_id,
                              read_job_outcomes, suite_summary, sweep_significance)

try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a hard dependency
    Callback = object  # type: ignore[misc,assignment]


def suite_corpora(config: Any) -> dict[str, str]:
    """For a suite multirun, corpus group option -> that corpus's name (its experiment is
    ``<prefix>-<name>``), read from each option's ``corpus/<option>.yaml`` (first found on
    Hydra's config search path, so ``hydra.searchpath`` corpora work) over the schema's
    defaults; for any other multirun ``{}``.

    Raises:
        ValueError: a corpus option has no config file.
    """
    from omegaconf import OmegaConf

    from rag.app.config import CorpusConfig, project_root

    dirs = [Path(str(src.path)) for src in config.hydra.runtime.get("config_sources", [])
            if str(src.schema) == "file"] or [project_root() / "conf"]

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    params = config.hydra.sweeper.get("params") or {}
    if not config.get("suite") or not config.suite.name:
        return {}
    # the command line's corpus=... wins over the suite file's, as it does for the jobs
    given = [o.split("=", 1)[1] for o in config.hydra.overrides.task
             if o.split("=", 1)[0].lstrip("+~") == "corpus" and "=" in o]
    value = given[-1] if given else params.get("corpus")
    if value is None:
        return {}
    parsed = OverridesParser.create().parse_override(f"corpus={value}")
    if not parsed.is_sweep_override():
        options = [str(parsed.value())]
    elif isinstance(parsed.value(), ChoiceSweep):
        options = [str(o) for o in parsed.sweep_string_iterator()]
    else:
        raise ValueError(f"suite {config.suite.name!r}: list the corpora (corpus: a,b or "
                         f"choice(a,b)), not {value!r}")
    out = {}
    for opt in options:
        f = next((d / "corpus" / f"{opt}.yaml" for d in dirs
                  if (d / "corpus" / f"{opt}.yaml").is_file()), None)
        if f is None:
            raise ValueError(f"suite {config.suite.name!r}: corpus {opt!r} has no config "
                             f"(corpus/{opt}.yaml in {', '.join(map(str, dirs))})")
        node = OmegaConf.merge(OmegaConf.structured(CorpusConfig), OmegaConf.load(f))
        root = OmegaConf.create({"corpus": node, "paths": config.paths, "dataset": config.dataset})
        out[opt] = str(root.corpus.name)
    return out



def check_repository_suite(config: Any) -> None:
    """Before a semble suite opens its parent run: its folder lists repositories and every
    repository of the sweep converts (rag/datasets/semble.py; conversions are cached, so the
    jobs reuse them). The first problem is printed as one ``error:`` line and the multirun
    exits 2, leaving no parent run and no row.

    Raises:
        SystemExit: with status 2, on the first bad repository or folder.
    """
    if str(getattr(config.dataset.format, "value", config.dataset.format)) != "semble":
        return
    from rag.app.config import semble_repos
    from rag.core.paths import expand_path
    from rag.datasets.common import DatasetError
    from rag.datasets.semble import default_root, prepare_semble

    try:
        given = [o.split("=", 1)[1] for o in config.hydra.overrides.task
                 if o.split("=", 1)[0].lstrip("+~") == "dataset.repo" and "=" in o]
        repos = (given[-1] if given else semble_repos(config.dataset.path)).split(",")
        root = (expand_path(config.dataset.path, base=Path.cwd()) if config.dataset.path
                else default_root())
        for repo in repos:
            prepare_semble(root, repo=repo.strip(), name=str(config.dataset.name),
                           cache_root=expand_path(config.paths.cache_dir) / "datasets")
    except (ValueError, DatasetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def planned_jobs(config: Any) -> int | None:
    """How many jobs Hydra's basic sweeper will launch for this multirun (the product of the
    values of every swept key: ``hydra.sweeper.params`` and the command line, parsed as
    ``BasicSweeper.sweep`` parses them); None for another sweeper or what cannot be parsed."""
    target = str(config.hydra.sweeper.get("_target_", ""))
    if not target.endswith("BasicSweeper"):
        return None
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides(
            params + [str(o) for o in config.hydra.overrides.task])
        return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
    except Exception:  # noqa: BLE001 - a glob sweep needs the config loader: not counted
        return None


def _one_line(exc: BaseException) -> str:
    """A failure of the callback as one line: the message of rag's own errors, else the
    exception's type and first message line."""
    from rag.core.errors import RunError
    from rag.ledger.mlflow_store import LedgerError, one_line

    if isinstance(exc, (RunError, LedgerError, ValueError)):
        return one_line(exc, 500)
    return f"{type(exc).__name__}: {one_line(exc, 400)}"


def _clock(seconds: float) -> str:
    """``1:02`` (minutes:seconds), ``1:02:03`` past an hour."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class SweepCallback(Callback):  # type: ignore[misc]
    """Hydra callback: the store checked, then sweep id, experiment and parent run before the
    jobs; summary after. Any failure stops the command (:meth:`_fatal`)."""

    def __init__(self, prebuild: bool = True) -> None:
        # (uri, corpus -> parent run, sweep id, corpus -> experiment id)
        self._open: tuple[str, dict[str, str], str, dict[str, str]] | None = None
        self._names: dict[str, str] = {}  # corpus -> experiment name
        self._retries: int | None = None  # tracking.server_retries
        self._planned: int | None = None  # jobs the sweeper will launch (planned_jobs)
        self._started: float | None = None  # time.monotonic() at the multirun's start
        # build every distinct index of the sweep once, before any job (rag/app/prebuild.py);
        # off with +hydra.callbacks.sweep.prebuild=false
        self.prebuild = prebuild

    @contextlib.contextmanager
    def _fatal(self, when: str) -> Iterator[None]:
        """Turn any failure inside into one ``error:`` line and ``SystemExit(2)`` (which
        Hydra does not swallow), after marking the open parent runs FAILED where the store
        still answers (within its retry budget)."""
        from rag.core.exit_codes import ExitCode

        try:
            yield
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure ends the command, in one line
            self._abandon()
            print(f"error: {_one_line(exc)} ({when})", file=sys.stderr, flush=True)
            raise SystemExit(int(ExitCode.ERROR)) from None

    def _abandon(self) -> None:
        """Mark the open parent runs FAILED (best effort) and forget them."""
        if self._open is None:
            return
        uri, parents, _, _ = self._open
        self._open = None
        try:
            from rag.ledger.mlflow_store import Ledger

            ledger = Ledger(uri, retries=self._retries)
            for parent_id in parents.values():
                ledger.mark_failed(parent_id)
        except Exception:  # noqa: BLE001 - the store is what failed: the parents stay RUNNING
            pass

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """One progress line per job on stderr, terminal or log alike: ``sweep routing: job
        2 of 4 (search.mode=bm25), 1:02 elapsed, about 2:04 left`` (the estimate: the mean
        time of the jobs done so far; the count and estimate only where the sweep started in
        this process — the basic launcher — else just the job's number)."""
        import time

        try:
            num = int(config.hydra.job.num)
            label = str(config.hydra.job.override_dirname) or "(defaults)"
        except Exception:  # noqa: BLE001 - not a multirun job: nothing to count
            return
        from rag.app.config import sweep_name

        of = f" of {self._planned}" if self._planned else ""
        timing = ""
        if self._started is not None:
            elapsed = time.monotonic() - self._started
            timing = f", {_clock(elapsed)} elapsed"
            if num and self._planned:
                timing += f", about {_clock(elapsed / num * (self._planned - num))} left"
        print(f"sweep {sweep_name(config) or '?'}: job {num + 1}{of} ({label}){timing}",
              file=sys.stderr, flush=True)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import time

        from rag.app.config import sweep_name

        self._started = time.monotonic()

        check_repository_suite(config)  # a bad dataset: one line, exit 2, no parent run

        with self._fatal("checked before the first job: no job was run, no row written"):
            # outcomes noted by the jobs of an earlier multirun in the same folder are not ours
            shutil.rmtree(Path(str(config.hydra.sweep.dir)) / OUTCOMES_DIR, ignore_errors=True)
            self._planned = planned_jobs(config)
            if config.tracking.enabled:
                self._check_store(config)
            name = sweep_name(config)
            if name and config.tracking.enabled:
                self._open_sweep(config, name)
        if self.prebuild:
            try:
                pre = self._prebuild(config)
            except Exception as exc:  # noqa: BLE001 - without it every job builds its own
                print(f"warning: sweep prebuild failed ({type(exc).__name__}: {exc}); each job "
                      "builds its index itself", file=sys.stderr)
                return
            with self._fatal("logging the prebuild on the parent run: no job was run"):
                self._log_prebuild(pre)

    def _check_store(self, config: Any) -> None:
        """The store of ``tracking.uri`` is reachable, its schema ready (opening creates or
        migrates a SQLite store and reads it) and it takes a write, for every experiment the
        jobs will log to (:meth:`rag.ledger.mlflow_store.Ledger.check_writable`).

        Raises:
            LedgerError: one line naming the store.
        """
        from rag.app.config import experiment_name, ledger_uri, output_path, register_configs
        from rag.ledger.mlflow_store import Ledger

        register_configs()
        t = config.tracking
        self._retries = t.get("server_retries")
        ledger = Ledger(ledger_uri(config), output_path(config, t.artifact_root),
                        retries=self._retries)
        corpora = list(suite_corpora(config).values())
        names = ([f"{t.experiment_prefix}-{c}" for c in corpora] if corpora
                 else [experiment_name(config)])
        for name in names:
            ledger.check_writable(name)

    def _prebuild(self, config: Any) -> Any:
        """Build the sweep's indexes into the on-disk caches before any job starts."""
        from rag.app.prebuild import prebuild_sweep

        pre = prebuild_sweep(config)
        print(f"sweep prebuild: {pre.indexes()} index(es) built before the jobs, "
              f"{pre.chunks_embedded()} chunks embedded ({pre.seconds:.1f} s); every job reads "
              "them from the caches in paths.cache_dir", flush=True)
        return pre

    def _log_prebuild(self, pre: Any) -> None:
        """Log ``sweep/chunks_embedded``, ``sweep/indexes_prebuilt`` and ``sweep/prebuild_s``
        on the parent run(s)."""
        if self._open is None:
            return
        from mlflow.entities import Metric

        from rag.ledger.mlflow_store import Ledger

        uri, parents, _, _ = self._open
        ledger = Ledger(uri, retries=self._retries)
        now = int(time.time() * 1000)
        for corpus, parent_id in parents.items():
            only = corpus if len(parents) > 1 else None  # a suite: that corpus's indexes
            values = {"sweep/chunks_embedded": pre.chunks_embedded(only),
                      "sweep/indexes_prebuilt": pre.indexes(only),
                      "sweep/prebuild_s": round(pre.seconds, 3)}
            ledger.client.log_batch(parent_id, metrics=[Metric(k, float(v), now, 0)
                                                        for k, v in values.items()])

    def _open_sweep(self, config: Any, name: str) -> None:
        import atexit

        from rag.app.config import experiment_name, ledger_uri, output_path, register_configs
        from rag.ledger.mlflow_store import Ledger

        register_configs()
        sweep_id = new_sweep_id(name)
        t = config.tracking
        uri = ledger_uri(config)
        ledger = Ledger(uri, output_path(config, t.artifact_root), retries=self._retries)
        # one experiment per corpus: the run's own, or every corpus of a suite (a semble
        # suite's repositories share one experiment: rag.app.config.experiment_name)
        corpora = list(suite_corpora(config).values())
        names = ({c: f"{t.experiment_prefix}-{c}" for c in corpora} if corpora
                 else {experiment_name(config): experiment_name(config)})
        exps = {c: ledger.experiment_id(n) for c, n in names.items()}
        # keys that vary: the sweep file's multi-valued params and any "k=a,b" on the command line
        varying = {str(k).lstrip("+~") for k, v in (config.hydra.sweeper.get("params") or {}).items()
                   if "," in str(v)}
        varying |= {o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task
                    if "=" in o and "," in o.split("=", 1)[1]}
        tags = {"sweep_id": sweep_id, "sweep_name": name,
                "sweep_baseline": str(config.sweep.baseline or ""), "rag.sweep_parent": "1",
                "sweep_varying": " ".join(sorted(varying))}
        if config.suite.name:
            tags["suite"] = str(config.suite.name)
        if self._planned is not None:
            tags["sweep_jobs_planned"] = str(self._planned)
        parents = {c: ledger.client.create_run(e, run_name=f"sweep {sweep_id}", tags=tags).info.run_id
                   for c, e in exps.items()}
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        first = next(iter(parents.values()))
        (sweep_dir / SWEEP_FILE).write_text(json.dumps({
            "sweep_id": sweep_id, "parent_run_id": first, "parent_run_ids": parents,
            "varying": sorted(varying), "started_at": time.time(),
            "planned_jobs": self._planned}))
        self._open = (uri, parents, sweep_id, exps)
        self._names = names
        atexit.register(self._close_if_open)
        print(f"sweep {sweep_id}: parent run" + ("s " if len(parents) > 1 else " ")
              + ", ".join(f"{p} ({c})" if len(parents) > 1 else p for c, p in parents.items()))

    def _close_if_open(self) -> None:
        """atexit: the multirun died before on_multirun_end (a job failed) — compare the jobs
        that did finish with their baseline, then mark the parents FAILED (the sweep is
        incomplete, and the report says so)."""
        if self._open is None:
            return
        uri, parents, sweep_id, exps = self._open
        self._open = None
        try:
            from rag.ledger.mlflow_store import Ledger

            ledger = Ledger(uri, retries=self._retries)
            try:
                for exp_id in exps.values():
                    sweep_significance(ledger, exp_id, sweep_id)
            finally:
                for parent_id in parents.values():
                    ledger.client.set_terminated(parent_id, status="FAILED")
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            print(f"warning: the incomplete sweep {sweep_id} was not compared with its baseline "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr)

    @staticmethod
    def _repository_suite(ledger: Any, config: Any, parents: dict[str, str],
                          rows: list[Any]) -> None:
        """A repository suite (``+suite=semble``): the tables of
        :func:`rag.ledger.suite_tables.suite_tables` (per-query tests from the rows'
        per_query.csv) logged on the parent as ``suite_tables.json`` / ``.md`` and printed."""
        from rag.ledger.figures import per_query_frame_any
        from rag.ledger.mlflow_store import LedgerError
        from rag.ledger.suite_tables import reference_figures, render_suite_tables, suite_tables

        frames = {}
        for r in rows:
            try:
                frames[r.run_id] = per_query_frame_any(ledger.download_text(r.run_id,
                                                                            "per_query.csv"))
            except LedgerError:
                continue
        tables = suite_tables(rows, frames=frames, baseline=str(config.sweep.baseline or "")
                              or None, reference=reference_figures(rows))
        md = "\n".join(render_suite_tables(tables)) + "\n"
        for parent_id in parents.values():
            ledger.client.log_text(parent_id, json.dumps(tables, indent=2) + "\n",
                                   "suite_tables.json")
            ledger.client.log_text(parent_id, md, "suite_tables.md")
        m = tables["metric"]
        print(f"suite {config.suite.name}: {m}, macro over repositories (micro over queries)")
        for c in tables["configs"]:
            mac, mic = c["macro"].get(m), c["micro"].get(m)
            cats = ", ".join(f"{k} {v['macro_' + m]:.3f}" for k, v in c["categories"].items()
                             if v.get("macro_" + m) is not None)
            print(f"  {c['config']}: macro {'n/a' if mac is None else f'{mac:.3f}'} (micro "
                  f"{'n/a' if mic is None else f'{mic:.3f}'}; {c['repos_with_rows']} "
                  f"repositories); by category, macro: {cats}")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from rag.core.exit_codes import ExitCode

        outcomes = read_job_outcomes(Path(str(config.hydra.sweep.dir)))
        failed = [o for o in outcomes if o.get("outcome") == "failed"]
        skipped = [o for o in outcomes if o.get("outcome") == "skipped"]
        opened = self._open is not None
        name = f"sweep {self._open[2]}" if opened else "multirun"
        incomplete = None
        if opened:
            with self._fatal("at the sweep's end: the sweep is marked incomplete"):
                incomplete = self._close(config, failed=failed, skipped=skipped)
        if failed or incomplete:
            what = incomplete or (f"{len(failed)} job(s) failed: " + "; ".join(
                f"job {o.get('job')}: {o.get('message', '?')}" for o in failed[:3]))
            print(f"error: {name}: {what}"
                  + ("; the sweep is marked incomplete (its parent run FAILED)" if opened
                     else "; no row was written for them"), file=sys.stderr, flush=True)
            raise SystemExit(int(ExitCode.ERROR))

    def _close(self, config: Any, *, failed: list[dict[str, str]],
               skipped: list[dict[str, str]]) -> str | None:
        """The sweep's end: significance, summaries, parent runs closed (FINISHED, or FAILED
        with tag ``sweep_incomplete`` when a job failed or a planned row is missing) and the
        report. Returns why the sweep is incomplete, or None."""
        uri, parents, sweep_id, exps = self._open
        from rag.app.config import output_path
        from rag.ledger.mlflow_store import Ledger
        from rag.ledger.report import LedgerRow
        from rag.app.report import write_report

        t = config.tracking
        ledger = Ledger(uri, output_path(config, t.artifact_root), retries=self._retries)
        counts = {}
        for corpus, exp_id in exps.items():
            counts[corpus] = len(ledger.rows([exp_id], where=f"tags.sweep_id = '{sweep_id}'"))
        logged = sum(counts.values())
        expected = None if self._planned is None else self._planned - len(skipped)
        incomplete = (f"{len(failed)} job(s) failed: " + "; ".join(
                          f"job {o.get('job')}: {o.get('message', '?')}" for o in failed[:3])
                      if failed else
                      f"{logged} of {expected} planned rows were logged"
                      if expected is not None and logged < expected else None)
        suite_rows = []
        for corpus, exp_id in exps.items():
            sig = sweep_significance(ledger, exp_id, sweep_id)  # Holm within each corpus
            rows = ledger.rows([exp_id], where=f"tags.sweep_id = '{sweep_id}'")
            suite_rows += [LedgerRow.from_mlflow(r, self._names[corpus]) for r in rows]
            summary = {"sweep_id": sweep_id, "baseline": str(config.sweep.baseline),
                       "corpus": corpus, "rows": len(rows), "planned_jobs": self._planned,
                       "incomplete": incomplete, **sig}
            if len(exps) > 1:
                print(f" {corpus}:")
            for j in sig["jobs"]:
                h = sig["holm"].get(j["run_id"], {})
                mde = j.get("mrr_mde")
                print(f"  {j['job']}: MRR {j.get('mrr_delta', float('nan')):+.3f} (p "
                      f"{j.get('mrr_p', float('nan')):.4f}, Holm {h.get('mrr_p_holm', float('nan')):.4f})"
                      + (f", minimum detectable effect {mde:.3f}" if mde is not None and mde == mde else "")
                      + (f"  UNDERPOWERED (> sweep.min_effect {config.sweep.min_effect:g})"
                         if mde is not None and mde == mde and mde > config.sweep.min_effect else ""))
            for run_id, why in sig["skipped"].items():
                print(f"  {run_id[:8]}: significance skipped: {why}")
            ledger.client.log_text(parents[corpus], json.dumps(summary, indent=2) + "\n",
                                   "sweep_significance.json")
            try:  # the summary table and the sweep's figures, on the parent run
                log_sweep_summary(ledger, parents[corpus], [
                    LedgerRow.from_mlflow(r, self._names[corpus]) for r in rows],
                    incomplete=incomplete)
            except Exception as exc:  # noqa: BLE001 - the rows and significance are logged
                from rag.ledger.mlflow_store import _is_store_error

                if _is_store_error(exc):
                    raise  # the store failed: _fatal says so
                print(f"warning: sweep {sweep_id}: summary table or figures not logged "
                      f"({type(exc).__name__}: {exc})", file=sys.stderr)
            ledger.client.set_tag(parents[corpus], "sweep_rows", str(len(rows)))
            if incomplete:
                ledger.client.set_tag(parents[corpus], "sweep_incomplete", incomplete[:5000])
        if config.suite.name and any(r.tags.get("dataset_repo") for r in suite_rows):
            self._repository_suite(ledger, config, parents, suite_rows)
        elif config.suite.name:
            table = suite_summary(suite_rows)
            for parent_id in parents.values():
                ledger.client.log_text(parent_id, json.dumps(table, indent=2) + "\n",
                                       "suite_summary.json")
            print(f"suite {config.suite.name}: MRR per corpus and macro average")
            for g in table:
                per = ", ".join(f"{c.split('-', 1)[-1]} {v['mrr']:.3f}" for c, v in g["corpora"].items()
                                if "mrr" in v)
                print(f"  {g['config']}: macro {g['macro'].get('mrr', float('nan')):.3f} ({per})")
        for parent_id in parents.values():
            ledger.client.set_terminated(parent_id, status="FAILED" if incomplete else "FINISHED")
        self._open = None
        report = write_report(uri, output_path(config, t.report_path), prefix=t.experiment_prefix,
                              ledger=ledger)
        print(f"sweep {sweep_id} " + ("INCOMPLETE" if incomplete else "done")
              + f": {len(suite_rows)} rows; report: {report}")
        return incomplete
