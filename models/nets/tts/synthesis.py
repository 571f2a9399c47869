"""B3's synthesis of one utterance, as the recipe's ``ImsTTS.read_text`` does it (``modules/sttts/tts/ims_tts.py``
with IMS-Toucan's ``AnonFastSpeech2``): FastSpeech2 with the given durations, pitch, energy and target style,
HiFi-GAN at 48 kHz, the recipe's silences and short-output rule. The recipe then resamples to 16 kHz with
``resampy.resample(wave, 48000, 16000)``: :func:`voxanon.models.dsp.resample.resample_kaiser_best` (its port) cut to
resampy's floor(n / 3) samples, done by the caller (networks import no other part of ``models``).

The recipe's quirks, kept:

* short output: while the 48 kHz waveform is under :data:`MIN_SAMPLES_48K` (0.5 s) the recipe multiplies the
  style embedding by a random mask (integers drawn uniformly from [-2, 2), from [-40, 40) at every tenth try) and
  synthesises again, at most :data:`RETRIES` + 1 times. The waveform's length is the durations' sum times the hop,
  whatever the embedding, so a short utterance always takes every try and keeps the last: here the masks are
  drawn in the same order from ``generator`` (the recipe draws from torch's global generator, unseeded) and the
  utterance is synthesised once, with the last embedding;
* silences: the leading and trailing silence the prosody extraction cut (in 16 kHz samples) are put back as
  that many zeros into the 48 kHz waveform, i.e. a third as long after resampling.
"""
from __future__ import annotations

import numpy as np
import torch

from ..hifigan import HifiganGenerator
from .articulatory import articulatory_vectors
from .fastspeech2 import FastSpeech2, regulated
from .hifigan import vocode, vocode_padded

MIN_SAMPLES_48K = 24_000
"""The recipe's shortest accepted 48 kHz waveform (0.5 s)."""
RETRIES = 30
"""The recipe stops once its retry counter passes 30: 31 masks."""


def retried_style(style: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The embedding the recipe's last retry synthesises with: ``style`` times each of its 31 random masks, in
    its order."""
    for attempt in range(RETRIES + 1):
        bound = 40 if attempt > 0 and attempt % 10 == 0 else 2
        mask = torch.zeros(style.shape[0]).random_(-bound, bound, generator=generator)
        style = style * mask
    return style


def synthesise_48k(fastspeech2: FastSpeech2, hifigan: HifiganGenerator, phones: str, durations, pitch, energy,
                   style: np.ndarray, generator: torch.Generator, start_silence: int = 0,
                   end_silence: int = 0) -> np.ndarray:
    """One utterance -> float32 waveform at 48 kHz (:data:`~voxanon.models.nets.tts.hifigan.SAMPLE_RATE`).

    ``phones``: the recogniser's phone string (Toucan's front end with ``input_phonemes``, whose vectors are the
    aligner's too: one per duration); ``durations`` (N,) frames, ``pitch`` and ``energy`` (N,) or (N, 1) per
    phone, ``start_silence`` and ``end_silence`` (the 16 kHz samples cut from the original's ends), as
    :func:`~voxanon.models.nets.tts.prosody.extract_prosody` and ``anonymise_prosody`` give them; ``style`` the
    128-d target embedding; ``generator`` draws the short-output masks."""
    vectors = articulatory_vectors(phones)
    _check_count(phones, vectors, durations)
    return synthesise_vectors(fastspeech2, hifigan, vectors, durations, pitch, energy, style, generator,
                              start_silence, end_silence)


def synthesise_vectors(fastspeech2: FastSpeech2, hifigan: HifiganGenerator, vectors: np.ndarray, durations, pitch,
                       energy, style: np.ndarray, generator: torch.Generator, start_silence: int = 0,
                       end_silence: int = 0) -> np.ndarray:
    """:func:`synthesise_48k` from the phones' articulatory vectors (N, 62)."""
    inputs = _network_inputs(vectors, durations, pitch, energy, style, generator, hifigan.config.hop_length)
    return _with_silences(vocode(hifigan, fastspeech2(*inputs)), start_silence, end_silence)


def synthesise_batch_48k(fastspeech2: FastSpeech2, hifigan: HifiganGenerator, utterances: list[dict]) -> list[np.ndarray]:
    """:func:`synthesise_48k` for several utterances (each a dict of its keyword arguments), FastSpeech2 and
    HiFi-GAN each as one zero-padded, length-masked batch: the GPU path (on CPU one at a time is faster), for
    utterances of similar length. Each waveform equals its one-at-a-time one, to float rounding; each
    utterance's masks come from its own generator."""
    inputs = []
    for utt in utterances:
        vectors = articulatory_vectors(utt["phones"])
        _check_count(utt["phones"], vectors, utt["durations"])
        inputs.append(_network_inputs(vectors, utt["durations"], utt["pitch"], utt["energy"], utt["style"],
                                      utt["generator"], hifigan.config.hop_length))
    waves = vocode_padded(hifigan, fastspeech2.batch(inputs))
    return [_with_silences(wave, utt.get("start_silence", 0), utt.get("end_silence", 0))
            for wave, utt in zip(waves, utterances)]


def _check_count(phones: str, vectors: np.ndarray, durations) -> None:
    count = len(np.asarray(durations).reshape(-1))
    if len(vectors) != count:
        raise ValueError(f"{len(vectors)} phones in {phones!r} but {count} durations")


def _network_inputs(vectors, durations, pitch, energy, style, generator: torch.Generator,
                    hop: int) -> tuple[torch.Tensor, ...]:
    """FastSpeech2's inputs, the style replaced by the recipe's last retry's where the output is short."""
    durations = regulated(durations)
    style = torch.as_tensor(np.asarray(style, dtype=np.float32)).reshape(-1)
    if int(durations.sum()) * hop < MIN_SAMPLES_48K:
        style = retried_style(style, generator)
    return (torch.as_tensor(np.asarray(vectors, dtype=np.float32)), durations,
            torch.as_tensor(np.asarray(pitch, dtype=np.float32)), torch.as_tensor(np.asarray(energy, dtype=np.float32)),
            style)


def _with_silences(wave: np.ndarray, start_silence: int, end_silence: int) -> np.ndarray:
    return np.concatenate([np.zeros(int(start_silence), np.float32), wave, np.zeros(int(end_silence), np.float32)])
