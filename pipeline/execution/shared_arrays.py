"""A batch's arrays between the local streaming executor's processes without pickling their samples.

The streaming executor's local lanes pass each batch from the CPU lane to the driver, to the device process,
back to the driver and to a writer. Pickled whole, its audio and features went through four pipes each way
(about 13 MB per 200 s batch), and the device process spent its host time (un)pickling them while the device
waited. Here the process that hands a batch on writes its arrays into one file in shared memory (``/dev/shm``,
a RAM file system; the temporary folder where there is none) with a single gathering write (the device process
in its sender thread: :mod:`.device_process`), and the batch travels with :class:`SharedArray` references in
their place; the process that takes it maps the file (copy-on-write: no copy, writable arrays; the device
process's receiver thread copies them into its own memory) and removes it. Nothing else changes: the same
arrays, bit for bit.

A file belongs to the run's driver (its name carries the driver's process id): the driver removes its own
leftovers (a batch whose process died) when its lanes close, and those of drivers no longer alive (a killed
run) when the next run's lanes start.
"""
from __future__ import annotations

import mmap
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..systems.stage import RunFault

PREFIX = "voxanon-arrays"
ALIGNMENT = 64
MAX_BUFFERS = 1024
"""Buffers per gathering write (the system's IOV_MAX on Linux)."""


@dataclass(frozen=True)
class SharedArray:
    """Where an array of a batch waits in a shared file: ``dtype`` and ``shape`` at byte ``offset``."""
    path: str
    offset: int
    dtype: str
    shape: tuple[int, ...]


def shared_folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _items(batch):
    """(holder, key) of every array slot of the batch's utterances: their audio, features and vectors."""
    for item in batch.ready:
        utterance = item.utterance
        yield utterance, "audio"
        for holder in (utterance.features, utterance.vectors):
            yield from ((holder, key) for key in list(holder))


def _get(holder, key):
    return holder[key] if isinstance(holder, dict) else getattr(holder, key)


def _set(holder, key, value) -> None:
    if isinstance(holder, dict):
        holder[key] = value
    else:
        setattr(holder, key, value)


def pack(batch, owner: int | None = None):
    """``batch`` with its arrays moved into one new shared file (the references in their place); ``owner``:
    the driver's process id (default: this process's parent, the driver of a lane's worker)."""
    owner = os.getppid() if owner is None else owner
    path = str(shared_folder() / f"{PREFIX}-{owner}-{os.getpid()}-{uuid.uuid4().hex}")
    buffers, offset = [], 0
    for holder, key in _items(batch):
        value = _get(holder, key)
        if not isinstance(value, np.ndarray) or value.dtype.hasobject or not value.nbytes:
            continue
        value = np.ascontiguousarray(value)
        gap = -offset % ALIGNMENT
        if gap:
            buffers.append(bytes(gap))
        offset += gap
        _set(holder, key, SharedArray(path, offset, value.dtype.str, value.shape))
        buffers.append(memoryview(value).cast("B"))
        offset += value.nbytes
    if buffers:
        try:
            _write(path, buffers, offset)
        except OSError as error:
            raise RunFault(f"shared arrays {path}: cannot write {offset} bytes ({error}; is the shared-memory folder "
                           f"{shared_folder()} full?); rerun to resume") from None
    return batch


def _write(path: str, buffers: list, size: int) -> None:
    """``buffers`` into a new file at ``path``: written under a temporary name, then renamed."""
    partial = path + ".part"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        written = 0
        while written < size:  # one gathering write, repeated only where the system cut it short
            written += os.writev(descriptor, _after(buffers, written)[:MAX_BUFFERS])
    finally:
        os.close(descriptor)
    os.rename(partial, path)


def _after(buffers: list, skip: int) -> list:
    """The byte buffers past their first ``skip`` bytes."""
    rest = []
    for buffer in buffers:
        size = len(buffer)
        if skip >= size:
            skip -= size
            continue
        rest.append(memoryview(buffer)[skip:] if skip else buffer)
        skip = 0
    return rest


def unpack(batch, private: bool = False):
    """``batch`` with its arrays back from their shared files (views of a private copy-on-write mapping of each:
    no copy), the files removed. ``private``: copies in this process's memory instead, the mappings gone (the
    device process's receiver: its main thread then takes no page fault on them)."""
    buffers: dict[str, mmap.mmap] = {}
    for holder, key in _items(batch):
        value = _get(holder, key)
        if not isinstance(value, SharedArray):
            continue
        if value.path not in buffers:
            buffers[value.path] = _read(value.path)
        array = np.frombuffer(buffers[value.path], np.dtype(value.dtype), int(np.prod(value.shape, dtype=np.int64)),
                              value.offset).reshape(value.shape)
        _set(holder, key, array.copy() if private else array)
    return batch


def _read(path: str) -> mmap.mmap:
    """The file at ``path`` mapped, then removed."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        mapping = mmap.mmap(descriptor, os.fstat(descriptor).st_size, access=mmap.ACCESS_COPY)
    finally:
        os.close(descriptor)
    os.unlink(path)
    return mapping


def remove_leftovers(owner: int) -> None:
    """Remove the shared files of the driver ``owner`` and of drivers no longer running."""
    for path in shared_folder().glob(f"{PREFIX}-*"):
        try:
            driver = int(path.name[len(PREFIX) + 1:].split("-")[0])
        except ValueError:
            continue
        if driver == owner or not _alive(driver):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
