"""``voxanon f0-targets``: sex-neutral F0 target moments of a corpus, for ``f0_neutral`` and ``tdpsola``."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ...data_prep.atomic import atomic_write_text, ensure_writable_folder
from ...data_prep.corpus import read_data_dir
from ...data_prep.errors import VoxanonError
from ...models.f0.params import DEFAULT_BACKEND, PYAAPT_BACKENDS

SHOWN_IDS = 10


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "f0-targets", help="sex-neutral F0 targets (mean, std) of a corpus by balanced averaging",
        description="YAAPT F0 (SSL-SAS settings) of every utterance; the mean and std of its voiced frames are "
                    "averaged per speaker, then per sex, then over the two sexes with equal weight (thesis §5.4), "
                    "so neither talkative speakers nor the larger sex pull the targets. The reference values "
                    "(LibriTTS train-other-500) are 154.37 Hz and 30.2 Hz. Prints the targets as JSON; utterances "
                    "without voiced frames and unusable files are reported and left out.")
    parser.add_argument("--data", required=True, action="append", type=Path, metavar="DIR",
                        help="Kaldi data directory with spk2gender (repeatable; speaker ids are shared across sets)")
    parser.add_argument("--out", type=Path, metavar="FILE.json", help="also write the targets to this file")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="worker processes for the F0 tracker (default: the number of cores)")
    parser.add_argument("--f0-backend", choices=PYAAPT_BACKENDS, default=DEFAULT_BACKEND,
                        help="YAAPT version: fast (default: pYAAPT's algorithm reimplemented, 4-5x faster, the "
                             "same track on almost every frame) or pyaapt (amfm-decompy's pYAAPT itself); the F0 "
                             "cache keeps the two apart")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", type=Path, metavar="DIR",
                       help="per-utterance F0 cache (default: $VOXANON_HOME/cache/f0)")
    cache.add_argument("--no-cache", action="store_true", help="compute every track, store none")
    parser.add_argument("--allow-pipes", action="store_true",
                        help="run 'command |' entries of wav.scp through the shell (only for data you trust)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def _cache_dir(args: argparse.Namespace) -> Path | None:
    if args.no_cache:
        return None
    if args.cache_dir is not None:
        return args.cache_dir
    from ...models.checkpoints.registry import voxanon_home

    return voxanon_home() / "cache" / "f0"


def run(args: argparse.Namespace) -> int:
    from ..systems.ssl_sas.f0_targets import compute_f0_targets
    from ..model_service import machine_workers
    from .options import refuse_counts_below_one

    refuse_counts_below_one(args, "workers")
    if args.out is not None:
        # Checked before the F0 work, whose result would otherwise have nowhere to go.
        if args.out.is_dir():
            raise VoxanonError(f"--out {args.out}: is a folder; give the file to write the targets to")
        ensure_writable_folder(args.out.parent, "--out")
    sets = [read_data_dir(path, allow_pipes=args.allow_pipes) for path in args.data]
    targets = compute_f0_targets(sets, workers=machine_workers(args.workers), cache_dir=_cache_dir(args),
                                 allow_pipes=args.allow_pipes, progress=not args.quiet, backend=args.f0_backend)
    unvoiced = targets.excluded["no_voiced_frames"]
    unusable = targets.excluded["unusable_audio"]
    if unvoiced:
        shown = ", ".join(unvoiced[:SHOWN_IDS]) + (", ..." if len(unvoiced) > SHOWN_IDS else "")
        print(f"excluded {len(unvoiced)} utterance(s) without voiced frames: {shown}", file=sys.stderr)
    for utt, reason in unusable.items():
        print(f"UNUSABLE {utt}: {reason}", file=sys.stderr)
    print(f"F0 targets from {targets.utterances} utterances of "
          + ", ".join(f"{n} {sex} speakers" for sex, n in targets.speakers_per_sex.items())
          + f": mean {targets.f0_mean_hz:.2f} Hz, std {targets.f0_std_hz:.2f} Hz", file=sys.stderr)
    text = targets.to_json()
    if args.out is not None:
        atomic_write_text(args.out, text)
    sys.stdout.write(text)
    return 1 if unusable else 0
