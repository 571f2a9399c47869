"""YAAPT F0: the fast version (``f0.backend: fast``) against pYAAPT (``amfm_decompy``), all in one run.

1. Parity and speed per CPU core, side by side: every demo-corpus utterance (182, 462 s; ``--every N``
   takes every N-th) and the synthetic stress voices (octave jumps, creak, digital silence, clipping;
   ``tests/helpers/synthetic_voices.py``), prepared as the SSL-SAS chain hands them to its F0 stage, go through
   pYAAPT and the fast version in turn (which goes first alternates), on one thread (OpenMP, OpenBLAS and
   MKL limited to 1 before numpy loads). Printed per set: voicing agreement (frames whose voiced/unvoiced
   decision agrees), F0 within 1 Hz on the frames both call voiced, identical frames and tracks, the worst
   utterance (lowest voicing agreement, then 1-Hz agreement); CPU seconds per audio second of each (the
   process's CPU time: what one core does, whatever else the machine runs) and their ratio (target >= 4x),
   and the ratio of wall-clock times, which a busy machine lowers (other processes evict the fast
   version's FFT and NCCF data from the caches more than they slow pYAAPT's interpreter).
2. The fast version's first call in a fresh interpreter (what the F0 stage's ``load_models`` costs a
   command before it forks): importing it and loading its compiled kernels from numba's cache; pYAAPT's
   import and first call for comparison; with ``--cold``, also compiling the kernels into an empty cache
   (once per machine and source version).
3. The batched torch version on CUDA (``yaapt_f0_batch``): audio seconds per wall second over the whole
   set in batches of ``--batch-sizes`` utterances, after one warm batch (target >= 3000x real time), and its
   parity with pYAAPT. Without CUDA the line says NOT MEASURED; ``--torch-cpu`` then checks the torch
   version's parity on the CPU instead (slow: it is written for a GPU). ``--device cuda`` runs this part
   alone (pYAAPT's references computed on every core), in well under a minute: what
   ``benchmarks/device.py`` runs on a GPU machine.
4. ``--resynth N`` (default 16): the resynth system (random full-size SSL-SAS weights, ``--size``) on N
   demo utterances spread over the corpus, and on every one whose two F0 tracks differ, with each
   backend's F0; the SNR of the fast-F0 output against the pYAAPT-F0 output (identical F0 gives identical
   audio: counted apart).

    .venv/bin/python -m benchmarks.f0 [--every 1] [--device cpu|cuda] [--batch-sizes 32 128] [--torch-cpu]
                                      [--cold] [--resynth 16] [--size full]
"""
from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
from tests.helpers.yaapt_parity import Agreement, agreement, demo_speech, synthetic_speech

from voxanon.models.f0.extract import yaapt_f0, yaapt_f0_batch  # noqa: E402

from voxanon.models.f0.params import SSL_SAS_YAAPT

SPEED_TARGET = 4.0
GPU_TARGET = 3000.0
FIRST_CALL = {
    "fast": "from voxanon.models.f0.extract import yaapt; yaapt.warm_up()",
    "pyaapt": "from voxanon.models.f0.extract import yaapt_f0; import numpy as np; "
              "yaapt_f0(np.sin(np.arange(1600) * 0.06), backend='pyaapt')",
}


def first_call_seconds(backend: str, cache_dir: str | None = None) -> float:
    """Wall seconds of ``FIRST_CALL[backend]`` in a fresh interpreter (numba's cache in ``cache_dir`` if given)."""
    environment = dict(os.environ, **({"NUMBA_CACHE_DIR": cache_dir} if cache_dir else {}))
    code = f"import time; began = time.perf_counter(); {FIRST_CALL[backend]}; print(time.perf_counter() - began)"
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return float(result.stdout.split()[-1])


def side_by_side(speech: dict[str, np.ndarray]) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """pYAAPT's and the fast version's tracks, and each one's (wall, CPU) seconds, the two taking turns going first."""
    tracks = {"pyaapt": {}, "fast": {}}
    seconds = {"pyaapt": np.zeros(2), "fast": np.zeros(2)}
    for index, (name, audio) in enumerate(speech.items()):
        for backend in (("pyaapt", "fast") if index % 2 == 0 else ("fast", "pyaapt")):
            wall, cpu = time.perf_counter(), time.process_time()
            tracks[backend][name] = yaapt_f0(audio, backend=backend)
            seconds[backend] += [time.perf_counter() - wall, time.process_time() - cpu]
    return tracks["pyaapt"], tracks["fast"], seconds["pyaapt"], seconds["fast"]


def speed_row(label: str, audio_seconds: float, pyaapt_s: np.ndarray, fast_s: np.ndarray) -> str:
    """CPU seconds per audio second (the process on one thread: what a core does) and the ratios."""
    return (f"{label:<26}{audio_seconds:>8.1f}{pyaapt_s[1] / audio_seconds:>16.4f}{fast_s[1] / audio_seconds:>14.4f}"
            f"{pyaapt_s[1] / fast_s[1]:>7.2f}x{pyaapt_s[0] / fast_s[0]:>17.2f}x")


def parity_row(label: str, result: Agreement) -> str:
    return (f"{label:<34}{result.voicing * 100:>9.3f}{result.f0_within_1hz * 100:>9.3f}"
            f"{result.identical_frames / result.frames * 100:>10.3f}{result.identical_tracks:>6}/{result.tracks:<5}"
            f"{result.worst_voicing * 100:>9.2f}/{result.worst_within_1hz * 100:.2f} {result.worst_name}")


def torch_batches(speech: dict[str, np.ndarray], batch_size: int, device: str) -> tuple[dict, float]:
    """The torch version's tracks in batches of ``batch_size`` (longest first), and the wall seconds."""
    names = sorted(speech, key=lambda name: -len(speech[name]))
    tracks = {}
    began = time.perf_counter()
    for start in range(0, len(names), batch_size):
        chunk = names[start:start + batch_size]
        for name, track in zip(chunk, yaapt_f0_batch([speech[name] for name in chunk], 16000, SSL_SAS_YAAPT, device)):
            if isinstance(track, Exception):
                raise track
            tracks[name] = track
    return tracks, time.perf_counter() - began


def resynth_snr(speech: dict[str, np.ndarray], size: str) -> list[float]:
    """SNR (dB) of the resynth output with fast F0 against the output with pYAAPT F0, per utterance."""
    import torch

    from benchmarks.gpu import random_model_home
    from benchmarks.stage_timing import stage_seconds, utterance_batches
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    torch.set_num_threads(1)
    waves = list(speech.values())
    outputs = {}
    with random_model_home(size):
        for backend in ("pyaapt", "fast"):
            system = build_system(load_system_config("resynth", [f"f0.backend={backend}"]))
            _, done = stage_seconds(system.stages, utterance_batches(system, waves, 4))
            outputs[backend] = [utt.audio.astype(np.float64) for utt in done]
    snrs = []
    for reference, other in zip(outputs["pyaapt"], outputs["fast"]):
        noise = np.sum((reference - other) ** 2)
        snrs.append(float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference ** 2) / noise)))
    return snrs


def gpu_figures(sets: dict[str, dict[str, np.ndarray]], references: dict[str, dict], batch_sizes: list[int]) -> None:
    """Part 3 on CUDA: speed of the batched torch version over all of ``sets`` per batch size, and its parity."""
    import torch

    audio_seconds = sum(len(audio) for speech in sets.values() for audio in speech.values()) / 16000
    warm = dict(list(sets["demo corpus"].items())[:max(batch_sizes)])
    began = time.perf_counter()
    torch_batches(warm, max(batch_sizes), "cuda")
    print(f"torch on {torch.cuda.get_device_name()}: first batch (CUDA start, cuFFT plans) "
          f"{time.perf_counter() - began:.1f} s; {os.cpu_count()} CPU threads for the per-utterance decisions")
    for batch_size in batch_sizes:
        tracks, seconds = {}, 0.0
        for label, speech in sets.items():
            tracks[label], spent = torch_batches(speech, batch_size, "cuda")
            seconds += spent
        speed = audio_seconds / seconds
        print(f"batches of {batch_size}: {audio_seconds:.0f} s of audio in {seconds:.2f} s, {speed:.0f}x real time "
              f"(target >= {GPU_TARGET:.0f}x: {'MET' if speed >= GPU_TARGET else 'NOT MET'})")
    for label in sets:
        print(parity_row(f"torch CUDA, {label}", agreement(references[label], tracks[label])))


def pyaapt_tracks(speech: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """pYAAPT's tracks, computed on every core (forked before CUDA starts)."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial
    from multiprocessing import get_context

    with ProcessPoolExecutor(os.cpu_count() or 1, mp_context=get_context("fork")) as pool:
        return dict(zip(speech, pool.map(partial(yaapt_f0, backend="pyaapt"), speech.values())))


def parity_header() -> str:
    return (f"\n{'parity against pYAAPT':<34}{'voicing%':>9}{'<=1Hz%':>9}{'frames=%':>10}{'tracks=':>11}"
            f"{'worst utterance: voicing%/<=1Hz%':>34}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=1, help="every N-th demo utterance (default: all 182)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: only part 3 (the references by pYAAPT on every core), in under a minute, for "
                             "benchmarks/device.py; without CUDA it says so and exits with code 2")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128], help="CUDA batch sizes")
    parser.add_argument("--torch-cpu", action="store_true", help="without CUDA: the torch version's parity on the CPU")
    parser.add_argument("--cold", action="store_true", help="also time compiling the kernels into an empty cache")
    parser.add_argument("--resynth", type=int, default=16, metavar="N", help="utterances for the SNR (0: skip)")
    parser.add_argument("--size", choices=("full", "tiny"), default="full", help="random SSL-SAS set for --resynth")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    sets = {"demo corpus": demo_speech(args.every), "synthetic stress voices": synthetic_speech()}
    if args.device == "cuda":
        from benchmarks.gpu import cuda_or_exit

        code = cuda_or_exit("benchmarks/f0.py --device cuda")  # counts the devices; no CUDA context yet
        if code is not None:
            return code
        references = {label: pyaapt_tracks(speech) for label, speech in sets.items()}
        print(parity_header())
        gpu_figures(sets, references, args.batch_sizes)
        return 0
    import torch

    torch.set_num_threads(1)
    yaapt_f0(np.sin(np.arange(3200) * 0.06), backend="fast")  # kernels loaded before the clock starts

    print(f"YAAPT F0, SSL-SAS settings; {os.cpu_count()} CPUs, one thread; numpy {np.__version__}, "
          f"torch {torch.__version__}")
    print(f"{'speed on one core':<26}{'audio s':>8}{'pYAAPT CPU s/s':>16}{'fast CPU s/s':>14}{'ratio':>8}"
          f"{'wall-clock ratio':>18}")
    references, fast_tracks = {}, {}
    totals = {"audio": 0.0, "pyaapt": np.zeros(2), "fast": np.zeros(2)}
    for label, speech in sets.items():
        audio_seconds = sum(map(len, speech.values())) / 16000
        references[label], fast_tracks[label], pyaapt_s, fast_s = side_by_side(speech)
        totals["audio"] += audio_seconds
        totals["pyaapt"] += pyaapt_s
        totals["fast"] += fast_s
        print(speed_row(label, audio_seconds, pyaapt_s, fast_s))
    ratio = totals["pyaapt"][1] / totals["fast"][1]
    print(speed_row("all", totals["audio"], totals["pyaapt"], totals["fast"])
          + f"   target >= {SPEED_TARGET:.0f}x per core: {'MET' if ratio >= SPEED_TARGET else 'NOT MET'}")

    print(parity_header())
    for label in sets:
        print(parity_row(f"fast, {label}", agreement(references[label], fast_tracks[label])))
    if torch.cuda.is_available():
        torch.set_num_threads(os.cpu_count() or 1)
        gpu_figures(sets, references, args.batch_sizes)
    else:
        print(f"torch on CUDA, batched: NOT MEASURED (no CUDA device here; target >= {GPU_TARGET:.0f}x real time)")
        if args.torch_cpu:
            for label, speech in sets.items():
                tracks, _ = torch_batches(speech, 16, "cpu")
                print(parity_row(f"torch CPU, {label}", agreement(references[label], tracks)))

    cached = first_call_seconds("fast")
    line = f"\nfirst call in a fresh interpreter: fast {cached:.2f} s (kernels from numba's cache)"
    if args.cold:
        with tempfile.TemporaryDirectory() as empty:
            line += f", {first_call_seconds('fast', empty):.1f} s compiling them into an empty cache"
    print(line + f"; pYAAPT {first_call_seconds('pyaapt'):.2f} s")

    if args.resynth:
        demo = sets["demo corpus"]
        differing = [name for name in demo if not np.array_equal(references["demo corpus"][name],
                                                                  fast_tracks["demo corpus"][name])]
        chosen = list(demo)[::max(1, len(demo) // args.resynth)][:args.resynth]
        chosen += [name for name in differing if name not in chosen]
        snrs = np.array(resynth_snr({name: demo[name] for name in chosen}, args.size))
        finite = snrs[np.isfinite(snrs)]
        print(f"\nresynth output ({args.size} random SSL-SAS weights), fast F0 against pYAAPT F0, {len(snrs)} "
              f"demo utterances ({args.resynth} spread over the corpus, and every one whose F0 tracks differ): "
              f"{len(snrs) - len(finite)} identical"
              + (f"; the others: {', '.join(f'{x:.1f}' for x in sorted(finite))} dB SNR" if len(finite) else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
