"""What cut this run short, and what left tests out of it, named by the options pytest was given.

The end-of-run notes say it in the user's own words (`-x`, `-k 'b8'`), the same with xdist or
without: pytest ends a run that -x stopped as failed, but xdist as interrupted, and either way
the configurations after the stop were not measured, which the user is told the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: `RunLimits.stopped_by` of a run ended by Ctrl-C, SIGTERM or SIGHUP.
INTERRUPT = "an interrupt"


@dataclass(frozen=True)
class RunLimits:
    """Why a run ended before its last test, and which of its options left tests out."""

    stopped_by: str | None = None  # "-x", "--maxfail=2", "--sw" or INTERRUPT; None: it ran to its end
    left_out_by: tuple[str, ...] = ()  # the options given that left tests out, as the user wrote them
    #: the command line named tests by node id (`file.py::test`): the rest of their files was
    #: never collected, so a test not seen there may still exist
    by_node_id: bool = False

    @classmethod
    def of(cls, config: pytest.Config, session: pytest.Session | None, exitstatus: int) -> RunLimits:
        stopped = stopped_by(config, session, exitstatus)
        # --sw both skips and stops: named once
        return cls(stopped, tuple(dict.fromkeys(narrowed_by(config) + ((stopped,) if stopped else ()))),
                   any("::" in str(arg) for arg in config.args))


def stopped_by(config: pytest.Config, session: pytest.Session | None, exitstatus: int) -> str | None:
    """The option that stopped the run before its last test, or INTERRUPT; None where it ran on
    to its end. Read from the failures counted, not the exit status, which xdist gives as
    interrupted for a run -x stopped and pytest as failed."""
    import pytest

    maxfail = getattr(config.option, "maxfail", 0) or 0
    if session is not None and maxfail and session.testsfailed >= maxfail:
        return "-x" if maxfail == 1 else f"--maxfail={maxfail}"
    if session is not None and getattr(config.option, "stepwise", False) and session.shouldstop:
        return "--sw"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return INTERRUPT
    return None


def narrowed_by(config: pytest.Config) -> tuple[str, ...]:
    """The selecting options given that leave collected tests out of the run."""
    option = config.option
    found = []
    if getattr(option, "keyword", ""):
        found.append(f"-k '{option.keyword}'")
    if getattr(option, "markexpr", ""):
        found.append(f"-m '{option.markexpr}'")
    if getattr(option, "deselect", None):
        found.append("--deselect")
    lf = config.pluginmanager.get_plugin("lfplugin")
    if lf is not None and lf.active and lf.lastfailed:  # --lf with no failure recorded runs all
        found.append("--lf")
    if getattr(option, "stepwise", False) or getattr(option, "stepwise_skip", False):
        found.append("--sw")  # skips the tests before the last run's failure
    return tuple(found)


__all__ = ["INTERRUPT", "RunLimits", "narrowed_by", "stopped_by"]
