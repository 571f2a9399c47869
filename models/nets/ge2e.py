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
        from resemblyzer import audio, preprocess_wav

        if self.preprocess:
            trimmed = preprocess_wav(wave.astype(np.float32), source_sr=SAMPLE_RATE)
            # Voice-activity trimming can remove everything from very short or quiet input.
            wave = trimmed if len(trimmed) >= SAMPLE_RATE // 10 else wave
        wav_slices, mel_slices = self.encoder.compute_partial_slices(len(wave), rate=1.3, min_coverage=0.75)
        if wav_slices[-1].stop >= len(wave):
            wave = np.pad(wave, (0, wav_slices[-1].stop - len(wave)))
        mel = audio.wav_to_mel_spectrogram(wave)
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
