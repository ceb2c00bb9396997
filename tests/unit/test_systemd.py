"""deploy/systemd: `systemd-analyze verify` accepts every unit, each is Type=notify with a restart policy, the
environment files and the hardening options, and the example environment files set only variables the processes
read. The processes' readiness notifications are tests/integration/test_sd_notify.py."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.environment import ROOT, variables_read

SYSTEMD = ROOT / "deploy" / "systemd"
SERVICES = sorted(SYSTEMD.glob("*.service"))
HARDENING = {"User": "walfeed", "Group": "walfeed", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
             "ProtectHome": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": "", "RemoveIPC": "yes"}


def _verify(directory: Path, *units: str) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/setup-infra.sh installs Debian's systemd package"
    return subprocess.run([analyze, "verify", "--man=no", *units], cwd=directory, capture_output=True, text=True,
                          timeout=120, check=False)


def _installed(tmp_path: Path) -> Path:
    """The units as installed from this checkout: /opt/walfeed is where the README installs walfeed."""
    for unit in [*SERVICES, SYSTEMD / "walfeed.target"]:
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/walfeed", str(ROOT)))
    return tmp_path


def _service(unit: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    return parser


def test_systemd_analyze_verify_accepts_every_unit_without_a_warning(tmp_path: Path) -> None:
    assert (ROOT / ".venv" / "bin" / "walfeed").exists(), "run scripts/bootstrap.sh: ExecStart must exist"
    verified = _verify(_installed(tmp_path), "walfeed-api.service", "walfeed-relay.service",
                       "walfeed-worker@9102.service", "walfeed.target")
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stdout + verified.stderr


@pytest.mark.parametrize("unit", ["walfeed-api.service", "walfeed-relay.service", "walfeed-worker@9102.service"])
def test_systemd_rates_each_service_well_hardened(tmp_path: Path, unit: str) -> None:
    """`systemd-analyze security`: 0 is fully locked down, 10 unprotected; these units rate 1.5 (systemd's "OK"). What
    is left is what a network service in Python needs: the network, writable-executable memory for extensions."""
    analyze = shutil.which("systemd-analyze")
    assert analyze
    rated = subprocess.run([analyze, "security", "--offline=yes", "--no-pager", f"./{unit}"], cwd=_installed(tmp_path),
                           capture_output=True, text=True, timeout=120, check=False)
    exposure = float(rated.stdout.rsplit("Overall exposure level for", 1)[1].split(":")[1].split()[0])
    assert exposure <= 2.0, rated.stdout


def test_verify_refuses_a_broken_unit(tmp_path: Path) -> None:
    (tmp_path / "broken.service").write_text("[Service]\nTyp=notify\nExecStart=/nonexistent/walfeed\n")
    verified = _verify(tmp_path, "broken.service")
    assert verified.returncode != 0 and "Typ" in verified.stderr and "/nonexistent/walfeed" in verified.stderr


@pytest.mark.parametrize("unit", SERVICES, ids=lambda p: p.name)
def test_each_service_is_ready_by_notification_restarted_configured_by_file_and_hardened(unit: Path) -> None:
    service = _service(unit)["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["Restart"] in ("always", "on-failure") and service["KillSignal"] == "SIGTERM"
    assert service["EnvironmentFile"].startswith("/etc/walfeed/")
    assert service["ExecStart"].startswith("/opt/walfeed/.venv/bin/walfeed ")
    for option, value in HARDENING.items():
        assert service[option] == value, option


def test_workers_are_a_template_whose_instance_is_the_metrics_port() -> None:
    service = _service(SYSTEMD / "walfeed-worker@.service")["Service"]
    assert service["Environment"] == "WALFEED_WORKER_METRICS_PORT=%i"


def test_the_example_environment_files_set_only_variables_the_processes_read() -> None:
    read = variables_read()
    for env in sorted((SYSTEMD / "env").glob("*.env")):
        names = {line.split("=", 1)[0] for line in env.read_text().splitlines() if line and not line.startswith("#")}
        assert names and names <= read, (env.name, names - read)
