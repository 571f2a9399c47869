"""Speed and accuracy of the neural resynth chain on a CUDA GPU (``--device cuda``).

For batch sizes 1, 8 and 32 (utterances handed to each stage at once; content and vocoder run them
as padded groups of similar length, the speaker encoder one by one) and for float32, bfloat16 and
float16 (content and vocoder under autocast; the speaker encoder stays float32), it prints each
stage's real-time factor (wall seconds per second of audio, the GPU synchronised before each clock
reading), the utterances per second of the GPU stages together, and the SNR of the output waveforms
against float32's at the same batch size (worst utterance). F0 (pYAAPT) runs on the CPU whatever
the device; its RTF on one core is printed once, for the estimate of a CPU-bound node.

Weights are random with the published shapes (``voxanon models import ssl-sas --random-init`` into a
temporary ``VOXANON_HOME``); utterances are 6/8/10 s voiced pulse trains, as in ``benchmarks/pipeline.py``.

On a machine without CUDA it prints one line saying so and exits with code 2.

    .venv/bin/python benchmarks/gpu.py [--utterances 64] [--batch-sizes 1 8 32] [--size full]
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NO_CUDA_EXIT = 2
PRECISIONS = ("float32", "bfloat16", "float16")
GPU_STAGES = ("content", "speaker", "vocoder")


def synchronise() -> None:
    import torch

    torch.cuda.synchronize()


def chain_outputs(precision: str, waves: list[np.ndarray], batch_size: int) -> tuple[dict[str, float], list]:
    """Seconds per stage and the output waveforms of the resynth chain on CUDA, ``batch_size`` utterances
    handed to each stage at once."""
    from voxanon.pipeline.systems import build_system, device_overrides, load_system_config, precision_overrides

    base = load_system_config("resynth")
    system = build_system(load_system_config("resynth", device_overrides(base, "cuda")
                                             + precision_overrides(base, precision)))
    timings = {stage.name: 0.0 for stage in system.stages}
    outputs = []
    for start in range(0, len(waves), batch_size):
        batch = [system.new_utterance(f"u{start + i}", "spk", None, wave)
                 for i, wave in enumerate(waves[start:start + batch_size])]
        for stage in system.stages:
            synchronise()
            began = time.perf_counter()
            stage.process_batch(batch)
            synchronise()
            timings[stage.name] += time.perf_counter() - began
        outputs += [utt.audio for utt in batch]
    return timings, outputs


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - other) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / noise))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"benchmarks/gpu.py: no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is "
              f"False), so no GPU figures were measured; exit code {NO_CUDA_EXIT}")
        return NO_CUDA_EXIT
    sys.stdout.reconfigure(line_buffering=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pipeline import synthetic_utterances  # benchmarks/pipeline.py

    from voxanon.models.f0 import yaapt_f0

    os.environ["VOXANON_HOME"] = tempfile.mkdtemp(prefix="voxanon-gpu-")
    atexit.register(shutil.rmtree, os.environ["VOXANON_HOME"], ignore_errors=True)  # a 0.5 GB model set
    subprocess.run([str(Path(sys.executable).with_name("voxanon")), "models", "import", "ssl-sas", "--random-init",
                    "--size", args.size], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    waves = [w / np.max(np.abs(w)) * 0.9 for w in synthetic_utterances(args.utterances)]
    seconds = sum(map(len, waves)) / 16000
    print(f"resynth chain on {torch.cuda.get_device_name()}, {args.size} random SSL-SAS weights, "
          f"{len(waves)} utterances ({seconds:.0f} s), torch {torch.__version__}")
    began = time.perf_counter()
    for wave in waves[:8]:
        yaapt_f0(wave[:len(wave) // 320 * 320])
    f0_rtf = (time.perf_counter() - began) / (sum(len(w) for w in waves[:8]) / 16000)
    print(f"F0 (pYAAPT, CPU, one core): RTF {f0_rtf:.4f}")

    chain_outputs("float32", waves[:2], 2)  # load the models, initialise CUDA
    print(f"{'precision':<10}{'batch':>6}" + "".join(f"{name + ' RTF':>14}" for name in GPU_STAGES)
          + f"{'GPU utt/s':>11}{'SNR vs fp32 dB':>16}")
    for batch_size in args.batch_sizes:
        reference = None
        for precision in PRECISIONS:
            if precision == "bfloat16" and not torch.cuda.is_bf16_supported():
                print(f"{precision:<10}{batch_size:>6}  (not supported on this GPU)")
                continue
            chain_outputs(precision, waves[:batch_size], batch_size)  # this precision's copies and kernels
            timings, outputs = chain_outputs(precision, waves, batch_size)
            reference = outputs if precision == "float32" else reference
            worst = min(snr_db(r, o) for r, o in zip(reference, outputs))
            gpu_seconds = sum(timings[name] for name in GPU_STAGES)
            print(f"{precision:<10}{batch_size:>6}" + "".join(f"{timings[name] / seconds:>14.5f}" for name in GPU_STAGES)
                  + f"{len(waves) / gpu_seconds:>11.1f}{worst:>16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
