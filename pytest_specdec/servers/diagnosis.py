"""Reading a server's log for the reason it failed, and the one error type that carries it.

A measurement that did not happen must say why. SGLang (and the embedded engine, which imitates it)
often keeps the HTTP process alive for a moment after a scheduler crashes, and exit codes say little
(-9, 1), so the cause comes from the log: the most specific line that matches a known fatal
signature (or, for a line that only opens a traceback, the exception that closes it).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

from pytest_specdec.sglang_api import FATAL_SIGNATURES, HANG_SIGNATURES, READY_LINE

_FATAL_RE = re.compile("|".join(re.escape(s) for s in FATAL_SIGNATURES), re.IGNORECASE)
_SIGNATURE_RES = tuple(re.compile(re.escape(s), re.IGNORECASE) for s in FATAL_SIGNATURES)
# Errno 98 (Linux) / 48 (macOS), as printed by asyncio, uvicorn and aiohttp.
_ADDRESS_IN_USE_RE = re.compile(r"address already in use", re.IGNORECASE)
# asyncio (aiohttp, uvicorn): "error while attempting to bind on address ('127.0.0.1', 30000)"
_BIND_ADDRESS_RE = re.compile(r"\('([^']*)',\s*(\d+)\)")
# argparse's refusal before it exits 2: "sglang serve: error: unrecognized arguments: --flag 8"
_USAGE_ERROR_RE = re.compile(r"^\S[^:]*: error: .+")

TAIL_LINES = 15
# The plugin's own first line in a server log, naming the command; not the server's words.
COMMAND_LINE_PREFIX = "# specdec: "
_TAIL_BYTES = 64 * 1024


_TRACEBACK = "Traceback (most recent call last):"
# Terminal colour codes: Python 3.13 colours a traceback written to a file where FORCE_COLOR or
# PYTHON_COLORS=1 is set (3.14 its argparse errors too), which hid the exception line from the regexes.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# The last line of a Python traceback: `ValueError: ...`, `torch.OutOfMemoryError: ...`.
_EXCEPTION_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b:?")


@dataclass(frozen=True)
class LogFinding:
    """What a log says: the most telling fatal line, the exception that followed it, whether
    the server reported a bind failure or readiness."""

    fatal_line: str | None = None
    address_in_use: bool = False
    taken_port: int | None = None  # the port the bind failure names, when the log line says
    ready: bool = False
    exception_line: str | None = None
    usage_error: str | None = None  # an argument parser's complaint (`prog: error: ...`)

    @property
    def cause(self) -> str | None:
        """One line: the fatal signature onwards; when that line only opens a traceback
        (`Scheduler hit an exception: Traceback ...`), the exception that closed it instead."""
        if self.fatal_line is None:
            return None
        cause = fatal_cause(self.fatal_line)
        if cause.endswith(_TRACEBACK) and self.exception_line:
            cause = f"{cause[: -len(_TRACEBACK)].rstrip()} {self.exception_line}"
        return cause


class LogWatcher:
    """Scans a growing log file incrementally, so polling every 0.5 s costs only the new bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""
        self._fatal_line: str | None = None
        self._fatal_rank: tuple[int, int] | None = None
        self._exception_line: str | None = None
        self._address_in_use = False
        self._taken_port: int | None = None
        self._ready = False
        self._usage_error: str | None = None

    def scan(self) -> LogFinding:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        self._offset += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()  # an unterminated last line is re-read once complete
        for line in lines:
            self._note(_ANSI_RE.sub("", line))
        return self.finding(include_partial=True)

    def _note(self, line: str) -> None:
        if line.startswith(COMMAND_LINE_PREFIX):
            return
        rank = _line_rank(line)
        if rank is not None and (self._fatal_rank is None or rank < self._fatal_rank):
            self._fatal_line, self._fatal_rank = line.strip(), rank
            self._exception_line = None  # an earlier traceback's exception is not this line's
        elif self._fatal_line is not None and self._exception_line is None and _EXCEPTION_LINE_RE.match(line):
            self._exception_line = line.strip()
        if _ADDRESS_IN_USE_RE.search(line):
            self._address_in_use = True
            address = _BIND_ADDRESS_RE.search(line)
            if address is not None:
                self._taken_port = int(address.group(2))
        if READY_LINE in line:
            self._ready = True
        if _USAGE_ERROR_RE.match(line):
            self._usage_error = line.strip()

    def finding(self, include_partial: bool = False) -> LogFinding:
        fatal, in_use, exception = self._fatal_line, self._address_in_use, self._exception_line
        partial = _ANSI_RE.sub("", self._partial)  # a code cut by the chunk's end: re-read whole later
        if include_partial and partial:
            rank = _line_rank(partial)
            if rank is not None and (self._fatal_rank is None or rank < self._fatal_rank):
                fatal, exception = partial.strip(), None  # its traceback has not been written yet
            in_use = in_use or bool(_ADDRESS_IN_USE_RE.search(partial))
        return LogFinding(fatal_line=fatal, address_in_use=in_use, taken_port=self._taken_port,
                          ready=self._ready, exception_line=exception,
                          usage_error=self._usage_error)


def _rank(line: str) -> int | None:
    """Index of the most specific fatal signature in `line`, None when there is none."""
    if not _FATAL_RE.search(line):
        return None
    return next(i for i, r in enumerate(_SIGNATURE_RES) if r.search(line))


def _line_rank(line: str) -> tuple[int, int] | None:
    """Sort key of a fatal line, lower is a better cause: the signature's specificity, then
    whether the line is indented. In a Python traceback the indented lines echo source code
    (`raise RuntimeError("... CUDA out of memory ...`), while the unindented last line is the
    exception with its full message."""
    rank = _rank(line)
    if rank is None:
        return None
    return rank, int(line[:1].isspace())


def is_hang_signature(line: str) -> bool:
    """True when the most specific fatal signature on `line` means a hang, not a crash."""
    rank = _rank(line)
    return rank is not None and FATAL_SIGNATURES[rank] in HANG_SIGNATURES


def fatal_cause(line: str) -> str:
    """The readable cause inside a fatal log line: from its most specific signature on, without
    the timestamp / logger prefix, e.g. `CUDA error: an illegal instruction was encountered`."""
    rank = _rank(line)
    if rank is None:
        return line.strip()
    return line[_SIGNATURE_RES[rank].search(line).start():].strip()


def tail(path: Path | None, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log (reads at most the last 64 KiB)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(_ANSI_RE.sub("", data).rstrip("\n").split("\n")[-lines:])


def describe_exit(returncode: int) -> str:
    """`exited with code 1` / `was killed by SIGKILL` (Popen reports signals as negative codes)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def unexplained_kill(returncode: int | None) -> str:
    """What to look at for a SIGKILL its log does not explain: no process of the plugin's sends one
    to a live server, and the kernel's out-of-memory killer, the usual sender, writes only to the
    kernel's log. Empty for any other ending."""
    if returncode != -signal.SIGKILL:
        return ""
    return ("; nothing in its log says why: a SIGKILL is most often the kernel's out-of-memory killer "
            "(host memory, not GPU memory), which says so in the kernel's log: dmesg | grep -i oom, "
            "or journalctl -k")


class ServerError(Exception):
    """A server could not be started, died, or stopped answering.

    `reason` is a short stable kind the plugin can branch on (`warmup-crash`, `hang`,
    `slow-start`, `port-in-use`, `refused`, `exited`, `died`, `unresponsive`, `teardown`, `lease`,
    `changed`: an attached server restarted as another configuration; `no-route`: an attached
    server's URL answers, but not /server_info);
    `cause` the one-line why; the message is what a test failure shows, log path and tail included.
    """

    def __init__(
        self,
        spec_id: str,
        reason: str,
        cause: str,
        *,
        log_path: Path | None = None,
        tail_text: str = "",
        headline: str | None = None,
        placement: str = "",
    ) -> None:
        self.spec_id = spec_id
        self.placement = placement  # `GPUs 4,5 (NVIDIA H200)`: which GPUs a failed configuration had
        self.reason = reason
        self.cause = cause
        self.log_path = log_path
        self.tail = tail_text
        self.headline = headline or f"server {spec_id} {reason}: {cause}"
        super().__init__(self._message())

    def _message(self) -> str:
        parts = []
        if self.log_path is not None:
            parts.append(f"log: {self.log_path}")
        if self.placement:
            parts.append(f"on {self.placement}")
        if self.tail:
            parts.append("last lines:\n" + _indent(self.tail))
        return self.headline + (f" ({'; '.join(parts)})" if parts else "")

    def __reduce__(self):  # picklable, so xdist can ship it to the controller
        return (
            _rebuild_server_error,
            (self.spec_id, self.reason, self.cause, self.log_path, self.tail, self.headline, self.placement),
        )


def _rebuild_server_error(spec_id, reason, cause, log_path, tail_text, headline, placement=""):
    return ServerError(spec_id, reason, cause, log_path=log_path, tail_text=tail_text, headline=headline,
                       placement=placement)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.split("\n"))
