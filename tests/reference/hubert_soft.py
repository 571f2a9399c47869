"""A compact transcription of bshall/hubert ``hubert/model.py`` (MIT), the parity reference for HuBERT-soft.

Module names and computation follow the published tree (commit c01819f), so
``state_dict()`` has the key layout of ``hubert-soft-35d9f29f.pt`` (without the DDP
``module.`` prefix, which :func:`published_checkpoint` adds). Sizes are parameters so
tests can build a tiny model; the defaults are the published ones. Masking (training
only) is left out: it does not change ``units()``.
"""
from __future__ import annotations

import copy
import warnings

import torch
import torch.nn.functional as F
from torch import nn

KERNELS = (10, 3, 3, 3, 3, 2, 2)
STRIDES = (5, 2, 2, 2, 2, 2, 2)


class FeatureExtractor(nn.Module):
    def __init__(self, channels: int = 512):
        super().__init__()
        self.conv0 = nn.Conv1d(1, channels, 10, 5, bias=False)
        self.norm0 = nn.GroupNorm(channels, channels)
        for i in range(1, 7):
            setattr(self, f"conv{i}", nn.Conv1d(channels, channels, KERNELS[i], STRIDES[i], bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm0(self.conv0(x)))
        for i in range(1, 7):
            x = F.gelu(getattr(self, f"conv{i}")(x))
        return x


class FeatureProjection(nn.Module):
    def __init__(self, channels: int = 512, hidden: int = 768):
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        self.projection = nn.Linear(channels, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.projection(self.norm(x)))


class PositionalConvEmbedding(nn.Module):
    def __init__(self, hidden: int = 768, kernel: int = 128, groups: int = 16, new_weight_norm: bool = False):
        super().__init__()
        conv = nn.Conv1d(hidden, hidden, kernel_size=kernel, padding=kernel // 2, groups=groups)
        if new_weight_norm:
            self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        else:
            with warnings.catch_warnings():
                # The deprecated API is the point: releases before 2024-10 were saved with it.
                warnings.simplefilter("ignore", FutureWarning)
                self.conv = nn.utils.weight_norm(conv, name="weight", dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.transpose(1, 2))
        x = F.gelu(x[:, :, :-1])
        return x.transpose(1, 2)


class TransformerEncoder(nn.Module):
    def __init__(self, encoder_layer: nn.TransformerEncoderLayer, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers

    def forward(self, src: torch.Tensor, output_layer: int | None = None) -> torch.Tensor:
        output = src
        for layer in self.layers[:output_layer]:
            output = layer(output)
        return output


class HubertSoft(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 12, channels: int = 512,
                 pos_kernel: int = 128, pos_groups: int = 16, units: int = 256, labels: int = 100,
                 new_weight_norm: bool = False):
        super().__init__()
        self.feature_extractor = FeatureExtractor(channels)
        self.feature_projection = FeatureProjection(channels, hidden)
        self.positional_embedding = PositionalConvEmbedding(hidden, pos_kernel, pos_groups, new_weight_norm)
        self.norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)
        self.encoder = TransformerEncoder(
            nn.TransformerEncoderLayer(hidden, heads, ffn, activation="gelu", batch_first=True), layers)
        self.proj = nn.Linear(hidden, units)
        self.masked_spec_embed = nn.Parameter(torch.FloatTensor(hidden).uniform_())
        self.label_embedding = nn.Embedding(labels, units)

    def encode(self, x: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        x = self.feature_extractor(x)
        x = self.feature_projection(x.transpose(1, 2))
        x = x + self.positional_embedding(x)
        x = self.dropout(self.norm(x))
        return self.encoder(x, output_layer=layer)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.cosine_similarity(x.unsqueeze(2), self.label_embedding.weight.unsqueeze(0).unsqueeze(0),
                                         dim=-1)
        return logits / 0.1

    @torch.inference_mode()
    def units(self, wav: torch.Tensor) -> torch.Tensor:
        """(1, 1, T) at 16 kHz -> (1, T/320, units)."""
        wav = F.pad(wav, ((400 - 320) // 2, (400 - 320) // 2))
        return self.proj(self.encode(wav))


def published_checkpoint(model: HubertSoft) -> dict:
    """The dict ``torch.save`` wrote for the release: DDP-prefixed state under ``"hubert"``."""
    return {"hubert": {f"module.{k}": v for k, v in model.state_dict().items()}}
