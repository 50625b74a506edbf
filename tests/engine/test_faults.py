"""Each --fault-* flag's observable behaviour: exit codes, log signatures, HTTP answers."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_specdec.engine.logs import ILLEGAL_INSTRUCTION, READY_LINE

PROMPT = "The capital city of France is"


def test_crash_during_warmup_exits_nonzero_with_sglang_signature(engines):
    engine = engines("--method", "ddtree", "--fault-crash-warmup", ready=False)
    assert engine.wait_exit() != 0
    assert "Initialization failed. warmup error: Traceback" in engine.log
    assert READY_LINE not in engine.log


def test_crash_after_n_requests(engines):
    engine = engines("--method", "ddtree", "--fault-crash-after", "2")
    for _ in range(2):
        assert engine.generate(PROMPT, max_new_tokens=8)["meta_info"]["completion_tokens"] == 8
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        engine.post("/generate", {"text": PROMPT}, timeout=30)
    assert engine.wait_exit() != 0
    assert ILLEGAL_INSTRUCTION in engine.log
    assert "Scheduler hit an exception: Traceback" in engine.log
    assert "Received sigquit from a child process" in engine.log


def test_crash_budgets_crash_at_warmup_for_listed_budget(engines):
    crashing = engines("--method", "ddtree", "--budget", "8", "--fault-crash-budgets", "8,12", ready=False)
    healthy = engines("--method", "ddtree", "--budget", "16", "--fault-crash-budgets", "8,12", ready=False)
    assert crashing.wait_exit() != 0
    assert re.search(r"TP0\] Scheduler hit an exception", crashing.log)
    assert ILLEGAL_INSTRUCTION in crashing.log and READY_LINE not in crashing.log
    healthy.wait_ready()
    assert healthy.generate(PROMPT, max_new_tokens=8)["meta_info"]["completion_tokens"] == 8


def test_zero_tokens_while_health_stays_green(engines):
    engine = engines("--method", "ddtree", "--fault-zero-tokens")
    out = engine.generate(PROMPT, max_new_tokens=32)
    assert out["text"] == "" and out["output_ids"] == []
    assert out["meta_info"]["completion_tokens"] == 0
    assert not {k for k in out["meta_info"] if k.startswith("spec_")}
    assert engine.get("/health").status == 200 and engine.get("/health_generate").status == 200


def test_hang_accepts_connections_but_never_answers_generation(engines):
    engine = engines("--method", "ar", "--fault-hang")

    def answered(path: str) -> bool:
        try:
            if path == "/generate":
                engine.post(path, {"text": PROMPT}, timeout=1.0)
            else:
                engine.get(path, timeout=1.0)
        except (TimeoutError, socket.timeout, urllib.error.URLError):
            return False
        return True

    paths = ("/generate", "/health", "/health_generate")
    with ThreadPoolExecutor(len(paths)) as pool:  # at once: each waits out its 1 s unanswered
        assert dict(zip(paths, pool.map(answered, paths))) == dict.fromkeys(paths, False)
    assert engine.get("/ready").status == 200
    assert engine.get("/metrics").status == 200
    assert engine.proc.poll() is None


@pytest.mark.parametrize("value", ["false", "0", "No"])
def test_health_without_generation_answers_over_a_hung_scheduler_as_sglangs(engines, monkeypatch, value):
    """SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off: SGLang's /health is 200 without a generation,
    so a hung scheduler behind it still passes; /health_generate still generates (and hangs).
    The engine ignored the variable: its /health hung."""
    monkeypatch.setenv("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", value)
    engine = engines("--method", "ar", "--fault-hang")
    assert engine.get("/health", timeout=10).status == 200
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        engine.get("/health_generate", timeout=1.0)


def test_an_unreadable_health_generation_setting_is_sglangs_default_with_its_warning(engines, monkeypatch):
    monkeypatch.setenv("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "Maybe")
    engine = engines("--method", "ar")
    assert ('Invalid value for SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: "maybe" is not a valid boolean value, '
            'using default "True"') in engine.log
    assert engine.get("/health").status == 200


def test_slow_start_keeps_the_port_closed_meanwhile(engines):
    started = time.monotonic()
    engine = engines("--method", "ar", "--fault-slow-start", "3", ready=False)
    engine.wait_for_line(r"--fault-slow-start", timeout=30)
    with pytest.raises(urllib.error.URLError):
        engine.get("/health", timeout=1.0)
    engine.wait_ready()
    assert time.monotonic() - started >= 3.0
    assert engine.get("/health").status == 200


def test_slow_factor_stretches_every_decode_step(engines):
    """Each decode step sleeps (F - 1) times its own duration: with F = 4 a request's decode
    takes about four times as long as the same engine's without the flag (2x is the bound:
    the behaviour is a planted slowdown, not a speed goal)."""
    normal = engines("--method", "ar")
    slow = engines("--method", "ar", "--fault-slow-factor", "4")
    assert slow.get("/server_info").json()["fault_slow_factor"] == 4.0

    def decode_s(engine) -> float:  # server-side e2e latency
        return engine.generate(PROMPT, max_new_tokens=48)["meta_info"]["e2e_latency"]

    # best of three each, taken in turns: a burst of load meets both engines, not one
    pairs = [(decode_s(normal), decode_s(slow)) for _ in range(3)]
    assert min(s for _, s in pairs) > 2 * min(n for n, _ in pairs), pairs


def test_a_frozen_scheduler_fails_health_checks_as_sglangs_http_side_does(engines, monkeypatch):
    """With the scheduler frozen, /health and /health_generate never answered; SGLang's HTTP side
    still answers them: 503 once SGLANG_HEALTH_CHECK_TIMEOUT has passed without any output, with
    its "Health check failed" line (a hang signature launchers read). Its shortest whole value
    here: each check waits it out."""
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")
    engine = engines("--method", "ar", "--fault-hang-after", "0")
    def send() -> None:
        try:
            engine.post("/generate", {"text": PROMPT}, timeout=30)
        except OSError:
            pass  # never answered: the engine is killed at the end

    threading.Thread(target=send, daemon=True).start()
    engine.wait_for_line(r"Fault injection: --fault-hang-after 0", timeout=30)
    for path in ("/health", "/health_generate"):
        mark = len(engine.lines)
        assert engine.get(path, timeout=15).status == 503, path
        engine.wait_for_line(r"\] Health check failed\. Server couldn't get a response from detokenizer for last "
                             r"1 seconds\. tic start time: \d\d:\d\d:\d\d\. last_heartbeat time: "
                             r"\d\d:\d\d:\d\d$", timeout=5, after=mark)
    assert engine.proc.poll() is None
