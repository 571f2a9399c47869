"""IMS-Toucan's audio front end as B3 uses it (``Preprocessing/AudioPreprocessor.py`` of the VoicePrivacy 2024
recipe's vendored IMS-Toucan, Apache-2.0), at 16 kHz in and out, silence not cut:

- :func:`normalise_loudness`: ITU-R BS.1770 integrated loudness (pyloudnorm, the recipe's meter) brought to
  -30 LUFS, then the peak to 1 (always, not only when it would clip), in float64 and returned as float32 (the
  recipe's ``torch.Tensor`` of it);
- :func:`log_mel`: log10 of an 80-band Slaney mel spectrogram of the STFT magnitude (librosa's STFT and mel
  basis: 1024-point periodic Hann window, hop 256, centred with reflection padding; 40-8000 Hz), floored at 1e-10.

Both give the recipe's bits. The STFT and the mel basis are librosa's, written out in NumPy with its dtypes and
operation order (:mod:`voxanon.models.dsp.librosa_exact`) rather than called: importing and first calling
librosa's costs seconds per process.
"""
import numpy as np

from ...dsp.librosa_exact import slaney_mel_basis, stft

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


def stft_magnitude(audio: np.ndarray) -> np.ndarray:
    """(frames, 513) float32 ``|librosa.stft(audio, n_fft=1024, hop_length=256)|`` of float32 ``audio``: reflection
    padding of 512 at each end, frames times the float64 window, float64 FFT, the spectrum kept as complex64."""
    return np.abs(stft(np.asarray(audio, dtype=np.float32), N_FFT, HOP_LENGTH, "reflect"))


def log_mel(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """(frames, 80) float32 log10 mel spectrogram of float32 ``audio``; frames = 1 + len(audio) // 256."""
    basis = slaney_mel_basis(sample_rate, N_FFT, N_MELS, F_MIN, F_MAX)
    return np.log10(np.maximum(LOG_FLOOR, np.dot(stft_magnitude(audio), basis.T)))
