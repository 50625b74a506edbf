"""An attached server restarted on its URL as another configuration between tests (or workloads)
is caught at the next liveness check, rather than having its figures recorded under the
configuration it was at the run's start."""

from __future__ import annotations

import json

import pytest

from http_stub import QuietHandler, serving
from pytest_specdec.servers.attach import AttachedServer
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.spec import ServerSpec


class Server(QuietHandler):
    budget = 8

    def do_GET(self) -> None:
        info = {"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": Server.budget + 1,
                "tp_size": 1, "model_path": "org/model"}
        body = json.dumps(info if self.path.endswith("server_info") else {}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_server_restarted_as_another_configuration_fails_its_next_check():
    Server.budget = 8
    with serving(Server) as url:
        server = AttachedServer(url).for_spec(ServerSpec(backend="sglang", method="ddtree", tp=1, budget=8))
        server.check_alive()  # as it was
        Server.budget = 16  # restarted with another budget on the same port
        with pytest.raises(ServerError) as error:
            server.check_alive()
    assert error.value.reason == "changed"
    assert error.value.headline.startswith(
        f"attached server ddtree-tp1-b8 at {url} changed: it now serves ddtree-tp1-b16, model org/model (per "
        f"/server_info), where at the run's start it served ddtree-tp1-b8, model org/model: restarted as another "
        f"configuration; its figures would be recorded as ddtree-tp1-b8's"), error.value.headline


class Blinking(Server):
    """Answers /server_info (both names) with 503 `fails` times, then as Server does."""

    fails = 0

    def do_GET(self) -> None:
        if self.path.endswith("server_info") and Blinking.fails:
            Blinking.fails -= 1
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


def test_one_failed_server_info_read_is_read_again_not_counted_as_a_dead_server(monkeypatch):
    """A server whose /health answered but whose /server_info failed once was 'unreachable; is it
    running?', and the pool failed every later test of its configuration at once."""
    from pytest_specdec.servers import attach
    from pytest_specdec.servers.pool import ServerPool

    monkeypatch.setattr(attach, "REREAD_PAUSE_S", 0.0)
    Server.budget, Blinking.fails = 8, 0
    spec = ServerSpec(backend="sglang", method="ddtree", tp=1, budget=8)
    with serving(Blinking) as url:
        pool = ServerPool.attach(url)
        pool.acquire(spec)
        Blinking.fails = 2  # one failed read: /server_info, then the old name it falls back to
        pool.acquire(spec)
        assert pool.failure(spec) is None
        Blinking.fails = 4  # failed twice running: still said as unreachable
        with pytest.raises(ServerError) as error:
            pool.acquire(spec)
    assert error.value.reason == "unreachable"
