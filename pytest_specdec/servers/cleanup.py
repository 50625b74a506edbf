"""Every server process we start is gone when pytest goes, however pytest goes.

Three layers, because each covers a way out the others miss:

1. normal teardown (the pool's `close()`, fixtures' finalizers) -- the polite path;
2. this registry: an `atexit` hook plus SIGTERM / SIGHUP handlers that SIGKILL every registered
   process group, and what its leader spawned into sessions of their own -- covers `sys.exit`, an
   uncaught exception and a CI runner's SIGTERM (SIGINT already becomes KeyboardInterrupt, which
   runs teardown and then atexit). In a pytest run that uses the plugin (`interrupt_on_signals`)
   the first SIGTERM or SIGHUP, once the servers are killed, ends the run as Ctrl-C does, so the
   summary, the report and the baselines of the tests that finished are still written; a batch
   system's SIGTERM is a notice before its SIGKILL, and a SIGHUP is an ssh session that dropped,
   whose terminal is gone: first the output bound for it is sent to a log (hangup.py), since a
   write to a hung-up terminal fails and could break the ending. One that comes while the run
   writes that ending (`ending`) kills the servers and lets it finish, and so does a first Ctrl-C
   there (SIGINT, which raises KeyboardInterrupt everywhere else). A second SIGTERM or SIGHUP
   ends the process at once, a second Ctrl-C the ending (the plugin says in one line what it left),
   a Ctrl-C that stopped the tests being the first;
3. for what runs no Python code at all (pytest SIGKILLed, or `os._exit` as pytest-timeout's
   thread method does): a watchdog process per pytest process, told each group over a pipe; the
   pipe reaches EOF when its writer dies, however it dies, and the watchdog then SIGKILLs every
   group still registered. `PR_SET_PDEATHSIG` (Linux) on the server's leader process is a second
   net for the leader itself (it cannot reach grandchildren, hence the watchdog). A grandchild
   that left the group (setsid) is an orphan by then, beyond any tree walk: every server starts
   with this process's owner token in its environment (`server_env`), its descendants inherit it,
   and on Linux the watchdog, like layer 2, kills every process whose environment holds it.
   An xdist worker that starts servers asks to die with its controller (`die_with_parent`), so a
   killed controller sets this layer off in its workers at once.

Also here: finding a server's descendants and the members of its process group (psutil), used
to confirm that nothing survived a teardown.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_specdec.servers import watchdog

if TYPE_CHECKING:
    from pytest_specdec.hangup import Terminal

_lock = threading.Lock()
_groups: dict[int, str] = {}  # pgid -> label, for processes still to be killed at exit
_installed = False
_previous_handlers: dict[int, object] = {}
_interrupts = False  # the next SIGTERM or SIGHUP raises KeyboardInterrupt instead of ending the process
_terminal: Terminal | None = None  # where a SIGHUP sends the output bound for the terminal
_notice = False  # whether a SIGHUP says on the terminal where the output goes (one process of a run)
_ending = False  # the run writes its ending (pytest_sessionfinish): an interrupt would only break it
_passes_on: Callable[[], list[int]] | None = None  # an xdist controller's workers, told of its interrupt
_worker = False  # an xdist worker: one repeat of the signal that interrupted it is that interrupt again
_taken: tuple[int, float] | None = None  # (signal, when) that interrupted this worker, until its one repeat comes
#: How soon a repeat must come to be the same interrupt: the direct and the passed-on copies come within
#: milliseconds, a second or more where the controller waits for a CPU; a later one (execnet's own
#: SIGINT, 5 s into its shutdown) is a new interrupt.
REPEAT_WINDOW_S = 3.0
_passed: tuple[int, int] | None = None  # (signal, workers it reached): what the controller passed on
_sigints = 0  # SIGINTs this process took since interrupt_on_signals: only the first is passed on
_armed = False  # interrupt_on_signals ran for this run (it uses the plugin), until its ending is over
_took_sigint = False  # the ending took SIGINT: Python's handler (or `_theirs`) goes back after it
_theirs: Callable | None = None  # the project's own SIGINT handler the ending took: the second Ctrl-C is its
_ctrl_c_spent = False  # a KeyboardInterrupt stopped this run's tests: the ending's first Ctrl-C is the run's second

SIGTERM_INTERRUPT = "SIGTERM: {killed}the run ends as after Ctrl-C, reporting the tests that finished " \
                    "(a second SIGTERM or SIGHUP ends it at once)"
SIGHUP_INTERRUPT = "SIGHUP (a terminal hangup, or kill -HUP): {killed}the run ends as after Ctrl-C, reporting " \
                   "the tests that finished{where} (a second SIGHUP or SIGTERM ends it at once)"
SIGHUP_NOTICE = "specdec: SIGHUP: {killed}the run ends as after Ctrl-C; its output from here on goes to {log}"
# The ending's first interrupt, either kind: what it does, and what the next of each kind does.
ENDING_CTRL_C = "specdec: Ctrl-C: the run is finishing what it writes (summary, report, baselines); " \
                "a second Ctrl-C stops it at once, leaving no file half-written, and a SIGTERM or SIGHUP " \
                "ends pytest at once"
ENDING_NOTICE = "specdec: {signal}: {killed}the run is finishing what it writes (summary, report, baselines)" \
                "{where}; a Ctrl-C stops it at once, leaving no file half-written, and a second SIGTERM or " \
                "SIGHUP ends pytest at once"


#: How long the interpreter's exit waits for its watchdog: told EOF, it kills what is left and
#: scans /proc once, milliseconds on any host.
WATCHDOG_EXIT_WAIT_S = 5.0
_watchdog: subprocess.Popen | None = None
_watchdog_owner: int | None = None
_token: tuple[int, str] | None = None  # (pid, token): a forked child takes a token of its own


def owner_token() -> str:
    """This process's token, which every server it starts carries in its environment."""
    global _token
    if _token is None or _token[0] != os.getpid():
        _token = (os.getpid(), f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
    return _token[1]


def server_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with this process's owner token, for a server about to start."""
    return {**env, watchdog.OWNER_ENV: owner_token()}


def register(pgid: int, label: str) -> None:
    """Remember a process group to kill if the interpreter leaves without tearing it down."""
    global _installed
    with _lock:
        _groups[pgid] = label
        if not _installed:
            atexit.register(_close_watchdog)  # atexit runs last in first out: after kill_all
            atexit.register(kill_all)
            _install_signal_handlers()
            _installed = True
        _tell_watchdog(f"+{pgid}")


def unregister(pgid: int) -> None:
    with _lock:
        _groups.pop(pgid, None)
        _tell_watchdog(f"-{pgid}")


def _tell_watchdog(message: str) -> None:
    """Send `+pgid` / `-pgid` to this process's watchdog, starting it on first need."""
    global _watchdog, _watchdog_owner
    if _watchdog_owner != os.getpid():  # a forked child must not share its parent's watchdog
        _watchdog, _watchdog_owner = None, os.getpid()
    try:
        if _watchdog is None or _watchdog.poll() is not None:
            if message.startswith("-"):
                return
            # In its own session so neither a terminal's Ctrl-C nor our killpg of a server reaches it.
            _watchdog = subprocess.Popen(
                [sys.executable, watchdog.__file__, owner_token()],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                text=True,
            )
            message = "\n".join(f"+{pgid}" for pgid in _groups)  # includes the new one
        _watchdog.stdin.write(message + "\n")
        _watchdog.stdin.flush()
    except OSError:
        pass  # best effort: the atexit and signal layers still stand


def _close_watchdog() -> None:
    """At interpreter exit, end this process's watchdog as its pipe's EOF would, and reap it: left
    to the exit itself, it is a subprocess still running and an unclosed pipe (ResourceWarnings
    under `-X dev`), and a zombie until the parent is gone."""
    global _watchdog
    with _lock:  # a register on another thread must not write to the pipe this closes
        proc = _watchdog
        if proc is None or _watchdog_owner != os.getpid():  # a forked child's copy is not its own to end
            return
        _watchdog = None
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=WATCHDOG_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        pass  # it finishes on its own; the exit must not wait on a slow /proc scan


def registered() -> dict[int, str]:
    with _lock:
        return dict(_groups)


def kill_all() -> None:
    """SIGKILL every registered group, and the leaders' descendants that left it (setsid): found
    before the group goes (orphaned, they would be init's), and by the owner token. No waiting."""
    for pgid in list(_groups):
        try:
            strays = descendants(pgid)  # a group's leader is the server process itself
        except Exception:  # psutil missing or failing: the group still goes
            strays = []
        for kill, target in [(os.killpg, pgid), *((os.kill, pid) for pid in strays)]:
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        _groups.pop(pgid, None)
    if _token is not None and _token[0] == os.getpid():  # started servers: their setsid descendants too
        watchdog.kill_tagged(_token[1])


def interrupt_on_signals(terminal: Terminal | None = None, notice: bool = True,
                         passes_on: Callable[[], list[int]] | None = None, worker: bool = False) -> None:
    """Make the first SIGTERM or SIGHUP of this pytest run, after killing the servers, raise
    KeyboardInterrupt: pytest then tears down and writes what finished, as after Ctrl-C. Killed at
    once instead, a run lost its summary, report and baselines without a word. A SIGHUP first
    points every descriptor on `terminal` at its log (`notice`: saying so on the terminal, where
    it still takes a line). Only for a pytest session that uses the plugin: elsewhere both keep
    their disposition.

    An xdist controller `passes_on` its interrupt to its workers (the pids it returns) at once:
    else xdist waits for them in their tests, execnet interrupting one after 5 s with a SIGINT that
    a worker started with SIGINT ignored (a CI shell's background job) never sees, and xdist kills
    it 10 s later, its tests' teardown and ending unwritten. A `worker` takes one repeat of its
    interrupting signal as that interrupt again: a hangup or a process group's SIGTERM reaches it
    both directly and through its controller. A second the user sends ends the controller at once,
    and the workers with it.

    A SIGINT the controller takes is passed on the same way where no terminal's Ctrl-C can have
    sent it (its process group is not its terminal's foreground group: `kill -INT` of the
    controller alone, a CI runner's cancel), and a worker there takes one repeat of it as the
    same interrupt; a terminal's Ctrl-C reaches every worker itself, and a copy from the controller
    would come as a second Ctrl-C, in the middle of its teardown."""
    global _interrupts, _terminal, _notice, _passes_on, _worker, _passed, _sigints, _armed, _ctrl_c_spent
    if threading.current_thread() is threading.main_thread():
        _interrupts, _terminal, _notice, _passes_on, _worker = True, terminal, notice, passes_on, worker
        _armed = True
        _passed, _sigints, _ctrl_c_spent = None, 0, False
        _install_signal_handlers()
        if passes_on is not None or worker:
            _install_interrupt_handler()


def ending(started: bool) -> bool:
    """The run's ending (`started`: it writes the summary, report and baselines now; else it has
    written them). A first SIGTERM or SIGHUP in it kills the servers and lets it finish: a
    KeyboardInterrupt there would stop the very writes it asks for, with a traceback. So does a
    first Ctrl-C, in the process that writes the ending (an xdist worker's is over by then): it
    says so in one line (`ENDING_CTRL_C`); the next raises KeyboardInterrupt, which the caller
    turns into one line, or goes to the project's own SIGINT handler where it had one (a
    conftest's). A Ctrl-C that stopped the tests counts as the first (`tests_interrupted`).
    Once it is over, all three take their disposition again.

    Returns whether this ending is guarded so: a run that uses the plugin, in that process."""
    global _ending, _interrupts, _armed, _ctrl_c_spent
    _ending = started
    if started:
        return _take_ctrl_c()
    _give_back_ctrl_c()
    _interrupts = _armed = _ctrl_c_spent = False
    return False


def tests_interrupted(exc: BaseException) -> None:
    """A KeyboardInterrupt stopped the tests (a Ctrl-C, or the SIGTERM or SIGHUP that raised it):
    a Ctrl-C in the ending is then the user's second, which stops it at once, as a second one
    does anywhere else. A SIGTERM or SIGHUP there still lets it finish once (a CI runner's cancel
    that follows its SIGINT, a terminal that drops). pytest's and xdist's `Interrupted` (-x, --sw,
    a worker's interrupt) and pytest.exit() are no Ctrl-C of the user's."""
    global _ctrl_c_spent
    if type(exc) is KeyboardInterrupt:
        _ctrl_c_spent = True


def _take_ctrl_c() -> bool:
    """SIGINT to `_on_ending_interrupt` where Python's handler, `_on_interrupt` or the project's
    own has it; an ignored one stays ignored (a CI shell's background job), and so does the
    default (death by SIGINT)."""
    global _took_sigint, _theirs
    if not _armed or _worker or threading.current_thread() is not threading.main_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGINT)
        if current is signal.default_int_handler or current is _on_interrupt:
            signal.signal(signal.SIGINT, _on_ending_interrupt)
            # Python's own after it: `_on_interrupt` passes a Ctrl-C on to workers the ending ends,
            # and a process that runs on (pytester's in-process run) must get its Ctrl-C back as it was
            _took_sigint = True
        elif callable(current) and current is not _on_ending_interrupt:
            # the project's (a conftest's): ours for the first Ctrl-C, which it would spend as the
            # ending's second; its own from the second on, and after the ending
            signal.signal(signal.SIGINT, _on_ending_interrupt)
            _took_sigint, _theirs = True, current
    except (ValueError, OSError):
        pass
    return True


def _give_back_ctrl_c() -> None:
    global _took_sigint, _theirs
    if not _took_sigint or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGINT) is _on_ending_interrupt:
            signal.signal(signal.SIGINT, _theirs if _theirs is not None else signal.default_int_handler)
    except (ValueError, OSError):
        pass
    _took_sigint, _theirs = False, None


def _on_ending_interrupt(signum, frame) -> None:
    """A Ctrl-C while the run writes its ending: the first lets it finish, as a SIGTERM there
    does; one after it (or after a Ctrl-C, SIGTERM or SIGHUP that stopped the tests) stops it, or
    is the project's own handler's to act on."""
    global _interrupts
    if _interrupts and not _ctrl_c_spent:
        _interrupts = False  # the next SIGINT, SIGTERM or SIGHUP stops it
        _say(ENDING_CTRL_C)
        return
    if _theirs is not None:
        _theirs(signum, frame)
        return
    raise KeyboardInterrupt


def _detached(killed: str) -> str:
    """Send the terminal's output to its log; the words that say where, for the interrupt."""
    if _terminal is None:
        return ""
    try:
        where = _terminal.detach(SIGHUP_NOTICE.format(killed=killed, log=_terminal.log) if _notice else None)
    except Exception:  # the ending goes on: a failed write then fails as it would have
        return ""
    return f"; the terminal's output from here on is in {where}"


def _install_signal_handlers() -> None:
    """Kill our servers on SIGTERM/SIGHUP, then let the previous disposition act.

    Only from the main thread (Python's rule) and only for signals whose handler is the default or
    one we can chain: an ignored one stays ignored (`nohup pytest`: a hangup must not kill the
    servers of a run meant to outlive it). SIGINT is left alone because pytest turns it into a
    clean teardown (under xdist `_install_interrupt_handler` passes it on).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous = signal.getsignal(signum)
            # installed already; or ignored, as nohup starts a run to outlive its terminal
            if previous is _on_signal or previous == signal.SIG_IGN:
                continue
            signal.signal(signum, _on_signal)
        except (ValueError, OSError):
            continue
        _previous_handlers[signum] = previous


def _install_interrupt_handler() -> None:
    """SIGINT to `_on_interrupt`, where Python's own handler has it (an ignored one stays ignored:
    a worker started so takes no Ctrl-C, nor a copy of one)."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_interrupt)
    except (ValueError, OSError):
        pass


def _on_interrupt(signum, frame) -> None:
    """Python's KeyboardInterrupt, but the controller's first one, where no terminal sent it, goes
    on to its workers, and a worker takes one repeat of such a one as the same interrupt."""
    global _taken, _sigints
    if _is_repeat(signum):  # the controller's copy of the SIGINT that reached this worker directly
        return
    _sigints += 1
    # after a SIGTERM or SIGHUP (`_interrupts` off) the workers were interrupted already
    if _interrupts and not _ending and _sigints == 1 and not _from_a_terminal():
        if _worker:
            _taken = (signum, time.monotonic())
        else:
            _pass_on(signum)
    raise KeyboardInterrupt


def _is_repeat(signum: int) -> bool:
    """Whether `signum` is the one repeat of the interrupt this worker took; a later copy of that
    signal spends it too, and is a new interrupt."""
    global _taken
    if _taken is None or _taken[0] != signum:
        return False
    within = time.monotonic() - _taken[1] <= REPEAT_WINDOW_S
    _taken = None
    return within


def _from_a_terminal() -> bool:
    """Whether a SIGINT may be its terminal's Ctrl-C, which reaches every process of the
    terminal's foreground group (an xdist controller's workers share its group)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal, or one hung up
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _on_signal(signum, frame) -> None:
    kill_all()
    previous = _previous_handlers.get(signum)
    if callable(previous):
        previous(signum, frame)
        return
    global _interrupts, _taken
    if _is_repeat(signum):  # the controller passed on the interrupt this worker already took
        return
    if _interrupts:
        _interrupts = False  # the next SIGTERM or SIGHUP ends the process
        _taken = (signum, time.monotonic()) if _worker else None
        _pass_on(signum)
        # an xdist controller starts no server: its workers' own handlers kill theirs
        started = _token is not None and _token[0] == os.getpid()
        killed = "this process's servers were killed; " if started else ""
        if _ending:
            where = _detached(killed) if signum == signal.SIGHUP else ""
            _say(ENDING_NOTICE.format(signal=signal.Signals(signum).name, killed=killed, where=where))
            return
        if signum == signal.SIGHUP:
            raise KeyboardInterrupt(SIGHUP_INTERRUPT.format(killed=killed, where=_detached(killed)))
        raise KeyboardInterrupt(SIGTERM_INTERRUPT.format(killed=killed))
    # Default disposition: restore it and re-deliver, so the exit status still says "signal".
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _pass_on(signum: int) -> None:
    """The controller's interrupt, to each of its workers (`interrupt_on_signals`)."""
    global _passed
    try:
        pids = _passes_on() if _passes_on is not None else []
    except Exception:  # xdist's own wait still ends them
        return
    reached = 0
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            continue
        reached += 1
    if reached:
        _passed = (signum, reached)


def passed_on() -> tuple[str, int] | None:
    """The signal this controller passed on to its workers and how many it reached; None where it
    passed none on (a Ctrl-C, remote workers only, their pids not to be had)."""
    return None if _passed is None else (signal.Signals(_passed[0]).name, _passed[1])


def _say(text: str) -> None:
    """One line on stderr from a signal handler: a raw write, which no buffer it interrupted refuses."""
    try:
        os.write(2, f"\n{text}\n".encode())
    except OSError:
        pass


PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, or None where there is none (not Linux). Looked up among the symbols this
    process has loaded, libc's among them: `ctypes.util.find_library` runs `ldconfig -p` in a
    subprocess, a process started for every server and plot worker the run starts."""
    if not sys.platform.startswith("linux"):
        return None
    for name in (None, "libc.so.6"):
        try:
            return ctypes.CDLL(name, use_errno=True).prctl
        except (OSError, AttributeError):
            continue
    return None


def parent_death_preexec() -> Callable[[], None] | None:
    """A `preexec_fn` that asks Linux to SIGKILL the child when its parent thread dies.

    libc and prctl are resolved here, in the parent: after fork only the call itself runs, so the
    child never imports or loads anything (which could deadlock on a lock another thread held).
    Note the kernel ties this to the *thread* that forked: launch servers from the main thread or
    from a thread that outlives them. Returns None where prctl is unavailable.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; False where prctl is unavailable.

    For an xdist worker, whose parent is the controller: a controller killed outright (SIGKILL,
    the OOM killer) closes the worker's channel, but the worker notices only once its test
    returns, or after execnet's grace of 5 s and 10 more if the test ignores the SIGINT it then
    sends itself; meanwhile it keeps its servers. Killed with the controller, it leaves them to
    the watchdog and their own `PR_SET_PDEATHSIG`, which end them at once.
    """
    prctl = _prctl()
    if prctl is None:
        return False
    parent = os.getppid()
    if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is `pgid`."""
    import psutil  # lazy: only a teardown needs it

    out = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) == pgid:
                out.append(proc.info["pid"])
        except (psutil.Error, OSError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (children may leave our process group with setsid, so teardown
    snapshots them before killing)."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [child.pid for child in children if _status(child) not in (None, psutil.STATUS_ZOMBIE)]


def alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    import psutil

    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return False
    return _status(proc) not in (None, psutil.STATUS_ZOMBIE)


def _status(proc) -> str | None:
    """The process's state, or None once it is gone (AccessDenied counts as alive)."""
    import psutil

    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return psutil.STATUS_RUNNING
