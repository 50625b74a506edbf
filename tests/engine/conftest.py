"""Fixtures that run the embedded engine as users do: its own process, on a free port.

Every engine starts in a new process group and is killed (the whole group, SIGKILL) by the
fixture's finalizer, whatever the test did.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from pytest_specdec.engine.logs import READY_LINE

STARTUP_TIMEOUT = 60.0
#: How the fixtures start the engine, as users do; a test may start a launcher script instead.
ENGINE_ENTRY = ("-m", "pytest_specdec.engine")

# In-process model tests: one thread suits the tiny model and shares the CPU better.
torch.set_num_threads(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpResult:
    def __init__(self, status: int, body: bytes, headers) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self):
        return json.loads(self.body)


class Engine:
    """A running engine process: its URL, its log lines so far, and small HTTP helpers."""

    def __init__(self, flags: list[str], entry: tuple[str, ...] = ENGINE_ENTRY) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, *entry, "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = STARTUP_TIMEOUT, after: int = 0) -> re.Match:
        """Wait for a log line matching ``pattern`` (a regex) among lines ``after`` onwards."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = after
        while True:
            exited = self.proc.poll() is not None
            if exited:
                self._reader.join(5)  # the whole log is in once the process is gone
            while seen < len(self.lines):
                m = rx.search(self.lines[seen])
                seen += 1
                if m:
                    return m
            if exited:
                raise AssertionError(f"engine exited {self.proc.returncode} before /{pattern}/:\n{self.log}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no /{pattern}/ within {timeout} s:\n{self.log}")
            time.sleep(0.02)

    def wait_ready(self) -> "Engine":
        self.wait_for_line(re.escape(READY_LINE))
        return self

    def wait_exit(self, timeout: float = STARTUP_TIMEOUT) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def request(self, method: str, path: str, body=None, timeout: float = 60.0, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> HttpResult:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return HttpResult(resp.status, resp.read(), resp.headers)
        except urllib.error.HTTPError as err:
            return HttpResult(err.code, err.read(), err.headers)

    def get(self, path: str, **kw) -> HttpResult:
        return self.request("GET", path, **kw)

    def post(self, path: str, body=None, **kw) -> HttpResult:
        return self.request("POST", path, body, **kw)

    def wait_for_load(self, running: int, queued: int) -> None:
        """Wait until the scheduler holds that many requests running and queued (/server_info)."""
        deadline = time.monotonic() + 30
        while True:
            state = self.get("/server_info").json()["internal_states"][0]
            if (state["num_running_reqs"], state["num_queue_reqs"]) == (running, queued):
                return
            assert time.monotonic() < deadline, f"never {running} running and {queued} queued: {state}"
            time.sleep(0.02)

    def generate(self, text: str, max_new_tokens: int = 32, **extra) -> dict:
        body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True,
                                                  "temperature": 0}, **extra}
        res = self.post("/generate", body)
        assert res.status == 200, res.text
        return res.json()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self._reader.join(5)


def _engine_starter():
    """A `start(*flags, ready=True, entry=ENGINE_ENTRY)` function and the engines it started (killed by the caller)."""
    started: list[Engine] = []

    def start(*flags: str, ready: bool = True, entry: tuple[str, ...] = ENGINE_ENTRY) -> Engine:
        engine = Engine(list(flags), entry)
        started.append(engine)
        return engine.wait_ready() if ready else engine

    return start, started


@pytest.fixture(scope="module")
def module_engines():
    """Start engines shared by one module's tests; all killed at module end."""
    start, started = _engine_starter()
    yield start
    for engine in started:
        engine.kill()


@pytest.fixture
def engines():
    """Start engines for one test; all killed when it ends."""
    start, started = _engine_starter()
    yield start
    for engine in started:
        engine.kill()
