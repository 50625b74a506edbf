"""The kernel suite in shards: ``KERNEL_SUITE_SHARD=i/n`` keeps every n-th test of this directory
from the i-th on (1-based), so that a suite longer than one GPU call's time limit runs whole over n
calls (``SUITE_SHARD`` of ``scripts/h200_verify.sh``). Taking every n-th test, not every n-th file,
spreads the grid's many cases of one file over the shards; every xdist worker collects the same
tests and so keeps the same ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARD_VARIABLE = "KERNEL_SUITE_SHARD"
HERE = Path(__file__).resolve().parent


def parse_suite_shard(text: str) -> tuple[int, int]:
    """(i, n) of ``i/n``, 1 <= i <= n; a usage error naming the variable otherwise."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index = count = 0
    if not 1 <= index <= count:
        raise pytest.UsageError(f"{SHARD_VARIABLE} must be i/n with 1 <= i <= n (e.g. 1/2), not {text!r}")
    return index, count


def pytest_collection_modifyitems(config, items):
    text = os.environ.get(SHARD_VARIABLE, "").strip()
    if not text:
        return
    index, count = parse_suite_shard(text)
    # this directory's tests only: a session that also collects others runs those whole
    ours = [item for item in items if Path(item.path).resolve().is_relative_to(HERE)]
    dropped = {id(item) for position, item in enumerate(ours) if position % count != index - 1}
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if id(item) in dropped])
        items[:] = [item for item in items if id(item) not in dropped]
