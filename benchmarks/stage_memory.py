"""Peak memory per input sample of loading an utterance and of each stage of a system: the figures the stages
declare (``Stage.bytes_per_sample``, ``LOAD_BYTES_PER_SAMPLE`` in pipeline/execution/memory_plan.py) and the
run's memory check multiplies by the utterances in flight.

For each length (default 20 s and 80 s of 16 kHz noise in a 16-bit WAV) a fresh process loads the system's
models, then loads the utterance and runs the stages one by one; before each step the kernel's peak-RSS mark
is reset (``/proc/self/clear_refs`` 5) and after it the step's peak above the RSS it started from is read
(``VmHWM`` less the ``VmRSS`` before). The figure per sample is the slope between the two lengths, so what a
step takes whatever the length (a model's workspace, a library's first call) does not count.

    .venv/bin/python -m benchmarks.stage_memory --system b2 b2r tdpsola [--seconds 20 80] [--computations ge2e asr]

``--computations`` measures an evaluation's computations the same way (``CachedComputation.bytes_per_sample``):
GE2E, ECAPA (the SSL-SAS geometry, random weights) and the bundled Whisper tiny.en, each run once on a second of
noise first so that its model is loaded.

Systems with models need them installed (random weights measure the same: activations do not depend on the
weights' values).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile

COMPUTATIONS = ("ge2e", "ecapa", "asr")


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_of(step) -> int:
    """Bytes ``step()`` took at its peak above the resident memory before it. The heap's free pages are given
    back first (``malloc_trim``): a step that reused what an earlier one freed would otherwise seem to take
    nothing (loading after the models measured 0, the vocoder after the content stage less than 0)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5", encoding="ascii")  # resets VmHWM to the current RSS
    before = _status_bytes("VmRSS")
    step()
    return _status_bytes("VmHWM") - before


def measure_once(system_name: str, seconds: float, overrides: list[str]) -> dict[str, int]:
    """In this process: each step's peak for one utterance of ``seconds``. A system with a stage that draws on the
    whole set (B3's GAN deal, B1's speaker means) is prepared first on the one-utterance set, as the runner does."""
    from voxanon.data_prep.audio import load_audio
    from voxanon.data_prep.corpus import load_corpus
    from voxanon.pipeline.execution.batches import load_stage_models
    from voxanon.pipeline.runner import prepare_set
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    system = build_system(load_system_config(system_name, overrides))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "set" / "s" / "u.wav"
        path.parent.mkdir(parents=True)
        soundfile.write(path, (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32), 16000,
                        subtype="PCM_16")
        data = load_corpus(path.parent.parent)
        if any(stage.prepares_from_set() for stage in system.stages):
            system = build_system(prepare_set(system, data, Path(folder) / "prepared", progress=False))
        load_stage_models(system, system.stages, device_models=True)
        loaded = {}

        def load():
            loaded["audio"] = load_audio(path, system.sample_rate).samples

        peaks = {"load": _peak_of(load)}
        utterance = system.new_utterance(data.utterances[0], "s", "f", loaded.pop("audio"))
        for stage in system.stages:
            peaks[stage.name] = _peak_of(lambda: stage.process_batch([utterance]))
    return peaks


def measure_computation(name: str, seconds: float) -> dict[str, int]:
    """In this process: the peak of an evaluation's computation (``ge2e``, ``asr``: the bundled Whisper) on one
    utterance of ``seconds``, its model loaded and run once on a second of noise first."""
    if name == "ecapa":  # the SSL-SAS geometry, random weights: as an ecapa:DIR folder embeds on the CPU
        from voxanon.models.nets.speaker import EcapaEncoder
        from voxanon.pipeline.evaluation.computations import embedding_function

        compute = embedding_function(EcapaEncoder(), "cpu")
    else:
        from voxanon.pipeline.evaluation.computations import make_embedder, make_transcriber

        computation = make_embedder({"encoder": "ge2e"}) if name == "ge2e" else make_transcriber("whisper-tiny.en")
        compute = computation.compute
    rng = np.random.default_rng(0)
    compute([(0.1 * rng.standard_normal(16000)).astype(np.float32)])
    wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
    return {name: _peak_of(lambda: compute([wave]))}


def measure(system_name: str, lengths: list[float], overrides: list[str]) -> dict[str, float]:
    """Each step's bytes per input sample (at 16 kHz): the slope of its peak between the shortest and longest
    of ``lengths``, each measured in a fresh process. A step whose memory grows faster than its length (attention
over the whole utterance) is bounded by the slope up to the longest length and a little beyond, so the longest
should be the system's ``max_seconds``."""
    runs = []
    for seconds in (min(lengths), max(lengths)):
        command = [sys.executable, "-m", "benchmarks.stage_memory", "--one", system_name, str(seconds), *overrides]
        if system_name in COMPUTATIONS:
            command[3] = "--computation"
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{system_name} at {seconds:g} s: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    samples = (max(lengths) - min(lengths)) * 16000
    return {step: (runs[1][step] - runs[0][step]) / samples for step in runs[0]}


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--one"]:
        print(json.dumps(measure_once(argv[1], float(argv[2]), argv[3:])))
        return 0
    if argv[:1] == ["--computation"]:
        print(json.dumps(measure_computation(argv[1], float(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", nargs="*", default=["b2", "b2r", "tdpsola"])
    parser.add_argument("--computations", nargs="*", default=[], choices=COMPUTATIONS,
                        help="evaluation computations to measure too")
    parser.add_argument("--seconds", nargs=2, type=float, default=[20.0, 80.0])
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args(argv)
    for name in args.system + args.computations:
        figures = measure(name, args.seconds, args.overrides)
        print(f"{name}: " + ", ".join(f"{step} {value:.1f} B/sample" for step, value in figures.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
