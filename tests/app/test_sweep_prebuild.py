"""A sweep's indexes are built once, on the driver, before any job (rag/app/prebuild.py):
every job, in any worker process — joblib's, or a Ray instance's (hydra/launcher=ray,
rag/app/ray_launcher.py) — embeds nothing, and a parallel sweep's rows equal the
one-process sweep's. A local Ray instance listens on loopback only, keeps token
authentication on, and leaves no process behind."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import (FIXTURE_FILES, FIXTURE_NEGATIVES, FIXTURE_QUERIES, PROJECT, run_overrides,
                      write_tree)


def test_job_overrides_follow_the_basic_sweeper():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rag.app.prebuild import BASIC_SWEEPER, sweep_job_overrides

    def cfg(target, task=()):
        return OmegaConf.create({"hydra": {
            "sweeper": {"_target_": target, "params": {"search.mode": "dense,bm25"}},
            "overrides": {"task": list(task)}}})

    assert sweep_job_overrides(cfg(BASIC_SWEEPER, ["search.top_k=5", "fusion.rrf_k=10,30"])) == [
        ["search.mode=dense", "search.top_k=5", "fusion.rrf_k=10"],
        ["search.mode=dense", "search.top_k=5", "fusion.rrf_k=30"],
        ["search.mode=bm25", "search.top_k=5", "fusion.rrf_k=10"],
        ["search.mode=bm25", "search.top_k=5", "fusion.rrf_k=30"]]
    # an override that names another key (docs/ranking.md's per-repository model) reaches
    # each job as typed, to be resolved in the job's config, not in the base config's
    per_repo = ["ranking.model=m/loro/${dataset.repo}.json"]
    base = OmegaConf.create({"dataset": {"repo": None}, "hydra": {
        "sweeper": {"_target_": BASIC_SWEEPER, "params": {"dataset.repo": "gin,chi"}},
        "overrides": {"task": per_repo}}})
    jobs = sweep_job_overrides(base)
    assert [job[0] for job in jobs] == ["dataset.repo=gin", "dataset.repo=chi"]
    # (written back as Hydra's launcher writes it, ``$\{...\}``, which parses to the text typed)
    parsed = OverridesParser.create().parse_overrides([jobs[0][1], jobs[1][1]])
    assert [o.value() for o in parsed] == ["m/loro/${dataset.repo}.json"] * 2
    # another sweeper (optuna, ...) decides its jobs as it goes: not listed in advance
    assert sweep_job_overrides(cfg("hydra_plugins.optuna.OptunaSweeper")) is None


def test_prebuild_builds_each_distinct_index_once(tmp_path, fixture_repo, fixture_golden,
                                                  compose, embedder):
    from rag.app.prebuild import prebuild_indexes
    from rag.app.stages import StageCache

    base = run_overrides(tmp_path, fixture_repo, fixture_golden)
    jobs = [([f"search.mode={m}"], compose([*base, f"search.mode={m}"]))
            for m in ("dense", "bm25", "hybrid", "auto")]
    bad = ["search.top_k=10", "search.candidates=9"]  # fails validation: left to its job
    jobs.append((bad, compose([*base, *bad])))
    notes: list[str] = []
    pre = prebuild_indexes(jobs, stages=StageCache(embedder=embedder), progress=False,
                           log=notes.append)
    # dense, hybrid and auto embed the same chunks: one build; bm25 reads the chunk store only
    assert [(b["job"], b["dense"]) for b in pre.builds] == [
        ("search.mode=dense", True), ("search.mode=bm25", False)]
    chunks = pre.builds[0]["chunks"]
    assert pre.chunks_embedded() == chunks > 0 and pre.indexes("shop") == 2
    assert list(pre.skipped) == ["search.top_k=10 search.candidates=9"]
    assert "search.candidates (9) must be >= search.top_k (10)" in notes[0]
    # the caches are on disk: a second prebuild (another process, say) embeds nothing, and
    # neither does a job's own build
    again = prebuild_indexes(jobs[:1], stages=StageCache(embedder=embedder), progress=False,
                             log=notes.append)
    assert again.chunks_embedded() == 0
    index = StageCache(embedder=embedder).index(jobs[2][1], fixture_repo, embedder,
                                                progress=False)
    assert index.stats["chunks_embedded"] == 0 and index.stats["corpus_read"] == 0


def _ray_env() -> dict[str, str]:
    """The environment of a process that starts a local Ray instance: offline, no cluster
    address, token authentication with a token of its own (so Ray writes no ~/.ray/auth_token)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _sweep(tmp_path, repo, golden, *launcher, env=None):
    tmp_path.mkdir()
    env = env or {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "+sweep=routing", *launcher,
         *run_overrides(tmp_path, repo, golden), f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    rows = {r.data.tags["sweep_job"]: r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"}
    assert all(r.data.tags["sweep_id"] == parents[0].data.tags["sweep_id"] for r in rows.values())
    return parents[0], rows, proc.stdout


ROUTING_JOBS = {f"search.mode={m}" for m in ("dense", "bm25", "hybrid", "auto")}


def _assert_prebuilt_once(parent, rows, stdout) -> None:
    """The routing sweep's four rows; the driver embedded each chunk once, no job any."""
    assert set(rows) == ROUTING_JOBS
    chunks = rows["search.mode=dense"].data.metrics["index/chunks"]
    assert parent.data.metrics["sweep/chunks_embedded"] == chunks > 0
    assert parent.data.metrics["sweep/indexes_prebuilt"] == 2  # with and without dense
    assert sum(r.data.metrics["index/chunks_embedded"] for r in rows.values()) == 0
    assert all(r.data.metrics["index/corpus_read"] == 0 for r in rows.values())
    assert "sweep prebuild: 2 index(es) built before the jobs" in stdout


def _assert_same_rows(a, b) -> None:
    """Equal quality metrics per job, the same baseline, equal significance fields."""
    assert a["search.mode=dense"].data.tags["is_baseline"] == "true"
    assert b["search.mode=dense"].data.tags["is_baseline"] == "true"
    quality = ("mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate")
    significance = [f"vs_baseline/{m}_{s}" for m in ("mrr", "recall_at_8", "ndcg_at_10")
                    for s in ("delta", "p", "p_holm")]
    for label in ROUTING_JOBS:
        ma, mb = a[label].data.metrics, b[label].data.metrics
        for k in quality:
            assert mb[k] == pytest.approx(ma[k]), (label, k)
        if label != "search.mode=dense":
            assert b[label].data.tags["sweep_baseline_job"] == "search.mode=dense"
            for k in significance:
                assert mb[k] == pytest.approx(ma[k]), (label, k)


@pytest.fixture(scope="module")
def sweep_inputs(tmp_path_factory):
    """(scratch root, fixture repository, its golden set), shared by the module's sweeps."""
    root = tmp_path_factory.mktemp("sweeps")
    repo = write_tree(root / "repo", FIXTURE_FILES)
    golden = write_tree(root / "golden", {"queries.yaml": FIXTURE_QUERIES,
                                          "negatives.yaml": FIXTURE_NEGATIVES})
    return root, repo, golden


@pytest.fixture(scope="module")
def basic_sweep(sweep_inputs):
    """The routing sweep under Hydra's basic launcher (one process), the reference."""
    root, repo, golden = sweep_inputs
    return _sweep(root / "basic", repo, golden)


@pytest.mark.integration
def test_parallel_sweep_embeds_nothing_and_equals_the_one_process_sweep(sweep_inputs,
                                                                        basic_sweep):
    """The routing sweep with Hydra's basic launcher (one process) and with the joblib launcher
    (2 worker processes), each into its own ledger and its own (empty) cache directory."""
    root, repo, golden = sweep_inputs
    joblib = _sweep(root / "joblib", repo, golden, "hydra/launcher=joblib",
                    "hydra.launcher.n_jobs=2")
    for parent, rows, stdout in (basic_sweep, joblib):
        _assert_prebuilt_once(parent, rows, stdout)
    assert "n_jobs=2" in joblib[2]  # the jobs did run in joblib's workers
    _assert_same_rows(basic_sweep[1], joblib[1])


# --- hydra/launcher=ray --------------------------------------------------------------------


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return None


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process (from /proc)."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            out[int(p.name)] = (int(stat[stat.rindex(")") + 2:].split()[1]), name)
    return out


def _tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    procs, tree, grew = _processes(), {root}, True
    while grew:
        new = {pid for pid, (ppid, _) in procs.items() if ppid in tree} - tree
        tree |= new
        grew = bool(new)
    return tree


def _ray_daemons() -> set[int]:
    return {pid for pid, (_, name) in _processes().items() if name in ("raylet", "gcs_server")}


def _listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes ``pids`` hold, read
    from /proc/net/tcp{,6} (state 0A) and each process's socket inodes."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in owner:
                continue
            hexip, hexport = cols[1].split(":")
            raw = b"".join(bytes.fromhex(hexip[i:i + 8])[::-1] for i in range(0, len(hexip), 8))
            out.append((owner[cols[9]], str(ipaddress.ip_address(raw)), int(hexport, 16)))
    return out


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def test_ray_init_kwargs_for_a_local_instance_and_for_a_cluster(monkeypatch):
    from rag.app.ray_launcher import init_kwargs

    init = {"address": None, "num_cpus": None, "_node_ip_address": "127.0.0.1",
            "include_dashboard": False, "object_store_memory": 78643200, "namespace": "rag"}
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    # a local instance: never Ray's auto-detected one; null keys left to Ray (num_cpus: all)
    assert init_kwargs(init) == ({"address": "local", "_node_ip_address": "127.0.0.1",
                                  "include_dashboard": False, "object_store_memory": 78643200,
                                  "namespace": "rag"}, True)
    assert init_kwargs({**init, "address": ""})[1] is True
    # a cluster: ray.init refuses the keys that describe a new instance
    assert init_kwargs({**init, "address": "10.0.0.5:6379", "num_cpus": 4}) == (
        {"address": "10.0.0.5:6379", "namespace": "rag"}, False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(ValueError, match="RAY_AUTH_MODE=disabled: .* keeps Ray's token"):
        init_kwargs(init)
    assert init_kwargs({**init, "address": "10.0.0.5:6379"})[1] is False  # the cluster decides


def test_job_paths_are_pinned_to_the_driver(compose, tmp_path, monkeypatch):
    from rag.app.config import project_root
    from rag.app.ray_launcher import pin_job_paths

    monkeypatch.delenv("RAG_CACHE_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("RAG_OUTPUT_DIR", "out/sub")
    cfg = compose(["paths.cache_dir='~/rag-cache'", "tracking.uri=sqlite:///ledger.db"])
    pinned = pin_job_paths(cfg)
    out = project_root().resolve() / "out" / "sub"
    assert pinned == {"paths.cache_dir": str(Path.home().resolve() / "rag-cache"),
                      "paths.output_dir": str(out),
                      "tracking.uri": f"sqlite:///{out / 'ledger.db'}"}
    # the values, no longer interpolations: a worker's environment changes nothing
    monkeypatch.setenv("RAG_OUTPUT_DIR", "/elsewhere")
    assert (cfg.paths.cache_dir, cfg.paths.output_dir, cfg.tracking.uri) == tuple(pinned.values())


SESSION_SCRIPT = textwrap.dedent("""\
    import json, os, sys
    from omegaconf import OmegaConf
    from hydra_plugins.rag_launchers.ray_launcher import RayLauncherConf
    from rag.app.ray_launcher import ray_session

    init = OmegaConf.to_container(OmegaConf.structured(RayLauncherConf).ray.init, resolve=True)
    with ray_session(init, sweep_dir=sys.argv[1]) as info:
        import ray

        @ray.remote
        def pid():
            return os.getpid()

        info.update(driver=os.getpid(), worker=ray.get(pid.remote()))
        print("SESSION " + json.dumps(info), flush=True)
        sys.stdin.readline()  # the test inspects the running instance meanwhile
    """)


@pytest.mark.slow
def test_local_ray_instance_listens_on_loopback_only_and_stops(tmp_path):
    """hydra/launcher=ray's defaults start an instance whose every listening socket (GCS,
    raylet, agents, the driver's and workers' gRPC servers) is on loopback, with token
    authentication on; leaving the session stops every process and removes its files."""
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-c", SESSION_SCRIPT, str(tmp_path / "sweep")],
                                stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.STDOUT,
                                text=True, env=_ray_env(), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not (m := re.search(r"^SESSION (.*)$", out.read_text(), re.M)):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.5)
        info = json.loads(m.group(1))
        tree = _tree(info["driver"])
        assert info["worker"] in tree and set(info["pids"]) <= tree
        names = {_processes().get(p, (0, ""))[1] for p in tree}
        assert {"raylet", "gcs_server"} <= names
        sockets = _listening(tree)
        assert {pid for pid, _, _ in sockets} >= {info["driver"], info["worker"]}
        assert [s for s in sockets if not _loopback(s[1])] == []
        assert info["node_ip"] == "127.0.0.1" and info["auth"] == "token" and info["local"]
        cmdlines = {p: _cmdline(p) for p in tree}
    finally:
        proc.communicate("\n", timeout=120)
    assert proc.returncode == 0, out.read_text()[-3000:]
    assert "ray: stopped the local instance" in out.read_text()
    time.sleep(1)
    assert [p for p, cmd in cmdlines.items() if cmd and _cmdline(p) == cmd] == []
    assert not Path(info["temp_dir"]).exists()
    assert (tmp_path / "sweep" / "ray_logs" / "gcs_server.out").is_file()


@pytest.mark.integration
def test_ray_sweep_embeds_nothing_and_equals_the_basic_sweep(sweep_inputs, basic_sweep):
    """The routing sweep under hydra/launcher=ray (a local instance, 2 CPUs: 2 jobs at a time)
    into its own ledger and (empty) cache: the same rows as the basic launcher's, no job
    embeds, and no Ray process is left when the sweep returns."""
    root, repo, golden = sweep_inputs
    before = _ray_daemons()
    ray = _sweep(root / "ray", repo, golden, "hydra/launcher=ray",
                 "hydra.launcher.ray.init.num_cpus=2", env=_ray_env())
    parent, rows, stdout = ray
    _assert_prebuilt_once(*ray)
    _assert_same_rows(basic_sweep[1], rows)
    assert "ray: started a local instance on 127.0.0.1 (2 CPUs, token authentication on" in stdout
    assert "(_run_job pid=" in stdout  # the jobs' rows were printed by Ray workers
    # the jobs' paths were pinned to the driver's (the basic launcher logs the raw default)
    from rag.app.config import expand_path

    output_dir = str(expand_path(os.environ.get("RAG_OUTPUT_DIR", ".")))
    assert {r.data.params["paths.output_dir"] for r in rows.values()} == {output_dir}
    # nothing left behind: no daemon, no process of the session, no session directory
    temp_dir = re.search(r"session in (/\S+)\)", stdout).group(1)
    time.sleep(1)
    assert _ray_daemons() - before == set()
    assert [p for p in _processes() if temp_dir in (_cmdline(p) or "")] == []
    assert not Path(temp_dir).exists()
    assert (root / "ray" / "multirun" / "ray_logs" / "gcs_server.out").is_file()
