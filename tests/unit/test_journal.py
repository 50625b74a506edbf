"""journal: durable appends, resume keys, torn lines after a crash, concurrent writers."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import warnings

import pytest

from pytest_specdec.journal import Journal, JournalWarning


def test_append_and_read_back(tmp_path):
    j = Journal(tmp_path / "sub" / "journal.jsonl")
    rec = j.append("ddtree-tp1-b16", "chat", {"output_tok_s": 812.4, "accept_length": 3.21})
    assert rec.key == ("ddtree-tp1-b16", "chat") and rec.pid == os.getpid() and rec.time
    j.append("dflash-tp1", "chat", {"output_tok_s": 700.0})
    got = j.records()
    assert [r.key for r in got] == [("ddtree-tp1-b16", "chat"), ("dflash-tp1", "chat")]
    assert got[0].data == {"output_tok_s": 812.4, "accept_length": 3.21}
    lines = (tmp_path / "sub" / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["v"] == 1


def test_every_append_is_fsynced(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    j = Journal(tmp_path / "j.jsonl")
    j.append("a", "chat")
    first = len(calls)
    assert first >= 1  # file (and the directory, on creation)
    j.append("b", "chat")
    assert len(calls) == first + 1


def test_missing_journal_is_empty(tmp_path):
    j = Journal(tmp_path / "none.jsonl")
    assert j.records() == [] and j.done_keys() == set() and j.latest() == {}


def test_done_keys_only_count_finished_measurements(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append("ddtree-tp1-b8", "chat", status="failed", data={"reason": "CUDA error"})
    j.append("ddtree-tp1-b16", "chat")
    j.append("ddtree-tp1-b16", "code")
    assert j.done_keys() == {("ddtree-tp1-b16", "chat"), ("ddtree-tp1-b16", "code")}


def test_latest_counts_a_key_once_and_most_recent_wins(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append("x", "chat", {"v": 1})
    j.append("x", "chat", {"v": 2})
    j.append("y", "chat", {"v": 3})
    j.append("y", "chat", status="failed")
    latest = j.latest()
    assert len(latest) == 2
    assert latest[("x", "chat")].data == {"v": 2}
    assert latest[("y", "chat")].status == "failed"


def test_torn_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat", {"n": 1})
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"config_id": "b", "workload": "ch')
    with pytest.warns(JournalWarning, match=r"j\.jsonl:2: skipped an incomplete last line"):
        keys = j.done_keys()
    assert keys == {("a", "chat")}


def test_append_after_a_torn_line_starts_a_fresh_line(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat")
    with open(path, "ab") as fh:
        fh.write(b'{"config_id": "b", "wor')
    j.append("c", "chat")
    with pytest.warns(JournalWarning, match="j.jsonl:2: skipped an unreadable line"):
        keys = j.done_keys()
    assert keys == {("a", "chat"), ("c", "chat")}


@pytest.mark.parametrize("junk", [b"not json\n", b"[1, 2]\n", b'{"workload": "chat"}\n', b'{"config_id": "a", "workload": "w", "pid": "x"}\n'])
def test_unreadable_middle_lines_are_skipped_never_raise(tmp_path, junk):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat")
    with open(path, "ab") as fh:
        fh.write(junk)
    j.append("b", "chat")
    with pytest.warns(JournalWarning):
        assert j.done_keys() == {("a", "chat"), ("b", "chat")}


@pytest.mark.parametrize("line, why", [
    (b'{"v": 99, "config_id": "x", "workload": "chat"}\n', "journal version 99"),
    (b'{"config_id": "x", "workload": "chat"}\n', "journal version None"),
    (b'{"v": 1, "config_id": "x", "workload": "chat", "data": [1]}\n', "its data is not an object"),
])
def test_records_of_another_version_or_shape_are_skipped_with_a_warning(tmp_path, line, why):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat")
    with open(path, "ab") as fh:
        fh.write(line)
    with pytest.warns(JournalWarning, match=rf"j\.jsonl:2: skipped an unreadable line \({why}"):
        assert j.done_keys() == {("a", "chat")}


def test_intact_journal_reads_without_warnings(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append("a", "chat")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert j.done_keys() == {("a", "chat")}


def test_unserialisable_data_fails_before_touching_the_file(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat")
    before = path.read_bytes()
    with pytest.raises(TypeError):
        j.append("b", "chat", {"obj": object()})
    with pytest.raises(ValueError):
        j.append("b", "chat", {"x": float("nan")})
    with pytest.raises(ValueError, match="config id"):
        j.append("", "chat")
    assert path.read_bytes() == before


def test_an_append_that_fails_midway_leaves_no_part_of_its_record(tmp_path, monkeypatch):
    """A full disk wrote part of a record and raised: the journal kept a torn line in its middle,
    which every later read warned about. Now the record is whole or absent."""
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat")
    before = path.read_bytes()
    real_write = os.write

    def full_after_ten_bytes(fd, data):
        real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_after_ten_bytes)
    with pytest.raises(OSError, match="No space left"):
        j.append("b", "chat", {"x": 1})
    monkeypatch.undo()
    assert path.read_bytes() == before
    j.append("c", "chat")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.config_id for r in j.records()] == ["a", "c"]


def _append_many(path: str, worker: int, n: int) -> None:
    j = Journal(path)
    for i in range(n):
        j.append(f"cfg{worker}-{i}", "chat", {"payload": "x" * (100 * (i % 7))})


def test_concurrent_appenders_interleave_whole_lines(tmp_path):
    path = str(tmp_path / "j.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = Journal(path).records()
    assert len(records) == 160
    assert Journal(path).done_keys() == {(f"cfg{w}-{i}", "chat") for w in range(4) for i in range(40)}
