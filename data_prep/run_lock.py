"""One run at a time per output folder: an advisory lock on ``<folder>/.lock``.

The lock is ``flock`` on that file, which the kernel releases when its holder exits for
any reason (``kill -9`` included), so a lock that is held belongs to a live run. The file
also holds a JSON record of the holder (PID, host, start time) so that a second run can
say whose the lock is. A record left by a run that is gone (its flock released) is stale
and taken over with a warning. Where ``flock`` does not work (some network file systems)
the record decides: a live process on this host holds the set; a process on another host
cannot be checked, so the message says to remove the file if that run is gone.

The file is never deleted (deleting it would let two runs lock two different files); the
holder empties the record when it finishes.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from .errors import VoxanonError

try:
    import fcntl
except ImportError:  # Windows: no flock; the record alone decides
    fcntl = None

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# A run that has just taken the lock writes its record a moment later; wait this long for it.
ORPHAN_WAIT_SECONDS = 10.0
RECORD_WAIT_SECONDS = 1.0


class RunLockedError(VoxanonError):
    """Another live run holds the output folder."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), telling a reused PID apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` of this host is running (not a zombie), and is the one started at ``start``."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    if not Path("/proc").is_dir():
        return True
    current = process_start(pid)
    return current is not None and (start is None or current == start)


def _record() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "process_start": process_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]])}


def _read_record(fd: int) -> dict | None:
    text = os.pread(fd, 65536, 0).decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _describe(record: dict | None) -> str:
    if record is None:
        return "another voxanon run (it has not yet written its PID and host)"
    return (f"another voxanon run (PID {record.get('pid')} on host {record.get('host')}, "
            f"started {record.get('started')}: {record.get('command')})")


def _flock(fd: int) -> bool | None:
    """True: locked; False: held by another open file (a live run); None: flock unsupported here."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold ``<folder>/.lock`` for the block, or raise :class:`RunLockedError` at once naming the holder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        locked = _flock(fd)
        if locked is False:
            deadline = time.monotonic() + RECORD_WAIT_SECONDS
            record = _read_record(fd)
            while record is None and time.monotonic() < deadline:
                time.sleep(0.05)
                record = _read_record(fd)
            # A run killed with kill -9 leaves its worker processes holding the lock's file for the moments they
            # take to die with it (they get a signal when their parent dies): wait for them, not for a live run.
            deadline = time.monotonic() + ORPHAN_WAIT_SECONDS
            while (locked is False and record is not None and record.get("host") == socket.gethostname()
                   and not process_alive(int(record.get("pid") or 0), record.get("process_start"))
                   and time.monotonic() < deadline):
                time.sleep(0.1)
                locked = _flock(fd)
        if locked is False:
            raise RunLockedError(f"{folder}: {_describe(record)} is writing this output set; wait for it to "
                                 f"finish, or write to another output folder")
        previous = _read_record(fd)
        if previous is not None and previous.get("pid") != os.getpid():
            same_host = previous.get("host") == socket.gethostname()
            alive = same_host and process_alive(int(previous.get("pid") or 0), previous.get("process_start"))
            if alive or (locked is None and not same_host):
                raise RunLockedError(
                    f"{folder}: {_describe(previous)} holds this output set"
                    + ("" if alive else f"; file locks do not work here, so if that run is gone remove {path}"))
            log.warning("%s: taking over the stale lock of a run that is gone (PID %s on host %s)",
                        folder, previous.get("pid"), previous.get("host"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(_record()) + "\n").encode("utf-8"), 0)
        os.fsync(fd)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
