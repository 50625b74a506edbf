"""The plugin's own HTTP checks go straight to the server whatever proxy the environment sets, as
the workloads' aiohttp requests do: urllib would send them to `HTTP_PROXY` (127.0.0.1 included),
and a launched server's readiness poll read the proxy's 502 as a warm-up that never ends."""

from __future__ import annotations

import json

import pytest

from http_stub import QuietHandler, serving
from pytest_specdec.servers.attach import fetch_server_info
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.process import probe


class Proxy(QuietHandler):
    """A proxy that reaches nothing: every request it gets is its 502."""

    seen: list[str] = []

    def do_GET(self) -> None:
        Proxy.seen.append(self.path)
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Server(QuietHandler):
    def do_GET(self) -> None:
        body = json.dumps({"speculative_algorithm": None, "tp_size": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def proxied(monkeypatch):
    Proxy.seen = []
    with serving(Proxy) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        yield proxy


def test_a_readiness_probe_reaches_the_server_not_the_proxy(proxied):
    with serving(Server) as url:
        assert probe(url + "/health_generate", 5) == ("ok", 200)
    assert Proxy.seen == []


def test_an_attached_servers_info_is_read_from_it_not_the_proxy(proxied):
    with serving(Server) as url:
        assert fetch_server_info(url)["tp_size"] == 1
    assert Proxy.seen == []


def test_an_unreachable_attached_server_says_the_proxy_is_not_used(proxied):
    with pytest.raises(ServerError) as error:
        fetch_server_info("http://127.0.0.1:9", timeout=2)
    assert "the run connects to the server directly, ignoring HTTP_PROXY, HTTPS_PROXY, ALL_PROXY" \
        in error.value.cause
    assert Proxy.seen == []
