"""calibration: the server's CPU share during a workload, and what it does to timing figures."""

from __future__ import annotations

import os
import sys
import time

import pytest

from pytest_specdec.calibration import MIN_SHARE, Calibration, CpuWaitMeter
from pytest_specdec.metrics import summarize
from test_metrics import rec, result


def test_share_scales_rates_up_and_latencies_down():
    cal = Calibration(wall_s=2.0, wait_s=1.5, cpu_s=0.5)
    assert cal.share == 0.25
    assert cal.rate(100.0) == 400.0 and cal.duration(8.0) == 2.0
    assert Calibration(1.0, 1.0, 0.0).share == MIN_SHARE  # never a division by zero
    assert Calibration.from_json(cal.to_json()) == cal and Calibration.from_json(None) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_the_meter_finds_the_busiest_thread():
    meter = CpuWaitMeter(lambda: [os.getpid()])
    meter.start()
    started, cpu = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu < 0.2:
        pass  # this thread is the busiest of the process; CPU time, not wall time: a loaded host starves it
    wall = time.perf_counter() - started
    cal = meter.stop(wall)
    assert cal is not None and 0.15 < cal.cpu_s <= wall + 0.05 and 0 <= cal.wait_s <= wall


def test_no_readable_process_means_no_calibration():
    meter = CpuWaitMeter(lambda: [2 ** 22 + 12345])  # above Linux's pid limit: no such process
    meter.start()
    assert meter.stop(1.0) is None


def test_calibrated_figures_keep_their_value_and_carry_calibrated_samples():
    m = summarize(result(rec(0, tokens=100, e2e=1000.0, ttft=100.0), rec(1, tokens=100, e2e=500.0, ttft=50.0),
                         wall=1.5))
    plain = {f.name: f for f in m.metrics()}
    from dataclasses import replace

    calibrated = {f.name: f for f in replace(m, calibration=Calibration(1.5, 0.75, 0.5)).metrics()}
    for name in ("output_tok_s", "ttft_ms", "tpot_ms"):
        assert calibrated[name].value == plain[name].value and calibrated[name].cpu_share == 0.5
        assert plain[name].cpu_share is None
    assert calibrated["output_tok_s"].distribution == tuple(2 * s for s in plain["output_tok_s"].distribution)
    assert calibrated["ttft_ms"].distribution == (50.0, 25.0)
    # the rate samples are scaled so that their mean is the workload's output_tok_s
    assert sum(plain["output_tok_s"].distribution) / 2 == pytest.approx(m.output_tok_s)
