"""The relay's pruning timer settings: off unless set, a duration operators write, errors naming the variable."""

from datetime import timedelta

import pytest

from services.cdc_relay.config import RelaySettings
from services.core.settings import SettingsError


def test_pruning_is_off_unless_a_duration_is_set() -> None:
    assert RelaySettings.from_env({}).prune_older_than is None
    on = RelaySettings.from_env({"WALFEED_RELAY_PRUNE_OLDER_THAN": "7d", "WALFEED_RELAY_PRUNE_INTERVAL": "60"})
    assert (on.prune_older_than, on.prune_interval) == (timedelta(days=7), 60.0)


@pytest.mark.parametrize(("var", "value"), [("WALFEED_RELAY_PRUNE_OLDER_THAN", "a week"),
                                            ("WALFEED_RELAY_PRUNE_INTERVAL", "0")])
def test_a_bad_value_names_the_variable(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var):
        RelaySettings.from_env({var: value})
