"""deploy/k8s as Kubernetes and KEDA read it, and what an operator relies on, offline.

Every kustomization is rendered (`kustomize.render`), each resource checked against the
Kubernetes API's schemas of `KUBERNETES_VERSION` (kubernetes-validate, strict: an unknown
field is an error) and each ScaledObject against the CRD of the KEDA release vendored in
deploy/k8s/schemas. Each pod's command is parsed by the real `inferstream` parser and builds its
Config from the pod's files and environment, so the probes, the grace periods and the scaler
are checked against the settings the pod runs with.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from inferstream.commands import COMMANDS
from inferstream.config import Config
from inferstream.controller.metrics import ControllerMetrics
from inferstream.http import HEALTHZ, READYZ
from inferstream.supervise.parent import GRACE_MARGIN_S
from tests.unit.deploy.kustomize import KUSTOMIZATION, Resource, render
from tests.unit.deploy.pods import Workload, container_config, workloads

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "deploy" / "k8s"
#: The Kubernetes release the manifests are validated for (its API schemas ship with
#: kubernetes-validate).
KUBERNETES_VERSION = "1.33"
KEDA_VERSION = "v2.21.1"
KEDA_CRD = K8S / "schemas" / "keda.sh_scaledobjects.yaml"
KUSTOMIZATIONS = sorted(str(p.parent.relative_to(K8S)) for p in K8S.rglob(KUSTOMIZATION))
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir())
GAUGE = "inferstream_pool_desired_workers"
#: How long a pool scaled to zero may take to get its first worker going: the scaler's poll, a
#: node the cluster autoscaler adds, the image's pull, the process's start.
MINUTES_TO_A_WORKER = 10
#: Each role's HTTP server (port, address) in its Config: /metrics, /healthz, /readyz.
ROLE_HTTP = {
    "worker": lambda c: (c.worker.metrics_port, c.worker.metrics_addr),
    "stream": lambda c: (c.worker.metrics_port, c.worker.metrics_addr),
    "controller": lambda c: (c.controller.metrics_port, c.controller.metrics_addr),
    "sysinfo": lambda c: (c.sysinfo.port, c.sysinfo.bind),
}


@functools.cache
def rendered(folder: str) -> list[Resource]:
    return render(K8S / folder)


def of_kind(resources: list[Resource], kind: str) -> list[Resource]:
    return [r for r in resources if r["kind"] == kind]


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> list[Resource]:
    """Each full deployment: what `kubectl apply -k deploy/k8s/overlays/NAME` applies."""
    return copy.deepcopy(rendered(f"overlays/{request.param}"))


def started(overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> list[tuple[Workload, str, Config]]:
    """Each workload of `overlay` with its inferstream command and Config."""
    found = []
    for workload in workloads(overlay):
        command, config = container_config(workload, tmp_path / workload.name, monkeypatch)
        found.append((workload, command, config))
    return found


# -- the files as Kubernetes and KEDA read them ---------------------------------------------

def test_every_manifest_is_part_of_a_kustomization() -> None:
    used = set()
    for folder in KUSTOMIZATIONS:
        spec = yaml.safe_load((K8S / folder / KUSTOMIZATION).read_text())
        used |= {(K8S / folder / entry).resolve() for entry in spec.get("resources", [])}
        used |= {(K8S / folder / patch["path"]).resolve() for patch in spec.get("patches", [])}
    manifests = {p.resolve() for p in K8S.rglob("*.yaml")
                 if p.name != KUSTOMIZATION and p.parent.name != "schemas"}
    assert manifests - used == set()


@pytest.mark.parametrize("folder", KUSTOMIZATIONS)
def test_every_resource_is_valid_for_kubernetes(folder: str) -> None:
    for resource in rendered(folder):
        if resource["apiVersion"].startswith("keda.sh/"):
            continue  # a custom resource: test_every_scaled_object_is_valid_for_keda
        try:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{folder}: {resource['kind']} {resource['metadata']['name']}: "
                        f"{exc.json_path}: {exc.message}")


def keda_crd() -> tuple[str, str]:
    """The vendored CRD's header (our comments) and the release's file."""
    text = KEDA_CRD.read_text()
    start = text.index("\n---\n") + 1
    return text[:start], text[start:]


def test_the_keda_crd_is_the_release_unchanged() -> None:
    header, release = keda_crd()
    assert f"KEDA {KEDA_VERSION}'s" in header
    assert hashlib.sha256(release.encode()).hexdigest() in header


def closed(schema: Any) -> Any:
    """`schema` with every object that lists its properties closed to others: the API server
    drops an unknown field of a custom resource without a word (pruning), so a misspelt
    setting would be lost, not refused."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    shut = {key: closed(value) for key, value in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        shut["additionalProperties"] = False
    return shut


@functools.cache
def scaled_object_schema() -> dict[str, Any]:
    crd = yaml.safe_load(keda_crd()[1])
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema: dict[str, Any] = closed(served["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: the API server's
    return schema


@pytest.mark.parametrize("folder", KUSTOMIZATIONS)
def test_every_scaled_object_is_valid_for_keda(folder: str) -> None:
    for scaled in of_kind(rendered(folder), "ScaledObject"):
        assert scaled["apiVersion"] == "keda.sh/v1alpha1"
        try:
            jsonschema.validate(scaled, scaled_object_schema())
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{folder}: {scaled['metadata']['name']}: {exc.json_path}: "
                        f"{exc.message}")
        spec = scaled["spec"]  # the CRD's one CEL rule, which jsonschema does not run
        assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)


def test_a_misspelt_scaler_setting_is_refused() -> None:
    scaled = copy.deepcopy(of_kind(rendered("overlays/cpu"), "ScaledObject")[0])
    scaled["spec"]["minReplicas"] = 0
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(scaled, scaled_object_schema())


# -- what the pods run ----------------------------------------------------------------------

def test_every_pod_runs_an_inferstream_command_with_flags_that_exist(
        overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert entrypoint is not None and yaml.safe_load(entrypoint[1]) == ["inferstream"]
    for workload, command, _config in started(overlay, tmp_path, monkeypatch):
        container = workload.container
        assert re.fullmatch(r"inferstream:(cpu|cuda)", container["image"]), workload.name
        assert "command" not in container, f"{workload.name}: the image's ENTRYPOINT runs"
        # a Deployment runs a role until stopped (under its supervisor); a Job a command
        # that ends
        assert COMMANDS[command].supervised == (workload.resource["kind"] == "Deployment"), \
            workload.name


def test_a_flag_inferstream_lacks_is_refused(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    resources = copy.deepcopy(rendered("overlays/cpu"))
    (worker,) = [w for w in workloads(resources) if w.name == "inferstream-worker-cpu"]
    worker.resource["spec"]["template"]["spec"]["containers"][0]["args"] += ["--gpus", "1"]
    with pytest.raises(AssertionError, match="inferstream rejects"):
        container_config(worker, tmp_path, monkeypatch)


def test_probes_ask_each_role_s_health_where_it_serves_metrics(
        overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for workload, command, config in started(overlay, tmp_path, monkeypatch):
        if workload.resource["kind"] != "Deployment":
            continue
        container = workload.container
        port, addr = ROLE_HTTP[command](config)
        assert addr == "0.0.0.0", f"{workload.name}: the kubelet probes the pod's IP"  # noqa: S104
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {kind: container[f"{kind}Probe"]["httpGet"]
                  for kind in ("startup", "liveness", "readiness")}
        assert {kind: probe["path"] for kind, probe in probes.items()} == {
            "startup": HEALTHZ, "liveness": HEALTHZ, "readiness": READYZ}
        scheme = "HTTPS" if config.http_tls_certfile else "HTTP"  # the server speaks one
        for probe in probes.values():
            assert ports.get(probe["port"], probe["port"]) == port, workload.name
            assert probe.get("scheme", "HTTP") == scheme, workload.name
        annotations = workload.resource["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == port, workload.name
        assert annotations["prometheus.io/path"] == "/metrics"


def drain_s(config: Config) -> float:
    """How long a role may take to stop after SIGTERM before it is killed: stop_grace_s, and
    under its supervisor (restart = on) GRACE_MARGIN_S more."""
    return config.stop_grace_s + (GRACE_MARGIN_S if config.restart == "on" else 0)


def test_each_pod_s_grace_period_outlasts_its_drain(
        overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for workload, _command, config in started(overlay, tmp_path, monkeypatch):
        if workload.resource["kind"] != "Deployment":
            continue
        grace = workload.pod["terminationGracePeriodSeconds"]
        assert grace > drain_s(config), workload.name
        assert grace > drain_s(Config()), workload.name  # the defaults, whatever the file says


def test_controllers_are_two_and_a_disruption_budget_keeps_one(
        overlay: list[Resource]) -> None:
    (controller,) = [w for w in workloads(overlay) if w.container["args"][0] == "controller"]
    assert controller.resource["spec"]["replicas"] == 2
    labels = controller.resource["spec"]["template"]["metadata"]["labels"]
    budgets = [b for b in of_kind(overlay, "PodDisruptionBudget")
               if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
    assert [b["spec"].get("minAvailable") for b in budgets] == [1]


def test_every_selector_picks_its_pods(overlay: list[Resource]) -> None:
    pods = {w.name: w.resource["spec"]["template"]["metadata"]["labels"]
            for w in workloads(overlay)}
    for resource in overlay:
        selector = resource.get("spec", {}).get("selector")
        if selector is None:
            continue
        wanted = selector.get("matchLabels", selector)  # a Service's selector is the labels
        chosen = [name for name, labels in pods.items() if wanted.items() <= labels.items()]
        if resource["kind"] == "Deployment":
            assert chosen == [resource["metadata"]["name"]]
        else:
            assert chosen, f"{resource['kind']} {resource['metadata']['name']} selects no pod"


def test_pods_run_as_the_image_s_user_without_privileges(overlay: list[Resource]) -> None:
    uid = re.search(r"useradd .*--uid (\d+)", (REPO / "Dockerfile").read_text())
    assert uid is not None
    for workload in workloads(overlay):
        pod = workload.pod["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == int(uid[1]), workload.name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        container = workload.container["securityContext"]
        assert container == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                             "capabilities": {"drop": ["ALL"]}}, workload.name
        resources = workload.container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), workload.name
        assert "memory" in resources["limits"], workload.name


def test_gpu_workers_get_one_gpu_each_on_gpu_nodes(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for workload, command, config in started(rendered("overlays/gpu"), tmp_path, monkeypatch):
        if command != "worker":
            continue
        assert config.worker.device == "cuda" and workload.container["image"] == "inferstream:cuda"
        resources = workload.container["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 1
        assert workload.pod["nodeSelector"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
            workload.pod["tolerations"]


def test_the_scaler_s_gauge_is_the_controller_s() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    (gauge,) = [m for m in vars(metrics).values() if isinstance(m, Gauge) and m._name == GAUGE]
    assert gauge._labelnames == ("pool",)  # the one label the queries select on


def test_keda_scales_each_pool_from_zero_on_its_desired_workers(
        overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = {w.name: (w, config) for w, command, config
             in started(overlay, tmp_path, monkeypatch) if command == "worker"}
    scaled = of_kind(overlay, "ScaledObject")
    assert sorted(s["spec"]["scaleTargetRef"]["name"] for s in scaled) == sorted(pools)
    for scaler in scaled:
        spec = scaler["spec"]
        workload, config = pools[spec["scaleTargetRef"]["name"]]
        pool = config.pool
        assert spec.get("scaleTargetRef", {}).get("kind", "Deployment") == "Deployment"
        assert "replicas" not in workload.resource["spec"], "KEDA owns the count"
        assert spec["minReplicaCount"] == 0 and "idleReplicaCount" not in spec
        assert spec["maxReplicaCount"] <= config.task_partitions_for(pool), "idle workers"
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus"
        # the controllers' replicas each report their share: the pool's figure is the sum,
        # and with a threshold of 1 per replica KEDA runs that many workers
        assert trigger["metadata"]["query"] == f'sum({GAUGE}{{pool="{pool}"}})'
        assert trigger["metadata"]["threshold"] == "1"
        assert trigger.get("metricType", "AverageValue") == "AverageValue"
        assert trigger["metadata"]["activationThreshold"] == "0"


def test_a_job_waits_for_a_pool_scaled_to_zero_to_start_a_worker(
        overlay: list[Resource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job of a pool with no worker fails its items once none came for model_wait_s: on
    Kubernetes the first worker may need a new node and an image pull of minutes first."""
    for _workload, command, config in started(overlay, tmp_path, monkeypatch):
        if command == "controller":
            assert config.controller.model_wait_s >= MINUTES_TO_A_WORKER * 60


def test_on_the_secured_cluster_each_role_reads_its_own_credentials_from_secret_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users = {}
    for workload, _command, config in started(rendered("overlays/secured"), tmp_path,
                                              monkeypatch):
        root = tmp_path / workload.name
        assert config.security_protocol == "SASL_SSL", workload.name
        assert config.sasl_password_file and config.sasl_password, workload.name
        for path in (config.sasl_password_file, config.ssl_cafile):
            assert path is not None and Path(path).is_relative_to(root), workload.name
            assert Path(path).is_file(), f"{workload.name}: {path} is in no mounted Secret"
        secret_volumes = [v for v in workload.pod["volumes"] if "projected" in v or "secret" in v]
        for volume in secret_volumes:  # the files: the pod's group reads them, no one else
            mode = (volume.get("projected") or volume["secret"])["defaultMode"]
            assert mode & 0o007 == 0 and workload.pod["securityContext"]["fsGroup"], volume
        # read from the file (a password in the environment too is a ConfigError)
        assert config.sasl_password == Path(config.sasl_password_file).read_text()
        if workload.resource["kind"] == "Deployment":  # it serves HTTP: a token guards it
            assert config.http_token_file is not None, workload.name
            assert Path(config.http_token_file).is_relative_to(root), workload.name
            assert config.http_token == Path(config.http_token_file).read_text()
        users[workload.name] = config.sasl_username
    assert len(set(users.values())) == len(users), users  # a principal per role
