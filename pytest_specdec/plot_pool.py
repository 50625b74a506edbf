"""Plot pages drawn in worker processes: a report of many workloads has many pages of seconds each.

Each worker is a fresh interpreter (`python -m pytest_specdec.plot_worker`), not a fork: the run
that writes the report has threads (watchdogs, xdist's channels) a fork would copy half-held, and
multiprocessing's spawn would import the user's `__main__` again. A worker gets the rows and the
parent's matplotlib settings once, then one page at a time from a thread here that waits on it,
so a slow page never holds up the others. A worker that fails leaves its page and the pages not
yet drawn to this process, which draws them as `plots.save_page` always did: the report is whole,
and a warning says why the worker failed (the end of its stderr, or its error), since drawing here
is slower and hides a broken environment.
A worker ignores SIGTERM, SIGHUP and SIGINT: sent to the run's process group (a CI runner's
cancel, a hangup, a terminal's Ctrl-C), they reach the workers too, while the run, which goes on
writing its ending after the first of them, still needs them; before, each died mid-page and its
pages were drawn here, slowly, with a warning of a failed worker (or, of a Ctrl-C, the report was
lost). An interrupted drawing (a second Ctrl-C) kills its workers; a run killed outright (SIGKILL, a second SIGTERM,
`os._exit`) takes them along: each asks Linux to SIGKILL it when the thread that started it dies
(`PR_SET_PDEATHSIG`), since one hung on its page would never find its pipe closed. Elsewhere a
worker goes once its page is drawn and it finds its pipe closed. A worker still on a page after PAGE_TIMEOUT_S (hung inside
matplotlib, say) is killed and its page left out, named by `PagesNotDrawn`; a fresh worker takes
the pages still queued, so the rest of the report lands.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plots import Page, Progress
    from .report import ReportRow

#: The most worker processes: each holds a matplotlib (about 100 MB) and the rows.
MOST_WORKERS = 8

#: How long a worker may take over one page, its start included: a page takes seconds, so ten
#: minutes means a hung worker, not a slow one (a constant: no run has wanted another).
PAGE_TIMEOUT_S = 600.0

#: The signals a worker ignores: sent to the run's whole process group (a CI runner's cancel, a batch
#: system's notice, a hangup, a terminal's Ctrl-C), the first leaves the run writing its ending, which
#: still needs the worker; where the drawing is interrupted, this process kills its workers itself.
DEAF_TO = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))

#: Imports the worker from the package this process imported, wherever it was imported from; its
#: stdout, the answers' stream, is set aside first, so no import's print reaches it.
BOOT = ("import os, sys\n"
        "sink = os.fdopen(os.dup(1), 'wb')\n"
        "os.dup2(2, 1)\n"
        "sys.stdout = sys.stderr\n"
        "import importlib.util\n"
        "spec = importlib.util.find_spec('pytest_specdec')\n"
        "if spec is None or spec.origin != sys.argv[2]:\n"
        "    sys.path.insert(0, sys.argv[1])\n"
        "from pytest_specdec.plot_worker import serve\n"
        "serve(sink)\n")


def workers(pages: int) -> int:
    """How many worker processes draw `pages` pages: one per core this process may use, but no
    more than pages or MOST_WORKERS; 1 means none (drawn here)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    return max(1, min(cores, pages, MOST_WORKERS))


def settings() -> dict[str, Any]:
    """matplotlib's settings as this process has them (a conftest may have set some): the
    workers draw with them, so a page looks as it would drawn here."""
    import matplotlib

    return {key: value for key, value in matplotlib.rcParams.items() if key != "backend"}


class PagesNotDrawn(Exception):
    """Pages whose worker passed PAGE_TIMEOUT_S and was killed; `written` holds the others' files."""

    def __init__(self, names: list[str], written: list[Path]) -> None:
        super().__init__(f"warning: plot page(s) not drawn: {', '.join(names)} (a worker took over "
                         f"{PAGE_TIMEOUT_S:g} s on each and was killed); the report has the other pages")
        self.names = names
        self.written = written


def save_pages(rows: Sequence[ReportRow], pages: Sequence[Page], out_dir: Path, count: int,
               progress: Progress) -> list[Path]:
    """`plots.save_page` of each page by `count` workers; the paths in the order of `pages`.
    Raises PagesNotDrawn, once the others are drawn, where a worker hung on a page."""
    import pytest_specdec

    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(pages)):
        todo.put(index)
    written: dict[int, list[Path]] = {}
    left: list[int] = []  # pages a failed worker did not draw
    hung: list[int] = []  # pages whose worker passed PAGE_TIMEOUT_S: not drawn again, here it may hang too
    started: list[subprocess.Popen] = []  # killed where the drawing is interrupted (Ctrl-C, SIGTERM)
    failures: list[str] = []  # why workers failed, warned once the pages are drawn
    lock = threading.Lock()
    interrupted = threading.Event()  # set by _kill: a worker that starts after it is killed at once
    try:
        payload = pickle.dumps((list(rows), settings(), str(out_dir)), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # a setting no pickle takes: all drawn here
        failures.append(f"none started: the rows or matplotlib's settings cannot be sent to one "
                        f"({type(exc).__name__}: {exc})")
        count, payload = 0, b""
    from .servers.cleanup import parent_death_preexec

    package = Path(pytest_specdec.__file__)
    command = [sys.executable, "-c", BOOT, str(package.parent.parent), str(package)]
    # a thread outlives its workers (each is waited for): dies with it means dies with this process
    dies_with_us = parent_death_preexec()

    def preexec() -> None:
        # a process group's SIGTERM, SIGHUP or Ctrl-C, which the run survives while it writes its
        # ending, would kill the workers mid-page; this process kills them itself where it is interrupted
        for number in DEAF_TO:
            signal.signal(number, signal.SIG_IGN)
        if dies_with_us is not None:
            dies_with_us()

    def finished(index: int, paths: list[Path]) -> None:
        with lock:
            written[index] = paths
            progress(len(written), len(pages))

    def work() -> None:
        while serve_one_worker():  # a worker killed on a hung page: a fresh one takes the pages left
            pass

    def serve_one_worker() -> bool:
        """Pages drawn by one worker until none are left; True where it hung and was killed."""
        index = None
        expired = threading.Event()
        failure = None  # why this worker left its page to this process
        with tempfile.TemporaryFile() as stderr:
            try:
                with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=stderr, preexec_fn=preexec) as worker:
                    with lock:
                        if interrupted.is_set():  # started as the drawing was interrupted: _kill missed it
                            worker.kill()
                            return False
                        started.append(worker)
                    assert worker.stdin is not None and worker.stdout is not None
                    try:
                        first = True
                        while True:
                            try:
                                index = todo.get_nowait()
                            except queue.Empty:
                                index = None
                                break
                            timer = threading.Timer(PAGE_TIMEOUT_S, lambda: (expired.set(), worker.kill()))
                            timer.daemon = True
                            timer.start()
                            try:
                                if first:
                                    worker.stdin.write(payload)
                                    first = False
                                pickle.dump(pages[index], worker.stdin)
                                worker.stdin.flush()
                                answer = pickle.load(worker.stdout)
                            finally:
                                timer.cancel()
                            if not isinstance(answer, list):  # its error: this process draws it
                                failure = _last_line(str(answer))
                                break
                            finished(index, [Path(p) for p in answer])
                            index = None
                            if expired.is_set():  # killed just as it answered: a fresh worker goes on
                                return True
                        if first:
                            worker.stdin.write(payload)
                        pickle.dump(None, worker.stdin)
                        worker.stdin.close()
                    finally:
                        if worker.poll() is None and index is not None:
                            worker.kill()
            except (OSError, EOFError, pickle.UnpicklingError) as exc:  # it did not start, or died
                if not expired.is_set() and not interrupted.is_set():
                    failure = _stderr_tail(stderr) or f"{type(exc).__name__}: {exc}"
        if index is not None:
            with lock:
                (hung if expired.is_set() else left).append(index)
                if failure and not expired.is_set():
                    failures.append(f"{pages[index].name}: {failure}")
        return expired.is_set() and not interrupted.is_set() and not todo.empty()

    threads = [threading.Thread(target=work, name=f"specdec-plots-{n}", daemon=True) for n in range(count)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException:
        _kill(started, lock, interrupted)
        raise
    from .plots import save_page

    while True:  # what the workers left, drawn here
        try:
            left.append(todo.get_nowait())
        except queue.Empty:
            break
    if failures:
        warnings.warn(f"pytest-specdec: plot worker(s) failed, their pages drawn in this process instead: "
                      f"{'; '.join(failures)}", stacklevel=2)
    for index in sorted(left):
        finished(index, save_page(rows, pages[index], out_dir))
    paths = [path for index in range(len(pages)) if index in written for path in written[index]]
    if hung:
        raise PagesNotDrawn([pages[index].name for index in sorted(hung)], paths)
    return paths


def _last_line(text: str) -> str:
    """The last non-blank line of a traceback or stderr: the error itself."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _stderr_tail(stderr: Any) -> str:
    """What a worker wrote last to its stderr (a temporary file), as one line."""
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - 4096))
    return _last_line(stderr.read().decode("utf-8", "replace"))


def _kill(started: list[subprocess.Popen], lock: threading.Lock, interrupted: threading.Event) -> None:
    """The workers of an interrupted drawing, ended before the interrupt goes on: no process the
    run started outlives it (a worker would otherwise draw on until its page is done). A thread
    still starting its worker kills it itself, seeing `interrupted`."""
    with lock:
        interrupted.set()
        for worker in started:
            if worker.poll() is None:
                worker.kill()
        for worker in started:
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
