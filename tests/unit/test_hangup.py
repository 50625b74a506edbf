"""After a hangup the output bound for the terminal goes to a log (hangup.py): on a real
pseudo-terminal, hung up by closing its master as sshd does, in this process."""

from __future__ import annotations

import os
import pty
import select
import sys

import pytest

from pytest_specdec.hangup import Terminal

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminals as Linux has them")


@pytest.fixture
def terminal():
    """A pseudo-terminal's (master, slave); what is left open is closed at the end."""
    master, slave = pty.openpty()
    fds = [master, slave]
    yield fds
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def test_a_write_to_a_hung_up_terminal_fails_and_after_detach_lands_in_the_log(terminal, tmp_path):
    master, slave = terminal
    noted = Terminal(frozenset({os.fstat(slave).st_rdev}), tmp_path / "run" / "after-hangup.log")
    copy = os.dup(slave)  # as pytest's capture keeps one to restore later
    try:
        os.close(master)
        terminal.remove(master)
        with pytest.raises(OSError):
            os.write(slave, b"lost\n")
        assert noted.detach("no terminal to take this") == noted.log
        os.write(slave, b"kept\n")
        os.write(copy, b"kept too\n")
        assert noted.log.read_text() == "kept\nkept too\n"
        assert os.read(slave, 10) == b""  # a read ends, as on the hung-up terminal
    finally:
        os.close(copy)


def test_a_terminal_still_there_is_told_where_the_output_goes(terminal, tmp_path):
    master, slave = terminal
    noted = Terminal(frozenset({os.fstat(slave).st_rdev}), tmp_path / "after-hangup.log")
    saved = os.dup(2)
    try:
        os.dup2(slave, 2)
        noted.detach("specdec: the output goes to the log")
        os.write(2, b"after\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert select.select([master], [], [], 5)[0]
    assert b"specdec: the output goes to the log" in os.read(master, 4096)
    assert noted.log.read_text() == "after\n"


def test_a_log_that_cannot_be_made_sends_the_output_to_dev_null(terminal, tmp_path):
    master, slave = terminal
    (tmp_path / "file").write_text("")
    noted = Terminal(frozenset({os.fstat(slave).st_rdev}), tmp_path / "file" / "after-hangup.log")
    os.close(master)
    terminal.remove(master)
    assert str(noted.detach()) == os.devnull
    os.write(slave, b"gone\n")  # no error


def test_output_to_a_file_has_no_terminal_to_lose(tmp_path):
    saved = [os.dup(1), os.dup(2)]
    target = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        for fd in (1, 2):
            os.dup2(target, fd)
        assert Terminal.of_this_process(tmp_path / "log") is None
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(target)
