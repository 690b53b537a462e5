"""``hydra/launcher=ray``: hydra-ray-launcher's launcher with a loopback-only local instance
that is stopped after the launch, and job paths pinned to the driver's; the logic is
:mod:`rag.app.ray_launcher`.

Its config is :class:`RayLauncherConf`, stored in Hydra's ConfigStore as ``hydra/launcher/ray``
in place of the plugin's own (``--cfg hydra -p hydra.launcher`` prints it). A YAML file of that
name would be merged with the plugin's schema, a deprecated Hydra behaviour that warns on
every composition. The plugin's configs are registered first (its ``_config`` module is
imported here), so this entry is the one that stays, whatever order Hydra scans plugins in.

Hydra imports this module when it scans for plugins, so it imports neither Ray nor ``rag``
(and, as Hydra executes it before registering it in ``sys.modules``, it must not use
``from __future__ import annotations`` with a dataclass).
"""

from dataclasses import dataclass, field
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_ray_launcher._config import RayConf  # registers the plugin's configs
from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as PluginRayLauncher


def _init_defaults() -> dict[str, Any]:
    return {
        # a running cluster (host:port, ray://host:10001, auto); empty: a local instance,
        # started for the launch and stopped after it, described by the keys below (dropped
        # when connecting to a cluster: rag.app.ray_launcher.LOCAL_ONLY)
        "address": "${oc.env:RAY_ADDRESS,null}",
        # CPUs Ray schedules on; null: every CPU of the machine
        "num_cpus": None,
        # every Ray server binds here: loopback only
        "_node_ip_address": "127.0.0.1",
        "include_dashboard": False,
        # bytes of shared memory for Ray's object store (a job returns a small dict); the
        # plugin's own default
        "object_store_memory": 78_643_200,
    }


@dataclass
class RayLauncherConf:
    """``hydra.launcher`` under ``hydra/launcher=ray``.

    ``ray.init``: ``ray.init`` keywords (https://docs.ray.io/en/latest/ray-core/api/doc/
    ray.init.html), see :func:`_init_defaults`; ``ray.remote``: ``ray.remote`` options of every
    job (default one CPU each, so as many jobs run at once as Ray has CPUs).
    """

    _target_: str = "hydra_plugins.rag_launchers.ray_launcher.RayLauncher"
    ray: RayConf = field(default_factory=lambda: RayConf(init=_init_defaults(),
                                                         remote={"num_cpus": 1}))


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf,
                             provider="rag")


class RayLauncher(PluginRayLauncher):
    """A sweep's jobs as Ray tasks (:func:`rag.app.ray_launcher.launch_on_ray`).

    Args:
        ray: ``init`` (``ray.init`` keywords; ``address`` empty: a local instance, see
            :func:`rag.app.ray_launcher.init_kwargs`) and ``remote`` (``ray.remote``
            options of every job), as in hydra-ray-launcher's ``RayConf``.
    """

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[Any]:
        """Run the batch's jobs and return their ``JobReturn`` in launch order."""
        from rag.app.ray_launcher import launch_on_ray

        return launch_on_ray(self, job_overrides, initial_job_idx)
