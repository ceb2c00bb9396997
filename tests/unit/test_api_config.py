"""api settings: defaults, and errors that name the variable."""

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
])
def test_invalid_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        ApiSettings.from_env(env)


def test_workers_and_auth_cache_from_env() -> None:
    api = ApiSettings.from_env({"WALFEED_API_WORKERS": "3", "WALFEED_API_AUTH_CACHE_SECONDS": "0"})
    assert (api.workers, api.auth_cache_seconds) == (3, 0.0)
