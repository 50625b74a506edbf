"""Settings for the unit tests alone (the repository's root conftest holds those of every suite).

The pytest runs these tests start use the plugin's default host-wide claims folder
(servers/host_claims.py: pytest-specdec-gpu-claims in the temporary directory) wherever they pass no
`--specdec-gpu-claims`: a run attached to a stub server on a random port left its turn's two files
there (`attached-http___127.0.0.1_<port>.lock` and `.queue`), and a run on a stubbed real GPU its
claim, hundreds of files in the host's folder after a few runs of the suite. Not in `tests/bench`:
`make bench` is a run as users make it, and its GPU claims must meet other runs of the host.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _temporary_directory_of_the_suites_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's temporary directory, under its pytest base folder, for the runs its tests start
    (TMPDIR: subprocesses, engines) and those in this process (`tempfile.tempdir`): the default claims
    folder is then this session's, which pytest's retention of base folders removes. The runs of one
    test still share it, as runs of one host do; a test that sets its own (monkeypatch) still wins."""
    folder = tmp_path_factory.mktemp("tmp", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))
        yield folder
