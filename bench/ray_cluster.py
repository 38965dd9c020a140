"""toolserver on a two-node Ray cluster on this machine, for the benchmarks: the test cluster of
tests/ray_helpers.py (a head with the `toolserver` resource, a worker with a logical GPU and `toolserver_models`),
the app deployed from deploy/ray/toolserver.yaml, serving until SIGTERM, then everything shut down.

    .venv/bin/python -m bench.ray_cluster --port 8000 [--models smfanet,clip,text] [--set smfanet:KEY=VALUE ...]

Prints `READY <url>` when the app answers /readyz, and writes the pids of the cluster's processes to `--pids`
(for a benchmark that measures the server's CPU and memory). `--state` starts the app's own Redis and Chroma
server (what several replicas share), counted with it. `--set DEPLOYMENT:TOOLSERVER_X=V` gives one
deployment an environment variable of its own (an unbatched SMFANet deployment: `smfanet:TOOLSERVER_SR_BATCH_CALLS=1`).
Settings for every replica come from this process's environment, as on a real cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import ChromaProcess, RedisProcess  # noqa: E402
from tests.ray_helpers import RayTestCluster, descendants, fitted_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models", default="smfanet,clip,text", help="models in deployments of their own")
    parser.add_argument("--set", action="append", default=[], metavar="DEPLOYMENT:NAME=VALUE")
    parser.add_argument("--replicas", type=int, default=2, help="ingress replicas")
    parser.add_argument("--affinity", action="store_true", help="the consistent-hash router on X-Session-ID")
    parser.add_argument("--haproxy", action="store_true", help="Serve's HAProxy ingress instead of its Python proxy "
                        "(RAY_SERVE_ENABLE_HA_PROXY=1; not with --affinity)")
    parser.add_argument("--pids", type=Path)
    parser.add_argument("--state", action="store_true", help="start a Redis and a Chroma server of its own for the "
                        "app (its sessions and documents), stopped with it")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.state:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolserver-ray-state-")))
            redis = RedisProcess(work)
            stack.callback(redis.stop)
            chroma = ChromaProcess(work / "chroma")
            stack.callback(chroma.stop)
            os.environ.update(TOOLSERVER_SESSION_STORE="redis", TOOLSERVER_REDIS_URL=redis.url,
                              TOOLSERVER_CHROMA_URL=chroma.url)
        serve(args)


def serve(args: argparse.Namespace) -> None:
    overrides: dict[str, dict] = {"toolserver": {"autoscaling_config": {"min_replicas": args.replicas,
                                                                        "max_replicas": args.replicas}}}
    if args.affinity:
        overrides["toolserver"]["request_router_config"] = {
            "request_router_class": "ray.serve.experimental.consistent_hash_router:ConsistentHashRouter"}
    for item in args.set:
        deployment, assignment = item.split(":", 1)
        name, value = assignment.split("=", 1)
        options = overrides.setdefault(deployment, {}).setdefault("ray_actor_options", {})
        options.setdefault("runtime_env", {}).setdefault("env_vars", {})[name] = value
    config = fitted_config(args.port, models=[m for m in args.models.split(",") if m])
    for deployment in config["applications"][0]["deployments"]:
        extra = overrides.get(deployment["name"], {})
        if "ray_actor_options" in extra:
            deployment["ray_actor_options"].update(extra.pop("ray_actor_options"))
        deployment.update(extra)
    if args.haproxy:
        os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
    stop = threading.Event()
    cluster = RayTestCluster({}).start()
    # After `ray.init`, whose failure-signal handler (a stack dump, then death) would otherwise take SIGTERM: the
    # cluster must be shut down, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        url = cluster.deploy(config, timeout_s=300)
        if args.pids:  # this process and everything below it: Redis, Chroma, the cluster's nodes and workers
            args.pids.write_text("\n".join(str(p) for p in descendants([os.getpid()])))
        print(f"READY {url}", flush=True)
        stop.wait()
    finally:
        left = cluster.stop()
        if left:
            print(f"killed {len(left)} Ray processes left after shutdown", file=sys.stderr)


if __name__ == "__main__":
    main()
