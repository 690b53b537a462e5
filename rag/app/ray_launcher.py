"""``hydra/launcher=ray``: a sweep's jobs as Ray tasks, on a running Ray cluster or on a Ray
instance started on this machine for the sweep.

``hydra/launcher=ray`` (``RayLauncherConf``, stored in Hydra's ConfigStore by
hydra_plugins/rag_launchers/ray_launcher.py) selects
:class:`hydra_plugins.rag_launchers.ray_launcher.RayLauncher` (Hydra instantiates launchers
only from the ``hydra_plugins`` package; that class is a thin subclass of hydra-ray-launcher's
``RayLauncher``, https://hydra.cc/docs/plugins/ray_launcher/, whose ``launch`` is
:func:`launch_on_ray`). It keeps the plugin's ``ray.init`` / ``ray.remote`` keys and adds what
a sweep of this project needs:

* **Where.** ``hydra.launcher.ray.init.address`` (default ``$RAY_ADDRESS``) names a running
  cluster. Empty, a local instance is started for the sweep with the other ``ray.init`` keys of
  ``RayLauncherConf``: every server bound to 127.0.0.1 (``_node_ip_address``: nothing
  listens beyond loopback), ``num_cpus`` null (every CPU of the machine, as Ray counts them),
  the dashboard off, and Ray's token authentication on (a ``RAY_AUTH_MODE`` other than
  ``token`` is refused). Its session lives in a fresh temporary directory; when the launch
  ends the instance is stopped (``ray.shutdown()``), its logs are copied into
  ``<sweep dir>/ray_logs`` and the temporary directory is removed, so no Ray process or file
  is left behind.
* **The same jobs.** Each job's config is composed on the driver exactly as the plugin does,
  then its paths are pinned (:func:`pin_job_paths`): ``paths.cache_dir``,
  ``paths.output_dir`` and ``tracking.uri`` become the absolute paths the driver resolved,
  because a worker resolves ``${oc.env:...}``, ``~`` and relative paths in its own
  environment and working directory. Every job thus reads the indexes the driver prebuilt into
  ``paths.cache_dir`` (:mod:`rag.app.prebuild`) and embeds nothing, and logs into the
  driver's ledger, under the sweep id of ``sweep.json``.

On a cluster of several machines ``paths.cache_dir``, ``paths.output_dir`` (the sweep dir,
``sweep.json``) and a sqlite ledger must be on storage every node mounts at the same path (or
``tracking.uri`` an MLflow server), and every node needs this project installed.

Hydra's basic sweeper calls the launcher once per batch (one batch unless
``hydra.sweeper.max_batch_size`` is set); a local instance lives for one launch.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

#: hosts that mean "this machine only"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: ``ray.init`` keys that describe a new local instance; dropped when connecting to a cluster
LOCAL_ONLY = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory",
              "include_dashboard", "dashboard_host", "dashboard_port", "_node_ip_address",
              "_temp_dir", "_system_config")
#: where a local instance's logs are copied, under the sweep dir
RAY_LOGS = "ray_logs"
#: ray.init reads it when imported: False makes Ray's own node-IP lookup answer 127.0.0.1
#: instead of the address of the default route (ray/_private/services.py, get_node_ip_address)
RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def init_kwargs(init: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``ray.init`` keyword arguments for ``hydra.launcher.ray.init``, and whether they start
    a local instance.

    With ``address`` set (a running cluster) the keys that only describe a new instance
    (:data:`LOCAL_ONLY`: ``num_cpus``, ``_node_ip_address``, ...) are dropped, as ``ray.init``
    refuses them when connecting. Else ``address="local"`` (never an instance found by Ray's
    own auto-detection) and every key whose value is not null.

    Raises:
        ValueError: a local instance with ``RAY_AUTH_MODE`` set to anything but ``token``.
    """
    given = dict(init)
    if given.get("address"):
        return {k: v for k, v in given.items() if k not in LOCAL_ONLY and v is not None}, False
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        raise ValueError(f"RAY_AUTH_MODE={mode}: hydra/launcher=ray keeps Ray's token "
                         "authentication on for the instance it starts; unset RAY_AUTH_MODE")
    out = {k: v for k, v in given.items() if v is not None}
    out["address"] = "local"
    return out, True


def pin_job_paths(cfg: DictConfig) -> dict[str, str]:
    """Replace the job's ``paths.cache_dir``, ``paths.output_dir`` and ``tracking.uri`` by the
    absolute values they resolve to here (on the driver), so that a worker with another working
    directory, home or environment reads the same caches and writes the same ledger.

    Returns:
        key -> pinned value.
    """
    from rag.app.config import expand_path, ledger_uri

    pinned = {"paths.cache_dir": str(expand_path(cfg.paths.cache_dir)),
              "paths.output_dir": str(expand_path(cfg.paths.output_dir))}
    with open_dict(cfg):
        cfg.paths.cache_dir = pinned["paths.cache_dir"]
        cfg.paths.output_dir = pinned["paths.output_dir"]
        pinned["tracking.uri"] = ledger_uri(cfg)
        cfg.tracking.uri = pinned["tracking.uri"]
    return pinned


def _say(message: str) -> None:
    print(f"ray: {message}", flush=True)


@contextmanager
def ray_session(init: Mapping[str, Any], *, sweep_dir: str | Path | None = None
                ) -> Iterator[dict[str, Any]]:
    """Connect to the configured cluster, or start a local instance, for the ``with`` body.

    A Ray already initialised in this process is used as it is and left running. Otherwise
    the session is closed on exit: ``ray.shutdown()`` (which stops every process of a local
    instance), the local instance's logs copied into ``sweep_dir / RAY_LOGS``, its temporary
    directory removed.

    Args:
        init: ``hydra.launcher.ray.init`` (:func:`init_kwargs`).

    Yields:
        ``{"local": bool, "address": GCS address, "node_ip": str, "num_cpus": float,
        "temp_dir": str | None, "auth": RAY_AUTH_MODE, "pids": [pid of each Ray process
        this session started]}``.

    Raises:
        ValueError: a local instance with token authentication turned off (:func:`init_kwargs`).
        RuntimeError: a local instance asked to bind to loopback that did not.
    """
    kwargs, start_local = init_kwargs(init)
    host = str(kwargs.get("_node_ip_address") or "")
    loopback = start_local and host in LOOPBACK
    if loopback:
        os.environ[RAY_CLUSTER_ENV] = "0"  # before ray is imported (read at import)
    if start_local:  # Ray's own default for a new local instance, made explicit
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    # the jobs' rows reach the driver's stdout line by line: never folded into "[repeated Nx
    # across cluster]" (Ray's default), and without colour codes when it is not a terminal
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    import ray

    if ray.is_initialized():
        _say("using the Ray already initialised in this process")
        yield {"local": False, "address": None, "node_ip": None, "num_cpus": None,
               "temp_dir": None, "auth": os.environ.get("RAY_AUTH_MODE"), "pids": []}
        return
    temp_dir = None
    if start_local and "_temp_dir" not in kwargs:
        # short: Ray's unix sockets live under it and a socket path may not exceed 107 bytes
        temp_dir = tempfile.mkdtemp(prefix="rag-ray-")
        kwargs["_temp_dir"] = temp_dir
    try:
        ctx = ray.init(**kwargs)
        node = ray._private.worker._global_node  # noqa: SLF001 - the processes this init started
        procs = node.all_processes.values() if start_local and node is not None else []
        info = {"local": start_local, "address": ctx.address_info.get("gcs_address"),
                "node_ip": ctx.address_info.get("node_ip_address"),
                "num_cpus": ray.cluster_resources().get("CPU", 0.0), "temp_dir": temp_dir,
                "auth": os.environ.get("RAY_AUTH_MODE"),
                "pids": sorted(p.process.pid for ps in procs for p in ps if p.process)}
        if loopback and info["node_ip"] not in LOOPBACK:
            raise RuntimeError(
                f"the local Ray instance bound to {info['node_ip']}, not {host}: Ray was "
                f"imported before {RAY_CLUSTER_ENV}=0 could apply; start the sweep in a fresh "
                "process")
        if start_local:
            _say(f"started a local instance on {info['node_ip']} ({info['num_cpus']:g} CPUs, "
                 f"token authentication {'on' if info['auth'] == 'token' else 'OFF'}, "
                 f"dashboard {'on' if kwargs.get('include_dashboard') else 'off'}, "
                 f"session in {temp_dir or kwargs['_temp_dir']})")
        else:
            _say(f"connected to the cluster at {info['address']} ({info['num_cpus']:g} CPUs)")
        yield info
    finally:
        if ray.is_initialized():
            ray.shutdown()
            if start_local:
                _say("stopped the local instance")
        if temp_dir is not None:
            try:
                _keep_logs(Path(temp_dir), Path(sweep_dir) if sweep_dir is not None else None)
            finally:
                shutil.rmtree(temp_dir, ignore_errors=True)


def _keep_logs(temp_dir: Path, sweep_dir: Path | None) -> None:
    """Copy the session's ``logs/`` folder into ``sweep_dir / RAY_LOGS`` (best effort)."""
    if sweep_dir is None:
        return
    src = temp_dir / "session_latest" / "logs"
    dst = sweep_dir / RAY_LOGS
    try:
        shutil.copytree(src.resolve(), dst, ignore=shutil.ignore_patterns("*.sock"),
                        dirs_exist_ok=True)
        _say(f"logs: {dst}")
    except (OSError, shutil.Error) as exc:
        print(f"warning: the Ray logs were not kept ({type(exc).__name__}: {exc})",
              file=sys.stderr)


def launch_on_ray(launcher: Any, job_overrides: Sequence[Sequence[str]],
                  initial_job_idx: int) -> list[Any]:
    """Run one batch of a sweep's jobs as Ray tasks; the body of
    :meth:`hydra_plugins.rag_launchers.ray_launcher.RayLauncher.launch`.

    Mirrors hydra-ray-launcher's ``_core.launch`` (each job's config composed here, on the
    driver, then run by ``hydra.core.utils.run_job`` in a Ray worker), inside
    :func:`ray_session` and with :func:`pin_job_paths` applied to every job's config.

    Args:
        launcher: the set-up launcher (``config``, ``hydra_context``, ``task_function``,
            ``ray_cfg`` with ``init`` and ``remote``).
        job_overrides: each job's overrides, in launch order.
        initial_job_idx: the number of the batch's first job.

    Returns:
        Each job's ``hydra.core.utils.JobReturn``, in launch order.
    """
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals

    setup_globals()
    config, context = launcher.config, launcher.hydra_context
    assert config is not None and context is not None and launcher.task_function is not None
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    init = OmegaConf.to_container(launcher.ray_cfg.get("init") or {}, resolve=True)
    with ray_session(init, sweep_dir=sweep_dir):
        import ray
        from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray

        log.info(f"Ray launcher: {len(job_overrides)} jobs, sweep output dir: {sweep_dir}")
        refs = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            cfg = context.config_loader.load_sweep_config(config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = f"job_id_for_{idx}"
                cfg.hydra.job.num = idx
            pin_job_paths(cfg)
            refs.append(launch_job_on_ray(context, launcher.ray_cfg.get("remote"), cfg,
                                          launcher.task_function, Singleton.get_state()))
        return [ray.get(r) for r in refs]
