"""librosa's mel front end in NumPy, with librosa's dtypes and order of operations: the same values bit for bit
(tests/models/test_librosa_exact.py compares them with librosa 0.11 itself).

Why: the first use of librosa's ``stft`` or ``filters.mel`` imports ``scipy.signal`` and loads numba kernels,
1-2 s of every process that embeds (GE2E) or synthesises (B3's prosody front end) before its first result.
"""
from __future__ import annotations

import functools

import numpy as np

from .scipy_exact import general_hamming


@functools.lru_cache(maxsize=8)
def hann_window(n_fft: int) -> np.ndarray:
    """``scipy.signal.get_window("hann", n_fft, fftbins=True)``, librosa's default: the periodic Hann window
    (the symmetric one of ``n_fft + 1`` points, its last dropped), float64."""
    return general_hamming(n_fft + 1, 0.5)[:-1]


def stft(audio: np.ndarray, n_fft: int, hop_length: int, pad_mode: str) -> np.ndarray:
    """``librosa.stft(audio, n_fft=n_fft, hop_length=hop_length, pad_mode=pad_mode).T`` of 1-D float ``audio``:
    centred frames (``n_fft // 2`` padded at each end in ``pad_mode``: ``"constant"`` zeros, ``"reflect"``),
    each times the float64 window, a float64 FFT, kept as complex64 for float32 audio (complex128 for float64),
    as librosa stores it. (frames, 1 + n_fft // 2), frames = 1 + len(audio) // hop_length."""
    if pad_mode not in ("constant", "reflect"):
        raise ValueError(f"pad_mode {pad_mode!r}: expected 'constant' or 'reflect'")
    padded = np.pad(audio, n_fft // 2, mode=pad_mode)
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop_length]
    return np.fft.rfft(frames * hann_window(n_fft), axis=-1).astype(np.result_type(audio.dtype, np.complex64))


@functools.lru_cache(maxsize=8)
def slaney_mel_basis(sample_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0,
                     f_max: float | None = None) -> np.ndarray:
    """``librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max)``: (n_mels,
    1 + n_fft // 2) float32 triangular filters on the Slaney mel scale with Slaney area normalisation (float64
    ramps written into float32 rows, then scaled). ``f_max`` None: half the sample rate."""
    f_max = float(sample_rate) / 2 if f_max is None else f_max
    fft_frequencies = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    edges = _slaney_mel_to_hz(np.linspace(_hz_to_slaney_mel(f_min), _hz_to_slaney_mel(f_max), n_mels + 2))
    widths = np.diff(edges)
    ramps = np.subtract.outer(edges, fft_frequencies)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for band in range(n_mels):
        rising = -ramps[band] / widths[band]
        falling = ramps[band + 2] / widths[band + 1]
        weights[band] = np.maximum(0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:n_mels + 2] - edges[:n_mels]))[:, np.newaxis]
    return weights


# The Slaney mel scale as librosa writes it: linear below 1 kHz, logarithmic above.
_MEL_PER_HZ = 200.0 / 3
_LOG_HZ = 1000.0
_LOG_MEL = (_LOG_HZ - 0.0) / _MEL_PER_HZ
_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_slaney_mel(frequency: float) -> np.ndarray:
    """librosa's ``hz_to_mel`` of one frequency (a 0-d array, as librosa computes it)."""
    frequency = np.asanyarray(frequency)
    mel = (frequency - 0.0) / _MEL_PER_HZ
    if frequency >= _LOG_HZ:
        mel = _LOG_MEL + np.log(frequency / _LOG_HZ) / _LOG_STEP
    return mel


def _slaney_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    """librosa's ``mel_to_hz`` of an array."""
    frequencies = 0.0 + _MEL_PER_HZ * mels
    logarithmic = mels >= _LOG_MEL
    frequencies[logarithmic] = _LOG_HZ * np.exp(_LOG_STEP * (mels[logarithmic] - _LOG_MEL))
    return frequencies
