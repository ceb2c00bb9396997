"""The relay's failover checkpoint and recovery under the relay's role (ADR 0060, ADR 0091): it advances the
checkpoint, creates a missing slot and republishes through the SECURITY DEFINER functions it was granted, and no
other role may run them."""

from __future__ import annotations

import psycopg
import pytest

from services.cdc_relay.checkpoint import ADVANCE
from services.cdc_relay.failover import Recovery, Republisher
from services.core import slots
from services.core.settings import Settings
from services.core.topology import Topology
from testkit.waiting import eventually
from tests.integration.relay.conftest import Watcher, checkpointed, watcher, write_events  # noqa: F401  (the fixture)
from tests.integration.roles.conftest import RoleEnv

pytestmark = pytest.mark.integration


def test_the_relay_role_checkpoints_and_recovers_a_missing_slot(
        role_env: RoleEnv, settings: Settings, slot_name: str, topology: Topology,
        watcher: Watcher) -> None:  # noqa: F811
    env = role_env("relay")
    url = env["WALFEED_DATABASE_URL"]
    ids = set(write_events(settings.database_url, 20, per_txn=2))
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(ADVANCE, {"slot": slot_name}).fetchone() == ("waiting",)  # a watermark now waits
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot_name,))

    def republisher() -> Republisher:
        return Republisher(env["WALFEED_AMQP_URL"], topology, 10, 60.0)

    Recovery(url, slot_name, 10, republisher).prepare()  # nothing checkpointed yet: every CDC row goes again
    eventually(lambda: watcher.has_all(ids), timeout=30, what="the outbox republished under the relay's role")
    with psycopg.connect(url, autocommit=True) as conn:
        assert slots.find(conn.cursor(), slot_name) is not None
    assert checkpointed(url, slot_name)
    for process in ("api", "worker"):
        with psycopg.connect(role_env(process)["WALFEED_DATABASE_URL"], autocommit=True) as conn, \
                pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM walfeed_relay_unconfirmed(%s)", (slot_name,))
