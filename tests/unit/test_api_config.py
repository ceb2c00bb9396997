"""api settings: defaults, and errors that name the variable."""

import os

import pytest

from services.api.config import ApiSettings
from services.core.settings import SettingsError


def test_defaults() -> None:
    assert ApiSettings.from_env({}) == ApiSettings()


@pytest.mark.parametrize(("env", "named"), [
    ({"WALFEED_API_MAX_BODY_BYTES": "big"}, "WALFEED_API_MAX_BODY_BYTES"),
    ({"WALFEED_API_MAX_BODY_BYTES": "1"}, "WALFEED_API_MAX_BODY_BYTES"),
    ({"WALFEED_API_POOL_MAX": "0"}, "WALFEED_API_POOL_MAX"),
    ({"WALFEED_API_POOL_MIN": "5", "WALFEED_API_POOL_MAX": "2"}, "WALFEED_API_POOL_MAX"),
    ({"WALFEED_API_POOL_TIMEOUT": "soon"}, "WALFEED_API_POOL_TIMEOUT"),
    ({"WALFEED_API_WORKERS": "0"}, "WALFEED_API_WORKERS"),
    ({"WALFEED_API_WORKERS": "two"}, "WALFEED_API_WORKERS"),
    ({"WALFEED_API_AUTH_CACHE_SECONDS": "-1"}, "WALFEED_API_AUTH_CACHE_SECONDS"),
    ({"WALFEED_API_METRICS_PORT": "70000"}, "WALFEED_API_METRICS_PORT"),
    ({"WALFEED_API_METRICS_HOST": " "}, "WALFEED_API_METRICS_HOST"),
    ({"WALFEED_API_DOCS": "maybe"}, "WALFEED_API_DOCS"),
    ({"WALFEED_API_STATEMENT_TIMEOUT": "0"}, "WALFEED_API_STATEMENT_TIMEOUT"),
    ({"WALFEED_API_SIGNUP_LIMIT": "-1"}, "WALFEED_API_SIGNUP_LIMIT"),
    ({"WALFEED_API_SIGNUP_WINDOW": "0"}, "WALFEED_API_SIGNUP_WINDOW"),
    ({"WALFEED_API_WRITE_LIMIT": "lots"}, "WALFEED_API_WRITE_LIMIT"),
    ({"WALFEED_API_WRITE_WINDOW": "86401"}, "WALFEED_API_WRITE_WINDOW"),
    ({"WALFEED_DATABASE_READ_URL": "replica:5432"}, "WALFEED_DATABASE_READ_URL"),
    ({"WALFEED_API_READ_AFTER_WAIT": "-0.1"}, "WALFEED_API_READ_AFTER_WAIT"),
    ({"WALFEED_API_READ_AFTER_MEMORY": "long"}, "WALFEED_API_READ_AFTER_MEMORY"),
    ({"WALFEED_API_REPLICA_RETRY": "0"}, "WALFEED_API_REPLICA_RETRY"),
    ({"WALFEED_API_SERVER": "hypercorn"}, "WALFEED_API_SERVER"),
])
def test_invalid_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        ApiSettings.from_env(env)


def test_workers_and_auth_cache_from_env() -> None:
    api = ApiSettings.from_env({"WALFEED_API_WORKERS": "3", "WALFEED_API_AUTH_CACHE_SECONDS": "0",
                                "WALFEED_API_SERVER": "uvicorn"})
    assert (api.workers, api.auth_cache_seconds, api.server) == (3, 0.0, "uvicorn")


def test_by_default_one_worker_per_usable_cpu_on_granian() -> None:
    api = ApiSettings.from_env({})
    assert api.workers == min(64, len(os.sched_getaffinity(0))) and api.server == "granian"


def test_security_settings_from_env() -> None:
    api = ApiSettings.from_env({"WALFEED_API_METRICS_PORT": "9100", "WALFEED_API_DOCS": "off",
                                "WALFEED_API_STATEMENT_TIMEOUT": "0.5", "WALFEED_API_WRITE_LIMIT": "0",
                                "WALFEED_API_SIGNUP_LIMIT": "5", "WALFEED_API_SIGNUP_WINDOW": "60"})
    assert (api.metrics_port, api.metrics_host, api.docs, api.statement_timeout) == (9100, "127.0.0.1", False, 0.5)
    assert not api.write_limit.enabled
    assert (api.signup_limit.policy, api.signup_limit.limit, api.signup_limit.window) == ("signup", 5, 60)


def test_read_replica_from_env() -> None:
    assert ApiSettings().read_url is None  # unset: every read on the primary, as before
    api = ApiSettings.from_env({"WALFEED_DATABASE_READ_URL": "postgresql://replica/walfeed",
                                "WALFEED_API_READ_AFTER_WAIT": "0.5", "WALFEED_API_READ_AFTER_MEMORY": "0",
                                "WALFEED_API_REPLICA_RETRY": "2"})
    assert (api.read_url, api.read_after_wait, api.read_after_memory, api.replica_retry) == (
        "postgresql://replica/walfeed", 0.5, 0.0, 2.0)


@pytest.mark.parametrize("url", ["replica-user:s3cret-pw@replica:5432", "mysql://replica-user:s3cret-pw@replica/db"])
def test_a_malformed_replica_url_is_named_without_its_password(url: str) -> None:
    with pytest.raises(SettingsError, match="WALFEED_DATABASE_READ_URL") as raised:
        ApiSettings.from_env({"WALFEED_DATABASE_READ_URL": url})
    assert "s3cret" not in str(raised.value) and "replica-user:***@replica" in str(raised.value), raised.value
