"""The watchdog: kills a pytest process's servers once that process is gone, however it went.

Run as a script by path (`python watchdog.py TOKEN`), never imported by it, so it needs nothing of
the package. Its stdin is a pipe from pytest carrying `+pgid` / `-pgid` lines; the pipe reaches EOF
when its writer dies. Then it SIGKILLs every group still registered, and every process whose
environment holds `SPECDEC_SERVER_OWNER=TOKEN`: the servers' descendants that left their group
(setsid) are orphans by then, so no tree walk can find them, but they inherited the token.
"""

from __future__ import annotations

import os
import signal
import sys

OWNER_ENV = "SPECDEC_SERVER_OWNER"


def tagged(token: str) -> list[int]:
    """Pids other than ours whose environment holds OWNER_ENV=token; none where /proc is missing
    (not Linux) or a process is not ours to read."""
    entry = f"{OWNER_ENV}={token}".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if entry in environ:
            found.append(int(name))
    return found


def kill_tagged(token: str, rounds: int = 3) -> None:
    """SIGKILL every tagged process; scan again, since a fork in flight may have made another."""
    for _ in range(rounds):
        pids = tagged(token)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not pids:
            return


def main(token: str) -> None:
    groups: set[int] = set()
    for line in sys.stdin:
        line = line.strip()
        if line[:1] == "+":
            groups.add(int(line[1:]))
        elif line[:1] == "-":
            groups.discard(int(line[1:]))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    kill_tagged(token)


if __name__ == "__main__":
    main(sys.argv[1])
