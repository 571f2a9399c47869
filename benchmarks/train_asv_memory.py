"""ASV attacker training memory on the CPU: peak RSS and step time of ``voxanon train asv`` per batch size.

The VoicePrivacy 2024 ECAPA-TDNN (channels 512x4/1536, 192-d, 3 s chunks, the recipe's defaults) trained on
the CPU for a few steps on synthetic 16 kHz 16-bit WAV utterances (243 speakers, as issue 30's small real set),
each configuration in a fresh process so that its peak RSS (``ru_maxrss``) and minor page faults are its own.
Two allocator settings, side by side in one run:

* ``default``: glibc's malloc, as ``train asv`` runs. Every activation above glibc's mmap threshold (at most
  32 MB; at batch 64 every big activation is above it) is mapped afresh and unmapped when freed, so each step
  faults its working set in again: millions of minor faults, a third of the CPU time in the kernel;
* ``kept``: :func:`kept_heap`, all blocks from the heap, which is never trimmed (``M_MMAP_MAX`` 0,
  ``M_TRIM_THRESHOLD`` -1): the churn stops, but freed blocks fragment the heap and the peak grows.

Measured on the 2-core development machine (load from other jobs, so wall times are noisy; CPU time is the
steadier figure), 3 steps each:

    batch  32: default 3.78 GB, 15.4 s CPU/step (3.3 s system), 0.93 M faults/step;
               kept    4.63 GB, 15.4 s CPU/step (1.4 s system), 0.30 M faults/step
    batch  64: default 5.12 GB, 36.4 s CPU/step (11.8 s system), 3.17 M faults/step;
               kept    8.11 GB, 24.6 s CPU/step (2.8 s system), 0.59 M faults/step
    batch 128: default 9.17 GB, 68.4 s CPU/step (26.5 s system), 6.49 M faults/step (2 steps; kept not run)

Keeping the heap saves up to a third of the CPU time but raises the peak by 23-58 %, against issue 30's point
(a laptop runs out of memory), so ``train asv`` keeps glibc's default; the peak per batch size it needs is in
docs/training.md, and :func:`voxanon.pipeline.training.asv.loader.check_cpu_memory` refuses a batch that will not fit.
Batch 256 needs about 15 GB: ``--batch-sizes`` and ``--modes`` choose what runs.

    .venv/bin/python -m benchmarks.train_asv_memory [--batch-sizes 32 64] [--steps 3] [--modes default kept]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEAKERS = 243


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_GLIBC_TRIM_THRESHOLD, _GLIBC_MMAP_MAX = 128 * 1024, 65536   # glibc's defaults


def _glibc():
    """The C library when it is glibc (whose mallopt :func:`kept_heap` sets), else None."""
    import ctypes

    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return ctypes.CDLL(None)


@contextlib.contextmanager
def kept_heap(enabled: bool = True):
    """All blocks from glibc's heap, kept between steps (nothing changes elsewhere or when not ``enabled``);
    afterwards glibc's defaults return and the heap is trimmed."""
    libc = _glibc() if enabled else None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_MAX, 0)
    libc.mallopt(_M_TRIM_THRESHOLD, -1)   # an int read as size_t by glibc: never trim
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_MAX, _GLIBC_MMAP_MAX)
        libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD)
        libc.malloc_trim(0)


def child(batch_size: int, steps: int, mode: str) -> dict:
    import torch

    from voxanon.pipeline.training.asv.data import prepare_training_data, read_training_sets
    from voxanon.pipeline.training.asv.loader import training_memory_estimate
    from voxanon.pipeline.training.asv.settings import resolve_hparams
    from voxanon.pipeline.training.asv.trainer import AsvTrainer

    from benchmarks.train_asv import synthetic_set

    torch.set_num_threads(2)
    hparams = resolve_hparams({"batch_size": batch_size, "valid_ratio": 0.0, "number_of_epochs": 1})
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = synthetic_set(Path(tmp), batch_size * steps, n_speakers=SPEAKERS, seconds=4.0)
        data = prepare_training_data(read_training_sets([data_dir]), hparams, progress=False)
        trainer = AsvTrainer(hparams, data, Path(tmp) / "model", device="cpu", progress=False)
        starts: list[float] = []
        trainer.model.register_forward_pre_hook(lambda *_: starts.append(time.perf_counter()))
        before = resource.getrusage(resource.RUSAGE_SELF)
        with kept_heap(mode == "kept"):
            trainer.train_epoch()
            starts.append(time.perf_counter())
        after = resource.getrusage(resource.RUSAGE_SELF)
        trainer.close()
    step_times = [b - a for a, b in zip(starts, starts[1:])]
    return {"peak_rss_gb": after.ru_maxrss * 1024 / 1e9, "step_s": statistics.median(step_times[1:] or step_times),
            "first_step_s": step_times[0], "minor_faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
            "estimate_gb": training_memory_estimate(hparams, batch_size) / 1e9,
            "user_s_per_step": (after.ru_utime - before.ru_utime) / steps,
            "system_s_per_step": (after.ru_stime - before.ru_stime) / steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--steps", type=int, default=3, help="steps per configuration (default 3)")
    parser.add_argument("--modes", nargs="+", default=["default", "kept"], choices=("default", "kept"))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), int(args.child[1]), args.child[2])))
        return 0
    print(f"ECAPA-TDNN (recipe defaults, 3 s chunks) over {SPEAKERS} speakers on the CPU, {args.steps} steps each")
    for batch_size in args.batch_sizes:
        figures = {}
        for mode in args.modes:
            run = subprocess.run([sys.executable, "-m", __spec__.name, "--child", str(batch_size), str(args.steps), mode],
                                 capture_output=True, text=True, check=True)
            figures[mode] = json.loads(run.stdout.strip().splitlines()[-1])
            f = figures[mode]
            print(f"batch {batch_size:4d} {mode:8s}: peak RSS {f['peak_rss_gb']:.2f} GB (estimate "
                  f"{f['estimate_gb']:.2f} GB), step {f['step_s']:.2f} s (first {f['first_step_s']:.2f} s), "
                  f"{f['minor_faults_per_step']:.0f} minor faults, CPU user {f['user_s_per_step']:.2f} s + "
                  f"system {f['system_s_per_step']:.2f} s per step", flush=True)
        if len(figures) == 2:
            kept, default = figures["kept"], figures["default"]
            cpu = {m: f["user_s_per_step"] + f["system_s_per_step"] for m, f in figures.items()}
            print(f"batch {batch_size:4d}: kept/default: step time {kept['step_s'] / default['step_s']:.2f}, CPU time "
                  f"{cpu['kept'] / cpu['default']:.2f}, peak RSS {kept['peak_rss_gb'] / default['peak_rss_gb']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
