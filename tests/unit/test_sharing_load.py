"""Another client's request in flight as a workload starts or ends is seen in the server's live
load (/v1/loads, or /get_load on a release before it) around the workload (sharing.py): the
generation-token counter counts a request only when it finishes, so one long request spanning the
whole workload was unseen. A quiet server reads no request in flight, a server serving neither
path is said once to be unchecked, and a record of the load's evidence reads back from a journal
as an older record without it still does."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from http_stub import QuietHandler, serving
from pytest_specdec import client
from pytest_specdec import sglang_api as api
from pytest_specdec.sharing import Shared, SharingCheck, requests_in_flight, verdict
from pytest_specdec.workloads import load_workload

pytest.importorskip("torch")

from test_warmup import engine, live  # noqa: E402  (needs torch)


def post(url: str, path: str, body: dict) -> bytes:
    request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=120).read()


def test_another_clients_long_request_spanning_the_workload_is_caught_though_the_counter_misses_it(tmp_path):
    """One request of another client, started before a short workload and still running after it,
    finishes after the counter's second read, so the counter alone called the workload clean."""
    # a context long enough that the other request outlasts the check's grace and the workload
    # (about 45 s on a CPU where the default 2k context's took 1.5 s, inside the 2 s grace)
    with engine(tmp_path / "engine.log", "--method", "ddtree", "--budget", "8", "--context-length", "16384") as url:
        server, check, _ = live(url, warmup_requests=0)
        longest = client.fetch_context_length(url) - 64  # aborted once the workload is done
        long = threading.Thread(target=post, args=(url, api.GENERATE, {
            "text": "another user's long prompt", "sampling_params": {"max_new_tokens": longest, "ignore_eos": True}}),
            daemon=True)
        long.start()
        deadline = time.monotonic() + 30
        while True:  # in flight first as waiting (its prefill), then running: a loaded machine shows both
            _, loads = client.fetch_loads(url)
            seen = [{k: load[k] for k in (api.LOAD_DP_RANK, api.LOAD_RUNNING, api.LOAD_WAITING)}
                    for load in loads[api.LOADS_LIST]]
            if seen[0][api.LOAD_RUNNING] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert seen == [{api.LOAD_DP_RANK: 0, api.LOAD_RUNNING: 1, api.LOAD_WAITING: 0}]
        try:
            measured = server.run(load_workload("chat", concurrency=2, max_new_tokens=8).resized(2))
            assert long.is_alive()  # it spans the workload: the counter has not counted it
        finally:
            post(url, "/abort_request", {"abort_all": True})
            long.join(timeout=60)
    record = server.last_shared
    assert record is not None and record.in_flight == (1, 1)
    assert not record.counted  # the counter alone missed it
    assert record.server_tokens == measured.completion_tokens == 16
    assert record.mark() == "shared: another client's requests in flight as it started (1) and ended (1)"
    assert record.describe() == (
        "the server ran or queued 1 request(s) not this run's as this workload started and ended (its live "
        "load, /v1/loads): another client shared it; its figures are not comparable")


# a loaded machine's client may read a stream's tokens in one read: said, and not this test's concern
@pytest.mark.filterwarnings("ignore:.*received their whole output:UserWarning")
def test_a_quiet_server_has_no_request_in_flight_around_a_workload_of_several_streams(tmp_path):
    """Our own requests, concurrent and of several samples each, have all answered at both reads:
    none is taken for another client's, and the engine says nothing of an unchecked load."""
    with engine(tmp_path / "engine.log", "--method", "ddtree", "--budget", "8") as url:
        said: list[str] = []
        server, check, _ = live(url, warmup_requests=2)
        check.warn = said.append
        for _ in range(3):
            server.run(load_workload("chat", concurrency=4, max_new_tokens=8, extra_sampling={"n": 2}).resized(6))
            assert server.last_shared is None
            assert check.in_flight(url, grace_s=0) == 0
    assert said == []


class NeitherLoadPath(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_server_serving_neither_load_path_is_said_once_to_be_unchecked_and_not_failed():
    said: list[str] = []
    check = SharingCheck(warn=said.append)
    with serving(NeitherLoadPath) as url:
        assert check.in_flight(url) is None
        assert check.in_flight(url) is None
    assert said == [f"pytest-specdec: the server at {url} serves neither /v1/loads nor /get_load, so whether another "
                    f"client's request was in flight as a workload started or ended (one the token counter misses: "
                    f"still running as it ended) cannot be checked this run"]
    assert verdict(1000, 1072, 72, (None, None)) is None  # the counter still decides alone


class OldLoad(QuietHandler):
    """A release before /v1/loads: /get_load's list per DP rank; `busy` requests on rank 1."""

    busy = 0

    def do_GET(self) -> None:
        if self.path == api.LOADS_OLD:
            body = json.dumps([{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0},
                               {"dp_rank": 1, "num_reqs": type(self).busy, "num_waiting_reqs": 1,
                                "num_tokens": 12}]).encode()
            self.send_response(200)
        else:
            body = b'{"detail":"Not Found"}'
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_get_load_is_read_where_v1_loads_is_not_served():
    said: list[str] = []
    check = SharingCheck(warn=said.append)
    with serving(OldLoad) as url:
        OldLoad.busy = 2
        started = time.monotonic()
        assert check.in_flight(url, grace_s=0.3) == 2  # read again through its grace, still busy
        assert 0.25 <= time.monotonic() - started < 2
        OldLoad.busy = 0
        assert check.in_flight(url) == 0
    assert said == []


def test_a_load_answer_without_its_counts_is_said_not_read_as_idle():
    with pytest.raises(ValueError, match="a DP rank without num_waiting_reqs"):
        requests_in_flight(api.LOADS, {"loads": [{"dp_rank": 0, "num_running_reqs": 0}]})
    with pytest.raises(ValueError, match="no list of DP ranks under 'loads'"):
        requests_in_flight(api.LOADS, {"load": 3})
    with pytest.raises(ValueError, match="a DP rank without num_reqs"):
        requests_in_flight(api.LOADS_OLD, [{"dp_rank": 0, "num_reqs": True}])
    assert requests_in_flight(api.LOADS, {"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 3},
                                                    {"num_running_reqs": 0, "num_waiting_reqs": 1}]}) == 6


def test_the_loads_evidence_is_marked_and_kept_in_the_journal_and_an_older_record_still_reads():
    both = verdict(1000, 1200, 72, (2, 0))
    assert both == Shared(200, 72, (2, 0)) and both.counted
    assert both.mark() == "shared: 72 of 200 tokens this run's, another client's 2 request(s) in flight as it started"
    assert both.describe() == (
        "the server generated 200 tokens during this workload, 72 of them this run's; the server ran or queued 2 "
        "request(s) not this run's as this workload started (its live load, /v1/loads): another client shared it; "
        "its figures are not comparable")
    no_metrics = verdict(None, None, 72, (0, 1))
    assert no_metrics == Shared(None, 72, (0, 1))
    assert no_metrics.mark() == "shared: another client's 1 request(s) in flight as it ended"
    for record in (both, no_metrics, verdict(1000, 1200, 72)):
        assert Shared.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert verdict(1000, 1200, 72).to_json() == {"server_tokens": 200, "own_tokens": 72}  # as before the load
    assert Shared.from_json({"server_tokens": 200, "own_tokens": 72}) == Shared(200, 72)
    assert Shared.from_json({"server_tokens": 200, "own_tokens": 72, "in_flight": "x"}) is None


class GarbledLoad(QuietHandler):
    """/v1/loads answered 200 with a body that is no JSON (a proxy's error page)."""

    def do_GET(self) -> None:
        body = b"<html>bad gateway</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_load_answer_that_is_no_json_is_said_once_not_raised():
    """Said once and read as unchecked, never as idle nor raised out of the workload's test."""
    said: list[str] = []
    check = SharingCheck(warn=said.append)
    with serving(GarbledLoad) as url:
        assert check.in_flight(url) is None
        assert check.in_flight(url) is None
    assert len(said) == 1 and said[0].startswith(f"pytest-specdec: the server at {url} answered /v1/loads badly "), said
