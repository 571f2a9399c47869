"""The memory a process may still take (voxanon.data_prep.memory.available_memory): MemAvailable, or what a cgroup
v1 or v2 limit leaves, on fake /proc and cgroup trees laid out as the kernel and container runtimes lay them out."""
from pathlib import Path

import pytest

from voxanon.data_prep import memory
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.memory import available_memory

GB = 10 ** 9
V1_UNLIMITED = 9223372036854771712   # what a v1 cgroup without a limit reports (2^63 rounded down to a page)


def _proc(root: Path, cgroup_lines: list[str], available: int = 40 * GB, total: int = 64 * GB) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       {total // 1024} kB\nMemFree:         1000 kB\n"
                                  f"MemAvailable:   {available // 1024} kB\n")
    (proc / "self" / "cgroup").write_text("".join(line + "\n" for line in cgroup_lines))
    return proc


def _v1(folder: Path, limit: int, usage: int, inactive_file: int = 0, hierarchical: int | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (folder / "memory.stat").write_text(f"cache 0\nrss {usage}\ninactive_file {inactive_file}\n"
                                        f"hierarchical_memory_limit {hierarchical or limit}\n"
                                        f"total_inactive_file {inactive_file}\n")


def _v2(folder: Path, limit: str, current: int, inactive_file: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.max").write_text(f"{limit}\n")
    (folder / "memory.current").write_text(f"{current}\n")
    (folder / "memory.stat").write_text(f"anon {current}\nfile 0\ninactive_file {inactive_file}\n")


def _v1_machine(root: Path, cgroup: str = "/docker/abc") -> tuple[Path, Path]:
    """A hybrid machine (v1 controllers, an empty unified hierarchy) whose process is in ``cgroup``."""
    cgroups = root / "cgroup"
    for controller in ("cpu", "pids", "memory"):
        (cgroups / controller).mkdir(parents=True)
    (cgroups / "unified").mkdir()
    (cgroups / "unified" / "cgroup.controllers").write_text("\n")
    _v1(cgroups / "memory", V1_UNLIMITED, 20 * GB)
    proc = _proc(root, ["9:pids:" + cgroup, "4:memory:" + cgroup, "2:cpu,cpuacct:" + cgroup, "0::/"])
    return cgroups, proc


def test_a_v1_limit_is_read(tmp_path):
    """4 GB limit, 1 GB used of which 0.5 GB reclaimable page cache: 3.5 GB left, not the machine's 40 GB."""
    cgroups, proc = _v1_machine(tmp_path)
    _v1(cgroups / "memory" / "docker" / "abc", 4 * GB, 1 * GB, inactive_file=GB // 2)
    assert available_memory(cgroups, proc) == 4 * GB - GB // 2


def test_a_v1_parent_limit_binds_its_child(tmp_path):
    cgroups, proc = _v1_machine(tmp_path)
    _v1(cgroups / "memory" / "docker", 2 * GB, 1_500_000_000)
    _v1(cgroups / "memory" / "docker" / "abc", V1_UNLIMITED, 1 * GB, hierarchical=2 * GB)
    assert available_memory(cgroups, proc) == 500_000_000


def test_v1_mounted_at_the_containers_own_cgroup(tmp_path):
    """Docker on v1 without a cgroup namespace: /proc/self/cgroup names /docker/<id>, but the container sees its
    own cgroup at the mount's root. Its limit, and the hierarchical limit of an ancestor it cannot see, apply."""
    cgroups, proc = _v1_machine(tmp_path, "/docker/0123456789abcdef")
    _v1(cgroups / "memory", 8 * GB, 3 * GB)
    assert available_memory(cgroups, proc) == 5 * GB
    _v1(cgroups / "memory", V1_UNLIMITED, 3 * GB, hierarchical=6 * GB)
    assert available_memory(cgroups, proc) == 3 * GB


def test_the_deepest_visible_part_of_the_cgroup_path_is_used(tmp_path):
    """The mount's root is /docker/<id>; the process is in a child of it, /docker/<id>/job."""
    cgroups, proc = _v1_machine(tmp_path, "/docker/0123/job")
    _v1(cgroups / "memory", 8 * GB, 3 * GB)
    _v1(cgroups / "memory" / "job", 2 * GB, 1 * GB, hierarchical=2 * GB)
    assert available_memory(cgroups, proc) == 1 * GB


def test_no_v1_limit_leaves_memavailable(tmp_path):
    cgroups, proc = _v1_machine(tmp_path)
    _v1(cgroups / "memory" / "docker" / "abc", V1_UNLIMITED, 1 * GB)
    assert available_memory(cgroups, proc) == 40 * GB // 1024 * 1024


def test_a_limit_above_the_machines_memory_is_no_limit(tmp_path):
    cgroups, proc = _v1_machine(tmp_path)
    _v1(cgroups / "memory" / "docker" / "abc", 100 * GB, 1 * GB)
    assert available_memory(cgroups, proc) == 40 * GB // 1024 * 1024


def _v2_machine(root: Path, cgroup: str, unified: str = "") -> tuple[Path, Path]:
    cgroups = root / "cgroup"
    mount = cgroups / unified if unified else cgroups
    mount.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpu io memory pids\n")
    (mount / "memory.stat").write_text("anon 0\n")
    return cgroups, _proc(root, ["0::" + cgroup])


def test_v2_limits_of_the_cgroup_and_its_ancestors(tmp_path):
    cgroups, proc = _v2_machine(tmp_path, "/user.slice/job.scope")
    _v2(cgroups / "user.slice", str(6 * GB), 5 * GB)
    _v2(cgroups / "user.slice" / "job.scope", "max", 4 * GB)
    assert available_memory(cgroups, proc) == 1 * GB
    _v2(cgroups / "user.slice", "max", 5 * GB)
    _v2(cgroups / "user.slice" / "job.scope", str(12 * GB), 4 * GB, inactive_file=1 * GB)
    assert available_memory(cgroups, proc) == 9 * GB


def test_v2_in_a_cgroup_namespace_and_in_the_hybrid_layout(tmp_path):
    """A container with its own cgroup namespace sees ``0::/`` and its limit at the mount's root; a hybrid
    machine mounts the unified hierarchy at cgroup/unified."""
    cgroups, proc = _v2_machine(tmp_path / "namespace", "/")
    _v2(cgroups, str(3 * GB), 1 * GB)
    assert available_memory(cgroups, proc) == 2 * GB
    cgroups, proc = _v2_machine(tmp_path / "hybrid", "/session/job", unified="unified")
    _v2(cgroups / "unified" / "session" / "job", str(7 * GB), 2 * GB)
    assert available_memory(cgroups, proc) == 5 * GB


def test_nothing_readable_gives_none_and_memavailable_alone_counts(tmp_path):
    assert available_memory(tmp_path / "no-cgroup", tmp_path / "no-proc") is None
    proc = _proc(tmp_path, [], available=5 * GB)
    assert available_memory(tmp_path / "no-cgroup", proc) == 5 * GB // 1024 * 1024


def test_train_asv_refuses_a_batch_that_will_not_fit_in_a_v1_limit(tmp_path, monkeypatch):
    """The machine has 40 GB free, but the job's cgroup v1 limit leaves 7 GB: the default batch of 243 chunks
    (about 15 GB) is refused before training rather than killed by the kernel (exit 137)."""
    from voxanon.pipeline.training.asv.loader import check_cpu_memory
    from voxanon.pipeline.training.asv.settings import resolve_hparams

    cgroups, proc = _v1_machine(tmp_path)
    _v1(cgroups / "memory" / "docker" / "abc", 8 * GB, 1 * GB)
    monkeypatch.setattr(memory, "CGROUP_ROOT", cgroups)
    monkeypatch.setattr(memory, "PROC_ROOT", proc)
    with pytest.raises(VoxanonError, match="243 chunks of 3 s need about 15.3 GB on the CPU, and [0-9.]+ GB is "
                                           "available; --set batch_size=[0-9]+ fits"):
        check_cpu_memory(resolve_hparams(None), 243)
    _v1(cgroups / "memory" / "docker" / "abc", V1_UNLIMITED, 1 * GB)
    check_cpu_memory(resolve_hparams(None), 243)
