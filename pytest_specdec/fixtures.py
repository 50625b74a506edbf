"""Fixtures of pytest-specdec; registered as a plugin from pytest_configure."""

from __future__ import annotations

import pytest

from .collection import MatrixCase
from .hardware import Hardware
from .state import STATE_KEY, RunState


@pytest.fixture(scope="session")
def specdec_state(pytestconfig: pytest.Config) -> RunState:
    """The run's resolved config, options, hardware and backend."""
    return pytestconfig.stash[STATE_KEY]


@pytest.fixture(scope="session")
def specdec_hardware(specdec_state: RunState) -> Hardware:
    """The GPU inventory the run schedules on (simulated under --specdec-arch/--specdec-gpus)."""
    return specdec_state.hardware


@pytest.fixture
def specdec_spec(request: pytest.FixtureRequest) -> MatrixCase:
    """The matrix cell this test is parametrized with."""
    if not hasattr(request, "param"):
        raise pytest.UsageError("specdec_spec is parametrized from the configured matrix; "
                                "request it from a test function, not from a fixture override")
    return request.param
