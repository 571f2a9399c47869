"""IMS-Toucan's 48 kHz HiFi-GAN (``InferenceInterfaces/InferenceArchitectures/InferenceHiFiGAN.py``, kan-bayashi's
ParallelWaveGAN layout of jik876's generator): 80-bin mel at 48 kHz / 768 samples per frame -> waveform.

Layer for layer it is jik876's generator (a kernel-7 input convolution, per stage a LeakyReLU(0.1) and a
transposed convolution, three residual blocks of kernels 3, 7, 11 with dilations 1, 3, 5 each followed by an
undilated convolution, averaged; LeakyReLU(0.01), a kernel-7 output convolution, tanh), so it runs as
:class:`voxanon.models.nets.hifigan.HifiganGenerator` (one generator in the project, with its CPU forms and its
length-masked batches); only the names differ: :data:`TOUCAN_TO_JIK876` maps Toucan's keys to it.
"""
from __future__ import annotations

import re

import numpy as np
import torch
import torch.nn.functional as F

from ..hifigan import (CPU_WINDOW_FRAMES, GeneratorConfig, HifiganGenerator, plan_spectral_convolutions,
                       receptive_field_frames, synthesis_windows)

SAMPLE_RATE = 48_000
TOUCAN_GENERATOR = GeneratorConfig(in_channels=80, upsample_rates=(8, 6, 4, 4), upsample_kernel_sizes=(16, 12, 8, 8),
                                   upsample_initial_channel=512, resblock="1", resblock_kernel_sizes=(3, 7, 11),
                                   resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)))
"""``HiFiGANGenerator``'s defaults in Toucan, which the recipe's inference class uses."""

TOUCAN_TO_JIK876 = [
    (r"input_conv\.(weight|bias)", r"conv_pre.\1"),
    (r"upsamples\.(\d+)\.1\.(weight|bias)", r"ups.\1.\2"),
    (r"blocks\.(\d+)\.convs([12])\.(\d+)\.1\.(weight|bias)", r"resblocks.\1.convs\2.\3.\4"),
    (r"output_conv\.1\.(weight|bias)", r"conv_post.\1"),
]
"""Toucan's generator keys (weight norm folded) -> :class:`HifiganGenerator`'s."""


def jik876_key(key: str) -> str | None:
    """``key``'s name in :class:`HifiganGenerator`, or None for a key Toucan's generator does not have."""
    for pattern, replacement in TOUCAN_TO_JIK876:
        if re.fullmatch(pattern, key):
            return re.sub(pattern, replacement, key)
    return None


@torch.inference_mode()
def vocode(generator: HifiganGenerator, mel: torch.Tensor) -> np.ndarray:
    """(frames, 80) mel -> float32 waveform of frames × hop samples at 48 kHz.

    On CPU, in float32, in windows of :data:`~voxanon.models.nets.hifigan.CPU_WINDOW_FRAMES` with the spectral
    convolutions (the project's generator's CPU form: the same waveform as one whole pass, to float rounding);
    elsewhere in one pass.
    """
    frames = mel.float().transpose(0, 1)
    device = next(generator.parameters()).device
    hop = generator.config.hop_length
    if device.type != "cpu" or not generator.cpu_forms:
        return generator(frames[None].to(device, generator.conv_pre.weight.dtype))[0, 0].float().cpu().numpy()
    plan_spectral_convolutions(generator)
    wave = np.empty(frames.shape[1] * hop, dtype=np.float32)
    for window in synthesis_windows(frames.shape[1], CPU_WINDOW_FRAMES, receptive_field_frames(generator.config)):
        chunk = frames[None, :, window.start:window.start + window.size]
        inside = chunk.shape[-1]
        lengths = None if inside == window.size else torch.tensor([inside])
        audio = generator(F.pad(chunk, (0, window.size - inside)), lengths)[0, 0]
        kept = audio[(window.keep_from - window.start) * hop:(window.keep_to - window.start) * hop]
        wave[window.keep_from * hop:window.keep_to * hop] = kept.numpy()
    return wave


@torch.inference_mode()
def vocode_padded(generator: HifiganGenerator, mels: list[torch.Tensor]) -> list[np.ndarray]:
    """:func:`vocode` for several (frames, 80) mels as one zero-padded, length-masked batch on the generator's
    device (the GPU path; give it utterances of similar length): each waveform equals its one-at-a-time one, to
    float rounding."""
    device = next(generator.parameters()).device
    lengths = [len(mel) for mel in mels]
    frames = torch.nn.utils.rnn.pad_sequence([mel.float() for mel in mels], batch_first=True).transpose(1, 2)
    audio = generator(frames.to(device, generator.conv_pre.weight.dtype), torch.tensor(lengths, device=device))
    audio = audio[:, 0].float().cpu().numpy()
    hop = generator.config.hop_length
    return [audio[row, :length * hop].copy() for row, length in enumerate(lengths)]

