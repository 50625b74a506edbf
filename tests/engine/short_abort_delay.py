"""The embedded engine, its refused streams' abort task run 0.2 s after the stream rather than
SGLang's 2 s (inflight.STREAM_ABORT_DELAY_S, which the contract tests hold to SGLang's).

The duplicate-rid tests wait for that abort in each of their streamed cases: 2 s idle a case, and
none of them asserts on how long the task waits, only that it aborts the request holding the rid.
Usage as ``python -m pytest_specdec.engine``: ``python tests/engine/short_abort_delay.py FLAGS``.
"""

import runpy

from pytest_specdec.engine import inflight

inflight.STREAM_ABORT_DELAY_S = 0.2  # read at each schedule, so the engine's tasks take this one
runpy.run_module("pytest_specdec.engine", run_name="__main__", alter_sys=True)
