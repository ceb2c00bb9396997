from pathlib import Path

import pytest

from services.core.redact import redact
from services.core.settings import Env, Settings, SettingsError


def test_defaults_match_the_spec() -> None:
    s = Settings.from_env({})
    assert s.database_url == "postgresql:///walfeed"
    assert s.amqp_url == "amqp://guest:guest@localhost:5672/%2F"
    assert (s.amqp_prefix, s.slot, s.celebrity_threshold) == ("walfeed", "walfeed", 10_000)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("WALFEED_CELEBRITY_THRESHOLD", "many"),
        ("WALFEED_CELEBRITY_THRESHOLD", "0"),
        ("WALFEED_SLOT", "Bad-Slot"),
        ("WALFEED_AMQP_URL", "http://localhost"),
        ("WALFEED_DATABASE_URL", "mysql://x"),
        ("WALFEED_AMQP_PREFIX", "has space"),
    ],
)
def test_invalid_values_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var):
        Settings.from_env({var: value})


@pytest.mark.parametrize(("raw", "value"), [("", True), ("true", True), (" ON ", True), ("1", True), ("yes", True),
                                            ("false", False), ("Off", False), ("0", False), ("no", False)])
def test_flags(raw: str, value: bool) -> None:
    assert Env({"FLAG": raw}).bool("FLAG", True) is value


def test_an_invalid_flag_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="FLAG"):
        Env({"FLAG": "maybe"}).bool("FLAG", True)


@pytest.mark.parametrize(("var", "value"), [
    ("WALFEED_DATABASE_URL", "mysql://walfeed:s3cret-pw@db-host/walfeed"),
    ("WALFEED_DATABASE_URL", "walfeed:s3cret-pw@db-host/walfeed"),
    ("WALFEED_AMQP_URL", "http://walfeed:s3cret-pw@mq-host:5672/%2F"),
    ("WALFEED_AMQP_URL", "amqp://walfeed:s3cret-pw@mq-host:port/%2F"),
    ("WALFEED_AMQP_URL", "amqp://walfeed:s3cret-pw@mq-host/a,amqp://walfeed:s3cret-pw@mq-host2/b"),
    ("WALFEED_AMQP_URL", "amqp://walfeed:s3cret-pw@mq-host/,amqp://walfeed:s3cret-pw@mq-host/"),
    ("WALFEED_AMQP_URL", "amqp://walfeed:s3cret@pw@mq-host/,"),
])
def test_a_malformed_url_is_named_without_its_password(var: str, value: str) -> None:
    """Start-up errors go to journals and CI logs: they show the URL, but never its password."""
    with pytest.raises(SettingsError, match=var) as raised:
        Settings.from_env({var: value})
    assert "s3cret" not in str(raised.value) and "pw" not in str(raised.value).replace("mq-host", "")
    assert "***" in str(raised.value) and "walfeed" in str(raised.value), raised.value


@pytest.mark.parametrize(("value", "shown"), [
    ("amqp://u:p@ss@host:5672/%2F", "amqp://u:***@host:5672/%2F"),
    ("postgresql://u:pw@h/db?sslmode=require&password=pw2", "postgresql://u:***@h/db?sslmode=require&password=***"),
    ("host=h password='a b' user=u", "host=h password=*** user=u"),
    ("u:pw@host", "u:***@host"),
    ("postgresql:///walfeed", "postgresql:///walfeed"),
    ("amqp://host:5672/%2F", "amqp://host:5672/%2F"),
])
def test_redaction_keeps_all_but_the_password(value: str, shown: str) -> None:
    assert redact(value) == shown


def test_a_setting_missing_from_the_environment_is_read_from_its_systemd_credential(tmp_path: Path) -> None:
    """LoadCredential=WALFEED_DATABASE_URL:... (deploy/systemd): the secret is a file only the unit's user reads,
    not an environment variable; the environment still wins where it sets the variable."""
    (tmp_path / "WALFEED_DATABASE_URL").write_text("postgresql://walfeed_api:pw@db/walfeed\n")
    (tmp_path / "WALFEED_AMQP_URL").write_text("amqp://walfeed_worker:pw@mq/%2F")
    settings = Settings.from_env({"CREDENTIALS_DIRECTORY": str(tmp_path),
                                  "WALFEED_AMQP_URL": "amqp://from-env:5672/%2F"})
    assert settings.database_url == "postgresql://walfeed_api:pw@db/walfeed"
    assert settings.amqp_url == "amqp://from-env:5672/%2F"
    assert Env({"CREDENTIALS_DIRECTORY": str(tmp_path)}).optional("WALFEED_NOT_THERE") is None
    (tmp_path / "WALFEED_SLOT").mkdir()  # unreadable as a file: named, never a traceback
    with pytest.raises(SettingsError, match="WALFEED_SLOT: the credential"):
        Settings.from_env({"CREDENTIALS_DIRECTORY": str(tmp_path)})
