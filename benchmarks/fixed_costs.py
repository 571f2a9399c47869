"""The F0-only command's fixed costs: ``voxanon f0-targets`` against the F0 it computes, parts side by side.

1. Parts, measured in this process on one thread over the corpus (demo corpus by default, 182 utterances):
   decoding (``load_audio``), preparing (the ``ssl_sas_input`` stage), the F0 itself (fast YAAPT, kernels
   loaded first) and writing each track to an F0 cache (atomic ``.npy``), as CPU seconds; and, each in fresh
   processes, the fixed costs every process pays: the interpreter with the CLI imported
   (``voxanon f0-targets --help``) and importing the tracker and loading its compiled kernels.
2. The command as users run it (``--no-cache``, ``--workers`` 2), fresh processes, wall and CPU seconds (its
   workers' included), ``--rounds`` times; with ``--compare-with DIR`` (another checkout with its own
   ``.venv``, e.g. ``git worktree add /tmp/prev HEAD~1 && make -C /tmp/prev install``) that checkout's command
   runs in the same rounds, alternating which goes first.
3. Ratios: the command's wall time against the F0 compute spread over the workers (F0 CPU seconds / workers:
   the target is at most 1.5x), and the command's CPU against the F0's CPU (what the fixed costs add, whatever
   else the machine runs).

Bytecode caches are kept in a temporary folder (``PYTHONPYCACHEPREFIX``), written by a warm-up run of each
command, as an installed package has them, even where ``PYTHONDONTWRITEBYTECODE`` is set (without them every
process compiles SciPy's signal package again: 3 s more per process on the development machine).

    .venv/bin/python -m benchmarks.fixed_costs [--data DIR] [--workers 2] [--rounds 3] [--compare-with DIR]
"""
from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "data_prep" / "demo" / "corpus"
TARGET_RATIO = 1.5
TRACKER_LOAD = ("import time; t = time.perf_counter(); from voxanon.models.f0 import yaapt; yaapt.warm_up(); "
                "print(time.perf_counter() - t)")


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, stdout) of one fresh process."""
    cpu, start = _cpu_of_children(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return time.perf_counter() - start, _cpu_of_children() - cpu, done.stdout


def parts_in_process(data_dir: Path) -> dict[str, float]:
    """CPU seconds of each per-utterance part over the corpus, on this thread."""
    from voxanon.data_prep.audio import load_audio
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.models.f0 import yaapt
    from voxanon.models.f0.extract import F0Cache, yaapt_f0
    from voxanon.models.f0.params import SSL_SAS_YAAPT
    from voxanon.pipeline.systems.ssl_sas.chain import SslSasInputStage
    from voxanon.pipeline.systems.stage import Utterance

    yaapt.warm_up()
    data = read_data_dir(data_dir)
    parts = dict.fromkeys(("decode", "prepare", "F0", "cache write"), 0.0)
    audio_seconds = 0.0
    with tempfile.TemporaryDirectory(prefix="voxanon-f0-cache-") as cache_dir:
        cache = F0Cache(cache_dir)
        for utt in data.utterances:
            start = time.process_time()
            audio = load_audio(str(data.audio_path(utt)), 16000)
            decoded = time.process_time()
            utterance = Utterance(utt, "", None, audio.samples, 16000, seeds={})
            SslSasInputStage().process(utterance)
            prepared = time.process_time()
            f0 = yaapt_f0(utterance.audio, 16000, SSL_SAS_YAAPT)
            tracked = time.process_time()
            cache.store(utterance.audio, f0)
            stored = time.process_time()
            parts["decode"] += decoded - start
            parts["prepare"] += prepared - decoded
            parts["F0"] += tracked - prepared
            parts["cache write"] += stored - tracked
            audio_seconds += len(utterance.audio) / 16000
    parts["audio seconds"] = audio_seconds
    return parts


def command(checkout: Path, data_dir: Path, workers: int) -> list[str]:
    return [str(checkout / ".venv" / "bin" / "voxanon"), "f0-targets", "--data", str(data_dir), "--no-cache",
            "--workers", str(workers), "--quiet"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEMO, help="Kaldi data directory (default: the demo corpus)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-with", type=Path, metavar="DIR", help="another checkout, with its .venv")
    args = parser.parse_args()
    checkouts = {"this": ROOT} | ({"compared": args.compare_with.resolve()} if args.compare_with else {})

    parts = parts_in_process(args.data)
    audio_seconds = parts.pop("audio seconds")
    with tempfile.TemporaryDirectory(prefix="voxanon-pycache-") as cache_dir:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache_dir
        python = str(ROOT / ".venv" / "bin" / "python")
        startup_command = [str(ROOT / ".venv" / "bin" / "voxanon"), "f0-targets", "--help"]
        for warm_up in [startup_command, [python, "-c", TRACKER_LOAD]] + [
                command(checkout, args.data, args.workers) for checkout in checkouts.values()]:
            timed(warm_up, env)  # writes the bytecode caches, warms the file cache
        startup = statistics.median(timed(startup_command, env)[0] for _ in range(3))
        tracker = statistics.median(float(timed([python, "-c", TRACKER_LOAD], env)[2]) for _ in range(3))
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
        outputs: dict[str, set[str]] = {name: set() for name in checkouts}
        for round_index in range(args.rounds):
            order = list(checkouts) if round_index % 2 == 0 else list(reversed(checkouts))
            for name in order:
                wall, cpu, stdout = timed(command(checkouts[name], args.data, args.workers), env)
                runs[name].append((wall, cpu))
                outputs[name].add(stdout.split('"source"')[0])  # the targets; the source paths name the checkout

    f0 = parts["F0"]
    print(f"{args.data}: {audio_seconds:.0f} s of audio; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {args.workers} workers, {args.rounds} rounds")
    print("per-utterance parts, one thread, CPU s (per audio s):")
    for name, seconds in parts.items():
        print(f"  {name:<12} {seconds:7.2f}  ({seconds / audio_seconds:.4f})  {seconds / f0:5.2f} of the F0")
    print(f"fixed, per process (wall, median of 3 fresh processes): CLI start-up (f0-targets --help) {startup:.2f} s, "
          f"tracker import + kernel load {tracker:.2f} s")
    spread = f0 / args.workers
    print(f"{'checkout':<10} {'wall s':>7} {'CPU s':>7} {'wall / (F0 CPU / workers)':>26} {'CPU / F0 CPU':>13}")
    for name, values in runs.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"{name:<10} {wall:7.2f} {cpu:7.2f} {wall / spread:26.2f} {cpu / f0:13.2f}   "
              f"(rounds: {', '.join(f'{w:.2f}' for w, _ in values)} s)")
    if len(runs) == 2:
        this, other = (statistics.median(w for w, _ in runs[name]) for name in checkouts)
        print(f"compared / this, wall: {other / this:.2f}x; the same targets: {outputs['this'] == outputs['compared']}")
    this_wall = statistics.median(w for w, _ in runs["this"])
    this_cpu = statistics.median(c for _, c in runs["this"])
    for what, ratio in (("wall / (F0 CPU / workers)", this_wall / spread), ("CPU / F0 CPU", this_cpu / f0)):
        print(f"target, the command within {TARGET_RATIO}x of its F0 compute, {what}: "
              f"{'met' if ratio <= TARGET_RATIO else 'NOT met'} ({ratio:.2f}x)")
    if os.getloadavg()[0] > os.cpu_count() - args.workers + 1:
        print("(the machine is loaded: the workers did not have a core each, and the wall ratio counts the wait)")

if __name__ == "__main__":
    sys.exit(main())
