"""Append-only results journal: what was measured survives a crash, a kill or a reboot.

One JSON object per line, appended with a single write and fsync'd before `append` returns, so
a record is either fully on disk or (after a crash mid-write) a torn last line that readers skip
with a warning. Records are keyed by (config id, workload) and carry the fingerprint of what was
measured (`fingerprint.py`): `done()` is what `--specdec-resume` skips where the fingerprint still
matches. Several processes (xdist workers) may append at once: each append
takes a file lock, repairs a torn tail by starting on a fresh line, and writes with O_APPEND.

A test's figures are journaled as `measured` before anything checks them, and a small `done`
mark naming that record (`mark_done`) follows once its checks passed: a process that dies in
between (or whose mark is torn) leaves the figures without a verdict, which resume measures
again rather than trusting. `latest()` resolves each mark to the figures it confirms, so every
reader sees one record per key. Version 1 journals wrote `done` with the figures themselves;
such a record still reads as done.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from filelock import FileLock

from . import json_text
from .file_kind import refuse_special
from .journal_cache import LatestCache

#: The version written. 2: figures are journaled `measured`, and a `done` mark confirms them.
JOURNAL_VERSION = 2
#: The versions read: a version 1 `done` record holds its figures and means done.
READ_VERSIONS = (1, 2)

Key = tuple[str, str]  # (config id, workload)

#: Whole figures, journaled before their checks (the gate, the losslessness check) ran: without a
#: `done` mark after them, resume measures them again.
MEASURED = "measured"
#: A finished measurement whose checks passed: a mark confirming a `measured` record, or (written by
#: `append`, and by version 1 journals) the figures themselves.
DONE = "done"
#: The status of a record appended after a `measured` one whose figures then failed their checks
#: (the gate, the losslessness check): whole figures, which resume measures again.
FAILED_CHECKS = "failed-checks"


class JournalWarning(UserWarning):
    """A journal line could not be read (torn by a crash, or edited by hand) and was skipped."""


@dataclass(frozen=True)
class DamagedLine:
    """A journal line that could not be read, and so was skipped."""

    path: Path
    lineno: int
    what: str  # "an unreadable line (why)" or "an incomplete last line (interrupted write)"

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: skipped {self.what}"


@dataclass(frozen=True)
class JournalRecord:
    """One finished measurement (status "done"), figures awaiting their checks ("measured") or a
    recorded failure (any other status).

    Only a "done" record that is its key's last counts for resume: a configuration that failed,
    in its measurement or in the checks after it (gate, losslessness), or whose checks never
    finished, is measured again.
    """

    config_id: str
    workload: str
    status: str = DONE
    data: Mapping[str, Any] = field(default_factory=dict)
    time: str = ""
    pid: int = 0
    fingerprint: str = ""  # digest of what was measured; "" in records older than fingerprints
    #: a `done` mark's: the `digest` of the `measured` record it confirms ("" for whole records)
    confirms: str = ""
    #: the digest of this record's journal line, which a `done` mark names; "" where not read or written
    digest: str = field(default="", compare=False)

    @property
    def key(self) -> Key:
        return (self.config_id, self.workload)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": JOURNAL_VERSION, "config_id": self.config_id, "workload": self.workload,
            "status": self.status, "time": self.time, "pid": self.pid, "data": dict(self.data),
            "fingerprint": self.fingerprint, **({"confirms": self.confirms} if self.confirms else {}),
        }


class Journal:
    """A JSONL journal file. Cheap to construct; every method opens the file itself."""

    def __init__(self, path: str | Path, said: set[int] | None = None,
                 cache: LatestCache | None = None):
        """`said`: the numbers of the damaged lines already warned of, shared by the readers of one
        run so that each is said once however often the run reads the journal (a torn last line
        reads as an unreadable one once the run appended past it: still the line said); `cache`: what `latest` read
        before, shared by the same readers (`LatestCache`)."""
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock")
        self._said = said
        self._cache = cache

    def append(self, config_id: str, workload: str, data: Mapping[str, Any] | None = None,
               *, status: str = DONE, fingerprint: str = "") -> JournalRecord:
        """Durably append one record; returns it (with its `digest`, for `mark_done`). `data` must
        be JSON-serialisable. Figures whose checks are still to run are appended as MEASURED."""
        return self._write(config_id, workload, data, status, fingerprint, "")

    def mark_done(self, measured: JournalRecord) -> JournalRecord:
        """Durably append the `done` mark of a MEASURED record of this journal (as `append`
        returns it or `records` reads it): its checks passed, so resume may skip it."""
        if measured.status != MEASURED or not measured.digest:
            raise ValueError(f"only a {MEASURED!r} record appended by this journal can be marked "
                             f"done, not a {measured.status!r} one")
        return self._write(measured.config_id, measured.workload, None, DONE,
                           measured.fingerprint, measured.digest)

    def _write(self, config_id: str, workload: str, data: Mapping[str, Any] | None, status: str,
               fingerprint: str, confirms: str) -> JournalRecord:
        if not config_id or not workload:
            raise ValueError("a journal record needs a config id and a workload name")
        record = JournalRecord(
            config_id=config_id, workload=workload, status=status, data=dict(data or {}),
            time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), pid=os.getpid(),
            fingerprint=fingerprint, confirms=confirms,
        )
        text = json.dumps(record.to_json(), sort_keys=True, allow_nan=False).encode("utf-8")
        record = replace(record, digest=_line_digest(text))
        line = text + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                before = os.fstat(fd)
                if not created and not _ends_with_newline(self.path):
                    line = b"\n" + line  # a crash tore the last line: never glue onto it
                append_whole(fd, line, sync=True)  # a record is whole or absent (a full disk)
                after = os.fstat(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)
            self._read_own(line, before, after)
        return record

    def _read_own(self, line: bytes, before: os.stat_result, after: os.stat_result) -> None:
        """Fold `line`, just appended under the lock, into the cache where the file was, up to it,
        what the cache read last: its next reading would otherwise find the size and time changed
        by this very append and read and hash the whole file again, once per test of a measuring
        run. Anything else (another writer's lines between, a rewrite, a torn tail) is left to
        that reading, which tells them apart."""
        cache = self._cache
        if cache is None or cache.path != self.path or cache.stat != _stat_key(before) \
                or cache.offset != before.st_size or after.st_size != before.st_size + len(line):
            return  # not the file read last (or not up to its end: a torn line), or not only this line added
        self._read_lines(cache, line)
        cache.stat = _stat_key(after)

    def records(self) -> list[JournalRecord]:
        """The readable lines as written: `done` marks unresolved (`latest` resolves them)."""
        return [record for _, record in self._iter_records()]

    def _iter_records(self, damaged: list[DamagedLine] | None = None) -> Iterator[tuple[int, JournalRecord]]:
        """(line number, record) of the readable records; each damaged line is skipped with a
        JournalWarning, or, where the caller says it itself (`damaged` given), appended there."""
        refuse_special(self.path, "results journal")
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        yield from self._parse(raw, 0, damaged)

    def _parse(self, raw: bytes, before: int, damaged: list[DamagedLine] | None,
               at: int | None = None) -> Iterator[tuple[int, JournalRecord]]:
        """`_iter_records` of `raw`, the file's bytes after its first `before` lines; `at`: where
        `raw` starts in the file, to leave each record's outputs there (`_OnDisk`), as the cache
        keeps them."""
        lines = raw.split(b"\n")
        start = 0
        for index, line in enumerate(lines, start=1):
            lineno = before + index
            where, start = start, start + len(line) + 1
            if not line.strip():
                continue
            if self._cache is not None:
                self._cache.parsed_lines += 1
            torn = index == len(lines)  # no newline after it: the write never finished
            try:
                obj = json_text.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
                if isinstance(obj.get("v"), bool) or obj.get("v") not in READ_VERSIONS:
                    raise ValueError(f"journal version {obj.get('v')!r}, this pytest-specdec "
                                     f"reads versions {READ_VERSIONS[0]} to {READ_VERSIONS[-1]}")
                if not isinstance(obj.get("data") or {}, dict):
                    raise ValueError("its data is not an object")
                rec = JournalRecord(
                    config_id=str(obj["config_id"]), workload=str(obj["workload"]),
                    status=str(obj.get("status", DONE)), data=obj.get("data") or {},
                    time=str(obj.get("time", "")), pid=int(obj.get("pid", 0)),
                    fingerprint=str(obj.get("fingerprint") or ""),
                    confirms=str(obj.get("confirms") or "") if obj["v"] >= 2 else "",
                    digest=_line_digest(line),
                )
                if rec.confirms and rec.status != DONE:
                    raise ValueError(f"a {rec.status!r} record confirms another")
                if at is not None and rec.data.get("outputs"):
                    rec = replace(rec, data=_OnDisk(rec.data, self.path, at + where, len(line), rec.digest))
            except (ValueError, KeyError, TypeError, OverflowError) as exc:  # Overflow: a pid of 1e999
                what = "an incomplete last line (interrupted write)" if torn else f"an unreadable line ({exc})"
                self._skip(DamagedLine(self.path, lineno, what), damaged)
                continue
            yield lineno, rec

    def _skip(self, line: DamagedLine, damaged: list[DamagedLine] | None) -> None:
        if damaged is not None:
            damaged.append(line)
            return
        if self._said is not None:
            if line.lineno in self._said:
                return
            self._said.add(line.lineno)
        # located at the journal's line, not at whichever reader of the run came upon it first
        warnings.warn_explicit(str(line), JournalWarning, filename=str(self.path), lineno=line.lineno)

    def done_keys(self) -> set[Key]:
        """(config id, workload) pairs whose last record is a finished measurement: what a
        resumed run skips."""
        return set(self.done())

    def done(self) -> dict[Key, JournalRecord]:
        """The last record per key where it is a finished measurement: a failure recorded after
        it (the test failed its gate or its losslessness check on those figures), or figures
        whose checks never finished (`measured` with no `done` mark), are measured again, not
        skipped as passed."""
        return {key: r for key, r in self.latest().items() if r.status == DONE}

    def latest(self, damaged: list[DamagedLine] | None = None) -> dict[Key, JournalRecord]:
        """The last record per key, so a configuration measured twice is counted once (the most
        recent outcome wins, failures included: a re-run that failed is not hidden by an old pass).
        A `done` mark becomes the `measured` record it confirms, as `done`; one that confirms no
        record (its figures were on a damaged line) is skipped as damaged, so what it marked is
        measured again rather than an older record trusted.
        `damaged`: where the lines skipped go instead of a JournalWarning each."""
        if self._cache is not None and damaged is None:
            return self._latest_cached(self._cache)
        out: dict[Key, JournalRecord] = {}
        self._fold(out, self._iter_records(damaged), damaged)
        return out

    def latest_of(self, workload: str | None) -> list[JournalRecord]:
        """The records of `latest()` whose figures are of `workload` (their data's "workload"), in
        its order. With a cache, from an index kept with it: a run judges each of thousands of
        tests against its workload's records, not against all of them."""
        cache = self._cache
        if cache is None:
            return [r for r in self.latest().values() if _figures_workload(r) == workload]
        out = self._latest_cached(cache, copy=False)
        if cache.tail:  # a torn last line folds into this reading alone, as `latest` reads it
            return [r for r in out.values() if _figures_workload(r) == workload]
        if cache.by_workload is None:
            cache.by_workload = {}
            for key, record in cache.latest.items():
                cache.by_workload.setdefault(_figures_workload(record), {})[key] = record
        return list(cache.by_workload.get(workload, {}).values())

    def _latest_cached(self, cache: LatestCache, copy: bool = True) -> dict[Key, JournalRecord]:
        """`latest()` from what `cache` read before and the whole lines appended since; a torn
        last line is read each time, as `latest()` reads it, and kept for when it is whole."""
        refuse_special(self.path, "results journal")
        try:
            with open(self.path, "rb") as fh:
                stat = _stat_key(os.fstat(fh.fileno()))
                if cache.path != self.path or cache.stat != stat:
                    self._read_on(cache, fh.read(), stat)
        except FileNotFoundError:
            cache.path, cache.stat, cache.latest, cache.offset, cache.lines = None, (0, 0, 0, 0), {}, 0, 0
            cache.prefix, cache.tail, cache.by_workload = hashlib.sha256(), b"", None
            return {}
        if not copy and not cache.tail:
            return cache.latest
        out = dict(cache.latest)
        if cache.tail:
            self._fold(out, self._parse(cache.tail, cache.lines, None), None)
        return out

    def _read_on(self, cache: LatestCache, raw: bytes, stat: tuple[int, int, int, int]) -> None:
        """Fold into `cache` the whole lines of `raw` (the file's bytes) it has not read."""
        if cache.path != self.path or cache.stat[:2] != stat[:2] or len(raw) < cache.offset \
                or hashlib.sha256(memoryview(raw)[:cache.offset]).digest() != cache.prefix.digest():
            # another file, or not the one read: from its start
            cache.offset, cache.lines, cache.latest, cache.prefix = 0, 0, {}, hashlib.sha256()
            cache.by_workload = None
        cache.path, cache.stat = self.path, stat
        whole = raw.rfind(b"\n") + 1  # the lines read for good: each ends with a newline
        if whole > cache.offset:
            self._read_lines(cache, raw[cache.offset:whole])
        cache.tail = raw[cache.offset:]

    def _read_lines(self, cache: LatestCache, lines: bytes) -> None:
        """Fold into `cache` `lines`, whole lines of the file from `cache.offset` on."""
        before: dict[Key, JournalRecord | None] = {}  # each key's record before these lines
        records = self._parse(lines, cache.lines, None, at=cache.offset)
        self._fold(cache.latest, _noting(records, cache.latest, before), None)
        _index_on(cache, before)
        cache.lines += lines.count(b"\n")
        cache.prefix.update(lines)
        cache.offset += len(lines)

    def _fold(self, out: dict[Key, JournalRecord], records: Iterator[tuple[int, JournalRecord]],
              damaged: list[DamagedLine] | None) -> None:
        """Fold `records` into `out`, the last record per key (`latest`)."""
        for lineno, record in records:
            if not record.confirms:
                out[record.key] = record
                continue
            measured = out.get(record.key)
            if measured is None or measured.status != MEASURED or measured.digest != record.confirms:
                self._skip(DamagedLine(self.path, lineno, "a 'done' mark whose figures are not its "
                                       "test's last readable record (a damaged line?)"), damaged)
                continue
            out[record.key] = replace(measured, status=DONE)


class _OnDisk(Mapping[str, Any]):
    """A cached record's data whose outputs stay in the journal file, read again from their line
    when asked for: a run reads the journal after each test, and holding every test's outputs
    (every request's text and token ids) would grow its memory by them for the whole run. Only
    the readers that compare outputs ask for them; they keep those they still need."""

    def __init__(self, data: Mapping[str, Any], path: Path, start: int, length: int, digest: str):
        self._data = {key: value for key, value in data.items() if key != "outputs"}
        self._where = (path, start, length, digest)

    def __getitem__(self, key: str) -> Any:
        if key == "outputs":
            return self._outputs()
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._data
        yield "outputs"

    def __len__(self) -> int:
        return len(self._data) + 1

    def _outputs(self) -> Any:
        path, start, length, digest = self._where
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                line = fh.read(length)
            if _line_digest(line) != digest:  # the file was replaced since: find the line by its bytes
                line = next((each for each in path.read_bytes().split(b"\n") if _line_digest(each) == digest), b"")
        except OSError:  # removed since
            line = b""
        if not line:
            raise ValueError(f"the outputs of a record of {path} are no longer there (the journal was "
                             f"replaced while this run read it)")
        return json_text.loads(line)["data"].get("outputs")


def _figures_workload(record: JournalRecord) -> Any:
    """The workload a record's figures name (`latest_of`): its data's, None where they name none;
    a value no workload name can equal (an edited line's list) is `_NO_WORKLOAD`, which is hashable."""
    workload = record.data.get("workload")
    return workload if workload is None or isinstance(workload, str) else _NO_WORKLOAD


#: What `_figures_workload` gives for figures whose workload is neither a name nor None.
_NO_WORKLOAD = object()


def _noting(records: Iterator[tuple[int, JournalRecord]], latest: Mapping[Key, JournalRecord],
            before: dict[Key, JournalRecord | None]) -> Iterator[tuple[int, JournalRecord]]:
    """`records`, noting in `before` each one's key with its record in `latest` before the first
    of them (`_index_on`)."""
    for lineno, record in records:
        before.setdefault(record.key, latest.get(record.key))
        yield lineno, record


def _index_on(cache: LatestCache, before: Mapping[Key, JournalRecord | None]) -> None:
    """Bring `cache.by_workload` up to `cache.latest` after the keys of `before` (each with its
    record before) were folded in: a key keeps its place, a new one comes last, as in `latest`;
    one whose figures moved to another workload has it grouped again."""
    index = cache.by_workload
    if index is None:
        return
    for key, old in before.items():
        record = cache.latest.get(key)
        if record is None:  # a mark that confirmed nothing, skipped
            continue
        workload = _figures_workload(record)
        if old is not None and _figures_workload(old) != workload:
            cache.by_workload = None  # its place among the other workload's records is latest's
            return
        index.setdefault(workload, {})[key] = record


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    """What `LatestCache.stat` holds of a file's status: device, inode, size, modification time."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _line_digest(line: bytes) -> str:
    """What a `done` mark names a journal line by: its bytes, so a mark confirms exactly the figures
    written, and nothing edited since."""
    return hashlib.sha256(line).hexdigest()[:16]


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def append_whole(fd: int, data: bytes, *, sync: bool = False) -> None:
    """Append `data` through the O_APPEND descriptor `fd` whole or not at all: a write the OS cuts
    short or refuses (a full disk), or a Ctrl-C between two writes, cuts the file back to its old
    size before the error goes on; `sync`: fsync it, as part of the write."""
    size = os.fstat(fd).st_size
    try:
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a short write is followed by one that says why the OS stopped
        written = os.write(fd, view)
        if not written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["DONE", "append_whole", "FAILED_CHECKS", "JOURNAL_VERSION", "MEASURED", "READ_VERSIONS", "DamagedLine", "Journal",
           "JournalRecord", "JournalWarning", "Key", "LatestCache"]
