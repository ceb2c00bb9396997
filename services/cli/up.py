"""`walfeed up`: the whole system on one terminal, for local development.

Checks the infrastructure, runs `walfeed bootstrap-roles` (roles, schema, grants, slot, broker users: it needs the
admin rights that command needs), then runs api, relay, worker, notifier, the webhook delivery worker (and the
email one when WALFEED_SMTP_URL is set) and the embedder (the local model, unless WALFEED_EMBEDDER says otherwise;
none when it is `off`) as child processes, each connected as its own role, with their output
interleaved behind the process name. A role password not set in the environment (WALFEED_*_DB_PASSWORD,
WALFEED_*_AMQP_PASSWORD) is generated for this run and set again by the bootstrap. Ctrl-C (or SIGTERM) stops all of
them; if one dies on its own, the others are stopped too and its exit code is returned, so a broken set-up is never
hidden.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import IO

from services.cli import bootstrap
from services.cli.checks import check_infrastructure
from services.cli.roles import RoleSettings, password_variables, process_environ
from services.core.settings import Settings

STOP_TIMEOUT = 20.0  # seconds each child gets to finish in-flight work after SIGTERM
COLORS = ("\033[36m", "\033[35m", "\033[33m", "\033[32m", "\033[34m")
RESET = "\033[0m"


def run(settings: Settings, *, host: str, port: int, workers: int) -> int:
    problems = check_infrastructure(settings)
    if problems:
        for problem in problems:
            print(f"walfeed up: {problem}", file=sys.stderr)
        print("walfeed up: run scripts/setup-infra.sh (or scripts/run, which does) and try again", file=sys.stderr)
        return 1
    environ = {**os.environ, **{v: secrets.token_urlsafe(24) for v in password_variables() if not os.environ.get(v)}}
    # mail's unsubscribe links lead to this api unless said otherwise (plain http: loopback only, docs/settings.md)
    environ.setdefault("WALFEED_API_PUBLIC_URL", f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}")
    roles = RoleSettings.from_env(environ)
    if bootstrap.run(settings, roles) != 0:
        return 1

    commands = {"api": ["api", "--host", host, "--port", str(port)], "relay": ["relay"]}
    for i in range(1, workers + 1):
        commands[f"worker{i}" if workers > 1 else "worker"] = ["worker"]
    commands["notifier"] = ["notifier"]
    for channel in ("webhook", "email") if environ.get("WALFEED_SMTP_URL") else ("webhook",):
        commands[f"deliver-{channel}"] = ["deliver", "--channel", channel]
    if environ.get("WALFEED_EMBEDDER", "local").lower() != "off":
        commands["embedder"] = ["embedder"]
    envs = {name: process_environ(environ, settings.database_url, settings.amqp_url, roles, _role(args[0]))
            for name, args in commands.items()}
    width = max(map(len, commands))
    children: dict[str, subprocess.Popen[str]] = {}
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    color = sys.stdout.isatty()
    for n, (name, args) in enumerate(commands.items()):
        child = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args], env=envs[name],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, bufsize=1,
            start_new_session=True,  # Ctrl-C reaches only us; we forward SIGTERM in order
        )
        children[name] = child
        label = f"{COLORS[n % len(COLORS)]}{name:<{width}}{RESET}" if color else f"{name:<{width}}"
        threading.Thread(target=_pump, args=(label, child.stdout), daemon=True).start()
    print(f"walfeed up: api on http://{host}:{port}  (Ctrl-C stops everything)", flush=True)
    if "deliver-email" not in commands:
        print("walfeed up: no email delivery (set WALFEED_SMTP_URL to start it)", flush=True)

    failed: tuple[str, int] | None = None
    while not stopping.is_set() and failed is None:
        for name, child in children.items():
            code = child.poll()
            if code is not None:
                failed = (name, code)
                break
        stopping.wait(0.2)

    if failed:
        print(f"walfeed up: {failed[0]} exited with code {failed[1]}; stopping the others", file=sys.stderr)
    _stop_all(children)
    return (failed[1] or 1) if failed else 0


def _role(command: str) -> str:
    return "delivery" if command == "deliver" else command


def _pump(label: str, stream: IO[str] | None) -> None:
    assert stream is not None
    for line in stream:
        sys.stdout.write(f"{label} | {line}")
        sys.stdout.flush()


def _stop_all(children: dict[str, subprocess.Popen[str]]) -> None:
    # The api first (no new writes), then the worker and the relay finish what they have in flight.
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for name, child in children.items():
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"walfeed up: {name} did not stop in {STOP_TIMEOUT:.0f}s; killing it", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            child.wait()
