"""deploy/systemd: `systemd-analyze verify` accepts every unit (where systemd-analyze is installed; else the test's
own parser checks them and says so), each is ready by notification (or started, for the delivery workers) with a
restart policy, the environment files and the hardening options; each process kind runs as a user of its own, gets
its secrets as credentials (LoadCredential=), and reaches nothing but its servers (IPAddressDeny=any) unless it must
reach the internet (the webhook delivery worker); the example environment files set only variables the processes
read, and no secret. The processes' readiness notifications are tests/integration/test_sd_notify.py."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.environment import ROOT, variables_read

SYSTEMD = ROOT / "deploy" / "systemd"
SERVICES = sorted(SYSTEMD.glob("*.service"))
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
             "CapabilityBoundingSet": "", "RemoveIPC": "yes", "PrivateDevices": "yes", "UMask": "0077"}
# What each command needs: its database role's URL, its broker user's URL (the api's for its live stream), the SMTP
# relay's.
URLS = {"WALFEED_DATABASE_URL", "WALFEED_AMQP_URL"}
COMMANDS = {"api": URLS, "relay": URLS, "worker": URLS, "notifier": URLS, "embedder": URLS,
            "deliver --channel webhook": URLS, "deliver --channel email": {*URLS, "WALFEED_SMTP_URL"}}
INTERNET = {"deliver --channel webhook"}  # webhooks are anywhere; the process checks addresses itself (ssrf.py)


ANALYZE = shutil.which("systemd-analyze")


def _verify(directory: Path, *units: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE, "systemd-analyze is missing: scripts/setup-infra.sh installs Debian's systemd package"
    return subprocess.run([ANALYZE, "verify", "--man=no", *units], cwd=directory, capture_output=True, text=True,
                          timeout=120, check=False)


def _installed(tmp_path: Path) -> Path:
    """The units as installed from this checkout: /opt/walfeed is where deploy/systemd/README.md installs walfeed."""
    for unit in [*SERVICES, SYSTEMD / "walfeed.target"]:
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/walfeed", str(ROOT)))
    return tmp_path


def _service(unit: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    return parser


UNITS = [*(u.name.replace("@.service", "@9102.service") for u in SERVICES), "walfeed.target"]
_SECTIONS = {"Unit", "Service", "Install"}


def _parse_strictly(unit: Path) -> list[str]:
    """What the test's own parser finds wrong with a unit (when systemd-analyze is absent): lines outside a known
    section or not `Key=value`, a missing [Service] or ExecStart, an ExecStart whose program does not exist."""
    problems, section = [], None
    for number, line in enumerate(unit.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            if section not in _SECTIONS:
                problems.append(f"{unit.name}:{number}: unknown section {line}")
        elif section is None or "=" not in line or not line.split("=", 1)[0].isalnum():
            problems.append(f"{unit.name}:{number}: not Key=value in a section: {line}")
    if unit.suffix == ".service" and not problems:
        service = _service(unit)
        if not service.has_section("Service") or "ExecStart" not in service["Service"]:
            problems.append(f"{unit.name}: no [Service] ExecStart=")
        elif not Path(service["Service"]["ExecStart"].split()[0]).exists():
            problems.append(f"{unit.name}: ExecStart {service['Service']['ExecStart'].split()[0]} does not exist")
    return problems


def test_every_unit_verifies_without_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`systemd-analyze verify` where it is installed; else this test's own parser, saying so."""
    assert (ROOT / ".venv" / "bin" / "walfeed").exists(), "run scripts/bootstrap.sh: ExecStart must exist"
    installed = _installed(tmp_path)
    if ANALYZE is None:
        with capsys.disabled():
            print("\nsystemd-analyze is not installed: the units are checked by this test's own parser only, not by "
                  "systemd (install Debian's systemd package for `systemd-analyze verify`)")
        problems = [p for unit in sorted(installed.iterdir()) for p in _parse_strictly(unit)]
        assert problems == []
        return
    verified = _verify(installed, *UNITS)
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stdout + verified.stderr


def test_the_own_parser_refuses_a_broken_unit(tmp_path: Path) -> None:
    (tmp_path / "broken.service").write_text("[Service]\nType notify\nExecStart=/nonexistent/walfeed\n[Servce]\n")
    problems = _parse_strictly(tmp_path / "broken.service")
    assert len(problems) == 2 and "Type notify" in problems[0] and "[Servce]" in problems[1], problems
    (tmp_path / "missing.service").write_text("[Service]\nType=notify\nExecStart=/nonexistent/walfeed\n")
    assert _parse_strictly(tmp_path / "missing.service") == [
        "missing.service: ExecStart /nonexistent/walfeed does not exist"]


@pytest.mark.parametrize("unit", [u for u in UNITS if u.endswith(".service")])
def test_systemd_rates_each_service_well_hardened(tmp_path: Path, unit: str) -> None:
    """`systemd-analyze security`: 0 is fully locked down, 10 unprotected; these units rate 1.5 or better (systemd's
    "OK"). What is left is what a network service in Python needs: the network, writable-executable memory for
    extensions."""
    if ANALYZE is None:  # the rating is systemd's own: without it, the options are checked by the tests below
        assert set(HARDENING) <= set(_service(SYSTEMD / unit.replace("@9102", "@"))["Service"])
        return
    rated = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager", f"./{unit}"], cwd=_installed(tmp_path),
                           capture_output=True, text=True, timeout=120, check=False)
    exposure = float(rated.stdout.rsplit("Overall exposure level for", 1)[1].split(":")[1].split()[0])
    assert exposure <= 2.0, rated.stdout


def test_verify_refuses_a_broken_unit(tmp_path: Path) -> None:
    if ANALYZE is None:  # the own parser's refusals: test_the_own_parser_refuses_a_broken_unit
        assert _parse_strictly(_installed(tmp_path) / "walfeed-api.service") == []
        return
    (tmp_path / "broken.service").write_text("[Service]\nTyp=notify\nExecStart=/nonexistent/walfeed\n")
    verified = _verify(tmp_path, "broken.service")
    assert verified.returncode != 0 and "Typ" in verified.stderr and "/nonexistent/walfeed" in verified.stderr


@pytest.mark.parametrize("unit", SERVICES, ids=lambda p: p.name)
def test_each_service_is_ready_by_notification_restarted_configured_by_file_and_hardened(unit: Path) -> None:
    service = _service(unit)["Service"]
    if "deliver" in service["ExecStart"]:  # the delivery workers do not notify readiness yet
        assert service["Type"] == "exec"
    else:
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


def _command(unit: Path) -> str:
    return _service(unit)["Service"]["ExecStart"].removeprefix("/opt/walfeed/.venv/bin/walfeed ")


def _all(unit: Path, key: str) -> list[str]:
    """Every value of a key that may repeat (configparser keeps the last): LoadCredential=, IPAddressAllow=."""
    return [line.split("=", 1)[1] for line in unit.read_text().splitlines() if line.startswith(f"{key}=")]


def test_there_is_a_unit_for_every_long_running_command() -> None:
    assert sorted(_command(u) for u in SERVICES) == sorted(COMMANDS)


def test_each_process_kind_runs_as_a_user_of_its_own_that_sysusers_creates() -> None:
    """One user for all let every process read every other's credentials and /proc/PID/environ, the relay's
    REPLICATION password included."""
    users = {u.name: _service(u)["Service"]["User"] for u in SERVICES}
    assert len(set(users.values())) == len(users), users
    for unit in SERVICES:
        service = _service(unit)["Service"]
        assert service["Group"] == service["User"] and "DynamicUser" not in service, unit.name
    created = {line.split()[1] for line in (SYSTEMD / "walfeed.sysusers").read_text().splitlines()
               if line.startswith("u ")}
    assert set(users.values()) <= created, set(users.values()) - created


def test_secrets_are_credentials_of_the_unit_never_environment_files() -> None:
    """Each unit loads the URLs with its role's passwords from root's /etc/walfeed/credentials/<unit>/ (readable by
    that unit's user only, in $CREDENTIALS_DIRECTORY); no unit shares another's credential files."""
    sources: dict[str, str] = {}
    for unit in SERVICES:
        credentials = dict(entry.split(":", 1) for entry in _all(unit, "LoadCredential"))
        assert set(credentials) == COMMANDS[_command(unit)], unit.name
        for name, path in credentials.items():
            assert path.startswith("/etc/walfeed/credentials/") and path.endswith(f"/{name}"), (unit.name, path)
            assert path not in sources, f"{unit.name} and {sources[path]} share {path}"
            sources[path] = unit.name
        assert not [v for v in _service(unit)["Service"] if v.startswith("Environment") and "PASSWORD" in v]


def test_every_process_but_the_webhook_worker_reaches_only_what_is_allowed() -> None:
    for unit in SERVICES:
        deny, allow = _all(unit, "IPAddressDeny"), _all(unit, "IPAddressAllow")
        assert allow == ["localhost"], unit.name  # the servers' addresses are the deployment's drop-in
        if _command(unit) in INTERNET:
            assert deny and "any" not in deny[0] and {"link-local", "10.0.0.0/8"} <= set(deny[0].split()), unit.name
        else:
            assert deny == ["any"], unit.name


def test_the_example_environment_files_hold_no_secret() -> None:
    for env in sorted((SYSTEMD / "env").glob("*.env")):
        text = env.read_text()
        assert not re.search(r"://[^/@\s]*:[^@\s]*@", text) and "PASSWORD" not in text, env.name
        assert "WALFEED_DATABASE_URL" not in text and "WALFEED_SMTP_URL=" not in text, env.name


def test_every_unit_the_install_steps_start_has_a_metrics_port_of_its_own() -> None:
    """The workers' instances (their metrics ports) in the README's steps and the target, and the ports the other
    units' environment files set: one process per port, or one of them runs without /metrics."""
    steps = (SYSTEMD / "README.md").read_text() + (SYSTEMD / "walfeed.target").read_text()
    ports = [int(p) for p in sorted(set(re.findall(r"walfeed-worker@(\d+)", steps)))]
    for env in sorted((SYSTEMD / "env").glob("*.env")):
        ports += [int(m) for m in re.findall(r"^WALFEED_\w+_METRICS_PORT=(\d+)$", env.read_text(), re.MULTILINE)]
    assert len(ports) == len(set(ports)) and len(ports) >= 6, sorted(ports)
