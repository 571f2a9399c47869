"""Speed and accuracy of the neural systems' GPU stages on CUDA (``--device cuda``), in about a minute.

``--systems`` (default ``resynth``): ``resynth`` (the SSL-SAS chain: content, speaker and vocoder on the GPU),
``b5`` and ``b6`` (VoicePrivacy 2024's ASR-BN systems: the BN extractor, wav2vec2 large or filterbanks +
TDNN-F + VQ, and SA-toolkit's CoreHifiGan on the GPU; the target draw and SA-toolkit's F0 on the CPU).

For batch sizes 1, 8, 32 and 64 (utterances handed to each stage at once; content, speaker and vocoder run
them as padded groups of similar length, on models in their direct form: weights cast once at load, no
autocast, plain cuDNN convolutions; see models/nets/precision.py) and for float32, bfloat16 and float16
(content and vocoder; the speaker encoder runs in float32 in every row), it prints each GPU stage's
real-time factor (wall seconds per second of audio, the GPU synchronised before each clock reading) over
a warm pass, the first pass's seconds (the same utterances just before: cuDNN's plans for each new tensor
shape included, which a long run pays once per shape of the padding grid), the GPU stages' utterances per
second, and the SNR of the output waveforms against float32's at the same batch size (worst utterance).
The last lines say, per stage, whether bfloat16 and float16 were at least as fast as float32 at every
batch size measured.

Done once per system, not per measurement: its random model set (``voxanon models import ssl-sas
--random-init``, or ``sa-toolkit --random-init --tag TAG``, in this process), its CPU stages (SSL-SAS input and
F0, or the target draw and F0) over every utterance in a pool of CPU processes, and one system per precision
(its models loaded before the first row); each row then runs only the GPU stages, on copies of those
utterances. ``--budget-s`` (default 55 s) bounds the whole script from its start, its set-up (the random
model sets' import, the CPU stages, the models' load) included; each system gets an even share of what is left
when it starts, and a row is started only where, taking as long as the row before it, it would end within that
share; a skipped row says so. Where the budget runs out, the script prints what it measured, one line saying
``PARTIAL`` and where it stopped, and exits with code 0.

Every line is printed as it comes: each row with, for bfloat16 and float16, each stage's verdict against
float32 at that batch size (``faster`` or ``SLOWER``), and the per-stage summary once a system's rows are done.

Weights are random with the published shapes; utterances are 6/8/10 s voiced pulse trains, as in
``benchmarks/pipeline.py``. ``--cudnn-benchmark`` times the rows with cuDNN's autotuner on (voxanon leaves
it off: it tunes every new shape again).

On a machine without CUDA it prints one line saying so and exits with code 2. ``--device cpu:0`` runs the same
script on the CPU (the device code path; no figure it prints is a GPU's): how its set-up, budget and partial
report are tested.

    python -m benchmarks.gpu [--systems resynth b5 b6] [--utterances 64] [--batch-sizes 1 8 32 64] [--size full]
                             [--budget-s 55] [--cudnn-benchmark] [--device cuda]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

NO_CUDA_EXIT = 2
PRECISIONS = ("float32", "bfloat16", "float16")
SYSTEMS = {  # system: (the random model set's import arguments, its GPU stages)
    "resynth": (["ssl-sas"], ("content", "speaker", "vocoder")),
    "b5": (["sa-toolkit", "--tag", "hifigan_bn_tdnnf_wav2vec2_vq_48_v1"], ("asrbn_bn", "asrbn_vocoder")),
    "b6": (["sa-toolkit", "--tag", "hifigan_bn_tdnnf_600h_vq_48_v1"], ("asrbn_bn", "asrbn_vocoder")),
}


class BudgetSpent(Exception):
    """The script's time budget ran out during the step its message names."""


def cuda_or_exit(script: str) -> int | None:
    """None where torch sees a CUDA device; else the one line every device benchmark prints, and its exit code."""
    import torch

    if torch.cuda.is_available():
        return None
    print(f"{script}: no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is False), so no "
          f"GPU figures were measured; exit code {NO_CUDA_EXIT}")
    return NO_CUDA_EXIT


@contextlib.contextmanager
def random_model_home(size: str = "full", systems: tuple[str, ...] = ("resynth",), deadline: float | None = None):
    """A temporary ``VOXANON_HOME`` holding the random model sets of ``systems`` at ``size``; removed at exit
    (the full SSL-SAS set is 0.5 GB, B5's 1.3 GB). Installed by another process, so that this one starts no
    torch thread pool before it forks its CPU workers (a forked child inherits those threads' locks); stopped,
    and :class:`BudgetSpent` raised, at ``deadline`` (a ``time.perf_counter()`` reading)."""
    home = tempfile.mkdtemp(prefix="voxanon-device-")
    os.environ["VOXANON_HOME"] = home
    try:
        for system in systems:
            try:
                done = subprocess.run([sys.executable, "-m", "voxanon.pipeline.cli", "models", "import",
                                       *SYSTEMS[system][0], "--random-init", "--size", size], capture_output=True,
                                      text=True, timeout=None if deadline is None else deadline - time.perf_counter())
            except subprocess.TimeoutExpired:
                raise BudgetSpent(f"importing the random model set of {system}") from None
            if done.returncode != 0:
                raise SystemExit(f"the random model set of {system} could not be installed: {done.stderr[-500:]}")
        yield Path(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def cpu_stages(name: str, wave: np.ndarray) -> tuple[np.ndarray, dict, float]:
    """System ``name``'s leading CPU stages on one utterance: its audio, its features and the seconds they
    took (one core)."""
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    system = build_system(load_system_config(name))
    utt = system.new_utterance("u", "spk", None, wave)
    began = time.perf_counter()
    for stage in system.stages:
        if stage.name in SYSTEMS[name][1]:
            break
        stage.process_batch([utt])
    return utt.audio, utt.features, time.perf_counter() - began


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - other) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / noise))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", nargs="+", choices=tuple(SYSTEMS), default=["resynth"])
    parser.add_argument("--utterances", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--budget-s", type=float, default=55.0,
                        help="the whole script's seconds, set-up included: no row is started that would end "
                             "(as long as the last row) after them")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN's autotuner on for every row")
    parser.add_argument("--device", choices=("cuda", "cpu:0"), default="cuda",
                        help="cpu:0: the script's own test on the CPU (no GPU figure)")
    args = parser.parse_args()
    started = time.perf_counter()
    deadline = started + args.budget_s
    sys.stdout.reconfigure(line_buffering=True)
    code = cuda_or_exit("benchmarks/gpu.py") if args.device == "cuda" else None
    if code is not None:
        return code
    import torch

    from benchmarks.pipeline import synthetic_utterances
    from voxanon.pipeline.execution.pool import kill_pool

    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    where = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU (cpu:0: not GPU figures)"
    print(f"GPU stages on {where}, {args.size} random weights, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, cudnn.benchmark {args.cudnn_benchmark}; budget "
          f"{args.budget_s:.0f} s, set-up included")
    try:
        with random_model_home(args.size, tuple(args.systems), deadline):
            print(f"set-up: random model sets imported at {time.perf_counter() - started:.1f} s")
            waves = [w / np.max(np.abs(w)) * 0.9 for w in synthetic_utterances(args.utterances)]
            # Every system's CPU stages in forked processes, before this process starts CUDA (or any thread a fork
            # would copy with its locks held).
            pool = ProcessPoolExecutor(min(len(waves), os.cpu_count() or 1), mp_context=get_context("fork"))
            try:
                prepared = {name: list(pool.map(functools.partial(cpu_stages, name), waves,
                                                timeout=deadline - time.perf_counter())) for name in args.systems}
            except TimeoutError:
                raise BudgetSpent("running the systems' CPU stages") from None
            finally:
                kill_pool(pool)
            print(f"set-up: CPU stages done at {time.perf_counter() - started:.1f} s")
            skipped = sum(benchmark_system(name, prepared[name], args,
                                           (deadline - time.perf_counter()) / (len(args.systems) - index))
                          for index, name in enumerate(args.systems))
        if skipped:
            print(f"benchmarks/gpu.py: PARTIAL: {skipped} row(s) skipped, past its {args.budget_s:.0f} s budget")
    except BudgetSpent as spent:
        print(f"benchmarks/gpu.py: PARTIAL: its {args.budget_s:.0f} s budget ran out while {spent} "
              f"({time.perf_counter() - started:.1f} s after its start); the lines above are what it measured")
        return 0
    print(f"benchmarks/gpu.py took {time.perf_counter() - started:.1f} s")
    return 0


def benchmark_system(name: str, prepared: list[tuple[np.ndarray, dict, float]], args: argparse.Namespace,
                     budget_s: float) -> int:
    """System ``name``'s rows over the utterances its CPU stages ``prepared`` (:func:`cpu_stages`), each batch
    size in each precision, within ``budget_s`` of its start; then the per-stage verdicts. The rows it skipped."""
    import torch
    from benchmarks.stage_timing import stage_seconds, utterance_batches

    from voxanon.pipeline.systems.recipes import build_system, device_overrides, load_system_config, precision_overrides

    started = time.perf_counter()
    device = args.device
    synchronise = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    gpu_stages = SYSTEMS[name][1]
    audio = [a for a, _, _ in prepared]
    features = [f for _, f, _ in prepared]
    seconds = sum(map(len, audio)) / 16000
    cpu_rtf = sum(s for _, _, s in prepared) / seconds
    print(f"{name}: GPU stages {', '.join(gpu_stages)}; {len(audio)} utterances ({seconds:.0f} s); CPU stages "
          f"before them, one core per utterance: RTF {cpu_rtf:.4f}")

    base = load_system_config(name)
    cpu_f0 = ["f0.device=cpu"] if "f0" in base.get("stages", []) else []  # F0 came from the CPU stages
    systems, stages = {}, {}
    for precision in PRECISIONS:
        if precision == "bfloat16" and device == "cuda" and not torch.cuda.is_bf16_supported():
            continue
        if time.perf_counter() - started > budget_s:
            raise BudgetSpent(f"loading {name}'s models in {precision}")
        began = time.perf_counter()
        systems[precision] = build_system(load_system_config(
            name, device_overrides(base, device) + precision_overrides(base, precision) + cpu_f0))
        stages[precision] = [s for s in systems[precision].stages if s.name in gpu_stages]
        for stage in stages[precision]:
            stage.load_device_models()
        print(f"{name} {precision} models loaded in {time.perf_counter() - began:.1f} s")

    print(f"{'precision':<10}{'batch':>6}" + "".join(f"{stage + ' RTF':>20}" for stage in gpu_stages)
          + f"{'first pass s':>14}{'GPU utt/s':>11}{'SNR vs fp32 dB':>16}")
    warm: dict[tuple[str, int], dict[str, float]] = {}
    last_row, skipped = 0.0, 0
    for batch_size in args.batch_sizes:
        reference = None
        for precision in PRECISIONS:
            if precision not in systems:
                print(f"{precision:<10}{batch_size:>6}  not supported on this GPU")
                continue
            row_started = time.perf_counter()
            if row_started + last_row - started > budget_s:
                print(f"{precision:<10}{batch_size:>6}  skipped: it would end past the system's {budget_s:.0f} s "
                      "budget")
                skipped += 1
                continue

            def run() -> tuple[dict[str, float], list]:
                return stage_seconds(stages[precision], utterance_batches(systems[precision], audio, batch_size,
                                                                          features), synchronise)

            first, _ = run()
            timings, done = run()
            last_row = time.perf_counter() - row_started
            warm[precision, batch_size] = timings
            outputs = [u.audio for u in done]
            reference = outputs if precision == "float32" else reference
            worst = min(snr_db(r, o) for r, o in zip(reference, outputs)) if reference else float("nan")
            gpu_seconds = sum(timings.values())
            against = warm.get(("float32", batch_size))
            verdicts = ("" if precision == "float32" or against is None else "  vs float32: " + ", ".join(
                f"{s} {'faster' if timings[s] <= against[s] else 'SLOWER'}" for s in gpu_stages))
            print(f"{precision:<10}{batch_size:>6}" + "".join(f"{timings[s] / seconds:>20.5f}" for s in gpu_stages)
                  + f"{sum(first.values()):>14.2f}{len(audio) / gpu_seconds:>11.1f}{worst:>16.1f}{verdicts}")
    for precision in PRECISIONS[1:]:
        verdicts = []
        for stage in gpu_stages:
            sizes = [b for b in args.batch_sizes if (precision, b) in warm and ("float32", b) in warm]
            slower = [b for b in sizes if warm[precision, b][stage] > warm["float32", b][stage]]
            verdicts.append(f"{stage} {'not measured' if not sizes else 'NO at ' + str(slower) if slower else 'yes'}"
                            + (" (float32 in every row)" if stage == "speaker" else ""))
        print(f"{name} {precision} at least as fast as float32 at every batch size measured: " + "; ".join(verdicts))
    return skipped


if __name__ == "__main__":
    sys.exit(main())
