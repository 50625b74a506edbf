"""A run reads its journal once per line, however many tests it judges against it."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_specdec import session
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.fingerprint import measured_setup
from pytest_specdec.result import Result
from pytest_specdec.state import build

PYPROJECT = """
[tool.specdec]
backend = "embedded"
[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
budget = [8]
[[tool.specdec.workloads]]
name = "chat"
num_prompts = 2
max_new_tokens = 8
"""


def _journal_cases(state, cases, time=1.0):
    journal = session.journal_for(state)
    for case in cases:
        nodeid = f"tests/test_x.py::test_x[{case.param_id}-chat]"
        data = {"test_id": f"test_x[{case.param_id}-chat]", "nodeid": nodeid, "family": case.family,
                "method": case.method, "tp": case.tp, "budget": case.budget, "workload": "chat", "time": time}
        journal.mark_done(journal.append(nodeid, "chat", data, status="measured",
                                         fingerprint=measured_setup(case, "chat", state).digest))


def test_each_journal_line_is_parsed_and_read_into_a_result_once_per_run(tmp_path, monkeypatch):
    """A resumed run judges each resumed test against the journal, and a measuring run each test
    it measured: each of those readings parsed every line and every record's figures again, so a
    journal of thousands of records took minutes per thousand tests."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    state = build(tmp_path, {}, {})
    cases = [MatrixCase("cpu", "ar", 1, None), MatrixCase("cpu", "ddtree", 1, 8)]
    _journal_cases(state, cases)
    read = []
    original = Result.from_json.__func__
    monkeypatch.setattr(Result, "from_json",
                        classmethod(lambda cls, obj, **kw: read.append(obj["test_id"]) or original(cls, obj, **kw)))
    wanted = SimpleNamespace(workload="chat")
    first = session._journaled(wanted, state, frozenset())
    for _ in range(4):
        assert session._journaled(wanted, state, frozenset()) == first
    assert [other.case for other in first[0]] == cases
    assert sorted(read) == ["test_x[ar-tp1-chat]", "test_x[ddtree-tp1-b8-chat]"]
    assert state.journal_read.parsed_lines == 4  # two records, each with its done mark

    _journal_cases(state, [MatrixCase("cpu", "ddtree", 1, 8)], time=2.0)  # measured again: read on from there
    again = session._journaled(wanted, state, frozenset())
    assert [other.case for other in again[0]] == cases
    assert state.journal_read.parsed_lines == 6
    assert [other.time for other in again[0]] == [1.0, 2.0]
    assert len(read) == 3
    replaced = frozenset({again[1][again[0][0].nodeid].digest})
    assert session._journaled(wanted, state, replaced)[0] == [again[0][1]]  # left out, as before


def test_a_judged_test_reads_only_its_workloads_records(tmp_path, monkeypatch):
    """session._journaled went through every latest record of the journal for each test it
    judged, to keep those of the test's workload: with thousands of records and thousands of
    resumed tests, a quadratic count of records looked at. It now takes its workload's records
    from an index kept with the journal's cache."""
    from pytest_specdec.journal import Journal

    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    state = build(tmp_path, {}, {})
    journal = session.journal_for(state)
    workloads = [f"w{i}" for i in range(10)]
    for workload in workloads:
        for case in (MatrixCase("cpu", "ar", 1, None), MatrixCase("cpu", "ddtree", 1, 8)):
            nodeid = f"tests/test_x.py::test_x[{case.param_id}-{workload}]"
            journal.append(nodeid, workload, {"nodeid": nodeid, "workload": workload}, status="done")
    handed = []
    for name in ("latest", "latest_of"):
        original = getattr(Journal, name, None)
        if original is not None:
            def counting(self, *args, _original=original, **kwargs):
                out = _original(self, *args, **kwargs)
                handed.append(len(out))
                return out

            monkeypatch.setattr(Journal, name, counting)
    for workload in workloads:
        for _ in range(3):
            session._journaled(SimpleNamespace(workload=workload), state, frozenset())
    assert 0 < sum(handed) <= 3 * len(workloads) * 2  # each reading its own workload's two records
