"""The relay's CPU per event on its hot path, in one process (a script, not a test): parse the wal2json message
(services/cdc_relay/wal2json.py), build the Outgoing and its EventProperties, encode them as pika frames them.

Three rows: one in the outbox layout without the trace column (what main wrote before db/init/007), one with a NULL
trace column, one with the api's trace context (the relay copies it into the `traceparent` header, ADR 0072).
With --against DIR, the same path of another checkout (e.g. `git worktree add --detach /tmp/main main`) is loaded
side by side and timed in alternation, so the load of a shared machine hits both alike; each figure is the best of
--repeats short runs.

    .venv/bin/python -m bench.relay_hot_path [--against /tmp/main] [--repeats 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.cdc_relay import messages, wal2json  # noqa: E402

COLUMNS: list[tuple[str, Any]] = [
    ("id", "949c8fe4-a458-4407-91e7-32424b7a9ce8"), ("aggregatetype", "post"), ("aggregateid", "7"),
    ("type", "post.created"), ("payload", '{"post_id": 7, "author_id": 3}'),
    ("created_at", "2026-11-29 19:29:48.858487+00"), ("published_at", None), ("claimed_by", None),
    ("claim_expires_at", None)]
TRACE = "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def row(*extra: tuple[str, Any]) -> bytes:
    return orjson.dumps({"action": "I", "lsn": "0/48E1A20", "schema": "public", "table": "outbox",
                         "columns": [{"name": k, "value": v} for k, v in [*COLUMNS, *extra]]})


ROWS = {"no trace column": row(), "trace column NULL": row(("tracingspancontext", None)),
        "the api's trace column": row(("tracingspancontext", TRACE))}


def load(directory: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"against_{name}", directory / "services/cdc_relay" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def hot_path(w: ModuleType, m: ModuleType, payload: bytes) -> Callable[[], bytes]:
    traced = "traceparent" in inspect.signature(m.EventProperties.__init__).parameters

    def one() -> bytes:
        message = w.parse(payload)
        if traced:
            out = m.Outgoing(1, message.body, message.event_id, message.type, message.timestamp, message.traceparent)
            properties = m.EventProperties(out.message_id, out.type, out.timestamp, out.traceparent)
        else:
            out = m.Outgoing(1, message.body, message.event_id, message.type, message.timestamp)
            properties = m.EventProperties(out.message_id, out.type, out.timestamp)
        return b"".join(properties.encode())

    return one


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="another checkout, timed side by side")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    cases = {f"this tree, {name}": hot_path(wal2json, messages, payload) for name, payload in ROWS.items()}
    if args.against:
        w, m = load(args.against, "wal2json"), load(args.against, "messages")
        cases = {f"{args.against}, no trace column": hot_path(w, m, ROWS["no trace column"]), **cases}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(args.repeats):
        for name, case in cases.items():
            best[name] = min(best[name], timeit.timeit(case, number=2000) / 2000)
    for name, seconds in best.items():
        print(f"{name:<60} {seconds * 1e6:6.2f} us/event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
