"""The streaming executor's own ceiling: ``resynth`` with every device stage an identity of the same shapes.

The content, speaker and vocoder stages are replaced by stand-ins that compute nothing (content: zeros of
(samples / 320) x 256, speaker: 192 zeros, vocoder: the input audio back), loaded by nothing; they run in the
streaming executor's device process on ``cpu:0`` (the device code path on the CPU), F0 in the CPU pool with a
warm F0 cache (filled by an untimed run over the source set first). What is left is the executor: the CPU lane
reading, resampling and writing, the driver handing batches from lane to lane, and the device process
receiving each batch and sending it back. The set: the demo corpus replicated ``--copies`` times under new ids.

Printed, line by line as they come:

* the run's wall time (from the call into the runner to its return; the set-up before it is printed on its own
  line) and the audio seconds per wall second;
* the host time of the device process per second of audio: the CPU time of its main thread, which on a GPU
  launches the kernels, from the start of its first batch to the end of its last (everything it does between:
  receiving the batches, gathering their parts, returning the results), and the CPU time of all its threads;
  target at most 0.1 ms per audio second;
* the busy shares of the lanes over the run's wall time: the CPU lane (its prepare and write tasks' wall time
  over its workers) and the device process (its batches' wall time), and which limits the run: with a null model
  the CPU lane's reading and decoding should (``limited by decoding``), not the executor.

``--compare-with DIR`` runs the same measurement on another checkout (a folder holding a ``voxanon`` package,
e.g. an older commit extracted: ``git archive <commit> | tar -x -C DIR/voxanon``) in a new process, in the same
invocation, and prints its figures beside ours.

    python -m benchmarks.null_model [--copies 4] [--workers 2] [--batch-seconds 200] [--compare-with DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

LOG_ENV = "VOXANON_NULL_MODEL_LOG"
CONTENT_DIM, SPEAKER_DIM, CONTENT_HOP = 256, 192, 320
TARGET_MS_PER_AUDIO_SECOND = 0.1


def install_null_models(log_path: str) -> None:
    """The device stages as identities and the lanes' tasks timed into ``log_path`` (one JSON line per task), in
    this process and in those it forks; a spawned device process runs this module's top level (as
    ``__mp_main__``) and installs them itself."""
    from voxanon.pipeline.systems.ssl_sas import chain
    from voxanon.pipeline.execution import streaming

    def content(self, batch):
        for utt in batch:
            utt.features["content"] = np.zeros((len(utt.audio) // CONTENT_HOP, CONTENT_DIM), dtype=np.float32)

    def speaker(self, batch):
        for utt in batch:
            utt.features["speaker"] = np.zeros(SPEAKER_DIM, dtype=np.float32)

    def vocoder(self, batch):
        for utt in batch:
            utt.audio = np.asarray(utt.audio, dtype=np.float32)

    for stage, process in ((chain.ContentStage, content), (chain.SpeakerStage, speaker),
                           (chain.VocoderStage, vocoder)):
        stage.process_batch = process
        stage.load_device_models = stage.load_models = lambda self: None
        stage.needs = lambda self: []

    lock = threading.Lock()

    def timed(kind: str, task):
        def run(*args, **kwargs):
            began = (time.time(), time.thread_time(), time.process_time())
            result = task(*args, **kwargs)
            ended = (time.time(), time.thread_time(), time.process_time())
            audio = 0.0
            if kind == "device":
                audio = sum(len(item.utterance.audio) / item.utterance.sample_rate for item in result[0].ready)
            line = json.dumps({"kind": kind, "pid": os.getpid(), "start": began, "end": ended, "audio": audio})
            with lock, open(log_path, "a") as log:
                log.write(line + "\n")
            return result
        return run

    streaming.prepare = timed("prepare", streaming.prepare)
    streaming.write = timed("write", streaming.write)
    streaming.run_device = timed("device", streaming.run_device)


if os.environ.get(LOG_ENV):
    install_null_models(os.environ[LOG_ENV])


def measure(copies: int, workers: int, batch_seconds: float) -> dict:
    """One null-model run (in this process, with the stand-ins installed): its figures."""
    from benchmarks.gpu_pipeline import replicated_set

    from voxanon.data_prep.demo_corpus import demo_corpus_dir
    from voxanon.pipeline.runner import anonymise_set
    from voxanon.pipeline.systems.recipes import load_system_config

    work = Path(tempfile.mkdtemp(prefix="voxanon-null-model-"))
    log = work / "tasks.jsonl"
    os.environ[LOG_ENV] = str(log)
    install_null_models(str(log))
    overrides = [f"f0.cache_dir={work / 'f0'}", "f0.device=cpu", f"batch_seconds={batch_seconds}",
                 *(f"{stage}.device=cpu:0" for stage in ("content", "speaker", "vocoder"))]
    config = load_system_config("resynth", overrides)
    began = time.perf_counter()
    source = replicated_set(demo_corpus_dir(), 0, work / "source")[0]
    anonymise_set(source, config, work / "warming", workers=workers, progress=False)
    data = replicated_set(demo_corpus_dir(), copies * sum(source.utt2dur.values()) / 3600, work)[0]
    set_up = time.perf_counter() - began
    log.unlink()
    began = time.perf_counter()
    result = anonymise_set(data, config, work / "out", workers=workers, progress=False, executor="streaming")
    wall = time.perf_counter() - began
    if not result.ok:
        raise RuntimeError(f"the null-model run failed: {result}")
    tasks = [json.loads(line) for line in log.read_text().splitlines()]
    shutil.rmtree(work, ignore_errors=True)
    device = sorted((t for t in tasks if t["kind"] == "device"), key=lambda t: t["start"][0])
    cpu_lane = [t for t in tasks if t["kind"] != "device"]
    audio = sum(t["audio"] for t in device)
    # The steady part: from the device's first batch to the last write (before it, the lanes start up).
    steady = max(t["end"][0] for t in tasks) - device[0]["start"][0]
    host = device[-1]["end"][1] - device[0]["start"][1]
    return {
        "utterances": len(data.wav), "audio": audio, "set_up": set_up, "wall": wall, "workers": workers,
        "device_batches": len(device), "steady": steady,
        "host_ms": 1000 * host / audio,
        "transfer_ms": 1000 * (host - sum(t["end"][1] - t["start"][1] for t in device)) / audio,
        "process_ms": 1000 * (device[-1]["end"][2] - device[0]["start"][2]) / audio,
        "device_share": sum(t["end"][0] - t["start"][0] for t in device) / steady,
        "cpu_share": sum(t["end"][0] - t["start"][0] for t in cpu_lane if t["end"][0] >= device[0]["start"][0])
        / workers / steady,
    }


def report(label: str, figures: dict) -> None:
    limited = ("decoding (the CPU lane: reading, resampling, writing)" if figures["cpu_share"] >= figures["device_share"]
               else "the device process (the executor)")
    verdict = "MET" if figures["host_ms"] <= TARGET_MS_PER_AUDIO_SECOND else "NOT MET"
    print(f"{label}: {figures['audio']:.0f} s of audio, {figures['utterances']} utterances, "
          f"{figures['device_batches']} device batches, {figures['workers']} CPU workers: {figures['wall']:.1f} s wall, "
          f"{figures['audio'] / figures['wall']:.0f}x real time, lanes' start-up included; from the device's first "
          f"batch on {figures['steady']:.1f} s, {figures['audio'] / figures['steady']:.0f}x (set-up before the run, "
          f"F0 cache warming included: {figures['set_up']:.1f} s)")
    print(f"  device process host time per audio second: {figures['host_ms']:.4f} ms on its main thread (of which "
          f"receiving and returning batches {figures['transfer_ms']:.4f} ms), {figures['process_ms']:.4f} ms all "
          f"threads; target <= {TARGET_MS_PER_AUDIO_SECOND} ms: {verdict}")
    print(f"  busy share from the device's first batch on: CPU lane {figures['cpu_share']:.0%} per worker, device "
          f"process {figures['device_share']:.0%}: limited by {limited}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=4, help="copies of the demo corpus (462 s each)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="CPU lane processes")
    parser.add_argument("--batch-seconds", type=float, default=200.0)
    parser.add_argument("--compare-with", type=Path, metavar="DIR", help="another checkout, measured the same way")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one JSON line (--compare-with)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.json:
        print(json.dumps(measure(args.copies, args.workers, args.batch_seconds)))
        return 0
    print(f"null-model resynth, streaming executor, device stages on cpu:0 ({os.cpu_count()} CPUs)")
    report("this checkout", measure(args.copies, args.workers, args.batch_seconds))
    if args.compare_with:
        command = [sys.executable, "-m", __spec__.name, "--json", "--copies", str(args.copies), "--workers",
                   str(args.workers), "--batch-seconds", str(args.batch_seconds)]
        environment = {**os.environ, "PYTHONPATH": str(args.compare_with)}
        environment.pop(LOG_ENV, None)
        run = subprocess.run(command, env=environment, capture_output=True, text=True)
        if run.returncode:
            print(f"--compare-with {args.compare_with} failed ({run.returncode}):\n{run.stderr[-2000:]}")
            return 1
        report(f"--compare-with {args.compare_with}", json.loads(run.stdout.strip().splitlines()[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
