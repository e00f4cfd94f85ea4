"""Which Host names the API answers to, the setting that extends them, and the CLI's URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from soulflow.cli.client import reachable_url
from soulflow.config import ConfigError, id_list, load_settings
from soulflow.dashboard.guard import HostName, Refused, RequestPolicy, same_origin


def allowed(policy: RequestPolicy, host: str, port: int) -> bool:
    parsed = HostName.parse(host)
    return parsed is not None and policy.host_allowed(parsed, port)


def test_loopback_bind_answers_loopback_names_on_its_port_only() -> None:
    policy = RequestPolicy.build("127.0.0.1", [])
    for host in ("127.0.0.1:3789", "localhost:3789", "[::1]:3789", "LocalHost:3789"):
        assert allowed(policy, host, 3789), host
    for host in ("127.0.0.1:3790", "localhost", "evil.example:3789", "127.0.0.1.nip.io:3789",
                 "0.0.0.0:3789", "[::1]", "localhost:3789/x", "a@localhost:3789", ""):
        assert not allowed(policy, host, 3789), host
    assert allowed(policy, "localhost", 80)  # a browser omits the default port


def test_non_loopback_bind_answers_its_address_and_the_configured_names() -> None:
    policy = RequestPolicy.build("192.168.1.5", ["dash.example", "proxy.example:8443"])
    assert allowed(policy, "192.168.1.5:3789", 3789)
    assert not allowed(policy, "192.168.1.5:80", 3789)
    assert allowed(policy, "localhost:3789", 3789)  # the machine itself, through loopback
    assert allowed(policy, "dash.example", 3789)  # no port listed: any (a proxy on 443)
    assert allowed(policy, "DASH.example:443", 3789)
    assert allowed(policy, "proxy.example:8443", 3789)
    assert not allowed(policy, "proxy.example:443", 3789)
    assert not allowed(policy, "192.168.1.6:3789", 3789)
    assert not allowed(policy, "evil.dash.example", 3789)
    tunnel = RequestPolicy.build("127.0.0.1", ["localhost:8080"])  # ssh -L 8080:127.0.0.1:3789
    assert allowed(tunnel, "localhost:8080", 3789) and allowed(tunnel, "localhost:3789", 3789)
    assert not allowed(tunnel, "localhost:8081", 3789)
    with pytest.raises(ValueError, match="DASHBOARD_ALLOWED_HOSTS"):
        RequestPolicy.build("127.0.0.1", ["http://dash.example/"])


def test_an_origin_must_name_the_host_the_request_went_to() -> None:
    host = HostName("127.0.0.1", 3789)
    assert same_origin("http://127.0.0.1:3789", host)
    for origin in ("http://127.0.0.1:3790", "http://localhost:3789", "null", "file://",
                   "http://127.0.0.1", "ftp://127.0.0.1:3789", "http://u@127.0.0.1:3789",
                   "http://127.0.0.1:3789/page", "http://127.0.0.1:99999"):
        assert not same_origin(origin, host), origin
    proxied = HostName("dash.example")
    assert same_origin("https://dash.example", proxied)
    assert same_origin("http://dash.example:80", proxied)


def test_the_reason_names_the_fix() -> None:
    policy = RequestPolicy.build("127.0.0.1", [])
    with pytest.raises(Refused) as refused:
        policy.check_source({"Host": "evil.example:3789"}, 3789)
    assert refused.value.status == 403
    assert "DASHBOARD_ALLOWED_HOSTS" in refused.value.reason
    policy.check_source({"Host": "127.0.0.1:3789", "Origin": "http://127.0.0.1:3789",
                         "Sec-Fetch-Site": "same-origin"}, 3789)


def test_the_allowed_hosts_setting_is_validated(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"DASHBOARD_ALLOWED_HOSTS": "dash.example, [::1]:8080"})
    assert id_list(settings["DASHBOARD_ALLOWED_HOSTS"]) == ["dash.example", "[::1]:8080"]
    assert load_settings(tmp_path, {})["DASHBOARD_ALLOWED_HOSTS"] == ""
    for bad in ("http://dash.example", "dash.example/x", "dash.example:99999", "a b",
                "user@dash.example"):
        with pytest.raises(ConfigError, match="DASHBOARD_ALLOWED_HOSTS must be"):
            load_settings(tmp_path, {"DASHBOARD_ALLOWED_HOSTS": bad})


def test_the_cli_calls_a_wildcard_bound_daemon_on_loopback() -> None:
    assert reachable_url("http://0.0.0.0:3789") == "http://127.0.0.1:3789"
    assert reachable_url("http://[::]:3789") == "http://[::1]:3789"
    assert reachable_url("http://127.0.0.1:3789") == "http://127.0.0.1:3789"
    assert reachable_url("http://192.168.1.5:3789") == "http://192.168.1.5:3789"
