"""The kernel suite in shards: ``KERNEL_SUITE_SHARD=i/n`` keeps every n-th test of this directory
from the i-th on (1-based), so that a suite longer than one GPU call's time limit runs whole over n
calls (``SUITE_SHARD`` of ``scripts/h200_verify.sh``). Taking every n-th test, not every n-th file,
spreads the grid's many cases of one file over the shards; every xdist worker collects the same
tests and so keeps the same ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_specdec.shard import parse_shard

SHARD_VARIABLE = "KERNEL_SUITE_SHARD"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    text = os.environ.get(SHARD_VARIABLE, "").strip()
    if not text:
        return
    try:
        shard = parse_shard(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{SHARD_VARIABLE} must be i/n with 1 <= i <= n: {exc}") from None
    # this directory's tests only: a session that also collects others runs those whole
    ours = [item for item in items if Path(item.path).resolve().is_relative_to(HERE)]
    dropped = [item for position, item in enumerate(ours) if position % shard.count != shard.index - 1]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]
