"""Per-utterance affine F0 mapping to sex-neutral target moments (Noé 2023 thesis §5.4).

Voiced frames are those with F0 > 0. Their mean ``m`` and population standard deviation ``s``
(``ddof=0``, as the ICASSP 2023 code's ``numpy.std``) are measured in linear Hz, and each voiced
frame is mapped to ``μ + σ·(f0 − m)/s``; unvoiced frames stay exactly 0. The result has voiced
mean μ and std σ.

Defined behaviour at the edges (never NaN):

* no voiced frame: the track is returned unchanged (all zeros), as in the reference code;
* ``s = 0`` (one voiced frame, or a flat track): there is no spread to rescale, so the frames are
  shifted to the target mean only (std stays 0);
* a voiced frame more than μ/σ (≈ 5.1 for the defaults) source standard deviations below the
  source mean would map to 0 Hz or below, i.e. become "unvoiced" or meaningless; such frames are
  clamped to ``floor_hz`` (1 Hz by default) so that they stay voiced. The clamp only touches such
  outliers (octave errors); the moments are exact whenever no frame is clamped.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEUTRAL_F0_MEAN_HZ = 154.37
"""Sex-neutral target mean (Hz) hard-coded in the ICASSP 2023 zLLR-VC code (LibriTTS train-other-500)."""
NEUTRAL_F0_STD_HZ = 30.2
"""Sex-neutral target standard deviation (Hz) of the same release."""
DEFAULT_FLOOR_HZ = 1.0
"""Lowest value a voiced frame may be mapped to, so that it stays voiced (F0 > 0)."""


@dataclass(frozen=True)
class VoicedMoments:
    """Mean and population standard deviation (Hz) of the voiced frames of one F0 track."""

    mean_hz: float
    std_hz: float
    n_voiced: int


def _validated_track(f0) -> np.ndarray:
    track = np.asarray(f0, dtype=np.float64)
    if track.ndim != 1:
        raise ValueError(f"an F0 track must be 1-D (one value per frame), got shape {track.shape}")
    if not np.all(np.isfinite(track)):
        raise ValueError("the F0 track contains NaN or infinity")
    if np.any(track < 0):
        raise ValueError(f"F0 values must be >= 0 Hz (0 = unvoiced), got a minimum of {track.min()} Hz")
    return track


def voiced_moments(f0) -> VoicedMoments | None:
    """Moments of the frames with F0 > 0, or ``None`` when the track has no voiced frame."""
    track = _validated_track(f0)
    voiced = track[track > 0]
    if voiced.size == 0:
        return None
    return VoicedMoments(float(voiced.mean()), float(voiced.std()), int(voiced.size))


def map_f0_to_moments(f0, target_mean_hz: float = NEUTRAL_F0_MEAN_HZ, target_std_hz: float = NEUTRAL_F0_STD_HZ,
                      *, floor_hz: float = DEFAULT_FLOOR_HZ) -> np.ndarray:
    """The track with its voiced frames mapped affinely to ``(target_mean_hz, target_std_hz)``.

    ``f0`` is in Hz with 0 for unvoiced frames; the result is float64 of the same length, with the
    same frames voiced. See the module docstring for tracks without voiced frames or spread.
    """
    track = _validated_track(f0)
    if not np.isfinite(target_mean_hz) or target_mean_hz <= 0:
        raise ValueError(f"target mean must be a positive number of Hz, got {target_mean_hz}")
    if not np.isfinite(target_std_hz) or target_std_hz < 0:
        raise ValueError(f"target standard deviation must be >= 0 Hz, got {target_std_hz}")
    if not np.isfinite(floor_hz) or floor_hz <= 0:
        raise ValueError(f"floor must be a positive number of Hz, got {floor_hz}")
    voiced = track > 0
    moments = voiced_moments(track)
    if moments is None:
        return track
    mapped = track.copy()
    if moments.std_hz > 0:
        mapped[voiced] = target_mean_hz + target_std_hz * (track[voiced] - moments.mean_hz) / moments.std_hz
    else:
        mapped[voiced] = target_mean_hz
    mapped[voiced] = np.maximum(mapped[voiced], floor_hz)
    return mapped
