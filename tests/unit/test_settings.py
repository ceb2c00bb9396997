from datetime import timedelta
from pathlib import Path

import pytest

from services.core import settings as core
from services.core.redact import redact
from services.core.settings import (
    Choice,
    Duration,
    Env,
    Flag,
    Float,
    Int,
    OptionalDuration,
    OptionalStr,
    Secret,
    Settings,
    SettingsError,
)


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


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e999", "1_000", "\u0663", "\xa08", "0x10", "1 000"])
def test_a_number_is_ascii_digits_and_finite(raw: str) -> None:
    """`nan` passes every bound (nan < minimum and nan > maximum are both false), `inf` overflows a timedelta at run
    time, and int() or float() alone take digit separators and other scripts' digits."""
    for read in (lambda: Env({"X": raw}).float("X", 1.0, 0.1, 300.0), lambda: Env({"X": raw}).int("X", 1, 0, 10**6)):
        with pytest.raises(SettingsError, match="X="):
            read()


def test_numbers_in_the_usual_forms_still_read() -> None:
    assert [Env({"X": raw}).float("X", 1.0, 0.0, None) for raw in ("2.5", " 3 ", "+1", ".5", "5.", "1e3")] == [
        2.5, 3.0, 1.0, 0.5, 5.0, 1000.0]
    assert Env({"X": "+42"}).int("X", 1, 0, None) == 42


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


def test_a_declaration_reads_its_variable_with_its_default_and_bounds() -> None:
    window = Int("WALFEED_X_WINDOW", 1000, "messages in flight", minimum=1, maximum=100_000)
    assert window.read(Env({})) == 1000 and window.read(Env({"WALFEED_X_WINDOW": " 7 "})) == 7
    with pytest.raises(SettingsError, match=r"WALFEED_X_WINDOW='0' is out of range: it must be between 1 and 100000"):
        window.read(Env({"WALFEED_X_WINDOW": "0"}))
    assert (window.shown_default(), window.values()) == ("`1000`", "integer, 1 to 100000")
    assert Float("F", 2.5, "", minimum=0.1).values() == "number, 0.1 or more"


def test_a_computed_default_is_worked_out_when_read_and_shown_as_declared() -> None:
    cpus = Int("WALFEED_X_WORKERS", lambda: 3, "processes", minimum=1, shown="one per CPU")
    assert cpus.read(Env({})) == 3 and cpus.default_value() == 3 and cpus.shown_default() == "one per CPU"
    prefetch = Int("WALFEED_X_PREFETCH", None, "unacked messages", minimum=1, shown="batch x 2")
    assert prefetch.read(Env({}), default=40) == 40 and prefetch.read(Env({"WALFEED_X_PREFETCH": "5"}), 40) == 5
    with pytest.raises(TypeError, match="WALFEED_X_PREFETCH"):
        prefetch.read(Env({}))


def test_choices_flags_and_durations_name_the_variable() -> None:
    kind = Choice("WALFEED_X_KIND", "a", ("a", "b"), "which", hint=" (b needs more)")
    assert kind.read(Env({"WALFEED_X_KIND": " B "})) == "b" and kind.values() == "`a`, `b`"
    with pytest.raises(SettingsError, match=r"WALFEED_X_KIND='c' is invalid: expected one of a, b \(b needs more\)"):
        kind.read(Env({"WALFEED_X_KIND": "c"}))
    keep = Duration("WALFEED_X_KEEP", "30d", "kept")
    assert keep.read(Env({})) == timedelta(days=30) and keep.read(Env({"WALFEED_X_KEEP": "0"})) == timedelta(0)
    with pytest.raises(SettingsError, match="WALFEED_X_KEEP: 'soon' is not a duration"):
        keep.read(Env({"WALFEED_X_KEEP": "soon"}))
    off = OptionalDuration("WALFEED_X_PRUNE", "pruned")
    assert off.read(Env({})) is None and off.read(Env({"WALFEED_X_PRUNE": "1h"})) == timedelta(hours=1)
    assert Flag("WALFEED_X_ON", False, "").read(Env({"WALFEED_X_ON": "yes"})) is True
    assert OptionalStr("WALFEED_X_URL", "").read(Env({"WALFEED_X_URL": "  "})) is None
    with pytest.raises(SettingsError, match="WALFEED_X_SECRET is not set"):
        Secret("WALFEED_X_SECRET", "", 16).read(Env({}))


def test_the_shared_settings_are_their_declarations_defaults() -> None:
    assert Settings.from_env({}) == Settings(core.DATABASE_URL.default, core.AMQP_URL.default, core.AMQP_PREFIX.default,
                                             core.SLOT.default, core.CELEBRITY_THRESHOLD.default_value(),
                                             core.AMQP_QUEUE_TYPE.default)
