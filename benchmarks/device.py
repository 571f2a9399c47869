"""Every device figure in one command, within 8 minutes, written to one file.

Runs one after the other, each in its own process with its own time limit, and writes everything they
print (with a header naming the machine, the GPU, torch and the commit, and each part's wall time and
exit code) to ``--out`` (default ``device-figures.txt``; written as ``<out>.partial`` while it runs, so
that a run cut short leaves what it measured):

0. ``voxanon models warm-up``: numba's compile of the fast YAAPT's kernels into the user's cache folder (about
   45 s on a fresh machine, then under a second; limit 60 s), timed on its own line so that no later part's
   budget pays for it;
1. ``benchmarks/gpu.py``: the resynth chain's GPU stages (content, speaker, vocoder) at batch sizes 1-64 in
   float32, bfloat16 and float16, with SNRs against float32 (its own budget 45 s, its set-up included; limit 65 s);
2. ``benchmarks/gpu.py --systems b5 b6``: the same for B5's and B6's GPU stages (BN extractor, converter) at
   batch sizes 8 and 32 (budget 40 s; limit 65 s);
3. ``benchmarks/gpu_pipeline.py``: ``voxanon anonymise --system resynth --device cuda`` over 10 h of audio:
   F0 in the CPU pool (the default), then bfloat16, then with a warm F0 cache (each timed run stopped with
   Ctrl-C at 45 s or its share of the part's 150 s budget, set-up included, its figures taken over what it
   wrote by then; limit 170 s);
4. ``benchmarks/f0.py --device cuda``: the fast YAAPT's batched GPU figures (limit 45 s);
5. ``benchmarks/train_asv.py --device cuda``: ASV attacker training against the bare speechbrain step
   (batch 256, 20 batches per epoch; limit 75 s).

The limits add up to 480 s, and no part runs past 8 minutes from the start. Each part's own budget ends before
its limit, so that it prints its partial result (a ``PARTIAL`` line) rather than being killed; every part runs
with ``PYTHONUNBUFFERED=1``, so that each line reaches the file as it is printed. On a machine without CUDA
it prints one line saying so and exits with code 2; otherwise the exit code is 0 when every part ran to
its end with exit code 0, else 1.

    python -m benchmarks.device [--out device-figures.txt] [--parts warm_up gpu gpu_asrbn gpu_pipeline f0 train_asv]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOTAL_S = 480.0
PARTS = {  # name: (script, or "-m MODULE", arguments, limit in seconds)
    "warm_up": ("-m voxanon.pipeline.cli", ["models", "warm-up"], 60.0),
    "gpu": ("gpu.py", ["--budget-s", "45"], 65.0),
    "gpu_asrbn": ("gpu.py", ["--systems", "b5", "b6", "--batch-sizes", "8", "32", "--budget-s", "40"], 65.0),
    "gpu_pipeline": ("gpu_pipeline.py", ["--variants", "cold", "bf16", "warm", "--timeout-s", "45", "--budget-s",
                                         "150"], 170.0),
    "f0": ("f0.py", ["--device", "cuda"], 45.0),
    "train_asv": ("train_asv.py", ["--device", "cuda", "--batches", "20"], 75.0),
}


def run_part(command: list[str], limit_s: float, write) -> tuple[int | None, float]:
    """``command`` with its output (stdout and stderr) passed line by line to ``write``; killed with its children
    after ``limit_s``. Its temporary files (model sets, outputs: gigabytes) go to a folder removed afterwards,
    killed or not. Its exit code (None when killed) and wall seconds."""
    began = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="voxanon-device-part-")
    process = subprocess.Popen(command, cwd=HERE.parent, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1,
                               env={**os.environ, "TMPDIR": scratch, "PYTHONUNBUFFERED": "1"})
    killer = threading.Timer(limit_s, lambda: os.killpg(process.pid, signal.SIGKILL))
    killer.start()
    try:
        for line in process.stdout:
            write(line)
        process.wait()
    finally:
        killer.cancel()
        shutil.rmtree(scratch, ignore_errors=True)
    killed = process.returncode == -signal.SIGKILL and time.perf_counter() - began >= limit_s
    return (None if killed else process.returncode), time.perf_counter() - began


def output_of(command: list[str], otherwise: str) -> str:
    try:
        return subprocess.run(command, cwd=HERE.parent, capture_output=True, text=True, timeout=10).stdout.strip() \
            or otherwise
    except (OSError, subprocess.TimeoutExpired):
        return otherwise


def header() -> str:
    """The machine, its GPUs (from nvidia-smi: this process starts no CUDA context), torch and the commit."""
    import torch

    gpus = output_of(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     "nvidia-smi not available").replace("\n", "; ")
    commit = output_of(["git", "rev-parse", "--short", "HEAD"], "not a git checkout")
    return (f"device figures, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}: {gpus}; "
            f"{os.cpu_count()} CPUs; torch {torch.__version__} (CUDA {torch.version.cuda}), Python "
            f"{platform.python_version()}; voxanon commit {commit}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("device-figures.txt"), help="the file the figures go to")
    parser.add_argument("--parts", nargs="+", choices=tuple(PARTS), default=list(PARTS))
    args = parser.parse_args()
    started = time.perf_counter()
    from benchmarks.gpu import cuda_or_exit

    code = cuda_or_exit("benchmarks/device.py")
    if code is not None:
        return code
    partial = args.out.with_name(args.out.name + ".partial")
    failed = False
    with open(partial, "w", encoding="utf-8") as out:
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
            out.write(text)
            out.flush()

        write(header())
        for name in args.parts:
            script, arguments, limit = PARTS[name]
            left = TOTAL_S - (time.perf_counter() - started)
            if left < 10:
                write(f"\n== {name}: skipped: the {TOTAL_S:.0f} s budget is spent\n")
                failed = True
                continue
            module = script.split() if script.startswith("-m ") else ["-m", "benchmarks." + script.removesuffix(".py")]
            command = [sys.executable, *module, *arguments]
            shown = " ".join(module)
            write(f"\n== {name}: python {shown} {' '.join(arguments)} (limit {min(limit, left):.0f} s)\n")
            returncode, seconds = run_part(command, min(limit, left), write)
            verdict = (f"KILLED at its {min(limit, left):.0f} s limit" if returncode is None
                       else f"exit code {returncode}")
            write(f"== {name}: {verdict}, {seconds:.1f} s\n")
            failed |= returncode != 0
        write(f"\nall device figures: {time.perf_counter() - started:.1f} s\n")
    os.replace(partial, args.out)
    print(f"written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
