"""Ends what a killed process leaves running: ``python -m voxanon.pipeline.execution.orphan_reaper PID``.

A command that starts a local Ray instance (``--backend ray`` without an address) is the parent of its
GCS server and raylet, which start agents and workers. Ray ends them all when the command exits, but not
when it is killed (``kill -9``, the out-of-memory killer): the raylet goes with it, and its agents and
workers wait minutes for it to come back (about 140 MB each, for about 150 s). This process, started
beside such a command, keeps the list of the command's descendants (each by PID and start time, so a
reused PID is never taken for one of them), and when the command is gone, kills those still running;
then it exits. Linux only (it reads /proc); elsewhere it exits at once.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


POLL_SECONDS = 1.0


def _processes() -> dict[int, tuple[int, str]]:
    """Every process's (parent PID, start time in clock ticks since boot), by PID."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(name)] = (int(fields[1]), fields[19])  # ppid, starttime
    return found


def descendants(root: int, processes: dict[int, tuple[int, str]]) -> dict[int, str]:
    """``root``'s descendants in ``processes`` (not ``root`` itself), with their start times."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = processes[pid][1]
            stack.extend(children.get(pid, []))
    return found


def reap_after(watched: int) -> list[int]:
    """Waits for ``watched`` to end, then kills its descendants as they were last seen (and theirs, started
    since); returns the PIDs killed."""
    own = os.getpid()
    tracked: dict[int, str] = {}
    watched_start = _processes().get(watched, (0, None))[1]
    while True:
        processes = _processes()
        alive = watched in processes and processes[watched][1] == watched_start
        for pid, start in descendants(watched, processes).items() if alive else ():
            tracked[pid] = start
        # Orphans of the tracked (reparented once their parent died) stay tracked, and so do their children.
        for pid, start in list(tracked.items()):
            if processes.get(pid, (0, None))[1] == start:
                tracked.update(descendants(pid, processes))
        tracked.pop(own, None)
        if not alive:
            break
        time.sleep(POLL_SECONDS)
    killed = []
    for pid, start in tracked.items():
        if processes.get(pid, (0, None))[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                continue
    return killed


def start_reaper() -> subprocess.Popen | None:
    """A reaper for this process (see the module doc), in a session of its own: Ctrl-C in the terminal and the
    end of this process leave it running until it has done its work."""
    if not sys.platform.startswith("linux"):
        return None
    return subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.execution.orphan_reaper", str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


if __name__ == "__main__":
    if sys.platform.startswith("linux"):
        reap_after(int(sys.argv[1]))
