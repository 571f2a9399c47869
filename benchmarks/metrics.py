"""Speed of the ``voxanon metrics`` quantities on 10^6 trials, side by side with llreval.

Times, best of ``--repeats`` runs on the same synthetic scores:

* every metric of the JSON output (``compute_metrics``), one by one and in all;
* the quantities voxanon and llreval both compute (ROCCH-EER, Cllr, min Cllr), each
  library on the same scores through its one-call path (voxanon ``eer_cllr_min_cllr``: one
  sort, one PAV shared by the ROCCH and min Cllr; llreval ``tarnon_2_eer_cllr_mincllr``),
  timed side by side in ``--runs`` separate runs (each the best of ``--repeats``, the two
  libraries interleaved), with every run's ratio llreval / voxanon, their median and the
  worst, and the largest difference between the values;
* the whole command, ``voxanon metrics --json``, on trials and score files of that size,
  and its parts (reading each file, pairing, metrics).

Targets: every metric of the JSON for 10^6 trials under 1 s, and at least 1.5x llreval on
the shared quantities in every run.

    .venv/bin/python -m benchmarks.metrics [--trials 1000000] [--repeats 3] [--runs 5] [--skip-cli]
"""
from __future__ import annotations

import os

# One core: pin every BLAS/OpenMP pool before numpy loads.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse
import contextlib
import gc
import io
import tempfile
import time
from pathlib import Path

import numpy as np
from llreval.quick_eval import tarnon_2_eer_cllr_mincllr

from voxanon.data_prep.corpus import read_trials
from voxanon.data_prep.scores import read_scores
from voxanon.eval.calibration import SortedTrials
from voxanon.eval.scores import pair_trials_with_scores
from voxanon.eval.summary import METRIC_STEPS, compute_metrics, eer_cllr_min_cllr
from voxanon.pipeline.cli import main as voxanon_main

RATIO_TARGET = 1.5
JSON_TARGET_SECONDS = 1.0


def best_time(function, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def synthetic_scores(n_trials: int, target_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PLDA-like scores: targets N(5, 3^2), non-targets N(-5, 4^2)."""
    rng = np.random.default_rng(seed)
    n_tar = int(round(n_trials * target_fraction))
    return rng.normal(5.0, 3.0, n_tar), rng.normal(-5.0, 4.0, n_trials - n_tar)


def write_files(folder: Path, tar: np.ndarray, non: np.ndarray) -> tuple[Path, Path]:
    n_speakers = 100
    trials, scores = [], []
    for index, (score, target) in enumerate([(s, True) for s in tar.tolist()] + [(s, False) for s in non.tolist()]):
        key = f"spk{index % n_speakers} utt{index // n_speakers}"
        trials.append(f"{key} {'target' if target else 'nontarget'}\n")
        scores.append(f"{key} {score!r}\n")
    (folder / "trials").write_text("".join(trials))
    (folder / "scores").write_text("".join(scores))
    return folder / "trials", folder / "scores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--target-fraction", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="side-by-side runs against llreval (default 5)")
    parser.add_argument("--skip-cli", action="store_true", help="leave out the whole-command timing")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tar, non = synthetic_scores(args.trials, args.target_fraction, args.seed)
    print(f"{args.trials} trials ({tar.size} target, {non.size} non-target), best of {args.repeats}, one thread")

    print("\nper step of the full JSON, in its order (a metric's time excludes what earlier steps "
          "left in the shared SortedTrials):")
    steps = {"sort": float("inf"), **{name: float("inf") for name, _ in METRIC_STEPS}}
    for _ in range(args.repeats):
        seconds, trials = best_time(lambda: SortedTrials(tar, non), 1)
        steps["sort"] = min(steps["sort"], seconds)
        for name, function in METRIC_STEPS:
            seconds, _ = best_time(lambda: function(tar, non, trials), 1)
            steps[name] = min(steps[name], seconds)
    for name, seconds in steps.items():
        print(f"  {name:16s} {seconds:7.3f} s")
    json_seconds, metrics = best_time(lambda: compute_metrics(tar, non), args.repeats)
    print(f"  {'full JSON':16s} {json_seconds:7.3f} s   (target < {JSON_TARGET_SECONDS:g} s: "
          f"{'met' if json_seconds < JSON_TARGET_SECONDS else 'MISSED'})")

    print(f"\nROCCH-EER + Cllr + min Cllr on the same scores, {args.runs} runs side by side "
          f"(each the best of {args.repeats}):")
    ratios, difference = [], 0.0
    for run in range(args.runs):
        ours_seconds, ours = best_time(lambda: eer_cllr_min_cllr(tar, non), args.repeats)
        theirs_seconds, theirs = best_time(lambda: tarnon_2_eer_cllr_mincllr(tar, non), args.repeats)
        difference = max(difference, *(abs(a - b) for a, b in zip(ours, theirs)))
        ratios.append(theirs_seconds / ours_seconds)
        print(f"  run {run + 1}: voxanon {ours_seconds:.3f} s, llreval {theirs_seconds:.3f} s, "
              f"ratio llreval/voxanon {ratios[-1]:.2f}x")
    worst = min(ratios)
    print(f"  median {np.median(ratios):.2f}x, worst {worst:.2f}x (target >= {RATIO_TARGET}x in every run: "
          f"{'met' if worst >= RATIO_TARGET else 'MISSED'}); largest value difference {difference:.1e}")
    if args.skip_cli:
        return

    with tempfile.TemporaryDirectory() as folder:
        trials_path, scores_path = write_files(Path(folder), tar, non)
        command = ["metrics", "--trials", str(trials_path), "--scores", str(scores_path), "--json"]
        with contextlib.redirect_stdout(io.StringIO()):
            cli_seconds, code = best_time(lambda: voxanon_main(command), args.repeats)
        # As in the command: the cyclic garbage collector is paused while reading.
        gc.disable()
        trials_seconds, trials = best_time(lambda: read_trials(trials_path), args.repeats)
        scores_seconds, table = best_time(lambda: read_scores(scores_path), args.repeats)
        pair_seconds, _ = best_time(lambda: pair_trials_with_scores(trials, table), args.repeats)
        gc.enable()
    print(f"\nvoxanon metrics --json, files to JSON: {cli_seconds:.3f} s (exit code {code}); of which")
    print(f"  read_trials {trials_seconds:.3f} s, read_scores {scores_seconds:.3f} s, "
          f"pairing {pair_seconds:.3f} s, metrics {json_seconds:.3f} s")
    print("\nJSON:", {key: (round(value, 6) if isinstance(value, float) else value) for key, value in metrics.items()})


if __name__ == "__main__":
    main()
