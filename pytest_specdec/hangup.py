"""After a hangup (SIGHUP: an ssh session dropped), this process's terminal output goes to a log.

SIGHUP ends the run as Ctrl-C does (servers/cleanup.py), and that ending writes: the progress
lines of the interrupted test, the summary, the notes of the report and the baselines. Once the
terminal is gone a write to it fails (EIO) and one to a terminal nobody reads can block; either
would break the ending before the report is written. So every descriptor of this process open on
the run's terminal is pointed at a log file instead, at the descriptor level: pytest's terminal
writer, `print`, faulthandler and the descriptors pytest's capture keeps to restore later all
refer to the terminal by number or by a dup of it, and all of them then land in the log.

A hung-up terminal answers no terminal ioctl (`isatty` is False by then), so the terminal is
noted while it still answers (`Terminal.of_this_process`) by its device number, which `fstat`
still gives after the hangup.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: The log's name in the run's artifacts folder.
LOG_NAME = "after-hangup.log"


@dataclass(frozen=True)
class Terminal:
    """The terminal this process writes its output to, and where that output goes after a hangup."""

    devices: frozenset[int]  # st_rdev of the terminal(s) behind stdout and stderr
    log: Path
    writer: object | None = None  # pytest's terminal writer, whose colours the log does without

    @classmethod
    def of_this_process(cls, log: Path, writer: object | None = None) -> Terminal | None:
        """The terminal behind stdout or stderr now, or None where neither is one (output to a
        file or a pipe has nothing to lose)."""
        devices = set()
        for fd in (1, 2):
            try:
                if os.isatty(fd):
                    devices.add(os.fstat(fd).st_rdev)
            except OSError:
                continue
        return cls(frozenset(devices), log, writer) if devices else None

    def detach(self, notice: str | None = None) -> Path:
        """Point every descriptor of this process open on the terminal at the log (at /dev/null
        where the log cannot be opened); returns where the output goes. `notice`, where given, is
        said on the terminal first if it takes it at once (a kill -HUP from elsewhere leaves the
        terminal there)."""
        fds = [fd for fd in _open_fds() if _device(fd) in self.devices]
        if notice is not None:
            for fd in fds:  # inside a test pytest's capture holds 1 and 2; its saved copies are the terminal
                if _say_without_blocking(fd, notice):
                    break
        if self.writer is not None:
            self.writer.hasmarkup = False
        target, where = _open_log(self.log)
        try:
            for fd in fds:
                try:
                    os.dup2(target, fd)
                except OSError:
                    continue
        finally:
            os.close(target)
        return where


def _open_fds() -> list[int]:
    """This process's open descriptors (Linux and macOS list them; elsewhere the first 256)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return sorted(int(name) for name in os.listdir(listing) if name.isdigit())
        except OSError:
            continue
    return list(range(256))


def _device(fd: int) -> int | None:
    """The device number of `fd` where it is a character device (a terminal, hung up or not)."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_rdev if stat.S_ISCHR(info.st_mode) else None


def _open_log(log: Path) -> tuple[int, Path]:
    """The log opened for appending (readable too: a read of stdin then ends, as on a hung-up
    terminal), or /dev/null where it cannot be made."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        return os.open(log, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644), log
    except OSError:
        return os.open(os.devnull, os.O_RDWR), Path(os.devnull)


def _say_without_blocking(fd: int, text: str) -> bool:
    """Write `text` to the terminal behind `fd` through a description of its own, non-blocking
    (setting O_NONBLOCK on `fd` would change it for the shell that shares it); False where it
    could not (hung up, full, or no /proc to reopen it through)."""
    try:
        own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        data = f"\n{text}\n".encode()
        return os.write(own, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(own)


def of_run(config: pytest.Config, run_id: str) -> Terminal | None:
    """This process's terminal, its output sent after a hangup to the run's artifacts folder
    (`run-<run_id>`, beside its servers' logs; the xdist controller and its workers share it)."""
    from .state import STATE_KEY

    state = config.stash[STATE_KEY]
    reporter = config.pluginmanager.get_plugin("terminalreporter")  # none in an xdist worker
    return Terminal.of_this_process(state.path(state.settings.artifacts) / f"run-{run_id}" / LOG_NAME,
                                    config.get_terminal_writer() if reporter is not None else None)


__all__ = ["LOG_NAME", "Terminal", "of_run"]
