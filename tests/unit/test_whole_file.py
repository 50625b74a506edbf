"""whole_file: a file is replaced whole or not at all, keeping its mode, leaving no temporary file."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import pytest

from pytest_specdec.whole_file import (
    is_temporary, remove_leftovers, replace_text, replace_with_copy, replacing_mode)


@pytest.fixture
def umask_022():
    mask = os.umask(0o022)
    yield
    os.umask(mask)


@pytest.fixture
def earlier(tmp_path: Path) -> Path:
    """A file with content and a mode of its own (group-readable, as a shared folder's)."""
    path = tmp_path / "data.json"
    path.write_text("earlier\n")
    path.chmod(0o640)
    return path


def _full_disk_write(self, text, *args, **kwargs):
    Path.write_bytes(self, text[:3].encode())  # what a full disk let through
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))


def _boom(*args, **kwargs):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def _interrupted(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("where, stand_in, raised", [
    ((Path, "write_text"), _full_disk_write, OSError),  # the bytes being written
    ((os, "fsync"), _boom, OSError),  # written, being flushed
    ((os, "fsync"), _interrupted, KeyboardInterrupt),  # Ctrl-C before the rename
    ((os, "replace"), _boom, OSError),  # the rename itself
])
def test_a_write_that_fails_leaves_the_earlier_file_whole_and_nothing_beside_it(
        earlier, monkeypatch, where, stand_in, raised):
    monkeypatch.setattr(*where, stand_in)
    with pytest.raises(raised):
        replace_text(earlier, "later\n", durable=True)
    monkeypatch.undo()
    assert earlier.read_text() == "earlier\n"
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o640
    assert [p.name for p in earlier.parent.iterdir()] == [earlier.name]


def test_the_error_is_the_os_own_unchanged(earlier, monkeypatch):
    """Callers name the file in their one-line messages from `strerror`: nothing is wrapped."""
    monkeypatch.setattr(Path, "write_text", _full_disk_write)
    with pytest.raises(OSError) as caught:
        replace_text(earlier, "later\n", durable=False)
    assert type(caught.value) is OSError and caught.value.errno == errno.ENOSPC
    assert caught.value.strerror == os.strerror(errno.ENOSPC)


def _refused_mkstemp(*, dir, prefix, suffix):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.path.join(dir, f"{prefix}x1y2{suffix}"))


@pytest.mark.parametrize("where, stand_in", [
    ((Path, "write_text"), _full_disk_write),  # the temporary file's bytes
    (("tempfile.mkstemp",), _refused_mkstemp),  # a folder that refuses new files
])
def test_the_error_names_the_file_replaced_not_its_hidden_temporary(earlier, monkeypatch, where, stand_in):
    """Callers name `filename` in their one-line messages: a random hidden name would tell the
    user nothing about which file the run could not write."""
    monkeypatch.setattr(*where, stand_in)
    with pytest.raises(OSError) as caught:
        replace_text(earlier, "later\n", durable=False)
    assert caught.value.filename == str(earlier)


def test_a_copy_cut_short_leaves_the_earlier_file_whole_and_nothing_beside_it(earlier, monkeypatch):
    source = earlier.parent / "source" / "new.jsonl"
    source.parent.mkdir()
    source.write_text("new line 1\nnew line 2\n")

    def cut_short(src, dst):
        Path(dst).write_text("new li")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfile", cut_short)
    with pytest.raises(OSError):
        replace_with_copy(earlier, source, durable=False)
    monkeypatch.undo()
    assert earlier.read_text() == "earlier\n"
    assert sorted(p.name for p in earlier.parent.iterdir()) == [earlier.name, "source"]
    replace_with_copy(earlier, source, durable=False)
    assert earlier.read_text() == source.read_text()
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o640


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umasks(earlier, umask_022):
    """mkstemp's private 0600 would hide a file of a shared folder from the group."""
    fresh = earlier.parent / "fresh.json"
    replace_text(earlier, "later\n", durable=True)
    replace_text(fresh, "new\n", durable=False)
    assert earlier.read_text() == "later\n" and fresh.read_text() == "new\n"
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o640
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
    assert replacing_mode(earlier.parent / "none-there") == 0o644
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["data.json", "fresh.json"]


@pytest.mark.parametrize("durable, synced", [(True, 2), (False, 0)])
def test_durable_fsyncs_the_file_and_its_folder_and_only_then(earlier, monkeypatch, durable, synced):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    replace_text(earlier, "later\n", durable=durable)
    assert len(calls) == synced
    assert earlier.read_text() == "later\n"


def test_a_folder_that_refuses_its_fsync_still_has_the_file(earlier, monkeypatch):
    """The rename happened: the file is the new one, and an fsync of the folder is only a bonus."""
    real = os.fsync
    seen = []

    def folder_refuses(fd):
        seen.append(fd)
        if len(seen) == 2:  # the file's went through; the folder's is refused
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(fd)

    monkeypatch.setattr(os, "fsync", folder_refuses)
    replace_text(earlier, "later\n", durable=True)
    assert earlier.read_text() == "later\n"


def test_temporary_names_are_told_from_the_folders_own_files(tmp_path, monkeypatch):
    names = []
    real = os.replace

    def seen(src, dst):
        names.append(Path(src).name)
        real(src, dst)

    monkeypatch.setattr(os, "replace", seen)
    replace_text(tmp_path / "shard.json", "{}\n", durable=False)
    assert len(names) == 1 and is_temporary(names[0]) and names[0].startswith(".shard.json.")
    for own in ("shard.json", "journal.jsonl", "journal.jsonl.run", ".cpu.json.lock", "gpu-leases.json",
                "journal.20250101-000000-000000.jsonl", ".tmp"):
        assert not is_temporary(own), own


def test_leftovers_of_a_killed_write_are_removed_and_no_other_files(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text("{}\n")
    torn = tmp_path / ".cpu.json.k1ll3d.tmp"
    other = tmp_path / ".other.json.k1ll3d.tmp"  # another file's: not this one's to remove
    for leftover in (torn, other):
        leftover.write_text("{")
    remove_leftovers(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "cpu.json"]



@pytest.mark.parametrize("replace", [
    lambda path, source: replace_text(path, "later\n", durable=True),
    lambda path, source: replace_with_copy(path, source, durable=True),
])
def test_a_read_only_file_is_replaced_as_the_folder_allows(earlier, monkeypatch, replace):
    """A file of mode 0444 (a baseline a user protected from edits) is replaced where its folder
    is writable, as a rename allows: the temporary file takes the file's mode only once filled,
    or its owner could not write it (root writes anyway, so the test watches the mode it is
    filled under)."""
    earlier.chmod(0o444)
    source = earlier.parent / "source.jsonl"
    source.write_text("later\n")
    modes = []
    write_text, copyfile = Path.write_text, shutil.copyfile

    def watched_write(self, *args, **kwargs):
        modes.append(stat.S_IMODE(self.stat().st_mode))
        return write_text(self, *args, **kwargs)

    def watched_copy(src, dst, *args, **kwargs):
        modes.append(stat.S_IMODE(Path(dst).stat().st_mode))
        return copyfile(src, dst, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", watched_write)
    monkeypatch.setattr(shutil, "copyfile", watched_copy)
    replace(earlier, source)
    assert len(modes) == 1 and modes[0] & stat.S_IWUSR, oct(modes[0])
    assert earlier.read_text() == "later\n"
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o444
