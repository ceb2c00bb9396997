import pytest

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
