"""The built-in figures and which way each one improves: the names tolerances may gate.

Apart from metrics.py so that reading the configuration (and its tolerances) at start-up does
not load the measurement code.
"""

from __future__ import annotations

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


def direction_of(metric: str) -> Direction:
    """The direction of a built-in metric; a KeyError names the known ones otherwise."""
    try:
        return METRIC_DIRECTIONS[metric]
    except KeyError:
        known = ", ".join(sorted(METRIC_DIRECTIONS))
        raise KeyError(f"unknown metric {metric!r}: give its direction explicitly (known: {known})") from None
