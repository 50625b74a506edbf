"""Hooks that exist only under pytest-xdist; registered from pytest_configure when it is loaded.

Workers collect, the controller does not: the controller learns the size of the run here, for
its `[done/total]` progress lines.
"""

from __future__ import annotations

from .session import Results


class XdistHooks:
    def __init__(self, results: Results) -> None:
        self.results = results
        self._seen = False

    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if not self._seen:  # every worker collects the same items
            self.results.total = len(ids)
            self._seen = True
