"""How closely two YAAPT versions agree, and the speech they are compared on.

Used by ``tests/models/test_fast_yaapt.py`` and ``benchmarks/f0.py``. Utterances are prepared as the SSL-SAS
chain hands them to its F0 stage (16 kHz, trimmed to a multiple of 320 samples, peak 0.95).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.helpers.synthetic_voices import stress_voices


@dataclass(frozen=True)
class Agreement:
    """Frame counts of tracks against reference tracks (Hz, 0 = unvoiced)."""

    frames: int
    voicing_agree: int
    both_voiced: int
    within_1hz: int
    identical_frames: int
    identical_tracks: int
    tracks: int
    worst_voicing: float
    worst_within_1hz: float
    worst_name: str
    """The utterance of lowest voicing agreement, then of lowest 1-Hz agreement, and its two figures."""

    @property
    def voicing(self) -> float:
        """Share of frames whose voiced/unvoiced decision agrees."""
        return self.voicing_agree / self.frames

    @property
    def f0_within_1hz(self) -> float:
        """Share of the frames both call voiced whose F0 differs by at most 1 Hz."""
        return self.within_1hz / max(self.both_voiced, 1)


def agreement(references: dict[str, np.ndarray], tracks: dict[str, np.ndarray]) -> Agreement:
    counts = np.zeros(5, dtype=np.int64)
    worst = (2.0, 2.0, "")
    for name, reference in references.items():
        track = tracks[name]
        if track.shape != reference.shape:
            raise AssertionError(f"{name}: {track.shape} frames against {reference.shape}")
        same_voicing = (reference > 0) == (track > 0)
        both = (reference > 0) & (track > 0)
        counts += [len(reference), same_voicing.sum(), both.sum(), (np.abs(reference - track)[both] <= 1.0).sum(),
                   (reference == track).sum()]
        within = (np.abs(reference - track)[both] <= 1.0).mean() if both.any() else 1.0
        worst = min(worst, (float(same_voicing.mean()), float(within), name))
    identical = sum(np.array_equal(references[name], tracks[name]) for name in references)
    return Agreement(*map(int, counts), identical, len(references), *worst)


def chain_input(audio: np.ndarray) -> np.ndarray:
    """What the ``ssl_sas_input`` stage makes of ``audio``."""
    from voxanon.pipeline.systems.ssl_sas.chain import SslSasInputStage
    from voxanon.pipeline.systems.stage import Utterance

    utterance = Utterance("u", "", None, np.asarray(audio, dtype=np.float32), 16000, seeds={})
    SslSasInputStage().process(utterance)
    return utterance.audio


def demo_speech(every: int = 1) -> dict[str, np.ndarray]:
    """Every ``every``-th utterance of the demo corpus (182 utterances, 462 s), by id."""
    from voxanon.data_prep.audio import load_audio
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.data_prep.demo_corpus import demo_corpus_dir

    data = read_data_dir(demo_corpus_dir())
    return {utt: chain_input(load_audio(data.audio_path(utt), 16000).samples)
            for utt in sorted(data.utterances)[::every]}


def synthetic_speech() -> dict[str, np.ndarray]:
    """:func:`synthetic_voices.stress_voices`, as the chain hands them on."""
    return {name: chain_input(samples) for name, samples in stress_voices().items()}
