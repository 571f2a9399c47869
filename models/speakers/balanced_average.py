"""Speaker-then-sex balanced averaging (Noé 2023 thesis §5.4).

Utterance values are averaged per speaker, speaker averages per sex, and the sex averages
with equal weight, so neither talkative speakers nor the larger sex pull the result. It gives
the sex-neutral F0 targets (values = per-utterance voiced F0 mean and std) and the global
speaker vector (values = per-utterance embeddings).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ...data_prep.errors import VoxanonError


@dataclass(frozen=True)
class BalancedAverage:
    neutral: np.ndarray                 # equal-weight mean of the sex averages, shape (d,)
    by_sex: dict[str, np.ndarray]       # sex -> mean of its speakers' averages
    by_speaker: dict[str, np.ndarray]   # speaker -> mean of its utterance values
    speakers_per_sex: dict[str, int]


def balanced_average(values, speakers: Sequence[str], sex_of_speaker: Mapping[str, str],
                     sexes: Sequence[str] = ("f", "m")) -> BalancedAverage:
    """Balanced average of ``values`` (n_utterances, d) or (n_utterances,).

    ``speakers[i]`` is the speaker of row ``i``; ``sex_of_speaker`` maps every speaker to one of
    ``sexes`` (Kaldi spk2gender letters, compared case-insensitively). Every sex in ``sexes`` must
    have at least one speaker.
    """
    array = np.asarray(values, dtype=np.float64)
    squeeze = array.ndim == 1
    array = array[:, None] if squeeze else array
    if array.ndim != 2 or len(array) != len(speakers):
        raise ValueError(f"values must be (n, d) with n = len(speakers) = {len(speakers)}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("values contain NaN or infinity")
    wanted = [s.lower() for s in sexes]
    missing = sorted({s for s in speakers if s not in sex_of_speaker})
    if missing:
        raise VoxanonError(f"no sex given for {len(missing)} speaker(s): {', '.join(missing[:5])}")
    index: dict[str, list[int]] = {}
    for row, speaker in enumerate(speakers):
        index.setdefault(speaker, []).append(row)
    by_speaker = {speaker: array[rows].mean(axis=0) for speaker, rows in index.items()}
    by_sex: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for sex in wanted:
        members = [spk for spk in by_speaker if sex_of_speaker[spk].lower() == sex]
        if not members:
            raise VoxanonError(f"balanced averaging needs speakers of every sex {list(wanted)}; none is {sex!r}")
        by_sex[sex] = np.mean([by_speaker[spk] for spk in members], axis=0)
        counts[sex] = len(members)
    others = sorted({sex_of_speaker[spk].lower() for spk in by_speaker} - set(wanted))
    if others:
        raise VoxanonError(f"speaker sex label(s) {others} are not among {list(wanted)}")
    neutral = np.mean([by_sex[sex] for sex in wanted], axis=0)
    if squeeze:
        neutral = neutral[0]
        by_sex = {k: v[0] for k, v in by_sex.items()}
        by_speaker = {k: v[0] for k, v in by_speaker.items()}
    return BalancedAverage(neutral, by_sex, by_speaker, counts)
