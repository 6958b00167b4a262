"""docker-compose.yml passes Debian's `docker-compose config` with a .env made from .env.example."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.real_binaries import require_binary

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
SECRET_KEYS = ("INFLUX_TOKEN", "INFLUX_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD")


def compose_config(env_file: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    require_binary("docker-compose", install="Debian package: apt-get install docker-compose")
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "--env-file", str(env_file), *extra, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def resolved(env_file: Path, *extra: str) -> dict[str, Any]:
    result = compose_config(env_file, *extra)
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout))


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    path = tmp_path / ".env"
    shutil.copy(REPO / ".env.example", path)
    return path


def test_compose_config_passes_with_the_example_env(env_file: Path) -> None:
    config = resolved(env_file)
    assert {"influxdb", "grafana", "locust-master", "locust-worker"} <= set(config["services"])
    sim = config["services"].get("sim")
    assert sim is None or sim["profiles"] == ["sim"]  # only under its profile (compose 1.29 lists it anyway)


def test_sim_profile_adds_the_simulated_engine(env_file: Path) -> None:
    sim = resolved(env_file, "--profile", "sim")["services"]["sim"]
    command = " ".join(sim["command"]) if isinstance(sim["command"], list) else sim["command"]
    assert "grill sim --profile vllm --host 0.0.0.0" in command


def test_master_and_workers_run_the_campaign(env_file: Path) -> None:
    services = resolved(env_file)["services"]
    master = services["locust-master"]
    master_command = " ".join(master["command"]) if isinstance(master["command"], list) else master["command"]
    assert "locust -f locustfiles/coding.py --master --headless --expect-workers 2" in master_command
    assert "--scenario deploy/scenarios/compose-sim.yaml" in master_command
    worker = services["locust-worker"]
    worker_command = " ".join(worker["command"]) if isinstance(worker["command"], list) else worker["command"]
    assert "--worker --master-host locust-master" in worker_command
    # scalable: --scale locust-worker=N needs no fixed container name and no published port
    assert "container_name" not in worker and not worker.get("ports")
    for name in ("locust-master", "locust-worker"):
        assert services[name]["environment"]["INFLUX_URL"] == "http://influxdb:8086"


def test_secrets_come_from_env_only(env_file: Path, tmp_path: Path) -> None:
    text = COMPOSE_FILE.read_text()
    example = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    for key in SECRET_KEYS:
        assert example[key] not in text, f"{key}'s example value is hard-coded in docker-compose.yml"
    changed = env_file.read_text().replace(example["INFLUX_TOKEN"], "token-from-env-file")
    env_file.write_text(changed)
    services = resolved(env_file)["services"]
    assert services["influxdb"]["environment"]["DOCKER_INFLUXDB_INIT_ADMIN_TOKEN"] == "token-from-env-file"
    assert services["grafana"]["environment"]["INFLUX_TOKEN"] == "token-from-env-file"
    # without the secrets, compose refuses to start rather than using a default
    missing = tmp_path / "missing.env"
    missing.write_text("INFLUX_ORG=grill\n")
    result = compose_config(missing)
    assert result.returncode != 0 and "INFLUX" in result.stderr


def test_influxdb_creates_the_dbrp_mapping_grafana_queries(env_file: Path) -> None:
    services = resolved(env_file)["services"]
    volumes = [volume if isinstance(volume, str) else f"{volume['source']}:{volume['target']}"
               for volume in services["influxdb"]["volumes"]]  # fmt: skip
    assert any(
        v.endswith(":/docker-entrypoint-initdb.d:ro") or "/docker-entrypoint-initdb.d" in v for v in volumes
    )
    script = REPO / "deploy" / "influxdb" / "init" / "create-dbrp.sh"
    text = script.read_text()
    assert "influx v1 dbrp create" in text and "DOCKER_INFLUXDB_INIT_BUCKET_ID" in text
    assert script.stat().st_mode & 0o111, "the init script must be executable"
    datasource = yaml.safe_load((REPO / "grafana/provisioning/datasources/influxdb.yaml").read_text())
    source = datasource["datasources"][0]
    assert source["uid"] == "grill-influxdb" and source["jsonData"]["dbName"] == "${INFLUX_BUCKET}"
    assert source["secureJsonData"]["httpHeaderValue1"] == "Token ${INFLUX_TOKEN}"


def test_dockerfile_copies_only_what_exists_and_ignores_secrets() -> None:
    copies = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copies += line.split()[1:-1]
    assert copies
    for source in copies:
        assert (REPO / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    for pattern in (".env", "results/", ".git"):
        assert pattern in ignored
