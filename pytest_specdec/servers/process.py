"""`ManagedServer`: one server process -- launch, readiness, liveness, teardown.

Why each choice:
- A new session (process group) per server, so teardown can signal the whole tree (SGLang forks a
  scheduler and a detokenizer per rank) without touching pytest.
- Readiness polls `/health_generate`, because it generates a token: `/health` on older servers and
  `/ready` answer before the model can actually decode. Every 0.05 s for the first seconds, where
  the embedded engine is ready (a refused connection costs nothing), then every 0.5 s. Between polls
  the process and its log are checked, so a crash during warm-up fails in about half a second, not
  at the deadline.
- What the polls saw decides the message at the deadline: connections accepted but never answered
  is a hang; refused or 503 is a slow start. Each failure kind has its own `ServerError.reason`.
- The port is checked free before launch; a bind race (xdist workers picking ports at once) shows
  up as "address already in use" in the log and, for a port we picked, is retried on a new port.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pytest_specdec import sglang_api as api
from pytest_specdec.servers import cleanup
from pytest_specdec.servers.diagnosis import (
    COMMAND_LINE_PREFIX,
    LogFinding,
    LogWatcher,
    ServerError,
    describe_exit,
    is_hang_signature,
    tail,
    unexplained_kill,
)
from pytest_specdec.servers.direct import urlopen
from pytest_specdec.servers.said_wait import SaidWait
from pytest_specdec.servers.spec import ServerSpec

ArgvForPort = Callable[[int], Sequence[str]]

POLL_INTERVAL_S = 0.5
# The embedded engine is ready 1.5-2 s after its launch: a boot polled every 0.5 s waited up to that
# much longer. Until QUICK_BOOT_S into a boot the polls come every QUICK_POLL_INTERVAL_S.
QUICK_BOOT_S = 4.0
QUICK_POLL_INTERVAL_S = 0.05
# SGLang's /health and /health_generate generate one token and wait up to 20 s
# (SGLANG_HEALTH_CHECK_TIMEOUT) before answering 503 themselves; waiting a little longer lets its
# own verdict (and its "Health check failed" log line) arrive instead of our timeout.
HEALTH_TIMEOUT_S = 25.0
# A stalled workload has already waited its stall timeout: the probe that says why is short.
STALL_PROBE_TIMEOUT_S = 2.0
# A ready, idle server answers /health at once: one silent this long gets the rest of its wait said.
HEALTH_QUIET_S = 2.0
# The embedded engine boots in 2-4 s on a loaded CPU: a boot not ready by then gets its wait said,
# and again each interval after, so a model loading for minutes does not pass for a hung run.
BOOT_QUIET_S = 5.0
BOOT_SAY_EVERY_S = 60.0
TERM_GRACE_S = 10.0
# A server that honours SIGTERM exits within a second or two: one still running this long gets the rest said.
TERM_QUIET_S = 3.0
# SIGKILL ends a process at once unless the kernel holds it (uninterruptible sleep, a GPU driver
# call): how long teardown waits for that, and how long it waits before saying so.
KILL_WAIT_S = 10.0
KILL_QUIET_S = 3.0
# A server that failed to boot, or one stopped because the user interrupted the run: nothing in it
# is worth waiting out the full grace for.
INTERRUPTED_GRACE_S = 2.0
PORT_RETRIES = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just called free (there is a race until the server binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something listens on host:port (a bind test, so it also sees non-HTTP holders)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore our own TIME_WAIT leftovers
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def fresh_log_path(log_dir: Path, stem: str) -> Path:
    """`<stem>.log`, or `<stem>.2.log`, ... so a restart never overwrites the crash it follows."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path, n = log_dir / f"{stem}.log", 1
    while path.exists():
        n += 1
        path = log_dir / f"{stem}.{n}.log"
    return path


def probe(url: str, timeout: float) -> tuple[str, int | None]:
    """GET url -> (outcome, status): outcome is `ok`, `http` (non-2xx), `refused`, `timeout`
    (connected, no answer) or `reset` (connection dropped without an answer)."""
    try:
        with urlopen(url, timeout=timeout) as resp:
            resp.read()
            return "ok", resp.status
    except urllib.error.HTTPError as e:
        return "http", e.code
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, ConnectionRefusedError):
            return "refused", None
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return "timeout", None
        return "reset", None
    except (TimeoutError, socket.timeout):
        return "timeout", None
    except (ConnectionError, http.client.HTTPException, OSError):
        return "reset", None


def probe_saying(url: str, timeout: float, announce: Callable[[str], None] | None,
                 waiting: Callable[[float], str]) -> tuple[str, int | None]:
    """`probe` within `timeout`; with `announce`, one probe still unanswered after
    `HEALTH_QUIET_S` has `waiting(seconds left)` said, once, while it goes on waiting."""
    if announce is None or timeout <= HEALTH_QUIET_S:
        return probe(url, timeout)
    result: list[tuple[str, int | None]] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: result.append(probe(url, timeout)), daemon=True)
    thread.start()
    thread.join(HEALTH_QUIET_S)
    if not result:
        announce(waiting(max(timeout - (time.monotonic() - started), 0.0)))
        thread.join()
    return result[0]


def _pids(pids: Sequence[int]) -> str:
    return f"pid {pids[0]}" if len(pids) == 1 else f"pids {', '.join(map(str, pids))}"


def describe_probe(path: str, outcome: str, status: int | None, timeout: float) -> str:
    """`/health_generate did not answer within 2s`: a `probe` outcome in words."""
    what = {
        "ok": "answered 200",
        "http": f"answered HTTP {status}",
        "timeout": f"did not answer within {timeout:g}s",
        "refused": "refused the connection",
    }.get(outcome, "dropped the connection")
    return f"{path} {what}"


#: Ways a boot fails that another process on its GPUs (memory, compute) can cause.
_BOOT_FAILURES = frozenset({"warmup-crash", "exited", "hang", "slow-start"})


class ManagedServer:
    """A server process we own. `start()` returns once it is ready or raises `ServerError`.

    `argv_for_port` builds the command for a given port (a backend's `argv_builder`), so a port
    retry needs no knowledge of the backend. `gpus` (physical indices from a lease) become
    CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA's numbering matches NVML's and
    nvidia-smi's, which the lease manager uses.
    """

    def __init__(
        self,
        spec: ServerSpec,
        argv_for_port: ArgvForPort,
        *,
        log_dir: Path,
        gpus: Sequence[int] = (),
        port: int | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 600.0,
        env: Mapping[str, str] | None = None,
        poll_interval: float = POLL_INTERVAL_S,
        health_timeout: float = HEALTH_TIMEOUT_S,
        term_grace: float = TERM_GRACE_S,
        wait_gpu_release: bool = True,
        argv_hint: str = "",
        startup_setting: str = "--specdec-startup-timeout",
        stall_timeout: float | None = None,
        stall_setting: str = "--specdec-stall-timeout",
        announce: Callable[[str], None] | None = None,
        placement: str = "",
    ) -> None:
        self.spec = spec
        self.placement = placement  # `GPUs 4,5 (NVIDIA H200)`, named by its failures
        self.argv_for_port = argv_for_port
        self.log_dir = Path(log_dir)
        self.gpus = tuple(gpus)
        self.host = host
        self.startup_timeout = startup_timeout
        self.extra_env = dict(env or {})
        self.poll_interval = poll_interval
        self.health_timeout = health_timeout
        self.term_grace = term_grace
        self.wait_gpu_release = wait_gpu_release
        self.argv_hint = argv_hint  # where the flags a refused command line got come from, and the fix
        self.startup_setting = startup_setting  # where the user set startup_timeout: the advice names it
        self.stall_timeout = stall_timeout  # the run's bound on silence, which caps a liveness probe
        self.stall_setting = stall_setting
        self.announce = announce  # a progress line past capture, for a wait long enough to pass for a hang
        # told the server's processes as they appear while it boots (the pool: its lease's entry)
        self.on_processes: Callable[[list[int]], None] | None = None
        self._noted: tuple[int, ...] = ()
        self._requested_port = port
        self.port: int | None = port
        self.log_path: Path | None = None
        self.argv: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._log_file = None
        self._watcher: LogWatcher | None = None
        self._ready = False
        self._stopped = False
        self._settled = False
        self._lost_port_race = True
        self._boot_started = self._boot_deadline = 0.0  # wait_ready's, for the line it says
        self._boot_say_at = float("inf")
        self.died: ServerError | None = None

    # -- public state --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def processes(self) -> list[int]:
        """The server's process and its descendants (what its CPU time is spread over)."""
        if self._proc is None or self._stopped:
            return []
        return [self._proc.pid, *cleanup.descendants(self._proc.pid)]

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and not self._stopped and self._proc.poll() is None

    @property
    def liveness_timeout(self) -> float:
        """How long a ready server's /health may take: `health_timeout`, capped by the run's stall
        timeout, since a server that produces no token for that long counts as stalled in a
        workload and so counts as frozen between workloads too."""
        if self.stall_timeout is None:
            return self.health_timeout
        return min(self.health_timeout, self.stall_timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Launch and wait until ready. On failure the process is already torn down."""
        for attempt in range(PORT_RETRIES):
            try:
                self.launch()
                self.wait_ready()
                return
            except ServerError as e:
                # Nothing to save in a server that failed to start: short grace, then SIGKILL.
                self.stop(check_gpu_release=False, grace=min(self.term_grace, INTERRUPTED_GRACE_S))
                if e.reason == "port-in-use" and self._requested_port is None and self._lost_port_race \
                        and attempt + 1 < PORT_RETRIES:
                    continue  # we picked the port and lost a race for it: pick another
                raise
            except BaseException:
                # a pytest-timeout or Ctrl-C mid-boot: no half-started server outlives its boot
                self.stop(check_gpu_release=False, grace=min(self.term_grace, INTERRUPTED_GRACE_S))
                raise

    def launch(self) -> None:
        port = self._requested_port or free_port(self.host)
        if port_in_use(port, self.host):
            raise ServerError(
                self.spec.id,
                "port-in-use",
                f"port {self.host}:{port} is already in use by another process; stop it or pick "
                f"another port",
                headline=f"server {self.spec.id} cannot start: address {self.host}:{port} already in use",
            )
        self.port = port
        self.argv = [str(a) for a in self.argv_for_port(port)]
        self.log_path = fresh_log_path(self.log_dir, self.spec.id)
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1"})
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env.update(self.extra_env)
        # the GPUs the server was given, in its log: where else a user could tell is the lease book
        placement = "".join(f"{name}={env[name]} " for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
                            if name in env and (self.gpus or name in self.extra_env))
        env = cleanup.server_env(env)
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"{COMMAND_LINE_PREFIX}{placement}{' '.join(self.argv)}\n".encode())
        self._log_file.flush()
        self._ready = False
        self._stopped = False
        self._settled = False
        self.died = None
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=cleanup.parent_death_preexec(),
        )
        # With start_new_session the child's pid is its process group id.
        cleanup.register(self._proc.pid, self.spec.id)
        self._watcher = LogWatcher(self.log_path)
        self._note_processes()

    def _note_processes(self) -> None:
        """Tell `on_processes` the server's processes whenever they changed: from its launch on, not
        once it is ready, since weights load (GPU memory held) in the boot, and a worker killed then
        must leave its lease waiting for that memory as for a ready server's."""
        if self.on_processes is None:
            return
        now = self.processes()
        if not now:
            return
        # a walk of /proc can miss a live child for a moment: what was seen stays while it lives
        pids = tuple(sorted({*now, *(pid for pid in self._noted if cleanup.alive(pid))}))
        if pids != self._noted:
            self._noted = pids
            self.on_processes(list(pids))

    def wait_ready(self) -> None:
        """Poll /health_generate until 200; raise a specific ServerError otherwise."""
        assert self._proc is not None and self._watcher is not None, "launch() first"
        self._boot_started = time.monotonic()
        deadline = self._boot_deadline = self._boot_started + self.startup_timeout
        self._boot_say_at = self._boot_started + BOOT_QUIET_S
        seen: list[str] = []
        while True:
            self._raise_if_failed_during_startup()
            self._note_processes()  # the engine's own workers (SGLang's schedulers) start as it boots
            self._say_boot_wait()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            outcome, status = self._watched_probe(api.HEALTH_GENERATE, min(self.health_timeout, remaining))
            seen.append(outcome if outcome != "http" else f"http-{status}")
            if outcome == "ok":
                # A 200 from someone else's server on a port we lost would lie: re-check ours.
                self._raise_if_failed_during_startup()
                self._note_processes()
                self._ready = True
                return
            now = time.monotonic()
            interval = QUICK_POLL_INTERVAL_S if now - self._boot_started < QUICK_BOOT_S else self.poll_interval
            time.sleep(max(0.0, min(interval, self.poll_interval, deadline - now)))
        raise self._deadline_error(seen)

    def _watched_probe(self, path: str, timeout: float) -> tuple[str, int | None]:
        """`probe` in a daemon thread, checking the process and log every poll interval meanwhile,
        so a crash is reported at once even while a slow health request is outstanding."""
        result: list[tuple[str, int | None]] = []
        thread = threading.Thread(target=lambda: result.append(probe(self.url + path, timeout)), daemon=True)
        thread.start()
        while True:
            thread.join(self.poll_interval)
            if result:
                return result[0]
            self._raise_if_failed_during_startup()
            self._say_boot_wait()

    def _say_boot_wait(self) -> None:
        """Once a boot has taken `BOOT_QUIET_S`, and each `BOOT_SAY_EVERY_S` after, say how much
        longer it may take, what bounds it and the log's last line."""
        now = time.monotonic()
        if self.announce is None or now < self._boot_say_at:
            return
        self._boot_say_at = now + BOOT_SAY_EVERY_S
        last = tail(self.log_path, 1).strip()
        if last.startswith(COMMAND_LINE_PREFIX):
            last = ""  # the command line the log opens with: the server has said nothing yet
        said = f"its log's last line: {last[:200]}" if last else "nothing in its log yet"
        self.announce(f"server {self.spec.id}: not ready after {now - self._boot_started:.0f}s; waiting up to "
                      f"{max(self._boot_deadline - now, 0):.0f}s more for its warm-up to answer "
                      f"/health_generate (bound: the startup timeout, {self.startup_setting}); {said} "
                      f"(log: {self.log_path})")

    def _scan(self):
        """Scan the log; after a first fatal line, wait a moment so the rest of the traceback
        (which holds the specific cause) is in the log too."""
        finding = self._watcher.scan()
        if finding.fatal_line is not None and not self._settled:
            self._settled = True
            time.sleep(0.3)
            finding = self._watcher.scan()
        return finding

    def _raise_if_failed_during_startup(self) -> None:
        code = self._proc.poll()  # first: a process that has exited has written all its log
        finding = self._scan()
        if finding.address_in_use:
            # The log names the port that was taken; an extra `--port` may have replaced ours.
            port = finding.taken_port or self.port
            self._lost_port_race = port == self.port
            raise self._error(
                "port-in-use",
                f"could not bind {self.host}:{port}: address already in use",
                headline=f"server {self.spec.id} cannot start: address {self.host}:{port} already in use",
            )
        if finding.fatal_line is not None:
            cause = finding.cause
            if is_hang_signature(finding.fatal_line):  # a watchdog / health verdict: stuck, not crashed
                raise self._error("hang", cause, headline=f"server {self.spec.id} hangs during warm-up: {cause}")
            if code is None:  # a crashing server exits just after its last line; name its exit status
                try:
                    code = self._proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
            how = "" if code is None else f" ({describe_exit(code)})"
            raise self._error(
                "warmup-crash",
                cause,
                headline=f"server {self.spec.id} crashed during warm-up{how}: {cause}",
            )
        if code == 2 and finding.usage_error is not None:  # argparse's exit status
            hint = f"; {self.argv_hint}" if self.argv_hint else ""
            raise self._error(
                "refused",
                finding.usage_error,
                headline=f"server {self.spec.id} cannot start: its command line was refused "
                f"({finding.usage_error}){hint}",
            )
        if code is not None:
            raise self._error(
                "exited",
                f"{describe_exit(code)} before it was ready{unexplained_kill(code)}",
                headline=f"server {self.spec.id} {describe_exit(code)} before it was ready "
                f"(no known fatal error in its log){unexplained_kill(code)}",
            )

    def _deadline_error(self, seen: list[str]) -> ServerError:
        t = self.startup_timeout
        last = seen[-1] if seen else "refused"
        finding = self._watcher.scan()
        if last in ("timeout", "reset"):
            extra = " although its log says it is ready" if finding.ready else ""
            return self._error(
                "hang",
                f"/health_generate accepted connections but never answered within {t:g}s{extra}; "
                f"the process is alive",
                headline=f"server {self.spec.id} hangs: /health_generate accepted connections but "
                f"never answered within the {t:g}s startup timeout{extra} (process alive, pid {self.pid})",
            )
        state = (
            "its port never opened"
            if last == "refused"
            else f"/health_generate still answers {last[5:]}, i.e. warm-up has not finished"
        )
        return self._error(
            "slow-start",
            f"not ready after the {t:g}s startup timeout ({state})",
            headline=f"server {self.spec.id} not ready after the {t:g}s startup timeout: still "
            f"starting ({state}); raise {self.startup_setting} if it is just slow",
        )

    def check_alive(self, timeout: float | None = None, announce: Callable[[str], None] | None = None) -> None:
        """Liveness: the process runs, its log shows no fatal line, and `/health` answers 200
        within `timeout` (default `liveness_timeout`). Raises ServerError `died` / `unresponsive`;
        a death is remembered. `announce` (a progress printer, default the server's own): a
        /health silent for `HEALTH_QUIET_S` gets the rest of the wait said as it goes on, since the
        whole of it is long enough to pass for a hung run."""
        if self.died is not None:
            raise self.died
        if self._proc is None or self._stopped:
            raise ServerError(self.spec.id, "died", "is not running (never started, or stopped)")
        finding = self._scan()
        code = self._proc.poll()
        if finding.fatal_line is not None or code is not None:
            self.died = self._death_error(self._scan(), code)
            raise self.died
        capped = not timeout and self.liveness_timeout < self.health_timeout  # by the stall timeout
        timeout = timeout or self.liveness_timeout
        outcome, status = self._probe_health(timeout, capped, announce or self.announce)
        if outcome != "ok":
            # Give a crash that is just happening a moment to reach the log / exit status.
            time.sleep(0.2)
            finding, code = self._scan(), self._proc.poll()
            if finding.fatal_line is not None or code is not None:
                self.died = self._death_error(finding, code)
                raise self.died
            what = describe_probe("/health", outcome, status, timeout)
            advice = f"; raise {self.stall_setting} if the server is just slow" \
                if outcome == "timeout" and capped else ""
            raise self._error("unresponsive", f"{what} (process alive, pid {self.pid}){advice}")

    def _probe_health(self, timeout: float, capped: bool,
                      announce: Callable[[str], None] | None) -> tuple[str, int | None]:
        """`probe` of /health within `timeout`; with `announce`, the rest of a wait that outlasts
        `HEALTH_QUIET_S` said (the server, how long, the setting that bounds it) as it goes on."""
        bound = (f"the stall timeout, {self.stall_setting}" if capped else
                 f"the {self.health_timeout:g}s /health limit; {self.stall_setting} lowers it")
        return probe_saying(
            self.url + api.HEALTH, timeout, announce,
            lambda rest: f"server {self.spec.id}: /health did not answer within {HEALTH_QUIET_S:g}s; "
                         f"waiting up to {rest:.0f}s more before counting it as frozen (bound: {bound})")

    def stall_error(self, stall: str, probe_timeout: float = STALL_PROBE_TIMEOUT_S) -> ServerError:
        """The error for a workload that stalled (`stall` says for how long, with how many
        requests in flight), after one probe: is the process alive, does /health_generate
        answer within `probe_timeout`? A death found meanwhile is reported as the death."""
        finding = self._scan() if self._watcher is not None else LogFinding()
        code = self._proc.poll() if self._proc is not None else None
        if finding.fatal_line is not None and not is_hang_signature(finding.fatal_line) \
                or code is not None:
            self.died = self._death_error(finding, code)
            return self.died
        outcome, status = probe(self.url + "/health_generate", probe_timeout)
        seen = describe_probe("/health_generate", outcome, status, probe_timeout)
        hang = f", log: {finding.cause}" if finding.fatal_line is not None else ""
        self.died = self._error(
            "stalled", f"{stall}; probe: process alive (pid {self.pid}), {seen}{hang}",
            headline=f"server {self.spec.id} stalled: {stall}; probe: process alive "
                     f"(pid {self.pid}), {seen}{hang}")
        return self.died

    def diagnose(self) -> ServerError | None:
        """After a request failed: the death error if the server died, else None."""
        try:
            self.check_alive()
        except ServerError as e:
            return e
        return None

    def _death_error(self, finding: LogFinding, code: int | None) -> ServerError:
        fatal_line = finding.fatal_line
        if fatal_line is not None and code is None and is_hang_signature(fatal_line):
            cause = finding.cause
            return self._error("hang", cause, headline=f"server {self.spec.id} hangs: {cause}")
        if fatal_line is not None:
            cause = finding.cause
        else:
            cause = f"the process {describe_exit(code)}{unexplained_kill(code)}" if code is not None \
                else "unknown cause"
        return self._error("died", cause, headline=f"server {self.spec.id} died: {cause}")

    def _error(self, reason: str, cause: str, headline: str | None = None) -> ServerError:
        if reason in _BOOT_FAILURES and self.gpus and self.wait_gpu_release \
                and "CUDA_VISIBLE_DEVICES" not in self.extra_env:  # real GPUs, seen by the server
            from pytest_specdec.servers.gpu_memory import others_on

            others = others_on(self.gpus, self.processes())
            if others:  # what no lease or claim keeps off: the likelier cause of a failed boot
                note = (f"; its GPUs were not free: {others}; free them, or give the run other GPUs "
                        f"(CUDA_VISIBLE_DEVICES)")
                cause += note
                headline = (headline or f"server {self.spec.id} {reason}: {cause[:-len(note)]}") + note
        return ServerError(
            self.spec.id, reason, cause, log_path=self.log_path, tail_text=tail(self.log_path), headline=headline,
            placement=self.placement)

    def stop(self, check_gpu_release: bool = True, grace: float | None = None) -> None:
        """SIGTERM the group, wait `grace` (default `term_grace`), SIGKILL, then confirm no process
        survives (a wait of up to `KILL_WAIT_S`, said once it outlasts `KILL_QUIET_S`).

        Idempotent. Raises ServerError(`teardown`) when something survives SIGKILL or, on GPUs,
        when the memory is not released (the next server on those GPUs would fail to start).
        """
        proc = self._proc
        if proc is None or self._stopped:
            return
        pgid = proc.pid
        tree = set(cleanup.descendants(pgid)) | {pgid}
        self._signal_group(pgid, signal.SIGTERM)
        self._signal_group(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once resumed
        self._wait_exit(proc, self.term_grace if grace is None else grace)
        self._signal_group(pgid, signal.SIGKILL)
        for pid in tree:  # descendants that moved to their own session
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait = SaidWait(KILL_WAIT_S, self.announce, KILL_QUIET_S)
        while True:
            proc.poll()  # reaps the server once it is dead, which sets its returncode
            survivors = sorted(set(cleanup.group_members(pgid)) | {p for p in tree if cleanup.alive(p)})
            if not survivors or wait.over():
                break
            wait.pause(0.05, lambda left: (
                f"server {self.spec.id}: {_pids(survivors)} still alive {KILL_QUIET_S:g}s after SIGKILL (stuck in "
                f"the kernel: uninterruptible sleep, or a GPU driver call); waiting up to {left:.0f}s more for it "
                f"to go (bound: the {KILL_WAIT_S:g}s SIGKILL wait)"))
        proc.poll()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if survivors:  # stay registered: the exit-time sweep tries once more
            raise self._error("teardown", f"processes {survivors} survived SIGKILL")
        cleanup.unregister(pgid)
        self._stopped = True
        if check_gpu_release and self.wait_gpu_release and self.gpus:
            from pytest_specdec.servers.gpu_memory import wait_released

            leftover = wait_released(self.gpus, tree, announce=self.announce, who=f"server {self.spec.id}")
            if leftover:
                raise self._error(
                    "teardown",
                    f"GPU memory not released after teardown: {leftover}",
                )

    def _wait_exit(self, proc: subprocess.Popen, grace: float) -> None:
        """Wait up to `grace` for `proc` to exit after SIGTERM; one still running after
        `TERM_QUIET_S` has the rest of the wait said."""
        quiet = TERM_QUIET_S if self.announce is not None and grace > TERM_QUIET_S else grace
        try:
            proc.wait(timeout=quiet)
            return
        except subprocess.TimeoutExpired:
            if quiet >= grace:
                return
        self.announce(f"server {self.spec.id}: still running {quiet:g}s after SIGTERM; waiting up to "
                      f"{grace - quiet:.0f}s more before SIGKILL (bound: the {grace:g}s SIGTERM grace)")
        try:
            proc.wait(timeout=grace - quiet)
        except subprocess.TimeoutExpired:
            pass

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ManagedServer({self.spec.id}, url={self.url}, pid={self.pid})"
