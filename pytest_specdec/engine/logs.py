"""Logging in SGLang's format, to stderr, one flushed line per record.

SGLang's HTTP server logs ``[2026-11-29 23:42:31] message`` and its scheduler
``[2026-11-29 23:42:31 TP0] message``. Tools that follow a server's log (the plugin's readiness
and crash diagnosis among them) match these lines, so the engine writes them the same way.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from pytest_specdec.sglang_api import READY_LINE

SERVER = logging.getLogger("specdec.engine.server")
SCHEDULER = logging.getLogger("specdec.engine.scheduler")

ILLEGAL_INSTRUCTION = "CUDA error: an illegal instruction was encountered"


class _SGLangFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__(f"[%(asctime)s{prefix}] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")


def setup(level: str) -> None:
    """Route both loggers to stderr at ``level`` (``warning`` hides the readiness and decode
    lines, as it does in SGLang)."""
    for logger, prefix in ((SERVER, ""), (SCHEDULER, " TP0")):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_SGLangFormatter(prefix))
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False


def ready() -> None:
    """The readiness line that launchers wait for, logged once warm-up has answered."""
    SERVER.info(READY_LINE)


def die(exit_code: int = 1) -> None:
    """Exit the whole process now, from any thread, after flushing the log.

    Used where SGLang's process tree would be torn down by a crashing child (no clean shutdown,
    open connections are reset), and after a clean stop, whose interpreter teardown is only a wait.
    """
    for logger in (SERVER, SCHEDULER):
        for handler in logger.handlers:
            handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def scheduler_crash(exc: BaseException) -> None:
    """Log a scheduler exception the way SGLang does when its scheduler process dies, and exit."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    SCHEDULER.error(f"Scheduler hit an exception: {text}")
    SERVER.error("Received sigquit from a child process. It usually means the child failed.")
    die(1)
