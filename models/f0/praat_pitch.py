"""Praat's autocorrelation pitch tracker (parselmouth) with the VoicePrivacy rho_F0 settings."""
from __future__ import annotations

import numpy as np


def praat_f0(samples: np.ndarray, sample_rate: int, *, time_step: float = 0.01, floor_hz: float = 75.0,
             ceiling_hz: float = 500.0) -> np.ndarray:
    """F0 in Hz every ``time_step`` seconds, 0 where unvoiced (``Sound.to_pitch`` defaults otherwise)."""
    import parselmouth

    sound = parselmouth.Sound(samples.astype(np.float64), sampling_frequency=sample_rate)
    pitch = sound.to_pitch(time_step=time_step, pitch_floor=floor_hz, pitch_ceiling=ceiling_hz)
    return np.nan_to_num(pitch.selected_array["frequency"], nan=0.0)
