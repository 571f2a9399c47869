"""B3's prosody: per-phone durations, pitch and energy of an utterance (the VoicePrivacy 2024 recipe's
``prosody/extraction/ims_prosody_extraction.py`` with IMS-Toucan's ``DurationCalculator``, ``EnergyCalculator`` and
``PitchCalculator``), and their anonymisation by random per-phone factors (``ims_prosody_anonymization.py``).

:func:`extract_prosody`, as the recipe does it:

1. the audio's loudness to -30 LUFS and its peak to 1 (:func:`audio.normalise_loudness`); leading and trailing
   silence cut where ``find_speech`` says the speech starts and ends (the recipe asks Silero VAD); the samples cut
   are returned as ``start_silence`` and ``end_silence`` for the synthesis;
2. the phones as articulatory vectors, one per symbol (word boundaries included), and the log-mel of the cut audio;
3. a copy of the aligner fine-tuned on the utterance (:func:`aligner.fine_tuned_copy`) aligns the symbols other than
   word boundaries; each word boundary gets 0 frames; where two neighbouring vectors are equal the pair's frames are
   split 3/5 (truncated) to the first and the rest to the second, pair by pair from the start;
4. energy: the frame's STFT magnitude summed over frequency (1024-point Hann, hop 256, centred), averaged over each
   phone's frames, 0 for symbols that are no phone; pitch: Praat's autocorrelation F0 (parselmouth, 40-600 Hz, a
   16 ms step) padded or cut to the mel's frame count, the mean of its voiced (> 0) frames per phone, 0 for unvoiced
   phones; each divided by the mean of its non-zero values (all zero: kept at zero, where the recipe's NaN would
   reach the synthesis).

:func:`anonymise_prosody` multiplies energy, then pitch, by integer factors drawn uniformly from [60, 140) and
divided by 100 (``torch.randint``'s exclusive upper bound: 0.60 to 1.39); durations are kept.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from . import articulatory, audio
from .aligner import Aligner, aligned_durations, fine_tuned_copy

SAMPLE_RATE = audio.SAMPLE_RATE
PITCH_FLOOR_HZ = 40.0
PITCH_CEILING_HZ = 600.0
FACTOR_LOWER = 60
FACTOR_UPPER = 140  # exclusive
# The recipe gives the first of two equal neighbours 3/5 of their frames.
REPEAT_SHARE = (3, 5)


def _durations_with_boundaries(aligned: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The aligned symbols' frames with a 0 at each word boundary, then equal neighbours' frames shared 3:2."""
    durations = np.zeros(len(vectors), dtype=np.int64)
    durations[vectors[:, articulatory.WORD_BOUNDARY] == 0] = aligned
    numerator, denominator = REPEAT_SHARE
    for index in range(1, len(vectors)):
        if np.array_equal(vectors[index - 1], vectors[index]):
            total = durations[index - 1] + durations[index]
            # The recipe's int((total / 5) * 3) on a 0-d int64 tensor: true division and product in float32.
            first = int(np.float32(np.float32(total) / np.float32(denominator)) * np.float32(numerator))
            durations[index - 1], durations[index] = first, total - first
    return durations


def _mean_per_phone(values: torch.Tensor, durations: np.ndarray, voiced_only: bool) -> torch.Tensor:
    """Each phone's mean over its frames (of its positive frames if ``voiced_only``), 0 where there are none;
    one reduction per phone, as the recipe's, so that every sum is the same."""
    bounds = np.concatenate(([0], np.cumsum(durations)))
    zero = values.new_tensor(0.0)
    means = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        frames = values[start:end]
        if voiced_only:  # the recipe's pitch takes mean(dim=0), its energy mean()
            voiced = frames.masked_select(frames.gt(0.0))
            means.append(voiced.mean(dim=0) if len(voiced) else zero)
        else:
            means.append(frames.mean() if len(frames) else zero)
    return torch.stack(means)


def _normalised_by_mean(values: torch.Tensor) -> torch.Tensor:
    """``values`` over the mean of the non-zero ones; all 0 stay 0 (the recipe divides by an empty mean: NaN)."""
    non_zero = values[values != 0.0]
    return values / non_zero.mean() if len(non_zero) else values


def frame_energy(wave: torch.Tensor) -> torch.Tensor:
    """(frames,) float32: the STFT magnitude's norm over frequency per frame (IMS-Toucan's EnergyCalculator)."""
    spectrum = torch.stft(wave.unsqueeze(0), n_fft=audio.N_FFT, hop_length=audio.HOP_LENGTH, win_length=audio.N_FFT,
                          window=torch.hann_window(audio.N_FFT, dtype=wave.dtype), center=True, normalized=False,
                          onesided=True, return_complex=True)
    parts = torch.view_as_real(spectrum).transpose(1, 2)  # (1, frames, bins, 2), the layout the recipe sums over
    power = parts[..., 0] ** 2 + parts[..., 1] ** 2
    return torch.sqrt(torch.clamp(power.sum(dim=2), min=1.0e-10))[0]


def frame_pitch(wave: torch.Tensor, frames: int) -> torch.Tensor:
    """(frames,) float32 Praat F0 in Hz (0 unvoiced), 16 ms step, centred in ``frames`` by zeros if shorter."""
    import parselmouth

    sound = parselmouth.Sound(values=wave.numpy().astype(np.double), sampling_frequency=SAMPLE_RATE)
    f0 = sound.to_pitch(time_step=audio.HOP_LENGTH / SAMPLE_RATE, pitch_floor=PITCH_FLOOR_HZ,
                        pitch_ceiling=PITCH_CEILING_HZ).selected_array["frequency"]
    pitch = torch.from_numpy(f0.reshape(-1)).float()
    if frames > len(pitch):
        missing = frames - len(pitch)
        return torch.nn.functional.pad(pitch, (math.ceil(missing / 2), math.floor(missing / 2)))
    return pitch[:frames]


def extract_prosody(aligner: Aligner, phones: str, audio_16k: np.ndarray, generator: torch.Generator,
                    find_speech: Callable[[np.ndarray], tuple[int, int]] | None = None) -> dict:
    """Per-symbol ``durations`` (int64 frames of 256 samples), ``pitch`` and ``energy`` (float32, normalised) of
    ``phones`` spoken in ``audio_16k``, and the samples of silence cut before and after the speech
    (``start_silence``, ``end_silence``). ``aligner`` (evaluation mode) is not modified; the fine-tuning's dropout
    draws come from ``generator``; ``find_speech`` gives (start, end) of the speech in the loudness-normalised
    audio (None: all of it). Raises ValueError for audio too short or silent, speech shorter than one analysis
    window and phones that leave nothing to align."""
    wave = audio.normalise_loudness(audio_16k)
    start, end = find_speech(wave) if find_speech is not None else (0, len(wave))
    start_silence, end_silence = int(start), len(wave) - int(end)
    if end - start < audio.N_FFT:
        raise ValueError(f"the speech found spans {max(0, end - start)} samples, too few for one "
                         f"{audio.N_FFT}-sample analysis window")
    wave = wave[start:end]
    vectors = articulatory.articulatory_vectors(phones)
    tokens = torch.from_numpy(articulatory.aligner_tokens(vectors))
    if len(tokens) == 0:
        raise ValueError(f"the phone string {phones!r} has no symbol to align")
    device = next(aligner.parameters()).device
    mel = torch.from_numpy(audio.log_mel(wave)).to(device)
    tuned = fine_tuned_copy(aligner, mel, tokens.to(device), generator)
    durations = _durations_with_boundaries(aligned_durations(tuned, mel, tokens), vectors)
    wave_tensor = torch.from_numpy(wave)
    with torch.inference_mode():
        energy = _mean_per_phone(frame_energy(wave_tensor)[:len(mel)], durations, voiced_only=False)
        energy[torch.from_numpy(vectors[:, articulatory.PHONEME] == 0)] = 0.0
        pitch = _mean_per_phone(frame_pitch(wave_tensor, len(mel)), durations, voiced_only=True)
        pitch[torch.from_numpy(vectors[:, articulatory.VOICED] == 0)] = 0.0
        energy, pitch = _normalised_by_mean(energy), _normalised_by_mean(pitch)
    return {"durations": durations, "pitch": pitch.numpy(), "energy": energy.numpy(),
            "start_silence": start_silence, "end_silence": end_silence}


def anonymise_prosody(prosody: dict, generator: torch.Generator, lower: int = FACTOR_LOWER,
                      upper: int = FACTOR_UPPER) -> dict:
    """``prosody`` with energy, then pitch, multiplied per symbol by ``randint(lower, upper) / 100`` drawn from
    ``generator`` (the recipe's draws, in its order, from the global generator); the other entries kept."""
    energy = torch.from_numpy(np.asarray(prosody["energy"], dtype=np.float32))
    pitch = torch.from_numpy(np.asarray(prosody["pitch"], dtype=np.float32))
    energy_scales = torch.randint(low=lower, high=upper, size=energy.size(), generator=generator).float() / 100
    pitch_scales = torch.randint(low=lower, high=upper, size=pitch.size(), generator=generator).float() / 100
    return {**prosody, "energy": (energy * energy_scales).numpy(), "pitch": (pitch * pitch_scales).numpy()}
