"""What the run's ending has still to write, for the one line a second Ctrl-C that stops it says.

The ending (`summary.finish`) writes durations.json, the baseline file, the report folder and the
shard folder's manifest in turn. A first Ctrl-C there lets it finish (servers/cleanup.py `ending`),
a second stops it: where it lands in a write that catches it (the baseline, the report), that
write's problem line names what is left; anywhere else (durations.json, the shard folder, another
plugin's ending, the terminal summary) the KeyboardInterrupt leaves pytest_sessionfinish, and the
plugin's wrapper says `stopped_line` instead of pytest's traceback. Each write is whole or not
there (staging, `whole_file`), so what is left is only what was not written yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from .state import RunState

STOPPED = "a second Ctrl-C stopped the run's ending"
NOTHING_TO_WRITE = "specdec: a second Ctrl-C stopped the run's ending: its summary may be cut short"

#: What each write is called in the line, by the option that asks for it ("shard": the shard folder).
NAMES = {"durations": "durations.json", "save_baseline": "baseline", "report": "report", "shard": "shard folder"}


@dataclass
class EndingWrites:
    """The ending's writes still to come, in the order it makes them."""

    left: list[str] = field(default_factory=list)  # keys of NAMES
    asked: tuple[str, ...] = ()  # all the ending writes, done or not

    @classmethod
    def of(cls, state: RunState, durations: bool, shard: bool) -> EndingWrites:
        """What a run with these settings writes as it ends (`durations`: it saves them; `shard`:
        it finishes a shard folder)."""
        settings = state.settings
        asked = {"durations": durations and settings.save_baseline, "save_baseline": settings.save_baseline,
                 "report": bool(settings.report), "shard": shard}
        keys = [key for key, wanted in asked.items() if wanted]
        return cls(list(keys), tuple(keys))

    def done(self, key: str) -> None:
        """`key` is written, or failed with a problem line of its own."""
        if key in self.left:
            self.left.remove(key)

    def stopped_line(self, state: RunState) -> str:
        """The line of a second Ctrl-C that stopped the ending outside the baseline's and report's writes."""
        if not self.left:
            if not self.asked:
                return NOTHING_TO_WRITE
            names = [NAMES[key] for key in self.asked]
            return (f"specdec: a second Ctrl-C stopped the run's ending after its {_joined(names)} "
                    f"{'was' if len(names) == 1 else 'were'} written: the summary and other plugins' files "
                    f"may be cut short")
        return f"specdec: ERROR: {unwritten(state, self.left, STOPPED)}"


def unwritten(state: RunState, left: list[str], why: str) -> str:
    """`left` named as not written, `why`, and the run that writes them: a resume for the baseline,
    the report and the shard folder, the next saving run for durations.json (a resumed test
    measures no time)."""
    names = [NAMES[key] for key in left]
    resumed = [key for key in left if key != "durations"]
    text = f"{_joined(names)} not written: {why}; no file there is half-written"
    if resumed:
        from .summary import same_shard

        setters = [state.settings.setter(key) for key in resumed if key != "shard"]
        if "shard" in resumed and "report" not in resumed:
            setters.append(state.settings.setter("report"))
        them = "it" if len(resumed) == 1 else "them"
        text += (f"; the journal keeps this run's figures: a run with {_joined(['--specdec-resume', *setters])}"
                 f"{same_shard(state)} writes {them} without measuring again the tests that passed")
    if "durations" in left:
        text += f"; durations.json: the next run with {state.settings.setter('save_baseline')} writes it again"
    return text


def _joined(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def say_stopped(session: pytest.Session) -> None:
    """Say what a second Ctrl-C left unwritten of the run's ending, and end the run as an
    interrupted one (exit status 2, as pytest's Ctrl-C during the tests), not dead of SIGINT."""
    import sys

    import pytest

    from .state import STATE_KEY

    session.exitstatus = pytest.ExitCode.INTERRUPTED
    controller = session.config.pluginmanager.get_plugin("specdec-controller")
    if controller is None or STATE_KEY not in session.config.stash:
        line = NOTHING_TO_WRITE
    else:  # the stop may come before the controller's own ending began (another plugin's, first)
        line = controller.ending_writes().stopped_line(session.config.stash[STATE_KEY])
    writer = getattr(session.config.pluginmanager.get_plugin("terminalreporter"), "_tw", None)
    if writer is not None:
        if writer.width_of_current_line:  # a progress line the interrupt left open
            writer.line()
        writer.line(line, red=True, bold=True)
    else:
        sys.stderr.write(line + "\n")
