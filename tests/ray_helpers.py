"""A two-node Ray cluster on this machine, with toolserver deployed on it from deploy/ray/toolserver.yaml.

`ray.cluster_utils.Cluster`: a head with one CPU that advertises `toolserver` (the ingress replicas' resource) and
a worker with one CPU and one logical GPU that advertises `toolserver_models` (the models' resource). The Serve
config is the file users deploy, with two changes that fit it to this cluster: every deployment's `num_cpus` is
quartered (two CPUs hold all six replicas) and the HTTP port is a free one. Settings reach the replicas as they
do on a real cluster: through the environment the nodes were started with.

Every deploy is bounded by a timeout (a replica that cannot be placed makes Serve wait forever, with warnings
only), and `stop` checks that no process of the cluster (its nodes' processes and every worker they started) outlives
it.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
SERVE_CONFIG = ROOT / "deploy" / "ray" / "toolserver.yaml"


def fitted_config(port: int, *, cpu_share: float = 0.25, models: list[str] | None = None,
                  overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """deploy/ray/toolserver.yaml fitted to a small test cluster (see the module's docstring)."""
    config = copy.deepcopy(yaml.safe_load(SERVE_CONFIG.read_text()))
    config["http_options"]["port"] = port
    config["http_options"]["host"] = "127.0.0.1"
    app = config["applications"][0]
    if models is not None:  # the models left out run inside the ingress: their deployments go too
        app["args"]["models"] = models
        app["deployments"] = [d for d in app["deployments"] if d["name"] in ("toolserver", *models)]
    for deployment in app["deployments"]:
        options = deployment.setdefault("ray_actor_options", {})
        options["num_cpus"] = options.get("num_cpus", 1) * cpu_share
        deployment.update((overrides or {}).get(deployment["name"], {}))
    return config


def descendants(roots: list[int]) -> list[int]:
    """`roots` and every live process below them (read from /proc: ppid links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found and Path(f"/proc/{pid}").exists():
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


class RayTestCluster:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self.cluster: Any = None
        self.stopped = False
        self._saved: dict[str, str | None] = {}
        self.session_dir = ""
        self.url = ""

    def start(self) -> RayTestCluster:
        import ray
        from ray.cluster_utils import Cluster

        # Inherited by the nodes, hence by every replica; given back at `stop`, so that the tests after these do
        # not read the cluster's settings.
        self._saved = {name: os.environ.get(name) for name in [*self.env, "RAY_USAGE_STATS_ENABLED"]}
        os.environ.update(self.env)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "resources": {"toolserver": 1}, "include_dashboard": False})
        self.cluster.add_node(num_cpus=1, num_gpus=1, resources={"toolserver_models": 1})
        ray.init(address=self.cluster.address, namespace="serve", log_to_driver=False)
        self.session_dir = self.cluster.head_node.get_session_dir_path()
        return self

    def deploy(self, config: dict[str, Any], timeout_s: float = 180.0) -> str:
        """Deploy a Serve config (as `serve run CONFIG` does) and wait until it runs; its URL."""
        from ray import serve
        from ray.serve._private import api as serve_api
        from ray.serve.schema import ServeDeploySchema

        schema = ServeDeploySchema.model_validate(config)
        client = serve_api.serve_start(http_options=schema.http_options.model_dump(),
                                       proxy_location=schema.proxy_location)
        client.deploy_apps(schema, _blocking=False)
        name = schema.applications[0].name
        deadline = time.monotonic() + timeout_s
        status: Any = None
        while time.monotonic() < deadline:
            status = serve.status().applications.get(name)
            if status is not None and status.status == "RUNNING":
                break
            if status is not None and status.status == "DEPLOY_FAILED":
                raise RuntimeError(f"deploy failed: {status.message}; "
                                   f"{ {n: d.message for n, d in status.deployments.items()} }")
            time.sleep(0.5)
        else:
            why = {n: (d.status, d.message) for n, d in status.deployments.items()} if status else "no status"
            raise TimeoutError(f"the app was not running after {timeout_s:.0f} s: {why}")
        self.url = f"http://{schema.http_options.host}:{schema.http_options.port}"
        wait_ready(self.url, timeout_s=max(10.0, deadline - time.monotonic()))
        return self.url

    def processes(self) -> list[int]:
        """Every process of the cluster: its nodes' processes (GCS, raylets, agents) and what they started (the
        workers: controller, proxies, replicas)."""
        roots = [info.process.pid for node in self.cluster.list_all_nodes()
                 for infos in node.all_processes.values() for info in infos]
        return descendants(roots)

    def node_ids(self) -> tuple[str, str]:
        """(head's node id, the GPU worker's)."""
        head = self.cluster.head_node.node_id
        worker = next(n for n in self.cluster.worker_nodes).node_id
        return head, worker

    def stop(self, timeout_s: float = 30.0) -> list[int]:
        """Shut everything down; the pids of the cluster's processes still alive after `timeout_s` (then killed)."""
        import ray
        from ray import serve

        if self.stopped:
            return []
        self.stopped = True
        processes = self.processes() if self.cluster is not None else []
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            if self.cluster is not None:
                self.cluster.shutdown()
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        deadline = time.monotonic() + timeout_s
        while (left := _alive(processes)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            with suppress(ProcessLookupError):
                os.kill(pid, 9)
        return left


@contextmanager
def ray_cluster(env: dict[str, str]) -> Iterator[RayTestCluster]:
    cluster = RayTestCluster(env).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} was not ready after {timeout_s:.0f} s")
