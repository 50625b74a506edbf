"""journal: durable appends, resume keys, torn lines after a crash, concurrent writers."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import warnings

import pytest

from pytest_specdec.journal import JOURNAL_VERSION, MEASURED, Journal, JournalWarning


def test_append_and_read_back(tmp_path):
    j = Journal(tmp_path / "sub" / "journal.jsonl")
    rec = j.append("ddtree-tp1-b16", "chat", {"output_tok_s": 812.4, "accept_length": 3.21})
    assert rec.key == ("ddtree-tp1-b16", "chat") and rec.pid == os.getpid() and rec.time
    j.append("dflash-tp1", "chat", {"output_tok_s": 700.0})
    got = j.records()
    assert [r.key for r in got] == [("ddtree-tp1-b16", "chat"), ("dflash-tp1", "chat")]
    assert got[0].data == {"output_tok_s": 812.4, "accept_length": 3.21}
    lines = (tmp_path / "sub" / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["v"] == JOURNAL_VERSION


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


def test_a_torn_line_is_said_once_after_the_run_appends_past_it(tmp_path):
    """A resumed run read the torn last line ("an incomplete last line"), appended after it, and
    read it again as "an unreadable line": two warnings, worded apart, of one damaged line."""
    path = tmp_path / "j.jsonl"
    Journal(path).append("a", "chat")
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"config_id": "b", "wor')
    said: set = set()
    with pytest.warns(JournalWarning) as first:
        Journal(path, said=said).done_keys()
    Journal(path, said=said).append("c", "chat")
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert Journal(path, said=said).done_keys() == {("a", "chat"), ("c", "chat")}
    assert [str(w.message) for w in first] == [f"{path}:2: skipped an incomplete last line (interrupted write)"]
    assert not [w for w in again if issubclass(w.category, JournalWarning)]


@pytest.mark.parametrize("junk", [b"not json\n", b"[1, 2]\n", b'{"workload": "chat"}\n', b'{"config_id": "a", "workload": "w", "pid": "x"}\n',
                                  # what json reads without a JSONDecodeError yet no record holds: a pid of 1e999
                                  # (int() overflows), nesting past the decoder's recursion limit
                                  b'{"v": 2, "config_id": "a", "workload": "w", "pid": 1e999}\n',
                                  b"[" * 100_000 + b"]" * 100_000 + b"\n"])
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


def test_measured_figures_are_done_only_once_marked(tmp_path):
    """Figures are journaled before their checks run: until the mark after the checks, a crash
    leaves them unchecked, and resume must measure them again."""
    j = Journal(tmp_path / "j.jsonl")
    measured = j.append("a", "chat", {"n": 1}, status=MEASURED, fingerprint="f1")
    assert j.done_keys() == set() and j.latest()[("a", "chat")].status == MEASURED
    j.mark_done(measured)
    [done] = j.done().values()
    assert (done.status, done.data, done.fingerprint) == ("done", {"n": 1}, "f1")
    assert [r.status for r in j.records()] == [MEASURED, "done"]
    assert j.records()[1].data == {}  # the mark is small: the figures stay on their own line
    again = j.append("a", "chat", {"n": 2}, status=MEASURED, fingerprint="f1")  # a rerun, unchecked
    assert j.done_keys() == set()
    j.mark_done(again)
    assert j.done()[("a", "chat")].data == {"n": 2}


def test_a_torn_done_mark_leaves_the_figures_unchecked(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.mark_done(j.append("a", "chat", {"n": 1}, status=MEASURED))
    j.append("b", "chat", {"n": 2}, status=MEASURED)
    whole = path.read_bytes()
    j.mark_done(j.records()[-1])
    mark = path.read_bytes()[len(whole):]
    path.write_bytes(whole + mark[:len(mark) // 2])  # the crash tore the mark's write
    with pytest.warns(JournalWarning, match=r"j\.jsonl:4: skipped an incomplete last line"):
        latest = j.latest()
    assert latest[("b", "chat")].status == MEASURED
    with pytest.warns(JournalWarning):
        assert j.done_keys() == {("a", "chat")}


def test_a_done_mark_confirms_only_the_figures_it_names(tmp_path):
    """A mark whose figures' line was damaged (or edited) must not pass an older record of its
    test, nor the edited figures."""
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat", {"n": 1}, status=MEASURED)  # an attempt whose checks never finished
    second = j.append("a", "chat", {"n": 2}, status=MEASURED)
    j.mark_done(second)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", lines[2]]) + "\n")
    damaged = []
    assert j.latest(damaged)[("a", "chat")].data == {"n": 1}
    assert [(d.lineno, d.what) for d in damaged] == [
        (2, "an unreadable line (Expecting value: line 1 column 1 (char 0))"),
        (3, "a 'done' mark whose figures are not its test's last readable record (a damaged line?)")]
    path.write_text("\n".join([lines[0], lines[1].replace('"n": 2', '"n": 3'), lines[2]]) + "\n")
    with pytest.warns(JournalWarning, match=r"j\.jsonl:3: skipped a 'done' mark"):
        assert j.done_keys() == set()


def test_only_measured_figures_appended_here_can_be_marked_done(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    with pytest.raises(ValueError, match="only a 'measured' record"):
        j.mark_done(j.append("a", "chat", status="failed"))


def test_a_version_1_journal_reads_as_it_was_written(tmp_path):
    """Version 1 wrote `done` with the figures: such a record still means done, and a failure
    after it still means measure again."""
    path = tmp_path / "j.jsonl"
    base = {"v": 1, "workload": "chat", "time": "t", "pid": 1, "fingerprint": "f"}
    lines = [{**base, "config_id": "a", "status": "done", "data": {"n": 1}},
             {**base, "config_id": "b", "status": "done", "data": {"n": 2}},
             {**base, "config_id": "b", "status": "failed-checks", "data": {"n": 2}}]
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    j = Journal(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        done = j.done()
    assert list(done) == [("a", "chat")] and done[("a", "chat")].data == {"n": 1}
    j.mark_done(j.append("b", "chat", {"n": 3}, status=MEASURED))  # a resumed run appends version 2
    assert j.done()[("b", "chat")].data == {"n": 3}


def test_a_shared_cache_parses_each_whole_line_once(tmp_path):
    # a resumed run judges each test against the journal, a measuring one reads it after each test
    from pytest_specdec.journal import LatestCache

    path, cache = tmp_path / "j.jsonl", LatestCache()
    writer = Journal(path)
    for n in range(5):
        writer.append(f"t{n}", "chat", {"n": n})
    for _ in range(3):
        assert Journal(path, cache=cache).latest() == writer.latest()
    assert cache.parsed_lines == 5
    measured = writer.append("t5", "chat", {"n": 5}, status=MEASURED)
    writer.mark_done(measured)
    assert Journal(path, cache=cache).latest() == writer.latest()
    assert cache.parsed_lines == 7


def test_a_run_reads_its_own_appends_without_reading_the_journal_again(tmp_path, monkeypatch):
    """A measuring run appends each test's figures and mark, and reads the journal after each
    test: its own append had changed the file's size and time, so each reading read and hashed
    the whole file again, a run's cost growing as tests times journal size. The lines it appends
    to the file it read last are folded into its cache as they are written."""
    import builtins

    from pytest_specdec import journal as journal_module
    from pytest_specdec.journal import LatestCache

    path, cache = tmp_path / "j.jsonl", LatestCache()
    for n in range(50):
        Journal(path).append(f"old{n}", "chat", {"workload": "chat", "n": n})
    before = path.stat().st_size
    read = []

    class Counted:
        def __init__(self, fh):
            self._fh = fh

        def __getattr__(self, name):
            return getattr(self._fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._fh.close()

        def read(self, *size):
            data = self._fh.read(*size)
            read.append(len(data))
            return data

    monkeypatch.setattr(journal_module, "open", lambda *a, **kw: Counted(builtins.open(*a, **kw)), raising=False)
    run = Journal(path, said=set(), cache=cache)
    assert run.latest_of("chat") == list(Journal(path).latest().values())
    for n in range(100):
        run.mark_done(run.append(f"t{n}", "chat", {"workload": "chat", "n": n}, status=MEASURED))
        assert Journal(path, said=set(), cache=cache).latest_of("chat") == list(Journal(path).latest().values())
    assert cache.parsed_lines == 50 + 2 * 100  # each line parsed once
    # the journal's first lines read once, the run's own never (a byte a write: is the last line whole?)
    assert sum(read) <= before + 2 * 100 < path.stat().st_size, (sum(read), before)


def test_a_run_whose_journal_another_changed_between_its_appends_reads_it_again(tmp_path, monkeypatch):
    """Its own lines are folded in only where the file is, up to them, what the run read last:
    after another writer's line (before the run's or, unlocked, right after it), a rewrite of the
    same size or a torn line, the run's next reading reads what it must, as a fresh one does."""
    from pytest_specdec import journal as journal_module
    from pytest_specdec.journal import LatestCache

    path, cache = tmp_path / "j.jsonl", LatestCache()
    run, other = Journal(path, said=set(), cache=cache), Journal(path)

    def same() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # the torn line's, said by the tests above
            assert Journal(path, said=set(), cache=cache).latest() == Journal(path).latest()

    run.append("a", "chat", {"n": 1})
    same()
    other.append("b", "chat", {"n": 2})  # another worker's line before the run's
    run.append("c", "chat", {"n": 3})
    same()
    stat = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"n": 1', b'"n": 7'))  # rewritten in place, same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # its time moved on, however coarse the clock
    run.append("d", "chat", {"n": 4})
    same()
    assert Journal(path, cache=cache).latest()[("a", "chat")].data == {"n": 7}
    with open(path, "ab") as fh:  # a crash in the middle of another's write
        fh.write(b'{"config_id": "e", "workload": "ch')
    run.append("f", "chat", {"n": 5})
    same()
    with open(path, "ab") as fh:  # torn after the run read it
        fh.write(b'{"config_id": "g", "workload": "ch')
    same()
    run.append("h", "chat", {"n": 6})
    same()
    unlocked = json.dumps({"v": 2, "config_id": "i", "workload": "chat", "data": {"n": 9}}).encode() + b"\n"
    real = journal_module.append_whole

    def and_another(fd, data, *, sync=False):  # a writer that takes no lock, just after the run's write
        real(fd, data, sync=sync)
        with open(path, "ab") as fh:
            fh.write(unlocked)

    monkeypatch.setattr(journal_module, "append_whole", and_another)
    run.append("j", "chat", {"n": 10})
    same()
    assert set(Journal(path, cache=cache).latest()) == {(k, "chat") for k in "abcdfhij"}


@pytest.mark.parametrize("own", [False, True], ids=["another-writer", "the-run-writes"])
def test_a_cached_reading_is_a_fresh_reading_through_tears_rewrites_and_rotation(tmp_path, own):
    from pytest_specdec.journal import LatestCache

    path, cache = tmp_path / "j.jsonl", LatestCache()
    said: set = set()
    writer = Journal(path, said=said, cache=cache) if own else Journal(path)

    def same() -> None:
        with warnings.catch_warnings(record=True) as fresh_warned:
            warnings.simplefilter("always")
            fresh = Journal(path).latest()
        with warnings.catch_warnings(record=True) as cached_warned:
            warnings.simplefilter("always")
            cached = Journal(path, said=said, cache=cache).latest()
        assert cached == fresh
        assert {str(w.message) for w in cached_warned} <= {str(w.message) for w in fresh_warned}

    writer.append("a", "chat", {"n": 1})
    same()
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"config_id": "b", "workload": "ch')
    same()
    measured = writer.append("b", "chat", {"n": 2}, status=MEASURED)  # starts a fresh line
    same()
    writer.mark_done(measured)
    same()
    stat = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"n": 1', b'"n": 7'))  # rewritten in place, same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # its time moved on, however coarse the clock
    same()
    path.rename(tmp_path / "j.old.jsonl")  # rotated: a new journal at the path
    same()
    writer.append("c", "chat", {"n": 3})
    same()
    assert set(Journal(path, cache=cache).latest()) == {("c", "chat")}


def test_a_workloads_records_are_those_of_a_fresh_reading_in_its_order(tmp_path):
    """`latest_of` answers from an index kept with the cache as lines are read on: through
    appends, a mark, a record whose figures moved to another workload, a torn last line and a
    rotation it must give what filtering a fresh `latest()` gives, in the same order."""
    from pytest_specdec.journal import LatestCache

    path, cache = tmp_path / "j.jsonl", LatestCache()
    writer = Journal(path)

    def same() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # the torn line's, said by test_journal's others
            fresh = list(Journal(path).latest().values())
            for workload in ("chat", "code", None, "nowhere"):
                cached = Journal(path, said=set(), cache=cache).latest_of(workload)
                assert cached == [r for r in fresh if r.data.get("workload") == workload]

    assert Journal(path, cache=cache).latest_of("chat") == []
    # "h": figures whose workload is a list, as only an edited line has them
    for name, workload in (("a", "chat"), ("b", "code"), ("c", "chat"), ("d", None), ("h", ["chat"])):
        writer.append(name, workload if isinstance(workload, str) else "-", {"workload": workload, "n": 1})
    same()
    measured = writer.append("e", "code", {"workload": "code", "n": 2}, status=MEASURED)
    same()
    writer.mark_done(measured)
    writer.append("a", "chat", {"workload": "chat", "n": 3})  # measured again: keeps its place
    same()
    assert [r.config_id for r in Journal(path, cache=cache).latest_of("chat")] == ["a", "c"]
    writer.append("c", "chat", {"workload": "code", "n": 4})  # figures of another workload (edited)
    same()
    assert [r.config_id for r in Journal(path, cache=cache).latest_of("code")] == ["b", "c", "e"]
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"config_id": "f", "workload": "ch')
    same()
    writer.append("f", "chat", {"workload": "chat", "n": 5})
    same()
    path.rename(tmp_path / "j.old.jsonl")  # rotated: a new journal at the path
    same()
    writer.append("g", "chat", {"workload": "chat", "n": 6})
    same()
    assert [r.config_id for r in Journal(path, cache=cache).latest_of("chat")] == ["g"]


def test_a_line_of_damaged_bytes_is_named_as_not_utf8_not_as_another_codec(tmp_path):
    """A crash can leave NUL blocks or stray bytes in the journal, a UTF-8 file: the skip says
    so, rather than the UTF-16 or UTF-32 error json's guess of the encoding from NUL bytes gave."""
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append("a", "chat", {"n": 1})
    good = path.read_bytes()
    path.write_bytes(good + b"\x00\x00\x00\x00" + good[4:] + good[:-8] + b"\xff" + good[-7:])
    damaged = []
    assert j.latest(damaged)[("a", "chat")].data == {"n": 1}
    whats = [(d.lineno, d.what) for d in damaged]
    assert [lineno for lineno, _ in whats] == [2, 3], whats
    assert not any("utf-16" in what or "utf-32" in what for _, what in whats), whats
    assert "not UTF-8 text (byte 0xff)" in whats[1][1], whats
