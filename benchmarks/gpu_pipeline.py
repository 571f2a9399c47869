"""``voxanon anonymise --system resynth --device cuda`` end to end over at least 10 h of audio, as users run it.

The set: a Kaldi data directory (``--data``; default the demo corpus, 182 real utterances, 462 s)
replicated under new utterance ids (``<utt>-xNNN``, same speakers, same files) until it holds ``--hours``
of audio. The command runs in a new process (interpreter, imports, model load and checks, every
utterance, writing, metadata), on random full-size SSL-SAS weights, timed from its launch to its exit.
Printed for each variant:

* audio seconds per wall second (x real time), start-up included;
* the time until the GPU's first batch: from the command's launch, and as run.json's streaming executor
  records it (``executor.first_device_batch_seconds``, from the run's start inside the command); without
  that record, the first NVML sample with the GPU busy;
* the GPU busy fraction from NVML (``nvidia-ml-py``, the ``gpu`` extra; utilisation sampled every 0.2 s):
  over the whole command and from the first batch on, beside run.json's ``device_busy_share`` (the share
  of the device process's span it computed);
* each queue's wait share (run.json's ``executor.queue_wait_share``: the share of the batches' lifetime
  spent waiting for the device, and for the writers).

Variants (``--variants``), each printed as soon as it ends: ``cold`` computes every F0 in the CPU pool on every
core (``--device cuda`` leaves F0 there), beside the GPU's models; ``gpu-f0`` computes it on the GPU instead
(``--set f0.device=cuda``: the batched GPU YAAPT, in series with the models in the device process); ``bf16`` is
``cold`` in ``--precision bfloat16``; ``warm`` first fills an F0 cache (``--set f0.cache_dir=...``) with one
untimed run over the source set, then times the replicated set with every F0 already cached: the GPU path
without F0. A run still going after ``--timeout-s`` is stopped with Ctrl-C (SIGINT; killed ``GRACE_S`` later
if still there), so that its run.json keeps the executor's statistics until then, and the figures are taken
over the audio written by then (said so). ``--budget-s`` bounds the whole script, its set-up (the random model
set's import, the replicated set, the F0 cache's warming) included: each run's limit is then its share of what
is left. The set-up is timed on its own line. run.json's busy share counts the device stages' time only (F0 in
the CPU pool is not device time). Each figure is printed with its verdict against its target as it comes.

On a machine without CUDA it prints one line saying so and exits with code 2.

    python -m benchmarks.gpu_pipeline [--hours 10] [--variants cold gpu-f0 bf16 warm] [--data DIR] [--precision float32]
                                      [--timeout-s 240] [--budget-s S] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import soundfile

NVML_PERIOD_S = 0.2
GRACE_S = 10.0
"""How long a run stopped with Ctrl-C has to write its run.json before it is killed."""
TARGETS = {"cold": 700.0, "gpu-f0": 700.0, "bf16": 700.0, "warm": 2000.0}  # x real time, start-up included
BUSY_TARGET, FIRST_BATCH_TARGET_S = 0.70, 3.0
VARIANTS = {  # name: (what it measures, its extra command-line arguments; the last --precision wins)
    "cold": ("every F0 computed, in the CPU pool", []),
    "gpu-f0": ("every F0 computed, on the GPU (f0.device=cuda)", ["--set=f0.device=cuda"]),
    "bf16": ("every F0 computed, in the CPU pool; bfloat16", ["--precision", "bfloat16"]),
    "warm": ("warm F0 cache (the GPU path alone)", []),
}


def replicated_set(source: Path, hours: float, root: Path):
    """``source`` (a Kaldi data directory) replicated under new utterance ids until it holds ``hours`` of audio,
    written to ``root``: the same files, ``<utt>-xNNN`` ids (each keeps its speaker's prefix)."""
    from voxanon.data_prep.corpus import DataDir, read_data_dir, write_data_dir

    data = read_data_dir(source)
    durations = {utt: data.utt2dur.get(utt) or soundfile.info(data.audio_path(utt)).duration for utt in data.wav}
    total = sum(durations.values())
    copies = max(1, int(-(-hours * 3600 // total)))
    wav, utt2spk, utt2dur = {}, {}, {}
    for copy in range(copies):
        for utt in data.utterances:
            new = f"{utt}-x{copy:03d}"
            wav[new] = str(Path(data.audio_path(utt)).resolve())
            utt2spk[new], utt2dur[new] = data.utt2spk[utt], durations[utt]
    replica = DataDir(name=f"{data.name}_x{copies}", wav=wav, utt2spk=utt2spk, spk2gender=dict(data.spk2gender),
                      utt2dur=utt2dur, path=root / f"{data.name}_x{copies}")
    write_data_dir(replica, replica.path)
    return replica, copies, len(data.wav), total


class NvmlSampler:
    """The GPU's utilisation (percent of each sample period with a kernel running, NVML) every ``NVML_PERIOD_S``
    in a thread, with the time of each sample; ``unavailable`` says why there is none."""

    def __init__(self):
        self.samples: list[tuple[float, int]] = []
        self.unavailable = None
        self.name = None
        try:
            import pynvml
        except ImportError:
            self.unavailable = "nvidia-ml-py is not installed (pip install 'voxanon[gpu]' or nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
            self.name = pynvml.nvmlDeviceGetName(self._handle)
        except pynvml.NVMLError as error:
            self.unavailable = f"NVML failed: {error}"
            return
        self._nvml = pynvml
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(NVML_PERIOD_S):
            self.samples.append((time.time(), self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

    def busy(self, start: float, end: float) -> float | None:
        """Mean utilisation (0-1) of the samples taken in [start, end]."""
        taken = [value for at, value in self.samples if start <= at <= end]
        return sum(taken) / len(taken) / 100 if taken else None

    def first_busy(self, start: float) -> float | None:
        return next((at for at, value in self.samples if at >= start and value > 0), None)

    def stop(self) -> None:
        if self.unavailable is None:
            self._stop.set()
            self._thread.join()


def written_seconds(out_set: Path) -> float:
    """Seconds of audio in the output set's WAV files (headers only)."""
    return sum(soundfile.info(path).duration for path in (out_set / "wav").glob("*.wav"))


def timed_run(data, out: Path, extra: list[str], timeout_s: float, sampler: NvmlSampler | None) -> dict:
    """The command over ``data`` into ``out``: its wall time, what it wrote, run.json and the NVML samples' view."""
    command = [sys.executable, "-m", "voxanon.pipeline.cli", "anonymise", "--system", "resynth", "--data",
               str(data.path), "--out", str(out), "--device", "cuda", "--quiet", *extra]
    launched = time.time()
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        output, _ = process.communicate(timeout=max(timeout_s, 1.0))
        ended, stopped = time.time(), False
    except subprocess.TimeoutExpired:
        ended, stopped = time.time(), True  # the figures stop here; the grace is for run.json only
        os.killpg(process.pid, signal.SIGINT)   # the command writes run.json with what its executor did so far
        try:
            output, _ = process.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
    out_set = next(out.glob("*/wav"), out / "missing").parent
    manifest = out_set / "run.json"
    try:
        run = json.loads(manifest.read_text())
    except (OSError, ValueError):
        run = {}
    executor = run.get("executor") if isinstance(run.get("executor"), dict) else None
    first_batch = executor.get("first_device_batch_at") if executor else None
    result = {"wall": ended - launched, "stopped": stopped, "returncode": process.returncode, "output": output,
              "audio": written_seconds(out_set) if out_set.is_dir() else 0.0, "executor": executor,
              "first_batch": None if first_batch is None else first_batch - launched}
    if sampler is not None and sampler.unavailable is None:
        first = sampler.first_busy(launched)
        result.update(busy=sampler.busy(launched, ended), first_busy=None if first is None else first - launched,
                      busy_after_first=None if first is None else sampler.busy(first, ended))
    return result


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def report(label: str, result: dict, sampler: NvmlSampler, target: float) -> None:
    audio, wall = result["audio"], result["wall"]
    how = (f"PARTIAL: stopped at the {wall:.0f} s limit; over the {audio:.0f} s of audio written by then"
           if result["stopped"] else f"exit code {result['returncode']}")
    print(f"{label}: {audio:.0f} s of audio in {wall:.1f} s wall: {audio / wall:.1f}x real time, start-up "
          f"included ({how}); target >= {target:.0f}x: {verdict(audio / wall >= target)}")
    if result["returncode"] not in (0, None) and not result["stopped"]:
        print("  the command failed; its last lines:\n    " + "\n    ".join(result["output"].strip().splitlines()[-8:]))
    executor = result["executor"]
    if result["first_batch"] is not None:
        print(f"  GPU's first batch: {result['first_batch']:.1f} s after the command's launch "
              f"({executor.get('first_device_batch_seconds')} s after the run started inside it); target <= "
              f"{FIRST_BATCH_TARGET_S:.0f} s: {verdict(result['first_batch'] <= FIRST_BATCH_TARGET_S)}")
    if executor:
        print(f"  run.json{' (until the stop)' if result['stopped'] else ''}: device busy share (device stages "
              f"only) {executor.get('device_busy_share')}, queue wait shares "
              f"{executor.get('queue_wait_share')}, device batches {executor.get('device_batches')}, CPU workers "
              f"{executor.get('cpu_workers')}")
    else:
        print("  run.json has no executor record (a run killed before it could write one, or a runner without the "
              "streaming executor)")
    if sampler.unavailable is not None:
        print(f"  GPU busy fraction: not measured: {sampler.unavailable}")
    elif result.get("first_busy") is None:
        print("  GPU busy fraction (NVML): the GPU was never seen busy")
    else:
        print(f"  GPU busy fraction (NVML, every {NVML_PERIOD_S} s): {result['busy']:.0%} of the command's wall time, "
              f"{result['busy_after_first']:.0%} from the first busy sample on ({result['first_busy']:.1f} s after "
              f"the launch); target >= {BUSY_TARGET:.0%} from the first batch on: "
              f"{verdict(result['busy_after_first'] >= BUSY_TARGET)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=10.0, help="audio in the replicated set (default 10)")
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=["cold", "bf16", "warm"])
    parser.add_argument("--data", type=Path, help="a Kaldi data directory to replicate (default: the demo corpus)")
    parser.add_argument("--precision", choices=("float32", "tf32", "bfloat16", "float16"), default="float32",
                        help="of every variant but bf16")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="stop a timed run after this long")
    parser.add_argument("--budget-s", type=float, help="the whole script's time, set-up included: each run is "
                                                       "stopped at its share of what is left (and --timeout-s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="passed on to the command (e.g. --set batch_seconds=400)")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.stdout.reconfigure(line_buffering=True)
    from benchmarks.gpu import cuda_or_exit, random_model_home

    code = cuda_or_exit("benchmarks/gpu_pipeline.py")
    if code is not None:
        return code
    import torch

    def limit(runs_left: int) -> float:
        """A run's time limit: --timeout-s, or less, its share of what is left of --budget-s."""
        if args.budget_s is None:
            return args.timeout_s
        return min(args.timeout_s, (args.budget_s - (time.perf_counter() - started)) / runs_left - GRACE_S)

    from voxanon.data_prep.demo_corpus import demo_corpus_dir

    work = Path(tempfile.mkdtemp(prefix="voxanon-gpu-pipeline-"))
    sampler = NvmlSampler()
    began = time.perf_counter()
    try:
        with random_model_home("full"):
            data, copies, unique, unique_seconds = replicated_set(args.data or demo_corpus_dir(), args.hours, work)
            print(f"set-up: random full-size model set imported and the set replicated in "
                  f"{time.perf_counter() - began:.1f} s (in the budget, not in any figure below)")
            print(f"anonymise --system resynth --device cuda --precision {args.precision} on "
                  f"{sampler.name or 'the CUDA device'} ({os.cpu_count()} CPUs, torch {torch.__version__}): "
                  f"{len(data.wav)} utterances, {sum(data.utt2dur.values()) / 3600:.2f} h (the {unique} utterances, "
                  f"{unique_seconds:.0f} s, of {args.data or 'the demo corpus'} x{copies} under new ids), random "
                  "full-size SSL-SAS weights")
            extra = ["--precision", args.precision, *(f"--set={o}" for o in args.overrides)]
            for index, variant in enumerate(args.variants):
                runs_left = len(args.variants) - index + ("warm" in args.variants[index:])
                if limit(runs_left) < 1:
                    print(f"{VARIANTS[variant][0]}: PARTIAL: skipped, the {args.budget_s:.0f} s budget is spent")
                    continue
                variant_extra = list(extra) + VARIANTS[variant][1]
                if variant == "warm":
                    cache = work / "f0-cache"
                    variant_extra.append(f"--set=f0.cache_dir={cache}")
                    began = time.perf_counter()
                    source = replicated_set(args.data or demo_corpus_dir(), 0, work / "source")[0]  # one copy
                    warmed = timed_run(source, work / "warming", variant_extra, limit(runs_left), None)
                    print(f"F0 cache warmed by an untimed run over the {unique} source utterances: "
                          f"{time.perf_counter() - began:.1f} s (exit code {warmed['returncode']})")
                result = timed_run(data, work / variant, variant_extra, limit(runs_left - (variant == "warm")), sampler)
                report(VARIANTS[variant][0], result, sampler, TARGETS[variant])
                shutil.rmtree(work / variant, ignore_errors=True)  # about 1.2 GB of output per 10 h
    finally:
        sampler.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
