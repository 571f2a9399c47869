"""The memory this process may still take: the machine's available memory, or less where a cgroup limits the process.

A container or a cluster scheduler's job runs inside a cgroup whose limit the kernel enforces by killing the process
(exit 137), whatever ``/proc/meminfo`` says is free. Both cgroup versions are read, from the process's own cgroup
(``/proc/self/cgroup``) up through every ancestor that is visible, since a parent's limit binds its children too:

* v2 (the unified hierarchy, line ``0::/path``): ``memory.max`` less ``memory.current``;
* v1 (line ``N:memory:/path``): ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``, and the ``memory.stat``
  ``hierarchical_memory_limit``, the least limit of the ancestors, including those above the container's view.

A cgroup's usage counts page cache that the kernel reclaims before it kills anything; the reclaimable part
(``inactive_file``) is left out of it, as ``MemAvailable`` leaves it out of the machine's used memory.
Inside a container the cgroup filesystem is often mounted at the container's own cgroup, so the path that
``/proc/self/cgroup`` gives (from the host's root) is not there: the deepest part of it that is under the
mount is used, else the mount's root. A limit of 2^60 bytes or more (v1's "no limit" is 2^63 rounded down to a
page), or above the machine's memory, is no limit.
"""
from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")
NO_LIMIT = 2 ** 60
V2_FILES = ("memory.max", "memory.current", "inactive_file")
V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def available_memory(cgroup_root: Path | None = None, proc_root: Path | None = None) -> int | None:
    """Bytes this process may still take: ``MemAvailable`` or what the tightest cgroup limit leaves, whichever
    is less; None where neither can be read. ``cgroup_root``, ``proc_root``: where the cgroup filesystem and
    /proc are (default :data:`CGROUP_ROOT`, :data:`PROC_ROOT`; others in tests)."""
    cgroup_root = Path(cgroup_root) if cgroup_root is not None else CGROUP_ROOT
    proc_root = Path(proc_root) if proc_root is not None else PROC_ROOT
    meminfo = _meminfo(proc_root / "meminfo")
    physical = meminfo.get("MemTotal")
    found = [meminfo["MemAvailable"]] if "MemAvailable" in meminfo else []
    for hierarchy, path in _memory_cgroups(proc_root / "self" / "cgroup"):
        if hierarchy == "v2":
            found += _cgroup_room(_v2_mount(cgroup_root), path, V2_FILES, physical)
        else:
            found += _cgroup_room(_v1_mount(cgroup_root, hierarchy), path, V1_FILES, physical)
    return min(found) if found else None


def _meminfo(path: Path) -> dict[str, int]:
    """/proc/meminfo's fields in bytes."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return {}
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def _memory_cgroups(path: Path) -> list[tuple[str, str]]:
    """``(hierarchy, path)`` of the process's memory cgroups: ``("v2", path)`` for the unified hierarchy's line
    ``0::/path``, ``(controllers, path)`` for a v1 line naming ``memory`` (``4:memory:/path``)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, cgroup = parts
        if number == "0" and controllers == "":
            found.append(("v2", cgroup))
        elif "memory" in controllers.split(","):
            found.append((controllers, cgroup))
    return found


def _v2_mount(cgroup_root: Path) -> Path:
    """Where the unified hierarchy is mounted: the cgroup root itself, or its ``unified`` folder (hybrid layout)."""
    hybrid = cgroup_root / "unified"
    return hybrid if (hybrid / "cgroup.controllers").is_file() else cgroup_root


def _v1_mount(cgroup_root: Path, controllers: str) -> Path:
    """Where a v1 hierarchy with the memory controller is mounted: named by its controllers (``memory``, or
    e.g. ``memory,hugetlb`` where they are mounted together), else ``memory``."""
    named = cgroup_root / controllers
    return named if named.is_dir() else cgroup_root / "memory"


def _cgroup_dir(mount: Path, cgroup: str) -> Path:
    """The process's cgroup folder under ``mount``: the cgroup's path, or the deepest tail of it that is there
    (the mount's root is then an ancestor of the process's cgroup), else the mount's root."""
    parts = [part for part in cgroup.split("/") if part]
    if ".." in parts:  # a cgroup outside this namespace's view: the mount's root is the nearest we see
        return mount
    for start in range(len(parts)):
        candidate = mount.joinpath(*parts[start:])
        if candidate.is_dir():
            return candidate
    return mount


def _cgroup_room(mount: Path, cgroup: str, files: tuple[str, str, str], physical: int | None) -> list[int]:
    """What each limit on the cgroup's folder and its visible ancestors leaves, in bytes."""
    if not mount.is_dir():
        return []
    limit_file, usage_file, reclaimable_field = files
    folder = _cgroup_dir(mount, cgroup)
    rooms = []
    leaf_usage = None
    for level in (folder, *folder.parents):
        if level != mount and mount not in level.parents:
            break
        stat = _stat(level / "memory.stat")
        usage = _number(level / usage_file)
        if usage is not None:
            usage = max(0, usage - stat.get(reclaimable_field, 0))
            leaf_usage = usage if leaf_usage is None else leaf_usage
        limit = _limit(_number(level / limit_file), physical)
        if limit is not None and usage is not None:
            rooms.append(limit - usage)
        hierarchical = _limit(stat.get("hierarchical_memory_limit"), physical)
        if hierarchical is not None and leaf_usage is not None:
            # The tightest ancestor's usage is not readable where it is above the mount: its
            # descendants' usage is at most that, so the room is at most this.
            rooms.append(hierarchical - leaf_usage)
    return [max(0, room) for room in rooms]


def _number(path: Path) -> int | None:
    """A cgroup file's one number; None where it is missing, unreadable or ``max`` (v2's no limit)."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    return {name: int(value) for name, _, value in (line.partition(" ") for line in lines) if value.isdigit()}


def _limit(value: int | None, physical: int | None) -> int | None:
    """A limit in bytes, or None for none: v1's "unlimited" (near 2^63), or one above the machine's memory."""
    if value is None or value >= NO_LIMIT or (physical is not None and value >= physical):
        return None
    return value
