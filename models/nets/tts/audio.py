"""IMS-Toucan's audio front end as B3 uses it (``Preprocessing/AudioPreprocessor.py`` of the VoicePrivacy 2024
recipe's vendored IMS-Toucan, Apache-2.0), at 16 kHz in and out, silence not cut:

- :func:`normalise_loudness`: ITU-R BS.1770 integrated loudness (pyloudnorm, the recipe's meter) brought to
  -30 LUFS, then the peak to 1 (always, not only when it would clip), in float64 and returned as float32 (the
  recipe's ``torch.Tensor`` of it);
- :func:`log_mel`: log10 of an 80-band Slaney mel spectrogram of the STFT magnitude (librosa's STFT and mel
  basis: 1024-point periodic Hann window, hop 256, centred with reflection padding; 40-8000 Hz), floored at 1e-10.

Both give the recipe's bits. The STFT and the mel basis are written out in NumPy with librosa's dtypes and
operation order (float64 window and FFT, complex64 result, float32 basis) rather than called: importing and
first calling librosa's costs seconds per process.
"""
from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16000
TARGET_LUFS = -30.0
N_FFT = 1024
HOP_LENGTH = 256
N_MELS = 80
F_MIN = 40.0
F_MAX = 8000.0
LOG_FLOOR = 1e-10
# pyloudnorm's gating block: shorter audio has no integrated loudness.
LOUDNESS_BLOCK_SECONDS = 0.4


def normalise_loudness(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """``audio`` at -30 LUFS, then divided by its peak: float32. Refuses (ValueError) audio shorter than the
    400 ms loudness block and audio without measurable loudness (digital silence), where the recipe fails or
    divides by zero."""
    import pyloudnorm

    if len(audio) < LOUDNESS_BLOCK_SECONDS * sample_rate:
        raise ValueError(f"{len(audio) / sample_rate:.3f} s of audio is too short for a loudness measurement "
                         f"(at least {LOUDNESS_BLOCK_SECONDS} s needed)")
    samples = np.asarray(audio, dtype=np.float64)
    loudness = pyloudnorm.Meter(sample_rate).integrated_loudness(samples)
    if not np.isfinite(loudness):
        raise ValueError("the audio is silent: it has no measurable loudness")
    # pyloudnorm.normalize.loudness without its clipping warning: the peak normalisation below undoes any clipping.
    gain = np.power(10.0, (TARGET_LUFS - loudness) / 20.0)
    normalised = gain * samples
    return (normalised / np.amax(np.abs(normalised))).astype(np.float32)


@lru_cache(maxsize=1)
def _hann_window() -> np.ndarray:
    """SciPy's periodic Hann window (``get_window("hann", 1024, fftbins=True)``, as librosa takes it), float64,
    computed as SciPy's ``general_cosine`` does."""
    angles = np.linspace(-np.pi, np.pi, N_FFT + 1)
    window = np.zeros(N_FFT + 1)
    window += 0.5 * np.cos(0 * angles)
    window += 0.5 * np.cos(angles)
    return window[:-1]


def _hz_to_slaney_mel(hertz: float) -> float:
    linear = hertz / (200.0 / 3)
    if hertz < 1000.0:
        return linear
    return 1000.0 / (200.0 / 3) + np.log(hertz / 1000.0) / (np.log(6.4) / 27.0)


def _slaney_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hertz = (200.0 / 3) * mels
    log_region = mels >= 1000.0 / (200.0 / 3)
    hertz[log_region] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[log_region] - 1000.0 / (200.0 / 3)))
    return hertz


@lru_cache(maxsize=4)
def _mel_basis(sample_rate: int) -> np.ndarray:
    """(80, 513) float32 Slaney-normalised triangular filters, as ``librosa.filters.mel`` computes them (float64
    ramps written into float32 rows, then scaled)."""
    weights = np.zeros((N_MELS, 1 + N_FFT // 2), dtype=np.float32)
    fft_hertz = np.fft.rfftfreq(n=N_FFT, d=1.0 / sample_rate)
    edges = _slaney_mel_to_hz(np.linspace(_hz_to_slaney_mel(F_MIN), _hz_to_slaney_mel(F_MAX), N_MELS + 2))
    widths = np.diff(edges)
    ramps = np.subtract.outer(edges, fft_hertz)
    for band in range(N_MELS):
        rising = -ramps[band] / widths[band]
        falling = ramps[band + 2] / widths[band + 1]
        weights[band] = np.maximum(0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:N_MELS + 2] - edges[:N_MELS]))[:, np.newaxis]
    return weights


def stft_magnitude(audio: np.ndarray) -> np.ndarray:
    """(frames, 513) float32 ``|librosa.stft(audio, n_fft=1024, hop_length=256)|`` of float32 ``audio``: reflection
    padding of 512 at each end, frames times the float64 window, float64 FFT, the spectrum kept as complex64."""
    padded = np.pad(np.asarray(audio, dtype=np.float32), N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    spectrum = np.fft.rfft(frames * _hann_window(), axis=-1).astype(np.complex64)
    return np.abs(spectrum)


def log_mel(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """(frames, 80) float32 log10 mel spectrogram of float32 ``audio``; frames = 1 + len(audio) // 256."""
    return np.log10(np.maximum(LOG_FLOOR, np.dot(stft_magnitude(audio), _mel_basis(sample_rate).T)))
