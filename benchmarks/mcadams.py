"""Speed of McAdams B2: voxanon's vectorised version against a per-frame loop, side by side.

Prints the real-time factor (processing seconds per audio second) on one core for both
implementations on the same utterances, and their ratio. Targets: RTF below 0.02 per
core and at least 5x faster than the per-frame loop.

    .venv/bin/python -m benchmarks.mcadams [--seconds 60]
"""
from __future__ import annotations

import os

# One core: pin every BLAS/OpenMP pool before numpy loads.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
from tests.helpers.corpora import synthetic_vowel
from tests.reference.mcadams import mcadams_per_frame
from voxanon.data_prep.audio import load_audio  # noqa: E402
from voxanon.data_prep.corpus import read_data_dir  # noqa: E402
from voxanon.models.dsp.mcadams import mcadams  # noqa: E402

SAMPLE_RATE = 16000


def demo_utterances(total_seconds: float) -> list[np.ndarray]:
    corpus = ROOT / "data_prep" / "demo" / "corpus"
    if not (corpus / "wav.scp").is_file():
        return []
    data = read_data_dir(corpus)
    chosen, seconds = [], 0.0
    for utt in data.utterances:
        chosen.append(load_audio(data.audio_path(utt), SAMPLE_RATE).samples)
        seconds += len(chosen[-1]) / SAMPLE_RATE
        if seconds >= total_seconds:
            break
    return chosen


def time_it(function, utterances: list[np.ndarray], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for samples in utterances:
            function(samples, SAMPLE_RATE, 0.8)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="audio to process (default 60 s)")
    args = parser.parse_args()
    utterances = demo_utterances(args.seconds)
    source = "demo corpus"
    if not utterances:
        utterances = [synthetic_vowel(110 + 10 * i, [(500, 60), (1500, 90), (2500, 120)], 4.0, seed=i)
                      for i in range(int(np.ceil(args.seconds / 4)))]
        source = "synthetic vowels"
    audio_seconds = sum(len(u) for u in utterances) / SAMPLE_RATE
    mcadams(utterances[0], SAMPLE_RATE, 0.8)
    vectorised = time_it(mcadams, utterances, repeats=3)
    loop = time_it(mcadams_per_frame, utterances, repeats=1)
    print(f"McAdams B2 on {audio_seconds:.1f} s of audio ({len(utterances)} utterances, {source}), one core")
    print(f"  voxanon vectorised : {vectorised:7.3f} s   RTF {vectorised / audio_seconds:.4f}  (target < 0.02)")
    print(f"  per-frame loop     : {loop:7.3f} s   RTF {loop / audio_seconds:.4f}")
    print(f"  speed-up           : {loop / vectorised:7.1f}x  (target >= 5x)")


if __name__ == "__main__":
    main()
