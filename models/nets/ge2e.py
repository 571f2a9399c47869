"""GE2E speaker encoder (Resemblyzer), batched: the embedded default ASV model.

The weights ship inside the ``resemblyzer`` wheel, so this encoder works with no
download. Each utterance is cut into 1.6 s partials exactly as Resemblyzer does; the
partials of a whole batch of utterances go through the LSTM in one forward pass, and
each utterance's embedding is the L2-normalised mean of its partial embeddings — the
same numbers as ``VoiceEncoder.embed_utterance`` one utterance at a time. Every partial has
the same length, so the batches need no padding, on the CPU or on a GPU (``device``).
"""
from __future__ import annotations

import functools

import numpy as np

from ..dsp.scipy_exact import general_hamming

SAMPLE_RATE = 16000
EMBEDDING_DIM = 256


class GE2EEncoder:
    """``embed(waves)`` -> (n, 256) float32, L2-normalised; input 16 kHz mono float."""

    name = "ge2e"
    dim = EMBEDDING_DIM
    sample_rate = SAMPLE_RATE

    def __init__(self, device: str = "cpu", preprocess: bool = True, max_partials_per_pass: int = 256):
        import torch
        from resemblyzer import VoiceEncoder

        # Resemblyzer loads its bundled pretrained.pt with torch.load, whose default is weights_only=True.
        self._torch = torch
        self.device = torch.device(device)
        self.encoder = VoiceEncoder(device=self.device, verbose=False)
        self.encoder.eval()
        self.preprocess = preprocess
        self.max_partials_per_pass = max_partials_per_pass

    def _partial_mels(self, wave: np.ndarray) -> np.ndarray:
        if self.preprocess:
            trimmed = resemblyzer_preprocess(wave.astype(np.float32))
            # Voice-activity trimming can remove everything from very short or quiet input.
            wave = trimmed if len(trimmed) >= SAMPLE_RATE // 10 else wave
        wav_slices, mel_slices = self.encoder.compute_partial_slices(len(wave), rate=1.3, min_coverage=0.75)
        if wav_slices[-1].stop >= len(wave):
            wave = np.pad(wave, (0, wav_slices[-1].stop - len(wave)))
        mel = mel_spectrogram(wave)
        return np.stack([mel[s] for s in mel_slices])

    def embed(self, waves: list[np.ndarray]) -> np.ndarray:
        if not waves:
            return np.zeros((0, self.dim), dtype=np.float32)
        partials = [self._partial_mels(w) for w in waves]
        stacked = np.concatenate(partials)
        outputs = []
        with self._torch.no_grad():
            for start in range(0, len(stacked), self.max_partials_per_pass):
                chunk = self._torch.from_numpy(stacked[start:start + self.max_partials_per_pass]).to(self.device)
                outputs.append(self.encoder(chunk).cpu().numpy())
        partial_embeddings = np.concatenate(outputs)
        embeddings = np.empty((len(waves), self.dim), dtype=np.float32)
        offset = 0
        for i, mels in enumerate(partials):
            mean = partial_embeddings[offset:offset + len(mels)].mean(axis=0)
            embeddings[i] = mean / np.linalg.norm(mean)
            offset += len(mels)
        return embeddings


# Resemblyzer's front end without librosa. ``resemblyzer.preprocess_wav`` and ``wav_to_mel_spectrogram`` call
# librosa (``resample``, ``feature.melspectrogram``), whose first use imports ``scipy.signal`` and loads numba
# kernels: 1.7 s of every evaluation process, on one core, before its first embedding. The same computation in
# NumPy, step for step, gives librosa's values bit for bit (tests/models/test_ge2e_front_end.py compares them).

MEL_FFT = SAMPLE_RATE * 25 // 1000  # resemblyzer's mel_window_length (25 ms)
MEL_HOP = SAMPLE_RATE * 10 // 1000  # mel_window_step (10 ms)
MEL_CHANNELS = 40


def resemblyzer_preprocess(wave: np.ndarray) -> np.ndarray:
    """``resemblyzer.preprocess_wav(wave, source_sr=16000)``: librosa's audio check (its ``resample`` between
    equal rates returns the samples untouched), volume normalisation and long-silence trimming."""
    from resemblyzer.audio import normalize_volume, trim_long_silences
    from resemblyzer.hparams import audio_norm_target_dBFS

    if not np.issubdtype(wave.dtype, np.floating) or wave.ndim != 1:
        raise ValueError("GE2E takes 1-D floating-point audio")
    if not np.isfinite(wave).all():
        raise ValueError("audio buffer is not finite everywhere")
    return trim_long_silences(normalize_volume(wave, audio_norm_target_dBFS, increase_only=True))


def mel_spectrogram(wave: np.ndarray) -> np.ndarray:
    """``resemblyzer.audio.wav_to_mel_spectrogram``: librosa's ``melspectrogram`` (power 2, centred frames of
    400 samples every 160, zero padding, periodic Hann window, 40 Slaney mel bands) as (frames, 40) float32."""
    padded = np.pad(wave, MEL_FFT // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, MEL_FFT)[::MEL_HOP]
    # As librosa: the float64 window times the samples, a float64 FFT per frame, stored as complex64.
    spectrum = np.fft.rfft(_stft_window() * frames, axis=-1).astype(np.result_type(wave.dtype, np.complex64))
    power = np.abs(spectrum) ** 2.0
    mel = np.einsum("...ft,mf->...mt", power.T, _mel_basis(), optimize=True)
    return mel.astype(np.float32).T


@functools.lru_cache(maxsize=1)
def _stft_window() -> np.ndarray:
    """``scipy.signal.get_window("hann", 400, fftbins=True)``: the symmetric window one longer, its last point
    dropped."""
    return general_hamming(MEL_FFT + 1, 0.5)[:-1]


@functools.lru_cache(maxsize=1)
def _mel_basis() -> np.ndarray:
    """``librosa.filters.mel(sr=16000, n_fft=400, n_mels=40)``: triangular Slaney-scale filters, Slaney area
    normalisation, float32."""
    fft_frequencies = np.fft.rfftfreq(n=MEL_FFT, d=1.0 / SAMPLE_RATE)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(float(SAMPLE_RATE) / 2), MEL_CHANNELS + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_frequencies)
    weights = np.zeros((MEL_CHANNELS, 1 + MEL_FFT // 2), dtype=np.float32)
    for i in range(MEL_CHANNELS):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:MEL_CHANNELS + 2] - mel_f[:MEL_CHANNELS]))[:, np.newaxis]
    return weights


# The Slaney mel scale as librosa writes it: linear below 1 kHz, logarithmic above.
_MEL_PER_HZ = 200.0 / 3
_LOG_HZ = 1000.0
_LOG_MEL = _LOG_HZ / _MEL_PER_HZ
_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_mel(frequency: float) -> np.ndarray:
    """librosa's ``hz_to_mel`` of one frequency (a 0-d array, as librosa computes it)."""
    frequency = np.asanyarray(frequency)
    mel = (frequency - 0.0) / _MEL_PER_HZ
    if frequency >= _LOG_HZ:
        mel = _LOG_MEL + np.log(frequency / _LOG_HZ) / _LOG_STEP
    return mel


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    """librosa's ``mel_to_hz`` of an array."""
    frequencies = 0.0 + _MEL_PER_HZ * mels
    logarithmic = mels >= _LOG_MEL
    frequencies[logarithmic] = _LOG_HZ * np.exp(_LOG_STEP * (mels[logarithmic] - _LOG_MEL))
    return frequencies
