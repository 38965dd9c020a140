"""The Ray Serve config and the Kubernetes manifests, checked offline: `ServeDeploySchema` for the Serve config (the
file `serve run` takes and the RayService carries), `kubectl kustomize` renders every kustomization, and
`kubernetes-validate --strict` validates every rendered object (the RayService's pod templates as PodTemplates,
since the validator knows no CRDs). A broken field must fail."""

from __future__ import annotations

import copy
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import need_program

# Rendering and validating every manifest takes seconds: .ci/run runs it (`-m slow`).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SERVE_CONFIG = ROOT / "deploy" / "ray" / "toolserver.yaml"
K8S = ROOT / "deploy" / "k8s"
KUBERNETES = "1.33.0"


def serve_config() -> dict[str, Any]:
    return yaml.safe_load(SERVE_CONFIG.read_text())


def render(directory: str) -> list[dict[str, Any]]:
    kubectl = need_program("kubectl")  # it renders the kustomizations offline (`kubectl kustomize`)
    done = subprocess.run([kubectl, "kustomize", str(K8S / directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def validate(obj: dict[str, Any]) -> None:
    """kubernetes-validate --strict; a RayService (a CRD) is checked through its pod templates."""
    if obj["kind"] == "RayService":
        cluster = obj["spec"]["rayClusterConfig"]
        groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        for i, group in enumerate(groups):
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate",
                                          "metadata": {"name": f"group-{i}"}, "template": group["template"]},
                                         KUBERNETES, strict=True)
        return
    kubernetes_validate.validate(obj, KUBERNETES, strict=True)


@pytest.mark.ray  # Ray Serve's own config schema: the `ray` extra, installed for .ci/run's Ray leg
def test_the_serve_config_validates_and_says_where_everything_runs():
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(serve_config())
    (app,) = schema.applications
    assert app.import_path == "toolserver.rayapp:build" and app.route_prefix == "/"
    assert app.runtime_env["env_vars"] == {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_MCP_SESSIONS": "shared"}
    deployments = {d.name: d for d in app.deployments}
    assert set(deployments) == {"toolserver", "smfanet", "clip", "text"} == {"toolserver", *app.args["models"]}
    ingress = deployments["toolserver"]
    assert ingress.ray_actor_options.resources == {"toolserver": 0.01}  # off the trainer's nodes
    assert ingress.max_ongoing_requests >= 64 and ingress.max_queued_requests > 0
    assert ingress.backpressure_config.status_code == 429 and ingress.backpressure_config.retry_after_s
    bounds = ingress.autoscaling_config
    assert 2 <= bounds["min_replicas"] < bounds["max_replicas"]
    for name in app.args["models"]:
        options = deployments[name].ray_actor_options
        assert 0 < options.num_gpus < 1 and options.resources == {"toolserver_models": 0.01}
        assert deployments[name].backpressure_config.status_code == 429


@pytest.mark.ray  # Ray Serve's own config schema: the `ray` extra, installed for .ci/run's Ray leg
def test_a_broken_serve_config_fails_validation():
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    broken = serve_config()
    broken["applications"][0]["deployments"][0]["max_ongoing_requests"] = "many"
    with pytest.raises(ValidationError):
        ServeDeploySchema.model_validate(broken)
    misspelt = serve_config()
    misspelt["applications"][0]["deployments"][0]["backpressure_config"]["retry_after"] = 1
    with pytest.raises(ValidationError):
        ServeDeploySchema.model_validate(misspelt)


@pytest.mark.parametrize("directory", ["base", "overlays/gpu", "ray"])
def test_every_rendered_manifest_validates_strictly(directory):
    objects = render(directory)
    assert objects
    for obj in objects:
        validate(obj)


def test_the_plain_manifests_share_sessions_documents_and_mcp_between_replicas():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render("base")}
    settings = objects[("ConfigMap", "toolserver-settings")]["data"]
    assert settings["TOOLSERVER_SESSION_STORE"] == "redis" and settings["TOOLSERVER_MCP_SESSIONS"] == "shared"
    assert settings["TOOLSERVER_REDIS_URL"].startswith("redis://toolserver-redis:")
    assert settings["TOOLSERVER_CHROMA_URL"] == "http://toolserver-chroma:8000"
    deployment = objects[("Deployment", "toolserver")]["spec"]
    pod = deployment["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["terminationGracePeriodSeconds"] > int(settings["TOOLSERVER_SHUTDOWN_GRACE_S"])
    shared = next(m for m in container["volumeMounts"] if m["name"] == "shared")["mountPath"]
    assert settings["TOOLSERVER_DOCUMENTS_DIR"].startswith(shared)
    assert objects[("PersistentVolumeClaim", "toolserver-shared")]["spec"]["accessModes"] == ["ReadWriteMany"]
    chroma = objects[("Deployment", "toolserver-chroma")]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert chroma == f"chromadb/chroma:{version('chromadb')}"  # the server the client library speaks to
    hpa = objects[("HorizontalPodAutoscaler", "toolserver")]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "toolserver" and hpa["minReplicas"] >= 2
    gpu = {(o["kind"], o["metadata"]["name"]): o for o in render("overlays/gpu")}
    limits = gpu[("Deployment", "toolserver")]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1 and "nvidia.com/gpu" not in container["resources"].get("limits", {})


@pytest.mark.ray  # Ray Serve's own config schema: the `ray` extra, installed for .ci/run's Ray leg
def test_the_rayservice_carries_the_serve_config_and_the_resources_it_names():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render("ray")}
    service = objects[("RayService", "toolserver")]["spec"]
    assert yaml.safe_load(service["serveConfigV2"]) == serve_config(), \
        "deploy/k8s/ray/rayservice.yaml's serveConfigV2 must be deploy/ray/toolserver.yaml"
    cluster = service["rayClusterConfig"]
    assert cluster["rayVersion"] == version("ray")
    advertised = {}
    for group in cluster["workerGroupSpecs"]:
        advertised[group["groupName"]] = yaml.safe_load(yaml.safe_load(group["rayStartParams"]["resources"]))
    assert advertised == {"ingress": {"toolserver": 1}, "models": {"toolserver_models": 1}}
    models = next(g for g in cluster["workerGroupSpecs"] if g["groupName"] == "models")
    assert models["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert ("ConfigMap", "toolserver-settings") in objects and ("Deployment", "toolserver-redis") in objects


def test_a_broken_manifest_fails_validation():
    deployment = next(o for o in render("base") if o["kind"] == "Deployment" and o["metadata"]["name"] == "toolserver")
    for path, value in ((("spec", "replicas"), "two"), (("spec", "template", "spec", "containers", 0, "portz"), [])):
        broken = copy.deepcopy(deployment)
        target: Any = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(kubernetes_validate.ValidationError):
            validate(broken)
    rayservice = next(o for o in render("ray") if o["kind"] == "RayService")
    rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(rayservice)
