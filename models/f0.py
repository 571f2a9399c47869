"""F0 with pYAAPT (``amfm-decompy``) exactly as the SSL-SAS anonymiser computes it.

SSL-SAS zero-pads the waveform by half a frame (160 samples) on each side and runs
pYAAPT with 20 ms frames every 10 ms, ``nccf_thresh1=0.25`` and a 25 ms TDA frame,
keeping the uninterpolated ``samp_values`` (Hz, 0 for unvoiced frames). For an input
of L samples, L a multiple of 160, that gives exactly L/160 frames, frame k centred on
sample 160·k of the unpadded input — the 100 Hz rate the SSL-SAS vocoder consumes.

pYAAPT is CPU-only and per-utterance; :class:`F0Cache` stores results on disk keyed by
the audio content and the parameters, so training and repeated runs compute each
utterance once.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from voxanon.data_prep.atomic import atomic_path
from voxanon.data_prep.paths import contained_path

MIN_SAMPLES = 640
"""pYAAPT indexes past the end of its arrays below four frames (2 × 20 ms after padding)."""


@dataclass(frozen=True)
class YaaptParams:
    """pYAAPT settings; the defaults are the SSL-SAS ones (``get_yaapt_f0``)."""

    frame_length_ms: float = 20.0
    frame_space_ms: float = 10.0
    tda_frame_length_ms: float = 25.0
    nccf_thresh1: float = 0.25
    f0_min_hz: float = 60.0
    f0_max_hz: float = 400.0

    def pad_samples(self, sample_rate: int) -> int:
        return int(self.frame_length_ms / 1000 * sample_rate) // 2

    def yaapt_kwargs(self) -> dict[str, float]:
        return {"frame_length": self.frame_length_ms, "frame_space": self.frame_space_ms,
                "tda_frame_length": self.tda_frame_length_ms, "nccf_thresh1": self.nccf_thresh1,
                "f0_min": self.f0_min_hz, "f0_max": self.f0_max_hz}


SSL_SAS_YAAPT = YaaptParams()


def yaapt_f0(audio: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT) -> np.ndarray:
    """F0 track in Hz (0 = unvoiced), float32, one value per ``frame_space_ms``.

    ``audio`` is mono float in [-1, 1]. Digital silence (all samples equal to zero)
    is returned as all-zero F0 without running pYAAPT, whose normalisation divides by
    the signal's standard deviation. Inputs shorter than :data:`MIN_SAMPLES` raise
    ``ValueError`` (pYAAPT cannot analyse them).
    """
    import amfm_decompy.basic_tools as basic
    import amfm_decompy.pYAAPT as pYAAPT

    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise ValueError(f"yaapt_f0 expects mono audio (1-D), got shape {audio.shape}")
    if len(audio) < MIN_SAMPLES:
        raise ValueError(f"audio of {len(audio)} samples is too short for pYAAPT (minimum {MIN_SAMPLES})")
    pad = params.pad_samples(sample_rate)
    hop = int(round(params.frame_space_ms / 1000 * sample_rate))
    frame = 2 * pad
    n_frames = len(range(frame // 2, len(audio) + 2 * pad - frame // 2, hop))
    if not np.any(audio):
        return np.zeros(n_frames, dtype=np.float32)
    padded = np.pad(audio.astype(np.float64), (pad, pad), mode="constant")
    with warnings.catch_warnings():
        # Near-silent frames make pYAAPT divide by zero; it still returns a valid track.
        warnings.simplefilter("ignore", RuntimeWarning)
        pitch = pYAAPT.yaapt(basic.SignalObj(padded, sample_rate), **params.yaapt_kwargs())
    f0 = np.asarray(pitch.samp_values, dtype=np.float32)
    if len(f0) != n_frames:
        raise RuntimeError(f"pYAAPT returned {len(f0)} frames for {len(audio)} samples, expected {n_frames}")
    return f0


class F0Cache:
    """F0 tracks on disk, one ``.npy`` per (audio content, parameters), written atomically."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    @staticmethod
    def key(audio: np.ndarray, sample_rate: int, params: YaaptParams) -> str:
        digest = hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes())
        digest.update(json.dumps({"sample_rate": sample_rate, **asdict(params)}, sort_keys=True).encode())
        return digest.hexdigest()

    def f0(self, audio: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT) -> np.ndarray:
        """The cached track, computing and storing it on a miss."""
        path = contained_path(self.directory, f"{self.key(audio, sample_rate, params)}.npy")
        if path.is_file():
            return np.load(path)
        f0 = yaapt_f0(audio, sample_rate, params)
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.save(handle, f0)
        return f0
