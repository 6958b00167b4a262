"""deploy/k8s: a master Deployment + Service and a worker Deployment that run one campaign together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}"
    return matches[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_every_manifest_has_the_required_fields() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents())
    assert kinds == [
        ("Deployment", "grill-locust-master"),
        ("Deployment", "grill-locust-worker"),
        ("NetworkPolicy", "grill-locust-master"),
        ("Service", "grill-locust-master"),
    ]
    for doc in documents():
        assert doc["apiVersion"] and doc["metadata"]["name"]


def test_selectors_match_the_pod_labels() -> None:
    for name in ("grill-locust-master", "grill-locust-worker"):
        deployment = find("Deployment", name)
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name
    service = find("Service", "grill-locust-master")
    master_labels = find("Deployment", "grill-locust-master")["spec"]["template"]["metadata"]["labels"]
    worker_labels = find("Deployment", "grill-locust-worker")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= master_labels.items()
    assert not service["spec"]["selector"].items() <= worker_labels.items(), (
        "the Service must not select workers"
    )


def test_master_service_exposes_the_worker_port_and_the_web_ui() -> None:
    service = find("Service", "grill-locust-master")
    ports = {port["port"]: port["targetPort"] for port in service["spec"]["ports"]}
    assert set(ports) == {5557, 8089}
    named = {
        port["name"]: port["containerPort"]
        for port in container(find("Deployment", "grill-locust-master"))["ports"]
    }
    for port, target in ports.items():
        assert named.get(target, target) == port


def test_workers_join_the_master_service_and_match_expect_workers() -> None:
    worker = find("Deployment", "grill-locust-worker")
    args = container(worker)["args"]
    assert "--worker" in args and "--master-host=grill-locust-master" in args
    assert args[:2] == ["-f", "locustfiles/coding.py"]
    master_script = " ".join(container(find("Deployment", "grill-locust-master"))["args"])
    assert "--master --headless" in master_script
    expect = int(master_script.split("--expect-workers", 1)[1].split()[0])
    assert worker["spec"]["replicas"] == expect


def test_master_reads_its_scenario_from_the_configmap_it_mounts() -> None:
    master = find("Deployment", "grill-locust-master")
    spec = master["spec"]["template"]["spec"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container(master)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["scenario"]["configMap"]["name"] == "grill-scenario"
    assert f"--scenario {mounts['scenario']}/campaign.yaml" in " ".join(container(master)["args"])


def test_no_secret_values_in_the_manifests() -> None:
    for path in K8S.glob("*.yaml"):
        text = path.read_text()
        assert "INFLUX_TOKEN:" not in text and "token:" not in text.lower(), path.name


def test_only_workers_may_reach_the_master_port() -> None:
    policy = find("NetworkPolicy", "grill-locust-master")["spec"]
    master_labels = find("Deployment", "grill-locust-master")["spec"]["template"]["metadata"]["labels"]
    worker_labels = find("Deployment", "grill-locust-worker")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= master_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    [source] = rule["from"]
    assert source["podSelector"]["matchLabels"].items() <= worker_labels.items()
    assert not source["podSelector"]["matchLabels"].items() <= master_labels.items()
    assert [port["port"] for port in rule["ports"]] == [5557]


def test_master_and_workers_read_the_same_secrets() -> None:
    """Workers expand the scenario's ${VAR} secrets from their own environment: the master's Secrets."""

    def secrets_of(name: str) -> list[str]:
        return [source["secretRef"]["name"] for source in container(find("Deployment", name))["envFrom"]]

    assert secrets_of("grill-locust-worker") == secrets_of("grill-locust-master")
    assert "grill-engine-keys" in secrets_of("grill-locust-worker")
