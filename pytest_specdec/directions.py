"""The built-in figures and which way each one improves: the names tolerances may gate.

Apart from metrics.py so that reading the configuration (and its tolerances) at start-up does
not load the measurement code.
"""

from __future__ import annotations

import re
from typing import Literal, Mapping

Direction = Literal["higher", "lower"]

#: Whether a bigger value of a metric is better. Unknown metrics must state their direction.
METRIC_DIRECTIONS: Mapping[str, Direction] = {
    "output_tok_s": "higher",
    "accept_length": "higher",
    "accept_rate": "higher",
    "ttft_ms": "lower",
    "tpot_ms": "lower",
    "e2e_ms": "lower",
    "verify_us": "lower",
}


#: What a metric's name may be: as a tolerance expression and a TOML key can spell it.
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")

#: How a user names a metric of their own, so that tolerances may gate it by name.
DECLARE_HINT = "declare a metric of your own, with the way it improves (higher or lower), in [tool.specdec.metrics]"


def case_clash(name: str, declared: Mapping[str, Direction] | None = None) -> str | None:
    """Why `name` must not be a figure of the user's own, where it is a built-in or declared name
    but for case: the two would be misread for each other in every table and gate rule (a
    tolerance's did-you-mean takes one for the other too). None where it is not such a twin."""
    for known in (*METRIC_DIRECTIONS, *(declared or {})):
        if known != name and known.lower() == name.lower():
            kind = "built-in" if known in METRIC_DIRECTIONS else "declared"
            return (f"metric {name!r} differs from the {kind} {known!r} only in case, so the two would be "
                    f"misread for each other in every table and gate rule; write {known!r} for that "
                    f"figure, or give yours a name of its own (e.g. my_{known.lower()})")
    return None


def known_directions(declared: Mapping[str, Direction] | None = None) -> Mapping[str, Direction]:
    """The built-in metrics and those the configuration declares."""
    return {**METRIC_DIRECTIONS, **(declared or {})}


def direction_of(metric: str, declared: Mapping[str, Direction] | None = None) -> Direction:
    """The direction of a built-in or declared metric; a KeyError names the known ones otherwise."""
    known = known_directions(declared)
    try:
        return known[metric]
    except KeyError:
        from .suggest import closest

        meant = closest(metric, sorted(known))
        raise KeyError(f"unknown metric {metric!r}: " + (f"did you mean {meant!r}? " if meant else "")
                       + f"give its direction explicitly, or {DECLARE_HINT} (known: {', '.join(sorted(known))})") from None
