"""``voxanon metrics``: verification and privacy metrics of a trials list and its scores."""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ...data_prep.atomic import ensure_writable_folder
from ...data_prep.errors import VoxanonError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)
DISPLAY_NAMES = {"cllr": "Cllr"}


def format_report(metrics: dict[str, object], trials: Path, scores: Path, notes: dict[str, str] | None = None) -> str:
    """A block in the manner of VoicePrivacy 2022's ``results.txt``, every EER variant named; each figure that the
    scores make degenerate (``notes``, by JSON key) followed by what it means."""
    from ...eval.zebra import format_zebra_value

    lines = (
        f"ASV: trials {trials}, scores {scores}",
        f"trials: {metrics['n_target']} target, {metrics['n_nontarget']} nontarget",
        f"EER (kaldi): {metrics['eer_kaldi']:.3f}%",
        f"EER (speechbrain): {metrics['eer_speechbrain']:.3f}%",
        f"EER (sweep): {metrics['eer_sweep']:.3f}%",
        f"ROCCH-EER: {metrics['eer_rocch']:.3f}%",
        f"Cllr (min/act): {metrics['min_cllr']:.3f}/{_bits(metrics['cllr'])}",
        f"linkability: {metrics['linkability']:.3f}",
        f"Population: {format_zebra_value(metrics['zebra_dece'])} bit",
        f"Individual: {format_zebra_value(metrics['zebra_worst_case'])} ({metrics['zebra_tag']})",
    )
    keys = {"EER (kaldi)": "eer_kaldi", "Cllr (min/act)": "min_cllr", "linkability": "linkability"}
    noted = []
    for line in lines:
        noted.append(line)
        key = keys.get(line.split(":")[0])
        if notes and key in notes:
            noted.append(f"  note: {notes[key]}")
    return "\n".join(noted) + "\n"


def _bits(value: float) -> str:
    """Three decimals, as VoicePrivacy prints Cllr; in exponent form from 1e6 bits on (LLRs near the float64
    limit give up to 1e308 bits, three hundred digits)."""
    return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.3e}"


def write_plots(directory: Path, label: str, tar: np.ndarray, non: np.ndarray) -> list[Path]:
    """ECE profile, DET curve and empirical calibration plot, each as PNG and PDF."""
    from ...eval.plots import calibration_figure, det_figure, ece_profile_figure, save_figure
    system = [(label, tar, non)]
    written = save_figure(ece_profile_figure(system), directory / "ece_profile")
    written += save_figure(det_figure(system), directory / "det")
    written += save_figure(calibration_figure(tar, non), directory / "calibration")
    return written


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while reading the inputs.

    Reading 10^6 trials creates millions of objects without reference cycles; the
    collector would re-scan them on every generation-2 pass, which tripled the time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "metrics", help="EERs, Cllr, linkability and ZEBRA of a trials list and its scores",
        description="Score a verification trials list. Trials lines: '<enrol-spk> <utt> target|nontarget'; "
                    "score lines: '<enrol-spk> <utt> <score>'. Reports every EER variant (rocch, kaldi, "
                    "speechbrain, sweep; %), Cllr and min Cllr (bits; Cllr reads the scores as natural-log "
                    "LLRs), linkability D_sys, and ZEBRA: expected disclosure D_ECE (bits), worst case "
                    "(log10) and tag.")
    parser.add_argument("--trials", required=True, type=Path, metavar="FILE", help="trials list")
    parser.add_argument("--scores", required=True, type=Path, metavar="FILE", help="score file")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text block")
    parser.add_argument("--plot", type=Path, metavar="DIR",
                        help="also write ece_profile, det and calibration figures (PNG and PDF) into DIR")
    parser.add_argument("--allow-missing", action="store_true",
                        help="drop trials without a score and scores without a trial (reported) "
                             "instead of failing")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ...data_prep.corpus import read_trials
    from ...data_prep.scores import read_scores
    from ...eval.scores import pair_trials_with_scores
    from ...eval.summary import compute_metrics, degenerate_notes
    import numpy as np

    if not args.trials.is_file():
        raise VoxanonError(f"{args.trials}: trials file not found")
    if args.plot is not None:
        ensure_writable_folder(args.plot, "--plot")
    with _collector_paused():
        paired = pair_trials_with_scores(read_trials(args.trials), read_scores(args.scores),
                                         allow_missing=args.allow_missing)
    if paired.trials_without_score:
        log.warning("dropped %d trial(s) without a score, e.g. %s", len(paired.trials_without_score),
                    " ".join(paired.trials_without_score[0]))
    if paired.scores_without_trial:
        log.warning("dropped %d score(s) without a trial, e.g. %s", len(paired.scores_without_trial),
                    " ".join(paired.scores_without_trial[0]))
    metrics = compute_metrics(paired.tar, paired.non, progress=True)
    overflowed = [key for key, value in metrics.items() if isinstance(value, float) and not math.isfinite(value)]
    if overflowed:
        # Only Cllr can: finite scores within a factor of ~2 of the float64 limit, wrongly signed, as natural-log LLRs.
        largest = max(np.abs(paired.tar).max(), np.abs(paired.non).max())
        raise VoxanonError(f"{args.scores}: scores up to ±{largest:.3g}, read as natural-log LLRs, give a "
                           f"{' and '.join(DISPLAY_NAMES.get(key, key) for key in overflowed)} beyond the largest float64; no LLR is that large (rescale the "
                           "scores)")
    notes = degenerate_notes(paired.tar, paired.non)
    if args.json:
        print(json.dumps({**metrics, "notes": notes} if notes else metrics, allow_nan=False))
    else:
        print(format_report(metrics, args.trials, args.scores, notes), end="")
    if args.plot is not None:
        for path in write_plots(args.plot, args.scores.name, paired.tar, paired.non):
            log.info("wrote %s", path)
    return 0
