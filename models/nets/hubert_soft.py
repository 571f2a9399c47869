"""bshall's HuBERT-soft (bshall/hubert, MIT): 256-d soft speech units at 50 Hz, on our HuBERT-base backbone.

The published ``hubert-soft-35d9f29f.pt`` holds ``{"hubert": state}`` with DDP ``module.``
prefixes and bshall's own module names (``nn.TransformerEncoderLayer`` with a fused
``in_proj_weight``, positional conv in either weight-norm layout); the renaming lives in
:func:`voxanon.models.checkpoints.keymaps.bshall_hubert_to_hf`. The network is HuBERT-base
(the :class:`~voxanon.models.nets.hubert.HubertBackbone` of :mod:`voxanon.models.nets.hubert`) plus ``proj`` (768 -> 256), whose
output on the last layer is the unit sequence; ``label_embedding`` (100 x 256) gives
the training logits, cosine / 0.1. ``masked_spec_embed`` is used only by training-time
masking and is not kept.

``units()`` as published: the waveform is zero-padded by (400 - 320) / 2 = 40 samples
each side, so L samples (L a multiple of 320) give exactly L/320 frames, no replication.
Like HuBERT-base, the first convolution is normalised over the whole utterance, so on CPU
utterances are encoded one at a time; on a GPU as padded batches whose statistics each see only their
own item (:meth:`HubertSoftEncoder.forward_batch`, through :func:`~voxanon.models.nets.hubert.encode_on_device`).

Not the SSL-SAS content (200 centroids, nii-yamagishilab/SSL-SAS): a vocoder for these units takes
``ConditioningLayout(content_dim=256)``, i.e. 256 + 1 + 192 = 449 input channels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .hubert import HubertBackboneConfig, SoftContentConfig, _conv_output_lengths, batch_hubert_features, plain_hubert
from .precision import to_device

UNITS_PAD_SAMPLES = (400 - 320) // 2
LOGIT_TEMPERATURE = 0.1
CONTENT_KIND = "hubert-soft"
"""The ``content_kind`` a model set's config carries for these units (SSL-SAS sets carry none)."""


@dataclass(frozen=True)
class HubertSoftConfig(HubertBackboneConfig):
    """The backbone and the unit head."""

    units_dim: int = 256
    n_labels: int = 100




class HubertSoftEncoder(nn.Module):
    """waveform (16 kHz) -> (L/320 frames at 50 Hz, 256) soft units, as bshall's ``HubertSoft.units``."""

    def __init__(self, config: HubertSoftConfig = HubertSoftConfig()):
        super().__init__()
        self.config = config
        self.hubert = plain_hubert(config)
        self.proj = nn.Linear(config.hidden_size, config.units_dim)
        # Given a weight, Embedding draws nothing; drawn here only off the meta device, where normal_
        # would import torch._dynamo (about 1 s of start-up).
        self.label_embedding = nn.Embedding(config.n_labels, config.units_dim,
                                            _weight=torch.empty(config.n_labels, config.units_dim))
        if not self.label_embedding.weight.is_meta:
            nn.init.normal_(self.label_embedding.weight)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """(1, L) -> (1, L/320, units_dim) for L a multiple of 320."""
        padded = F.pad(wave, (UNITS_PAD_SAMPLES, UNITS_PAD_SAMPLES))
        return self.proj(self.hubert(padded))

    input_padding = UNITS_PAD_SAMPLES
    """Zeros :func:`~voxanon.models.nets.hubert.encode_on_device` puts before and after each utterance, as ``units()``."""

    def forward_batch(self, waves: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """Zero-padded (B, L_max) waveforms, each already with its :attr:`input_padding` zeros either side,
        on the model's device, and their padded lengths (B,) on the CPU -> float32 units (B, T, units_dim)
        and each item's frame count, as :meth:`forward` gives them for the item alone (to float rounding)."""
        features, _ = batch_hubert_features(self.hubert, waves, to_device(lengths, waves.device))
        return self.proj(features.to(self.proj.weight.dtype)).float(), _conv_output_lengths(lengths).tolist()

    def logits(self, units: torch.Tensor) -> torch.Tensor:
        """(..., units_dim) -> (..., n_labels): cosine with each label embedding / 0.1, as in training."""
        return F.cosine_similarity(units.unsqueeze(-2), self.label_embedding.weight, dim=-1) / LOGIT_TEMPERATURE

    @torch.inference_mode()
    def encode(self, waves: list[np.ndarray]) -> list[np.ndarray]:
        """Float32 units per utterance, one utterance at a time (see the module doc)."""
        return [self(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))[None])[0].numpy() for w in waves]


def content_encoder(model_set) -> nn.Module:
    """The content encoder a model set describes: HuBERT-soft units when its config says
    ``content_kind: hubert-soft``, else the SSL-SAS 200-centroid soft content. Both have ``encode(waves)``."""
    from .hubert import SoftContentEncoder

    if model_set.config.get("content_kind") == CONTENT_KIND:
        config = HubertSoftConfig.from_dict(model_set.config["content"])
        return model_set.build("content", lambda: HubertSoftEncoder(config))
    config = SoftContentConfig.from_dict(model_set.config["content"])
    return model_set.build("content", lambda: SoftContentEncoder(config))
