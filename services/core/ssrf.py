"""Refusing user-given URLs that reach inside the network (server-side request forgery).

Pure classification (`check_url`, `refusal`, `check_addresses`) and one thin resolver (`resolve`). A URL is used
only through the addresses `checked` returned, so a DNS answer that changes between the check and the connection
cannot point the request anywhere else (docs/notifications.md, "SSRF").
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from services.core.settings import Declared, Env, Flag, OptionalStr, SettingsError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LENGTH: Final = 2048
_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")  # RFC 6598, shared address space
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the last 32 bits are an IPv4 address
_ULA: Final = ipaddress.IPv6Network("fc00::/7")


# What a client is told when the URL's addresses are refused, whatever the reason: that a name does not exist, or
# which private address it resolves to, would let anyone map the networks walfeed reaches (the logs say which).
NOT_PUBLIC: Final = "its host must resolve, and to public addresses only"


class UrlRefused(ValueError):
    """A URL walfeed will not call; the message says why, in words an API client can act on. `detail`: what only
    the logs say (the address and its category, the resolver's error)."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.detail = detail


# A host of digits (decimal, octal with a leading 0, hex with 0x) and at most three dots: an IPv4 address to inet_aton
_NUMERIC_HOST: Final = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?", re.IGNORECASE)


class ResolveFailed(UrlRefused):
    """The name could not be resolved for now (the resolver's temporary failure, a name server's failure, a system
    error): worth another try later, unlike a name that does not exist."""


# getaddrinfo's errors that say nothing about the name itself (EAI_NONAME, EAI_NODATA do: it has no address)
_TEMPORARY: Final = frozenset(getattr(socket, name) for name in ("EAI_AGAIN", "EAI_FAIL", "EAI_MEMORY", "EAI_SYSTEM")
                              if hasattr(socket, name))


@dataclass(frozen=True, slots=True)
class Policy:
    allowed_networks: tuple[IPNetwork, ...] = ()  # networks allowed although not public (e.g. 127.0.0.0/8 in tests)
    allow_http: bool = False


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the syntactic checks: where to connect and what to ask for."""

    scheme: str
    host: str  # a name or an address literal, lower case, without brackets
    port: int
    target: str  # path and query, as sent on the request line
    url: str = field(compare=False)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


ALLOWED_NETWORKS: Final = OptionalStr(
    "WALFEED_WEBHOOK_ALLOWED_NETWORKS", "CIDR networks webhooks may reach although not public, e.g. `10.20.0.0/16`",
    allowed="CIDR networks, comma-separated", shown="empty")
ALLOW_HTTP: Final = Flag("WALFEED_WEBHOOK_ALLOW_HTTP", False, "allow plain `http://` webhook URLs (https otherwise)")
SETTINGS: Final[tuple[Declared, ...]] = (ALLOWED_NETWORKS, ALLOW_HTTP)


def policy_from_env(env: Env) -> Policy:
    """The policy of every process that checks webhook URLs (the API at registration, the delivery worker at each
    attempt): WALFEED_WEBHOOK_ALLOWED_NETWORKS, WALFEED_WEBHOOK_ALLOW_HTTP."""
    try:
        networks = parse_networks(ALLOWED_NETWORKS.read(env) or "")
    except ValueError as exc:
        raise SettingsError(f"{ALLOWED_NETWORKS.name} is invalid: {exc}") from None
    return Policy(networks, ALLOW_HTTP.read(env))


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """A comma-separated list of CIDR networks; raises ValueError naming the bad entry."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not a network (expected CIDR such as 10.0.0.0/8)") from None
    return tuple(networks)


def check_url(url: str, policy: Policy) -> Target:
    """The syntactic checks: scheme, host, port, no credentials. Addresses are checked after resolving."""
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise UrlRefused("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"the URL is invalid: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise UrlRefused("the URL must start with https://")
    if scheme == "http" and not policy.allow_http:
        raise UrlRefused("the URL must use https (plain http is not allowed by this server)")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("the URL must not carry credentials: verify requests by their signature instead")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UrlRefused("the URL has no host")
    if literal(host) is None and _NUMERIC_HOST.fullmatch(host):
        # 0x5db8d70e, 0135.0270.0327.016, 93.184.55054: getaddrinfo reads them as an address (inet_aton), and each
        # spelling would be a host of its own to the per-host budget; an address is written as one
        raise UrlRefused("the URL's host is an address written in a form other than dotted decimal or IPv6")
    try:  # a name as DNS and the Host header see it: internationalized names in their ASCII form
        host = host if literal(host) is not None else host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UrlRefused("the URL's host is not a valid name") from None
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Target(scheme, host, port or (443 if scheme == "https" else 80), target, url)


def host_key(host: str) -> str:
    """One spelling of a host, to count what goes to it: a literal address in its canonical form (an IPv4-mapped IPv6
    address as its IPv4 address), a name in lower case and its ASCII form, without a trailing dot."""
    host = host.rstrip(".").lower()
    address = literal(host)
    if address is not None:
        return str(getattr(address, "ipv4_mapped", None) or address)
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def literal(host: str) -> IPAddress | None:
    """The address a host names literally (in its canonical form only), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def refusal(address: IPAddress, policy: Policy) -> str | None:
    """Why walfeed refuses to connect to `address`, or None when it may. An IPv6 address embedding an IPv4 one
    (IPv4-mapped, NAT64, 6to4, Teredo) is judged by the IPv4 address too."""
    for candidate in _and_embedded(address):
        if any(candidate in network for network in policy.allowed_networks if candidate.version == network.version):
            continue
        reason = _category(candidate)
        if reason is not None:
            return f"{address} is {reason}" if candidate == address else f"{address} reaches {candidate}, {reason}"
    return None


def _and_embedded(address: IPAddress) -> list[IPAddress]:
    """The addresses a connection to `address` reaches: an IPv4-mapped or NAT64 address is its IPv4 address
    alone; a 6to4 or Teredo address is itself and the IPv4 address it embeds."""
    if isinstance(address, ipaddress.IPv4Address):
        return [address]
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _NAT64:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    found: list[IPAddress] = [address]
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def _category(address: IPAddress) -> str | None:
    """The first reason an address is not a public unicast one; None for a public unicast address."""
    checks: tuple[tuple[bool, str], ...] = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "in the CGNAT range 100.64.0.0/10"),
        (isinstance(address, ipaddress.IPv6Address) and address in _ULA,
         "an IPv6 unique local address"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "an IPv6 site-local address"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "not a public address"),
    )
    return next((reason for hit, reason in checks if hit), None)


def check_addresses(target: Target, addresses: Sequence[IPAddress], policy: Policy) -> tuple[IPAddress, ...]:
    """All resolved addresses must be allowed (an attacker's name may answer one public and one private address,
    and the connection may use either); returns them, deduplicated in order."""
    if not addresses:
        raise UrlRefused(NOT_PUBLIC, f"{target.host} has no address")
    for address in addresses:
        reason = refusal(address, policy)
        if reason is not None:
            raise UrlRefused(NOT_PUBLIC, f"{target.host} resolves to a non-public address ({reason})")
    return tuple(dict.fromkeys(addresses))


Resolver = Callable[[str, int], Iterable[IPAddress]]


def resolve(host: str, port: int) -> list[IPAddress]:
    """The system resolver (getaddrinfo); raises UrlRefused when the name does not resolve, ResolveFailed (one) when
    it could not be resolved for now."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        refused = ResolveFailed if exc.errno in _TEMPORARY else UrlRefused
        raise refused(NOT_PUBLIC, f"{host} does not resolve: {exc}") from None
    except UnicodeError as exc:
        raise UrlRefused(NOT_PUBLIC, f"{host} does not resolve: {exc}") from None
    # scope ids (fe80::1%eth0) are dropped by ip_address's parse only in their text form: strip them first
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def checked(url: str, policy: Policy, resolver: Resolver = resolve) -> tuple[Target, tuple[IPAddress, ...]]:
    """The URL's target and the addresses to connect to, all allowed; raises UrlRefused with the reason."""
    target = check_url(url, policy)
    address = literal(target.host)
    found = [address] if address is not None else list(resolver(target.host, target.port))
    return target, check_addresses(target, found, policy)
