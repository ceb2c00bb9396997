"""The WALFEED_* variables walfeed's processes read, found by running each settings object's from_env on a
mapping that records every lookup, plus the few the command line reads from os.environ directly. Shared by the
tests of docs/settings.md and of compose.yaml."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from services.api.config import ApiSettings, listen_address
from services.api.search_config import SearchSettings
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.poll_policy import PollSettings
from services.cli.ops_args import RETENTION
from services.cli.roles import RoleSettings, password_variables
from services.core.embedding.config import EmbedderSettings
from services.core.logs import log_format, log_level
from services.core.settings import Env, Settings
from services.delivery.config import DeliverySettings
from services.embedder.config import EmbedSettings
from services.notifier import config as notifier_config
from services.worker import config as worker_config

ROOT = Path(__file__).resolve().parents[2]
_OS_ENVIRON = re.compile(r'os\.environ(?:\.get\(|\[)"(WALFEED_[A-Z0-9_]+)"')


class _Recording(dict[str, str]):
    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def variables_read() -> set[str]:
    environ = _Recording({name: "a-password-of-24-chars!!" for name in password_variables()})
    environ["WALFEED_SMTP_URL"] = "smtp://mail.example.com"  # the email channel reads its other settings after it
    environ["WALFEED_API_PUBLIC_URL"] = "https://walfeed.example.com"  # and needs this one
    for from_env in (Settings.from_env, ApiSettings.from_env, RelaySettings.from_env, PollSettings.from_env,
                     worker_config.from_env, notifier_config.from_env, RoleSettings.from_env, log_format,
                     log_level, listen_address, EmbedderSettings.from_env, SearchSettings.from_env,
                     EmbedSettings.from_env):
        from_env(environ)
    RETENTION.read(Env(environ))  # prune-notifications reads it when no --older-than is given
    DeliverySettings.from_env("email", environ)
    direct = {name for path in (ROOT / "services").rglob("*.py") for name in _OS_ENVIRON.findall(path.read_text())}
    return (environ.read | direct) - {"CREDENTIALS_DIRECTORY"}  # systemd's, not a setting (docs/settings.md)
