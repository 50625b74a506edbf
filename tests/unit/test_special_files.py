"""Inputs that are no regular file: a named pipe (a FIFO, or bash's `<(command)`, /dev/fd/N) blocked
each reader's open() until a writer came, and is read once only; a device reads endless or empty.
Each reader refuses them as a usage error naming the path, what it is and the fix.

The `fifo` fixture releases a reader that opens the pipe (as the old code did): it opens the write
end as soon as a reader waits and closes it, so the reader reads nothing and the test fails rather
than hangs."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from pytest_specdec import (baselines, config, durations, file_kind, journal, journal_owner, models, run_paths,
                            shard_dir, workloads)
from pytest_specdec.errors import SpecdecUsageError

PIPE = r"is a named pipe \(FIFO\), not a regular file"


def _release(path, stop: threading.Event) -> None:
    while not stop.wait(0.02):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # succeeds only while a reader waits
        except OSError as exc:
            if exc.errno not in (errno.ENXIO, errno.ENOENT):
                raise


@pytest.fixture
def fifo(tmp_path):
    """Makes a named pipe at a path and releases any reader of it while the test runs."""
    made, stop, threads = [], threading.Event(), []

    def make(path):
        os.mkfifo(path)
        thread = threading.Thread(target=_release, args=(path, stop), daemon=True)
        thread.start()
        made.append(path)
        threads.append(thread)
        return path

    yield make
    stop.set()
    for thread in threads:
        thread.join()


def test_special_names_what_stands_at_a_path(tmp_path, fifo):
    (tmp_path / "file").write_text("x")
    assert file_kind.special(fifo(tmp_path / "p")) == "a named pipe (FIFO)"
    assert file_kind.special(os.devnull) == "a character device"
    assert [file_kind.special(p) for p in (tmp_path / "file", tmp_path, tmp_path / "absent")] == [None] * 3
    assert file_kind.no_file(tmp_path / "p") == "a named pipe (FIFO)"


def test_a_workload_file_that_is_a_pipe_is_refused_with_the_fix(tmp_path, fifo):
    path = fifo(tmp_path / "prompts.jsonl")
    with pytest.raises(SpecdecUsageError, match=rf"^workload file {path} {PIPE}: reading it waits for a "
                                                r"writer .*; write its content to a file"):
        workloads.load_jsonl(path)


def test_a_process_substitution_path_is_refused_though_it_holds_prompts(tmp_path):
    """bash's <(gen_prompts) is /dev/fd/N: the main process could read it once, an xdist worker
    (which does not inherit the descriptor) not at all."""
    read, write = os.pipe()
    try:
        os.write(write, b'{"prompt": "hi"}\n')
        os.close(write)
        with pytest.raises(SpecdecUsageError, match=rf"^workload file /dev/fd/{read} is a named pipe "
                                                    r"\(FIFO\), a descriptor of the process reading it"):
            workloads.load_jsonl(f"/dev/fd/{read}")
    finally:
        os.close(read)


def test_a_device_as_workload_file_is_refused():
    with pytest.raises(SpecdecUsageError, match=r"^workload file /dev/null is a character device, not a "
                                                r"regular file: .*endless or empty"):
        workloads.load_jsonl(os.devnull)


def test_prompts_in_the_settings_that_name_a_pipe_are_refused_with_the_fix(tmp_path, fifo):
    fifo(tmp_path / "p.jsonl")
    (tmp_path / "specdec.toml").write_text('[[workloads]]\nprompts = "p.jsonl"\n')
    with pytest.raises(SpecdecUsageError, match=rf"{tmp_path / 'p.jsonl'} {PIPE}; write the prompts to a "
                                                r"JSONL file"):
        config.load(tmp_path)


def test_a_settings_file_that_is_a_pipe_is_named_so(tmp_path, fifo):
    fifo(tmp_path / "specdec.toml")
    with pytest.raises(SpecdecUsageError, match=r"specdec.toml is a named pipe \(FIFO\), not a settings file"):
        config.load(tmp_path)


def test_a_known_issues_file_that_is_a_pipe_is_named_so(tmp_path, fifo):
    path = fifo(tmp_path / "known_issues.toml")
    with pytest.raises(SpecdecUsageError, match=r"is a named pipe \(FIFO\), not a TOML file"):
        config.load_known_issues(path)


def test_a_baseline_file_that_is_a_pipe_is_refused(tmp_path, fifo):
    path = fifo(tmp_path / "cpu.json")
    with pytest.raises(SpecdecUsageError, match=rf"^baseline file {path} {PIPE}"):
        baselines.load_baselines(path, "cpu")


def test_a_durations_file_that_is_a_pipe_is_refused(tmp_path, fifo):
    path = fifo(tmp_path / "durations.json")
    with pytest.raises(SpecdecUsageError, match=rf"^durations file {path} {PIPE}"):
        durations.load(path)


def test_a_shard_manifest_that_is_a_pipe_is_refused(tmp_path, fifo):
    path = fifo(tmp_path / shard_dir.MANIFEST)
    with pytest.raises(SpecdecUsageError, match=rf"^shard manifest {path} {PIPE}"):
        shard_dir.read(tmp_path)


def test_a_model_manifest_that_is_a_pipe_is_refused_with_its_own_fix(tmp_path, fifo):
    path = fifo(tmp_path / models.MANIFEST)
    with pytest.raises(SpecdecUsageError, match=rf"^model manifest {path} {PIPE}: .*; remove it"):
        models.check_complete(tmp_path)


def test_a_run_marker_that_is_a_pipe_is_refused(tmp_path, fifo):
    marker = fifo(journal_owner.marker_of(tmp_path / "journal.jsonl"))
    with pytest.raises(SpecdecUsageError, match=rf"run marker {marker} {PIPE}: .*; remove it"):
        journal_owner.owner(marker)


def test_a_journal_that_is_a_pipe_is_refused_before_the_run(tmp_path, fifo):
    path = fifo(tmp_path / "journal.jsonl")
    with pytest.raises(SpecdecUsageError, match=rf"results journal \(--specdec-journal\) {path} {PIPE}: "
                                                r".*give a file path"):
        run_paths.check(path, "--specdec-journal", tmp_path / "artifacts", "--specdec-artifacts")


@pytest.mark.parametrize("read", ["records", "latest"])
def test_a_journal_read_back_that_is_a_pipe_is_refused(tmp_path, fifo, read):
    """A merge reads each shard folder's journal; a resumed run its own."""
    path = fifo(tmp_path / "journal.jsonl")
    with pytest.raises(SpecdecUsageError, match=rf"^results journal {path} {PIPE}"):
        getattr(journal.Journal(path), read)()


def test_a_regular_file_reached_through_a_descriptor_path_is_read(tmp_path):
    """`3< prompts.jsonl` with /dev/fd/3, or /proc/self/fd/3: a regular file, read as one."""
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        for name in (f"/dev/fd/{fd}", f"/proc/self/fd/{fd}"):
            assert file_kind.special(name) is None
            assert len(workloads.load_jsonl(name).prompts) == 1
    finally:
        os.close(fd)


def test_a_regular_file_through_a_link_or_relative_to_the_project_root_is_read(tmp_path, monkeypatch):
    """Each reader checks the path it opens: a link is followed, and the settings' relative
    prompts path is the project root's, whatever the current folder holds at that name."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "data" / "p.jsonl")
    (tmp_path / "specdec.toml").write_text('[[workloads]]\nname = "a"\nprompts = "link.jsonl"\n'
                                           '[[workloads]]\nname = "b"\nprompts = "data/p.jsonl"\n')
    elsewhere = tmp_path / "cwd"
    (elsewhere / "data").mkdir(parents=True)
    os.mkfifo(elsewhere / "data" / "p.jsonl")  # the current folder's, never opened
    os.symlink(os.devnull, elsewhere / "link.jsonl")
    monkeypatch.chdir(elsewhere)
    loaded = config.load(tmp_path)
    assert [w.prompts for w in loaded.workloads] == [str(tmp_path / "link.jsonl"), str(tmp_path / "data" / "p.jsonl")]
    for spec in loaded.workloads:
        assert len(workloads.load_jsonl(spec.prompts).prompts) == 1


def test_stdin_replaced_by_pytest_is_named_as_a_descriptor_not_the_file_given():
    """`prompts = "/dev/stdin"` run as `pytest < prompts.jsonl`: pytest's capture has put /dev/null
    at descriptor 0, so the error said '/dev/stdin is a character device' of a regular file."""
    stdin_null = os.open(os.devnull, os.O_RDONLY)
    saved = os.dup(0)
    os.dup2(stdin_null, 0)  # as pytest's capture does while the settings are read
    try:
        with pytest.raises(SpecdecUsageError, match=r"^workload file /dev/stdin is a character device, a "
                                                    r"descriptor of the process reading it \(pytest puts "
                                                    r"/dev/null at its standard input"):
            workloads.load_jsonl("/dev/stdin")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(stdin_null)
