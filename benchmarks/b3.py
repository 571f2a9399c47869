"""B3's cost per audio second, stage by stage and for the whole chain, ours against the reference code, side by side.

Writes B3's release with full-size random weights (the published shapes) as the publishers' code writes its files
(the fixture writers of ``tests/helpers/sttts_*_fixtures.py``) into a temporary ``exp/sttts_models``, imports it as
``voxanon models import sttts`` does (:func:`voxanon.models.checkpoints.sttts.import_sttts`), and loads the
reference from the same files: ESPnet's ``Speech2Text`` for the recogniser (when ``espnet`` is installed) and the
test-only transcriptions of the recipe and IMS-Toucan under ``tests/reference/toucan/`` for the rest. Then it runs
each stage on the same synthetic utterance of ``--seconds`` seconds, in the order ours, reference, reference, ours
(a load that drifts during the run weighs on both alike), and prints each stage's seconds per audio second (means of
two runs), the ratio ours / reference, and the chain (the sum of the stages: each utterance passes them in turn).
The load average is printed before and after. ``--threads`` torch threads (1: as the runner's workers compute).

With random weights the recogniser's output is noise: the recogniser runs on the utterance, and the later stages
take a fixed phone string of the utterance's length, the same for ours and the reference.

    .venv/bin/python -m benchmarks.b3 [--seconds 4] [--threads 1] [--device cpu]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SENTENCE = "~ðə kwɪk bɹaʊn fɑks dʒʌmps oʊvɚ ðə leɪzi dɑɡ, ænd ðə dɑɡ slɪps ɑn.~#"
"""IPA as the recogniser writes it (about 2.5 s of speech); repeated to the utterance's length."""


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced, amplitude-modulated tone with noise and short pauses, at 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    voiced = (np.sin(2 * np.pi * 140 * t) + 0.3 * np.sin(2 * np.pi * 1130 * t)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    wave = 0.2 * voiced + 0.02 * rng.standard_normal(len(t))
    wave[(t % 1.3) > 1.15] *= 0.01
    return wave.astype(np.float32)


def phones_for(seconds: float) -> str:
    words = SENTENCE.strip("~#").split()
    repeats = max(1, round(seconds / 2.5))
    return "~" + " ".join(words * repeats) + "~#"


class Timings:
    """Seconds per stage, ours and the reference's, each the mean of its runs."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.runs: dict[tuple[str, str], list[float]] = {}

    def timed(self, stage: str, side: str, run):
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
        self.runs.setdefault((stage, side), []).append(elapsed)
        print(f"    {stage:28s} {side:9s} {elapsed:8.2f} s   {elapsed / self.seconds:7.3f} s per audio second", flush=True)
        return result

    def side_by_side(self, stage: str, ours, reference):
        """Ours, the reference, the reference, ours; ours' first result."""
        result = self.timed(stage, "ours", ours)
        if reference is not None:
            self.timed(stage, "reference", reference)
            self.timed(stage, "reference", reference)
        self.timed(stage, "ours", ours)
        return result

    def mean(self, stage: str, side: str) -> float | None:
        runs = self.runs.get((stage, side))
        return None if not runs else sum(runs) / len(runs)

    def report(self, stages: list[str]) -> None:
        print(f"\n{'stage':28s} {'ours':>10s} {'reference':>10s} {'ours/ref':>9s}   (s per audio second, means of 2 runs)")
        total_ours = total_reference = 0.0
        compared = True
        for stage in stages:
            ours, reference = self.mean(stage, "ours"), self.mean(stage, "reference")
            total_ours += ours
            if reference is None:
                compared = False
                print(f"{stage:28s} {ours / self.seconds:10.3f} {'-':>10s} {'-':>9s}")
                continue
            total_reference += reference
            print(f"{stage:28s} {ours / self.seconds:10.3f} {reference / self.seconds:10.3f} {ours / reference:9.3f}")
        if compared:
            print(f"{'chain':28s} {total_ours / self.seconds:10.3f} {total_reference / self.seconds:10.3f} "
                  f"{total_ours / total_reference:9.3f}")
        else:
            print(f"{'chain (ours)':28s} {total_ours / self.seconds:10.3f}")
