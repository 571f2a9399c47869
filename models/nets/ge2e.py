"""GE2E speaker encoder (Resemblyzer), batched: the embedded default ASV model.

The weights ship inside the ``resemblyzer`` wheel, so this encoder works with no
download. Each utterance is cut into 1.6 s partials exactly as Resemblyzer does; the
partials of a whole batch of utterances go through the LSTM in one forward pass, and
each utterance's embedding is the L2-normalised mean of its partial embeddings — the
same numbers as ``VoiceEncoder.embed_utterance`` one utterance at a time. Every partial has
the same length, so the batches need no padding, on the CPU or on a GPU (``device``).
"""
from __future__ import annotations

import numpy as np

from ..dsp.blas import one_blas_thread
from ..dsp.librosa_exact import slaney_mel_basis, stft

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
        with one_blas_thread():   # the front end's products are small (models/dsp/blas.py)
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
# NumPy (:mod:`voxanon.models.dsp.librosa_exact`) gives Resemblyzer's values bit for bit
# (tests/models/test_ge2e_front_end.py compares them).

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
    power = np.abs(stft(wave, MEL_FFT, MEL_HOP, "constant")) ** 2.0
    # librosa's own product, on the (bins, frames) spectrum it holds.
    basis = slaney_mel_basis(SAMPLE_RATE, MEL_FFT, MEL_CHANNELS)
    mel = np.einsum("...ft,mf->...mt", power.T, basis, optimize=True)
    return mel.astype(np.float32).T
