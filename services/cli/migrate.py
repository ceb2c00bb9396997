"""`walfeed migrate`."""

from __future__ import annotations

import sys

import psycopg

from services.core.migrate import MigrationError, apply_schema, ensure_database, ensure_slot
from services.core.settings import Settings


def run(settings: Settings, *, slot: bool = True) -> int:
    try:
        if ensure_database(settings.database_url):
            print("created database")
        applied = apply_schema(settings.database_url)
        print(f"schema: applied {', '.join(applied)}" if applied else "schema: up to date")
        if slot:
            created = ensure_slot(settings.database_url, settings.slot)
            print(f"slot {settings.slot}: {'created' if created else 'exists'}")
        else:
            print("slot: skipped (--no-slot): only `walfeed relay --source poll` can publish from this database")
    except (MigrationError, psycopg.OperationalError) as exc:
        print(f"walfeed migrate: {exc}".rstrip(), file=sys.stderr)
        return 1
    return 0
