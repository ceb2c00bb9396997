"""RabbitMQ side of `walfeed bootstrap-roles`: one user per process, no tags (no management or administrator
rights), with the permissions of services.cli.roles.amqp_permissions in the vhost of WALFEED_AMQP_URL.

Users are administered with the broker's admin rights: `rabbitmqctl` (root or the rabbitmq OS user on the broker's
machine; WALFEED_RABBITMQCTL names the command, e.g. `sudo rabbitmqctl`), or the management HTTP API with an
administrator's credentials (WALFEED_RABBITMQ_MANAGEMENT_URL, compose.yaml). Passwords go through stdin or a
request body, never a command line. Idempotent: an existing user gets its password, tags and permissions set again.
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol

from services.cli.roles import Permissions, with_credentials
from services.core import nodes


class BrokerAdminError(Exception):
    """The broker refused or could not be reached; the message says what to do."""


class BrokerAdmin(Protocol):
    def ensure_user(self, user: str, password: str, vhost: str, permissions: Permissions) -> None: ...

    def delete_user(self, user: str) -> None: ...


class Rabbitmqctl:
    def __init__(self, command: str) -> None:
        self._command = shlex.split(command)

    def ensure_user(self, user: str, password: str, vhost: str, permissions: Permissions) -> None:
        added = self._run("add_user", user, stdin=password, ok_if="already exists")
        if not added:
            self._run("change_password", user, stdin=password)
        self._run("set_user_tags", user)  # no tags: neither management UI nor administrator
        self._run("set_permissions", "-p", vhost, user, permissions.configure, permissions.write, permissions.read)

    def delete_user(self, user: str) -> None:
        self._run("delete_user", user, ok_if="not found")

    def _run(self, *args: str, stdin: str | None = None, ok_if: str | None = None) -> bool:
        """True when the command succeeded, False when it failed with `ok_if` in its output."""
        try:
            done = subprocess.run([*self._command, "--quiet", *args], input=f"{stdin}\n" if stdin else None,
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BrokerAdminError(f"cannot run {shlex.join(self._command)} ({exc}): install it, or set "
                                   "WALFEED_RABBITMQCTL (e.g. 'sudo rabbitmqctl') or "
                                   "WALFEED_RABBITMQ_MANAGEMENT_URL") from None
        output = f"{done.stdout}\n{done.stderr}"
        if done.returncode == 0:
            return True
        if ok_if and ok_if in output:
            return False
        raise BrokerAdminError(f"rabbitmqctl {args[0]} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}."
                               " It needs the broker's admin rights: run as root or the rabbitmq user, or set "
                               "WALFEED_RABBITMQCTL")


class ManagementApi:
    """The management plugin's HTTP API (https://www.rabbitmq.com/docs/management#http-api)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self._base = with_credentials(url, None, None).rstrip("/")
        credentials = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        self._auth = "Basic " + base64.b64encode(credentials.encode()).decode()

    def ensure_user(self, user: str, password: str, vhost: str, permissions: Permissions) -> None:
        self._request("PUT", f"/api/users/{_segment(user)}", {"password": password, "tags": ""})
        self._request("PUT", f"/api/permissions/{_segment(vhost)}/{_segment(user)}", {
            "configure": permissions.configure, "write": permissions.write, "read": permissions.read})

    def delete_user(self, user: str) -> None:
        self._request("DELETE", f"/api/users/{_segment(user)}", None, missing_ok=True)

    def _request(self, method: str, path: str, body: dict[str, str] | None, missing_ok: bool = False) -> None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self._base}{path}", data=data, method=method, headers={
            "Authorization": self._auth, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30):
                return
        except urllib.error.HTTPError as exc:
            if missing_ok and exc.code == 404:
                return
            raise BrokerAdminError(f"RabbitMQ management API: {method} {path} answered {exc.code}; the user in "
                                   "WALFEED_RABBITMQ_MANAGEMENT_URL needs the administrator tag") from None
        except OSError as exc:
            raise BrokerAdminError(f"RabbitMQ management API unreachable (WALFEED_RABBITMQ_MANAGEMENT_URL): {exc}"
                                   ) from None


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def admin(rabbitmqctl: str, management_url: str | None) -> BrokerAdmin:
    return ManagementApi(management_url) if management_url else Rabbitmqctl(rabbitmqctl)


def vhost_of(amqp_url: str) -> str:
    """The virtual host of an AMQP URL, as pika reads it (empty path or `/`: the default vhost `/`)."""
    return nodes.vhost(nodes.split(amqp_url)[0])  # every node names the same one
