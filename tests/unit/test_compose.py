"""compose.yaml, checked without a container engine: valid under the compose-spec schema (the copy check-jsonschema
ships) once its variables are set, every secret required, and every WALFEED_* variable it passes one that the
processes read."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.cli.roles import password_variables
from tests.unit.environment import ROOT, variables_read

COMPOSE = ROOT / "compose.yaml"
SECRETS = {"POSTGRES_PASSWORD", "RABBITMQ_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD", *password_variables()}
# Compose's interpolation: $$, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}.
_REFERENCE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


class Unset(Exception):
    pass


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.groups()
        present = environ.get(name)
        empty = present is None or (operator is not None and operator.startswith(":") and present == "")
        if operator is not None and operator.endswith("?") and empty:
            raise Unset(f"{name}: {argument}")
        if operator is not None and operator.endswith("-") and empty:
            return str(argument)
        return present or ""

    return _REFERENCE.sub(value, text)


def _compose(environ: Mapping[str, str]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(interpolate(COMPOSE.read_text(), environ))
    return loaded


def _with_secrets(missing: str | None = None) -> dict[str, str]:
    return {name: "0123456789abcdef0123" for name in SECRETS - {missing}}


def _check_compose_spec(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                           str(path)], capture_output=True, text=True, timeout=120, check=False)


def test_compose_yaml_is_valid_under_the_compose_spec_with_its_secrets_set(tmp_path: Path) -> None:
    resolved = interpolate(COMPOSE.read_text(), _with_secrets())
    check = _check_compose_spec(resolved, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_schema_check_refuses_what_compose_would_refuse(tmp_path: Path) -> None:
    check = _check_compose_spec("services:\n  api:\n    image: walfeed\n    enviroment: {WALFEED_SLOT: walfeed}\n",
                                tmp_path)
    assert check.returncode == 1 and "enviroment" in check.stdout


@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_every_secret_is_required(secret: str) -> None:
    with pytest.raises(Unset, match=secret):
        _compose(_with_secrets(missing=secret))


def test_the_walfeed_variables_compose_passes_are_ones_the_processes_read() -> None:
    services = _compose(_with_secrets())["services"]
    passed = {name for service in services.values() for name in (service.get("environment") or {})
              if name.startswith("WALFEED_")}
    assert passed, "compose.yaml passes no WALFEED_* variable"
    assert passed <= variables_read(), passed - variables_read()


def test_prometheus_and_grafana_are_optional_and_load_the_files_in_deploy() -> None:
    services = _compose(_with_secrets())["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
        assert all(port.startswith("127.0.0.1:") for port in services[name]["ports"]), name
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}"
    mounted = " ".join(services["prometheus"]["volumes"] + services["grafana"]["volumes"])
    assert "./deploy/prometheus:" in mounted and "./deploy/grafana/walfeed.json:" in mounted
    assert not [name for name, service in services.items() if name not in ("prometheus", "grafana")
                and service.get("profiles")], "the pipeline itself runs without a profile"


def test_grafana_takes_its_admin_password_from_the_environment() -> None:
    """Grafana's admin/admin default on a published port is a login anyone can guess."""
    grafana = _compose({**_with_secrets(), "GRAFANA_ADMIN_PASSWORD": "from-dot-env-0123456"})["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "from-dot-env-0123456"
