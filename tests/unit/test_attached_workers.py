"""Workers of one run on one attached server (`--specdec-server-url`): nothing is launched, so no GPU
lease keeps two workers apart, yet each worker's workload would read the other's as another
client's load (sharing.py) and fail both tests as shared. The attached server's measurement lease
(servers/attach_lease.py) lets one worker measure on it at a time."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")

from test_bench_flow import attached_engine, project, run  # noqa: E402  (needs torch)

WORKLOADS = "".join(f"""
[[tool.specdec.workloads]]
name = "w{i}"
prompts = "chat"
num_prompts = 8
max_new_tokens = 64
concurrency = 2
""" for i in (1, 2, 3, 4))


def test_two_workers_on_one_attached_server_measure_one_at_a_time(pytester):
    """`--dist load`, which a user may keep in addopts, splits one configuration's workloads
    across the workers: each is measured alone on the server, none shared."""
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto", extra="")
        text = (pytester.path / "pyproject.toml").read_text()
        start = text.index("[[tool.specdec.workloads]]")
        end = text.index("[tool.specdec.engine]")
        (pytester.path / "pyproject.toml").write_text(text[:start] + WORKLOADS + "\n" + text[end:])
        result = run(pytester, f"--specdec-server-url={url}", "-n", "2", "--dist", "load")
    out = result.stdout.str()
    assert "was shared while" not in out and "did not flush" not in out, out[-4000:]
    result.assert_outcomes(passed=4)
    said = result.stderr.str()
    assert "[gw0] server ddtree-tp1-b8: workload" in said and "[gw1] server ddtree-tp1-b8: workload" in said, said


def test_the_lease_waits_says_its_wait_once_and_names_the_holder_when_it_gives_up(tmp_path, monkeypatch):
    from pytest_specdec.servers import attach_lease
    from pytest_specdec.servers.attach_lease import AttachedLease, AttachedLeaseError

    monkeypatch.setattr(attach_lease, "QUIET_S", 0.2)
    url = "http://gpu-box:30000/"
    holder = AttachedLease(tmp_path, url, timeout=5, setting="--specdec-gpu-wait-timeout")
    holder.acquire("test_a[w1]")
    said: list[str] = []
    waiter = AttachedLease(tmp_path, url, timeout=0.5, setting="--specdec-gpu-wait-timeout", announce=said.append)
    with pytest.raises(AttachedLeaseError) as info:
        waiter.acquire("test_b[w2]")
    assert str(info.value).startswith("test_b[w2] waited 0.5s for the attached server http://gpu-box:30000, which "
                                      f"another worker of this run measures on (pid {os.getpid()}, test_a[w1], since ")
    assert str(info.value).endswith("); raise --specdec-gpu-wait-timeout to wait longer")
    assert len(said) == 1 and said[0].startswith("test_b[w2] waits for the attached server http://gpu-box:30000: "
                                                 f"another worker of this run measures on it (pid {os.getpid()}, "
                                                 "test_a[w1], since "), said
    holder.release()
    waiter.acquire("test_b[w2]")  # free once released; a failed wait held nothing
    other = AttachedLease(tmp_path, "http://other-box:30000", timeout=0.1, setting="x")
    other.acquire("test_c")  # another URL is another server
    waiter.release(), other.release()
