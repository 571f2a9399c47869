"""Start-up time of the ``voxanon`` command line: ``--help``, ``systems`` and ``metrics --help``.

Each command runs in a fresh process, ``--runs`` times, interleaved with a bare interpreter
(``python -c pass``) so that all figures of a round are taken under the same load. Printed per
command: the median and best wall time, the median CPU time (user + system, less sensitive to
other processes on the machine than wall time), the median wall time less the interpreter's own
start-up, and the ratio of the median wall time to the 0.5 s target (at most 1.0 meets it).

Bytecode caches are kept in a temporary folder (``PYTHONPYCACHEPREFIX``), written by a warm-up
run, as an installed package has them, even where ``PYTHONDONTWRITEBYTECODE`` is set.

    .venv/bin/python -m benchmarks.cli [--runs 7]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.5
COMMANDS = (("--help",), ("systems",), ("metrics", "--help"))


def voxanon_command() -> list[str]:
    """The installed ``voxanon`` script beside this interpreter, else the CLI module."""
    script = Path(sys.executable).with_name("voxanon")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "voxanon.pipeline.cli"]


def timed_run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {completed.returncode}:\n{completed.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(runs: int, cache_dir: str) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) times of each command and of a bare interpreter, the commands interleaved run by run."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache_dir
    commands = {"python -c pass": [sys.executable, "-c", "pass"]}
    commands.update({"voxanon " + " ".join(args): voxanon_command() + list(args) for args in COMMANDS})
    for command in commands.values():  # writes the bytecode caches, warms the file cache
        timed_run(command, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(timed_run(command, env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per command (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voxanon-pycache-") as cache_dir:
        times = measure(max(1, args.runs), cache_dir)
    interpreter = statistics.median(wall for wall, _ in times.pop("python -c pass"))
    load = os.getloadavg()[0]
    print(f"CLI start-up, {args.runs} fresh processes each ({os.cpu_count()} cores, load average {load:.1f}; "
          f"python -c pass: median {interpreter:.3f} s)")
    print(f"{'command':<24} {'median s':>9} {'best s':>8} {'CPU s':>7} {'less python s':>14} {'/ target':>9}")
    worst = 0.0
    for name, values in times.items():
        walls = [wall for wall, _ in values]
        median = statistics.median(walls)
        worst = max(worst, median)
        cpu = statistics.median(cpu for _, cpu in values)
        print(f"{name:<24} {median:9.3f} {min(walls):8.3f} {cpu:7.3f} {median - interpreter:14.3f} "
              f"{median / TARGET_SECONDS:9.2f}")
    print(f"target {TARGET_SECONDS} s: worst median / target = {worst / TARGET_SECONDS:.2f} "
          f"({'met' if worst <= TARGET_SECONDS else 'NOT met'})")


if __name__ == "__main__":
    main()
