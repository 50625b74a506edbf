"""What one run has read of its journal (`Journal.latest`'s cache), apart from the journal itself so
that every run can hold one without loading the journal and its lock (a run without specdec tests
loads neither)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LatestCache:
    """What `Journal.latest` has read of a journal so far, shared by the readers of one run: a
    resumed run judges every test against the journal, and a measuring one reads it after each
    test, so a reading parses only the lines appended since the last (a journal of thousands of
    records is otherwise parsed once per test). A file whose device, inode, size and modification
    time are those of the last reading is taken as unchanged; otherwise it is read again from its
    start wherever the bytes read before are not all still there (rotated, rewritten). A line the
    run appends itself to a file unchanged since its reading is folded in as it is written
    (`Journal._write`), so the run's own appends cost no reading of the whole file."""

    path: Path | None = None
    stat: tuple[int, int, int, int] = (0, 0, 0, 0)  # device, inode, size, modification time (ns)
    offset: int = 0  # end of the last whole line read (just after its newline)
    lines: int = 0  # lines up to `offset`, as `_iter_records` numbers them
    #: sha256 of the bytes up to `offset`, kept running so that lines read on extend it
    prefix: Any = field(default_factory=hashlib.sha256)
    tail: bytes = b""  # what follows `offset`: a torn last line, read again at each reading
    latest: dict = field(default_factory=dict)
    parsed_lines: int = 0  # lines parsed in all, for tests that count the work done
    #: what readers worked out from a record, by a key that starts with its `digest` (its line's bytes)
    derived: dict = field(default_factory=dict)
    #: `latest`'s records by their figures' workload, in its order (`Journal.latest_of`), kept up
    #: as lines are read on; None: to be grouped again from `latest`
    by_workload: dict | None = None
