"""Speed of the neural resynth chain on CPU with random full-size SSL-SAS weights.

Prints the real-time factor (seconds of compute per second of audio) of each stage and
of the whole chain for batch sizes 1, 4 and 16. Batch size 1 is the one-utterance-at-
a-time run of the same chain, as the reference systems do it (every stage on a single
utterance, the generator on an unpadded batch of one); batches 4 and 16 are compared
with it for speed and for equality of the outputs.

    .venv/bin/python benchmarks/pipeline.py [--utterances 16] [--threads 2] [--size full]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def synthetic_utterances(count: int, seed: int = 0) -> list[np.ndarray]:
    """Voiced pulse trains of 6, 8 and 10 s (as in the reference timing) with noise."""
    rng = np.random.default_rng(seed)
    waves = []
    for i in range(count):
        seconds = (6.0, 8.0, 10.0)[i % 3]
        t = np.arange(int(seconds * 16000)) / 16000
        f0 = 120 + 60 * np.sin(2 * np.pi * 0.3 * t + i)
        wave = np.sin(2 * np.pi * np.cumsum(f0) / 16000) * (0.5 + 0.5 * np.sin(2 * np.pi * 2 * t) ** 2)
        waves.append((0.4 * wave + 0.01 * rng.standard_normal(len(t))).astype(np.float32))
    return waves


def run_chain(system, waves: list[np.ndarray], batch_size: int) -> tuple[dict[str, float], list[np.ndarray]]:
    timings = {stage.name: 0.0 for stage in system.stages}
    outputs = []
    for start in range(0, len(waves), batch_size):
        batch = [system.new_utterance(f"u{start + i}", "spk", None, w)
                 for i, w in enumerate(waves[start:start + batch_size])]
        for stage in system.stages:
            began = time.perf_counter()
            stage.process_batch(batch)
            timings[stage.name] += time.perf_counter() - began
        outputs += [u.audio for u in batch]
    return timings, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="voxanon-bench-")
    os.environ["VOXANON_HOME"] = home
    import torch

    torch.set_num_threads(args.threads)
    from voxanon.models.checkpoints import random_ssl_sas
    from voxanon.models.registry import write_model_set
    from voxanon.pipeline.systems import build_system, load_system_config

    components, config = random_ssl_sas(args.size)
    write_model_set("ssl-sas", components, config, source="benchmark", random=True)
    system = build_system(load_system_config("resynth"))
    waves = synthetic_utterances(args.utterances)
    audio_seconds = sum(len(w) for w in waves) / 16000
    run_chain(system, waves[:1], 1)  # load the models and warm up

    print(f"{args.utterances} utterances, {audio_seconds:.0f} s of audio, {args.threads} torch threads, "
          f"{args.size} random weights")
    header = f"{'run':<16}" + "".join(f"{stage.name:>15}" for stage in system.stages) + f"{'total':>10}"
    print(header)

    def report(label: str, timings: dict[str, float]) -> float:
        total = sum(timings.values())
        print(f"{label:<16}" + "".join(f"{timings[s.name] / audio_seconds:>15.4f}" for s in system.stages)
              + f"{total / audio_seconds:>10.4f}")
        return total

    reference_timings, reference_outputs = run_chain(system, waves, 1)
    reference_total = report("batch 1", reference_timings)
    for batch_size in (4, 16):
        timings, outputs = run_chain(system, waves, batch_size)
        total = report(f"batch {batch_size}", timings)
        worst = max(float(np.max(np.abs(a - b))) for a, b in zip(outputs, reference_outputs))
        print(f"{'':<16}speed-up vs one-at-a-time x{reference_total / total:.2f}; "
              f"max |difference| {worst:.2e}")


if __name__ == "__main__":
    main()
