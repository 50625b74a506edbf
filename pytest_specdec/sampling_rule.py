"""SGLang's rule for when it decodes greedily, in one place: the plugin's losslessness guard
(which compares only greedy outputs) and the embedded engine (which serves `n` copies only where
SGLang's samples would be identical) both read it, so neither calls a greedy request sampled.

A temperature of 0 is not the only greedy setting: SGLang turns any temperature below its epsilon
into top_k 1, and decodes a request with top_k 1 by argmax whatever its temperature. Treated as
sampled, such a workload's outputs went unchecked, though a lossy engine changes them.
"""

from __future__ import annotations

from typing import Any

#: SGLang decodes greedily below this temperature (its _SAMPLING_EPS).
SAMPLING_EPS = 1e-6


def decodes_greedily(temperature: Any, top_k: Any = None) -> bool:
    """Whether SGLang decodes a request with these settings greedily."""
    # SGLang: 0 <= temperature < _SAMPLING_EPS sets top_k = 1, and top_k <= 1 decodes by argmax
    low = isinstance(temperature, (int, float)) and not isinstance(temperature, bool) \
        and 0 <= temperature < SAMPLING_EPS
    return low or (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k == 1)
