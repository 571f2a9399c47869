"""A straightforward per-frame port of the VoicePrivacy 2024 McAdams code (``anonym_v2``).

It calls the same library functions the reference calls, one frame at a time
(``librosa.lpc``, ``scipy.signal.tf2zpk``, ``np.poly``, ``scipy.signal.lfilter``), and
normalises the peak as the reference pipeline does before writing 16-bit audio. It is
the yardstick for ``voxanon.models.dsp.mcadams``: the parity test compares the two, and
``benchmarks/mcadams.py`` times them side by side.
"""
from __future__ import annotations

import librosa
import numpy as np
import scipy.signal


def mcadams_per_frame(samples: np.ndarray, sample_rate: int, alpha: float, lp_order: int = 20,
                      win_ms: float = 20.0, shift_ms: float = 10.0) -> np.ndarray:
    eps = np.finfo(np.float32).eps
    samples = samples.astype(np.float64) + eps
    win_length = int(np.floor(win_ms * 0.001 * sample_rate))
    shift = int(np.floor(shift_ms * 0.001 * sample_rate))
    hann = np.hanning(win_length)
    window = np.sqrt(hann / (np.sum(hann) / shift))
    n_frames = 1 + (len(samples) - win_length) // shift
    output = np.zeros(len(samples))
    for m in range(n_frames):
        start = m * shift
        frame = samples[start:start + win_length] * window
        a_lpc = librosa.lpc(frame + eps, order=lp_order)
        _, poles, _ = scipy.signal.tf2zpk(np.array([1.0]), a_lpc)
        angles = np.angle(poles)
        is_complex = np.iscomplex(poles)
        new_angles = angles.copy()
        new_angles[is_complex] = np.sign(angles[is_complex]) * np.abs(angles[is_complex]) ** alpha
        new_poles = np.abs(poles) * np.exp(1j * new_angles)
        a_new = np.real(np.poly(new_poles))
        residual = scipy.signal.lfilter(a_lpc, np.array([1.0]), frame)
        rebuilt = scipy.signal.lfilter(np.array([1.0]), a_new, residual) * window
        output[start:start + win_length] += rebuilt
    return output / np.max(np.abs(output)) * (32767 - 1) / 32768
