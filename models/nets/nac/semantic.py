"""The semantic front end of VoicePrivacy 2024 B4 (NAC): HuBERT-base's layer-9 states and gitmylo's quantiser.

Semantic tokens (:func:`semantic_tokens`), as the recipe computes them: the 16 kHz input to 24 kHz the way
EnCodec's ``convert_audio`` does (torchaudio's default sinc resampler), back to 16 kHz the same way (the coqui
fork's ``CustomHubert``), HuBERT's layer-9 hidden states (transformers' ``hidden_states[9]``), the quantiser's
2-layer LSTM, linear layer and argmax. :mod:`voxanon.models.checkpoints.nac` imports the published weights.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .bark import SEMANTIC_VOCAB_SIZE
from ..hubert import HubertBackbone

SAMPLE_RATE = 24000
"""Bark's and EnCodec's rate, which the recipe's semantic tokens go through."""


class SemanticQuantiser(nn.Module):
    """The HuBERT quantiser (gitmylo's ``HubertTokenizer`` version 0): 2-layer LSTM, linear, log-softmax, argmax."""

    def __init__(self, input_size: int = 768, hidden_size: int = 1024, output_size: int = SEMANTIC_VOCAB_SIZE):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, 2, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(frames, input_size) -> tokens (frames,)."""
        return torch.argmax(torch.log_softmax(self.fc(self.lstm(features)[0]), dim=1), dim=1)


def hubert_layer(hubert: HubertBackbone, wave: torch.Tensor, layer: int) -> torch.Tensor:
    """transformers' ``hidden_states[layer]`` of HuBERT-base: (batch, samples) at 16 kHz -> (batch, frames, 768)."""
    x = hubert.feature_projection(hubert.feature_extractor(wave).transpose(1, 2))
    encoder = hubert.encoder
    x = encoder.layer_norm(x + encoder.pos_conv_embed(x))
    for block in encoder.layers[:layer]:
        x = block(x, None)
    return x


def semantic_tokens(hubert: HubertBackbone, quantiser: SemanticQuantiser, wave16k: np.ndarray, layer: int) -> np.ndarray:
    """Bark semantic tokens of a 16 kHz waveform, through 24 kHz as the recipe goes (module doc), on the device
    the networks are on."""
    import torchaudio.functional as AF

    device = next(hubert.parameters()).device
    with torch.inference_mode():
        wave = torch.from_numpy(np.asarray(wave16k, dtype=np.float32))[None].to(device)
        wave = AF.resample(AF.resample(wave, 16000, SAMPLE_RATE), SAMPLE_RATE, 16000)
        return quantiser(hubert_layer(hubert, wave, layer)[0]).cpu().numpy().astype(np.int64)
