"""The fixed costs of the F0-only command (``voxanon f0-targets`` against the F0 it computes, parts side by side)
and, with ``--command anonymise``, of the neural chain's command (:func:`anonymise_costs`).

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

``--command anonymise``: ``voxanon anonymise --system resynth`` (random full-size SSL-SAS weights, installed in a
temporary ``VOXANON_HOME``) over the first ``--utterances`` of the corpus, against the chain's compute measured in
this process on one thread (decoding and every stage, CPU seconds, after a warm-up utterance). Each fresh process
is watched while it runs: the time from its start to its first journal line (the first utterance done and
recorded), and the main process's own CPU (``/proc``: start-up, model load, the pool and the journal; the
workers are forked from it and compute). Per-utterance overhead: the command's CPU beyond the compute, less what
the same command over one utterance spends beyond that utterance's compute (the per-process part), per utterance.

    .venv/bin/python -m benchmarks.fixed_costs [--command f0-targets|anonymise] [--data DIR] [--workers 2]
                                               [--rounds 3] [--utterances 24] [--compare-with DIR]
"""
from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
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
    parser.add_argument("--command", choices=("f0-targets", "anonymise"), default="f0-targets")
    parser.add_argument("--utterances", type=int, default=24, help="anonymise: the first N utterances of --data")
    args = parser.parse_args()
    checkouts = {"this": ROOT} | ({"compared": args.compare_with.resolve()} if args.compare_with else {})
    if args.command == "anonymise":
        return anonymise_costs(args, checkouts)

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


def subset_dir(data_dir: Path, count: int, target: Path) -> Path:
    """A Kaldi data directory of ``data_dir``'s first ``count`` utterances (absolute audio paths)."""
    from voxanon.data_prep.corpus import read_data_dir

    data = read_data_dir(data_dir)
    utterances = data.utterances[:count]
    target.mkdir(parents=True)
    (target / "wav.scp").write_text("".join(f"{u} {data.audio_path(u)}\n" for u in utterances))
    (target / "utt2spk").write_text("".join(f"{u} {data.utt2spk[u]}\n" for u in utterances))
    return target


def chain_compute(data_dir: Path) -> tuple[list[float], float]:
    """CPU seconds of each utterance through the resynth chain on this thread (decoding, every stage), after
    a warm-up utterance, and the seconds of audio."""
    import torch

    from voxanon.data_prep.audio import load_audio
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    torch.set_num_threads(1)
    system = build_system(load_system_config("resynth"))
    data = read_data_dir(data_dir)
    seconds, audio_seconds = [], 0.0
    for index, utt in enumerate([data.utterances[0], *data.utterances]):
        start = time.process_time()
        audio = load_audio(str(data.audio_path(utt)), 16000)
        batch = [system.new_utterance(utt, data.utt2spk[utt], None, audio.samples)]
        for stage in system.stages:
            stage.process_batch(batch)
        if index:  # the first pass is the warm-up
            seconds.append(time.process_time() - start)
            audio_seconds += len(audio.samples) / 16000
    return seconds, audio_seconds


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of one live process, its children not counted."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watched(command: list[str], env: dict[str, str], journal: Path) -> dict[str, float]:
    """One fresh process: wall and CPU seconds (workers included), the time to its first journal line and the
    CPU of its main process, read from ``/proc`` every 10 ms until it exits."""
    cpu, start = _cpu_of_children(), time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    first = main_cpu = None
    while process.poll() is None:
        if first is None and journal.exists() and journal.stat().st_size:
            first = time.perf_counter() - start
        main_cpu = _process_cpu(process.pid) or main_cpu
        time.sleep(0.01)
    wall = time.perf_counter() - start
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{process.stderr.read()}")
    return {"wall": wall, "cpu": _cpu_of_children() - cpu, "first": first if first is not None else wall,
            "main cpu": main_cpu or 0.0}


def anonymise_costs(args, checkouts: dict[str, Path]) -> None:
    """``--command anonymise``: the neural command's fixed and per-utterance costs (module doc)."""
    with tempfile.TemporaryDirectory(prefix="voxanon-fixed-costs-") as work_dir:
        work = Path(work_dir)
        os.environ["VOXANON_HOME"] = str(work / "home")
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        subprocess.run([str(ROOT / ".venv" / "bin" / "voxanon"), "models", "import", "ssl-sas", "--random-init"],
                       check=True, capture_output=True, env=env)
        data = subset_dir(args.data, args.utterances, work / "data")
        one = subset_dir(args.data, 1, work / "one")
        compute, audio_seconds = chain_compute(data)

        def run(name: str, data_dir: Path, label: str) -> dict[str, float]:
            out = work / f"out-{name}-{label}"
            command = [str(checkouts[name] / ".venv" / "bin" / "voxanon"), "anonymise", "--system", "resynth",
                       "--data", str(data_dir), "--out", str(out), "--workers", str(args.workers), "--quiet"]
            result = watched(command, env, out / f"{data_dir.name}_resynth" / ".journal.jsonl")
            shutil.rmtree(out)
            return result

        for name in checkouts:
            run(name, one, "warm-up")  # bytecode caches, the file cache
        runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {"set": [], "one": []} for name in checkouts}
        for round_index in range(args.rounds):
            order = list(checkouts) if round_index % 2 == 0 else list(reversed(checkouts))
            for name in order:
                runs[name]["set"].append(run(name, data, f"set{round_index}"))
                runs[name]["one"].append(run(name, one, f"one{round_index}"))

    total = sum(compute)
    print(f"{args.data}: first {len(compute)} utterances, {audio_seconds:.0f} s of audio; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; {args.workers} workers, {args.rounds} rounds")
    print(f"chain compute on one thread (decode + stages): {total:.1f} CPU s ({total / audio_seconds:.3f} per audio s); "
          f"the first utterance {compute[0]:.2f} s")
    print(f"{'checkout':<10} {'wall s':>7} {'CPU s':>7} {'CPU / compute':>14} {'to 1st utt. s':>14} "
          f"{'main CPU s':>11} {'1-utt. wall s':>14} {'overhead / utt. CPU s':>22}")
    for name, values in runs.items():
        def median(kind: str, key: str) -> float:
            return statistics.median(v[key] for v in values[kind])
        per_process = median("one", "cpu") - compute[0]
        overhead = (median("set", "cpu") - total - per_process) / max(len(compute) - 1, 1)
        rounds = ", ".join(f"{v['wall']:.1f}" for v in values["set"])
        print(f"{name:<10} {median('set', 'wall'):7.2f} {median('set', 'cpu'):7.2f} {median('set', 'cpu') / total:14.2f} "
              f"{median('set', 'first'):14.2f} {median('set', 'main cpu'):11.2f} {median('one', 'wall'):14.2f} "
              f"{overhead:22.3f}   (set rounds: {rounds} s)")


if __name__ == "__main__":
    sys.exit(main())
