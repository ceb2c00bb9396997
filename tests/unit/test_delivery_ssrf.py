"""SSRF: which URLs and addresses the delivery worker and the webhook API refuse (services/core/ssrf.py)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core import ssrf

OPEN = ssrf.Policy()
LOCAL_TESTS = ssrf.Policy(ssrf.parse_networks("127.0.0.0/8"), allow_http=True)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "100.127.255.254",
    "169.254.169.254", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "0.0.0.0", "192.0.2.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:a00:1::1",
])
def test_non_public_addresses_are_refused_with_a_reason(address: str) -> None:
    reason = ssrf.refusal(ipaddress.ip_address(address), OPEN)
    assert reason is not None and str(ipaddress.ip_address(address)) in reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert ssrf.refusal(ipaddress.ip_address(address), OPEN) is None


def test_cgnat_and_ula_say_what_they_are() -> None:
    assert "CGNAT" in (ssrf.refusal(ipaddress.ip_address("100.64.1.1"), OPEN) or "")
    assert "unique local" in (ssrf.refusal(ipaddress.ip_address("fd00::1"), OPEN) or "")


def test_allowed_networks_allow_exactly_their_addresses_and_mapped_forms() -> None:
    assert ssrf.refusal(ipaddress.ip_address("127.0.0.1"), LOCAL_TESTS) is None
    assert ssrf.refusal(ipaddress.ip_address("::ffff:127.0.0.2"), LOCAL_TESTS) is None
    assert ssrf.refusal(ipaddress.ip_address("10.0.0.1"), LOCAL_TESTS) is not None
    assert ssrf.refusal(ipaddress.ip_address("::1"), LOCAL_TESTS) is not None


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_and_its_mapped_form_are_judged_alike(address: ipaddress.IPv4Address) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert (ssrf.refusal(address, OPEN) is None) == (ssrf.refusal(mapped, OPEN) is None)


@given(st.ip_addresses())
def test_only_global_unicast_unreserved_addresses_pass(address: ssrf.IPAddress) -> None:
    reached = ssrf._and_embedded(address)
    allowed = ssrf.refusal(address, OPEN) is None
    assert allowed == all(a.is_global and not (a.is_multicast or a.is_reserved or getattr(a, "is_site_local", False))
                          for a in reached)


@given(st.ip_addresses(v=4, network="10.0.0.0/8") | st.ip_addresses(v=4, network="100.64.0.0/10")
       | st.ip_addresses(v=6, network="fc00::/7") | st.ip_addresses(v=6, network="fe80::/10"))
def test_private_ranges_never_pass(address: ssrf.IPAddress) -> None:
    assert ssrf.refusal(address, OPEN) is not None


@pytest.mark.parametrize(("url", "words"), [
    ("http://example.com/hook", "https"),
    ("ftp://example.com/", "https://"),
    ("https://user:pw@example.com/", "credentials"),
    ("https:///path", "no host"),
    ("https://example.com:99999/", "invalid"),
    ("https://exa mple.com/", "whitespace"),
    ("https://example.com/" + "a" * 2100, "longer"),
    ("https://0x5db8d70e/", "dotted decimal"), ("https://0135.0270.0327.016/", "dotted decimal"),
    ("https://93.184.55054/", "dotted decimal"), ("https://1572395790/", "dotted decimal"),
    ("https://093.184.215.014/", "dotted decimal"),
])
def test_bad_urls_are_refused_saying_why(url: str, words: str) -> None:
    with pytest.raises(ssrf.UrlRefused, match=words):
        ssrf.check_url(url, OPEN)


def test_a_url_is_split_into_where_to_connect_and_what_to_ask() -> None:
    target = ssrf.check_url("https://Hooks.Example.com:8443/in?x=1#frag", OPEN)
    assert (target.scheme, target.host, target.port, target.target) == ("https", "hooks.example.com", 8443, "/in?x=1")
    assert target.host_header == "hooks.example.com:8443"
    assert ssrf.check_url("http://[::1]/", LOCAL_TESTS).host_header == "[::1]"


def test_every_resolved_address_must_be_allowed() -> None:
    def resolver(host: str, port: int) -> list[ssrf.IPAddress]:
        return [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("10.0.0.1")]

    with pytest.raises(ssrf.UrlRefused) as refused:
        ssrf.checked("https://rebind.example/", OPEN, resolver)
    assert "10.0.0.1" in (refused.value.detail or "") and "10.0.0.1" not in str(refused.value)


def test_a_literal_address_is_not_resolved() -> None:
    def resolver(host: str, port: int) -> list[ssrf.IPAddress]:
        raise AssertionError("resolved a literal")

    target, addresses = ssrf.checked("http://127.0.0.2:81/x", LOCAL_TESTS, resolver)
    assert addresses == (ipaddress.ip_address("127.0.0.2"),) and target.port == 81


def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    with pytest.raises(ssrf.UrlRefused, match=ssrf.NOT_PUBLIC) as refused:
        ssrf.checked("https://localhost/", OPEN)
    assert "non-public" in (refused.value.detail or "")


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(ssrf.UrlRefused, match=ssrf.NOT_PUBLIC) as refused:
        ssrf.checked("https://no-such-host.invalid/", OPEN)
    assert "does not resolve" in (refused.value.detail or "")


@pytest.mark.parametrize("url", ["https://no-such-host.invalid/", "https://localhost/", "https://10.1.2.3/",
                                 "https://[::ffff:169.254.169.254]/", "https://100.64.0.1:8443/"])
def test_a_refusal_tells_the_client_nothing_of_the_network_behind(url: str) -> None:
    with pytest.raises(ssrf.UrlRefused) as refused:
        ssrf.checked(url, OPEN)
    assert str(refused.value) == ssrf.NOT_PUBLIC and refused.value.detail


def test_networks_setting_names_the_bad_entry() -> None:
    assert ssrf.parse_networks(" 127.0.0.0/8, ::1/128 ,") == (ipaddress.ip_network("127.0.0.0/8"),
                                                              ipaddress.ip_network("::1/128"))
    with pytest.raises(ValueError, match="'nope'"):
        ssrf.parse_networks("10.0.0.0/8,nope")


@pytest.mark.parametrize("spelling", ["93.184.215.14", "[::ffff:5db8:d70e]", "[::ffff:93.184.215.14]",
                                      "93.184.215.14."])
def test_the_spellings_of_one_address_are_one_host(spelling: str) -> None:
    assert ssrf.host_key(urlsplit(f"https://{spelling}/").hostname or "") == "93.184.215.14"
    assert ssrf.host_key("Bücher.Example.") == ssrf.host_key("xn--bcher-kva.example") == "xn--bcher-kva.example"
