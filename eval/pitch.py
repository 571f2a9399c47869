"""Pitch correlation rho_F0 between original and anonymised utterances (VoicePrivacy 2020/2022).

As ``local/pitch_correlation.py`` computes it (Voice-Privacy-Challenge-2022): the shorter F0 track
is linearly interpolated to the longer one's length, values outside [75, 500] Hz are set
to 0, the anonymised track is shifted (circularly) by the lag that maximises the full
cross-correlation, and the Pearson correlation of the two tracks is taken with unvoiced
zeros included. An undefined correlation (a constant track) counts as 0.
"""
from __future__ import annotations

import numpy as np

F0_FLOOR_HZ = 75.0
F0_CEILING_HZ = 500.0


def _stretch(track: np.ndarray, length: int) -> np.ndarray:
    if len(track) == length:
        return track
    return np.interp(np.linspace(0.0, 1.0, length), np.linspace(0.0, 1.0, len(track)), track)


def pitch_correlation(f0_original, f0_anonymised) -> float:
    """rho_F0 of one utterance pair; F0 tracks in Hz at a common frame rate (0 = unvoiced)."""
    original = np.asarray(f0_original, dtype=np.float64).ravel()
    anonymised = np.asarray(f0_anonymised, dtype=np.float64).ravel()
    if original.size == 0 or anonymised.size == 0:
        raise ValueError("pitch correlation: an F0 track is empty")
    if not (np.isfinite(original).all() and np.isfinite(anonymised).all()):
        raise ValueError("pitch correlation: F0 tracks must be finite")
    length = max(len(original), len(anonymised))
    original, anonymised = _stretch(original, length), _stretch(anonymised, length)
    for track in (original, anonymised):
        track[(track < F0_FLOOR_HZ) | (track > F0_CEILING_HZ)] = 0.0
    lag = int(np.argmax(np.correlate(original, anonymised, "full"))) - (length - 1)
    anonymised = np.roll(anonymised, lag)
    if original.std() == 0 or anonymised.std() == 0:
        return 0.0
    return float(np.corrcoef(original, anonymised)[0, 1])


def pitch_correlation_summary(pairs) -> tuple[float, float]:
    """Mean and standard deviation of rho_F0 over ``(f0_original, f0_anonymised)`` pairs."""
    values = np.array([pitch_correlation(a, b) for a, b in pairs])
    if values.size == 0:
        raise ValueError("pitch correlation: no utterance pairs")
    return float(values.mean()), float(values.std())
