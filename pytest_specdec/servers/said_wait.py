"""A bounded polling wait that says itself, once, when it outlasts a quiet spell.

A teardown waits on things outside the plugin's hands (the driver freeing a dead server's GPU
memory, the kernel finishing a killed process stuck in uninterruptible sleep). Such a wait is
usually over in a second; one that goes on would leave the terminal frozen with no word of why,
so past `quiet` seconds it gets one line: what it waits for, and for how long at most.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class SaidWait:
    """`timeout` seconds from now, said through `announce` (None: never) once `quiet` have passed.
    `clock` and `sleep` are the time it runs on (a test's fake one, say)."""

    timeout: float
    announce: Callable[[str], None] | None
    quiet: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    started: float = field(init=False)
    said: bool = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.said = self.announce is None

    @property
    def deadline(self) -> float:
        return self.started + self.timeout

    def over(self) -> bool:
        return self.clock() >= self.deadline

    def pause(self, seconds: float, words: Callable[[float], str]) -> None:
        """Sleep `seconds` between polls; first, a wait that has lasted `quiet` says
        `words(seconds left)`, once."""
        now = self.clock()
        if not self.said and now - self.started >= self.quiet:
            self.said = True
            self.announce(words(max(self.deadline - now, 0.0)))
        self.sleep(seconds)
