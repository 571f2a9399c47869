"""The SSL-SAS 200-centroid soft content encoder on a transformers ``HubertModel``.

SSL-SAS (``SoftPredictor`` in its ``models_test.py``) takes the last layer of a fairseq
HuBERT-base, then, kept here because the published vocoder was trained on them:

* ``normalise_over_time``: ``F.normalize(x)`` on a (batch, time, 768) tensor uses the
  default ``dim=1``, i.e. each feature channel is scaled to unit norm *over time*, not
  each frame over its features (its multilingual successor's trainer uses ``dim=-1``);
* the 200 centroids ``W`` are unit-normalised rows, logits = x · Wᵀ (a cosine only in
  the time-normalised sense above);
* ``replicate_last_frame``: HuBERT gives L/320 − 1 frames for L samples (L a multiple
  of 320); the last frame is repeated so content has exactly L/320 frames at 50 Hz.

The backbone is loaded from fairseq keys through
:func:`voxanon.models.checkpoints.fairseq_hubert_to_hf`; fairseq is never imported.
HuBERT-base normalises its first convolution over the whole utterance (GroupNorm), so
plain zero padding would change the features. On CPU utterances are encoded one at a time;
on a GPU :func:`encode_on_device` runs groups of similar length as one padded batch whose
GroupNorm statistics, attention, positional convolution and time normalisation each see
only their own item's frames (:func:`batch_hubert_features`): each output equals the
utterance's one-at-a-time output to float rounding.

:func:`encode_lower_precision` runs any such content encoder under bfloat16 autocast
(about 1.5x faster on CPUs with AMX, on a copy whose weights are already bfloat16:
:func:`voxanon.models.precision.lower_precision_copy`), keeping its normalisations in float32.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from voxanon.models.checkpoints import CheckpointError, fairseq_hubert_to_hf, strip_prefix
from voxanon.models.precision import float32_normalisations, length_groups

CONV_KERNELS = (10, 3, 3, 3, 3, 2, 2)
CONV_STRIDES = (5, 2, 2, 2, 2, 2, 2)


@dataclass(frozen=True)
class HubertBackboneConfig:
    """HuBERT backbone sizes (HuBERT-base by default), shared by both content encoders' configs."""

    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    conv_channels: int = 512
    pos_conv_kernel: int = 128
    pos_conv_groups: int = 16

    def hf_config(self):
        from transformers import HubertConfig

        return HubertConfig(hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
                            num_attention_heads=self.num_heads, intermediate_size=self.intermediate_size,
                            conv_dim=(self.conv_channels,) * 7, conv_kernel=CONV_KERNELS, conv_stride=CONV_STRIDES,
                            conv_bias=False, feat_extract_norm="group", feat_proj_layer_norm=True,
                            do_stable_layer_norm=False, num_conv_pos_embeddings=self.pos_conv_kernel,
                            num_conv_pos_embedding_groups=self.pos_conv_groups, hidden_act="gelu",
                            layer_norm_eps=1e-5, mask_time_prob=0.0, mask_feature_prob=0.0,
                            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                            feat_proj_dropout=0.0, layerdrop=0.0)

    @classmethod
    def from_dict(cls, values: dict):
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SoftContentConfig(HubertBackboneConfig):
    """The backbone and the SSL-SAS centroids and quirk flags."""

    n_centroids: int = 200
    normalise_over_time: bool = True
    replicate_last_frame: bool = True

    @classmethod
    def from_fairseq_state(cls, centroids: torch.Tensor, hubert: dict[str, torch.Tensor], **quirks) -> "SoftContentConfig":
        """Sizes read off the tensor shapes; heads = hidden / 64 as in HuBERT base and large."""
        try:
            layers = {int(m.group(1)) for k in hubert if (m := re.match(r"encoder\.layers\.(\d+)\.", k))}
            pos_v = hubert.get("encoder.pos_conv.0.weight_v", hubert.get("encoder.pos_conv.0.weight"))
            hidden = int(centroids.shape[1])
            return cls(hidden_size=hidden, num_layers=len(layers), num_heads=max(1, hidden // 64),
                       intermediate_size=int(hubert["encoder.layers.0.fc1.weight"].shape[0]),
                       conv_channels=int(hubert["feature_extractor.conv_layers.0.0.weight"].shape[0]),
                       pos_conv_kernel=int(pos_v.shape[2]), pos_conv_groups=hidden // int(pos_v.shape[1]),
                       n_centroids=int(centroids.shape[0]), **quirks)
        except (KeyError, AttributeError, IndexError) as error:
            raise CheckpointError(f"not a fairseq HuBERT state dict (missing {error})") from None


def plain_hubert(config: HubertBackboneConfig):
    """A HubertModel whose positional convolution carries a plain weight (weight norm removed)."""
    from transformers import HubertModel

    model = HubertModel(config.hf_config())
    conv = model.encoder.pos_conv_embed.conv
    if nn.utils.parametrize.is_parametrized(conv):
        nn.utils.parametrize.remove_parametrizations(conv, "weight", leave_parametrized=True)
    elif hasattr(conv, "weight_g"):
        nn.utils.remove_weight_norm(conv)
    return model.eval()


class SoftContentEncoder(nn.Module):
    """waveform (16 kHz) -> (frames at 50 Hz, n_centroids) soft content, SSL-SAS style."""

    def __init__(self, config: SoftContentConfig = SoftContentConfig()):
        super().__init__()
        self.config = config
        self.hubert = plain_hubert(config)
        self.W = nn.Parameter(torch.zeros(config.n_centroids, config.hidden_size))

    @classmethod
    def from_ssl_sas_state(cls, state: dict[str, torch.Tensor], **quirks) -> "SoftContentEncoder":
        """From ``soft_model.pt`` or the ``latent_encoder.*`` part of a ``g_*`` file: ``W`` + ``ssl_model.*``."""
        if "W" not in state:
            raise CheckpointError("SSL-SAS soft content state has no centroid matrix 'W'")
        fairseq_state = strip_prefix(state, "ssl_model.")
        encoder = cls(SoftContentConfig.from_fairseq_state(state["W"], fairseq_state, **quirks))
        encoder.load_converted(state["W"], fairseq_hubert_to_hf(fairseq_state))
        return encoder

    def load_converted(self, centroids: torch.Tensor, hf_state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.hubert.load_state_dict(hf_state, strict=False)
        if missing or unexpected:
            raise CheckpointError(f"HuBERT weights do not fit the backbone: missing {missing[:4]}, "
                                  f"unexpected {unexpected[:4]}")
        if centroids.shape != self.W.shape:
            raise CheckpointError(f"centroids have shape {tuple(centroids.shape)}, expected {tuple(self.W.shape)}")
        self.W.data.copy_(centroids)

    def features(self, wave: torch.Tensor) -> torch.Tensor:
        """Last-layer HuBERT features (1, frames, hidden) for one (1, samples) waveform."""
        return self.hubert(wave).last_hidden_state

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """(1, L) -> (1, L/320, n_centroids) for L a multiple of 320."""
        # Under lower-precision autocast the time normalisation and the centroid cosines stay
        # in float32: they are cheap, and bfloat16 would round the small per-channel norms.
        x = self.features(wave).float()
        with torch.autocast(wave.device.type, enabled=False):
            x = F.normalize(x, dim=1 if self.config.normalise_over_time else -1)
            logits = F.linear(x, F.normalize(self.W, dim=1))
            if self.config.replicate_last_frame:
                logits = F.pad(logits.transpose(1, 2), (0, 1), mode="replicate").transpose(1, 2)
        return logits

    @torch.inference_mode()
    def encode(self, waves: list[np.ndarray]) -> list[np.ndarray]:
        """Float32 content per utterance, one utterance at a time (see the module doc)."""
        return [self(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))[None])[0].numpy() for w in waves]

    def forward_batch(self, waves: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Zero-padded (B, L_max) waveforms with their lengths (B,) -> each item's (L/320, n_centroids)
        content, as :meth:`forward` gives it for that item alone (to float rounding)."""
        x, frames = batch_hubert_features(self.hubert, waves, lengths)
        x = x.float()
        with torch.autocast(waves.device.type, enabled=False):
            valid = torch.arange(x.shape[1], device=x.device)[None, :, None] < frames[:, None, None]
            x = F.normalize(x * valid, dim=1 if self.config.normalise_over_time else -1)
            logits = F.linear(x, F.normalize(self.W, dim=1))
        items = [logits[i, :int(n)] for i, n in enumerate(frames)]
        return [torch.cat([item, item[-1:]]) for item in items] if self.config.replicate_last_frame else items


def _conv_output_lengths(lengths: torch.Tensor, kernels=CONV_KERNELS, strides=CONV_STRIDES) -> torch.Tensor:
    for kernel, stride in zip(kernels, strides):
        lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
    return lengths


def batch_hubert_features(hubert, waves: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Last-layer features (B, T_max, hidden) of a zero-padded batch and each item's frame count (B,).

    What makes each item's frames equal its one-at-a-time features: the feature encoder's
    convolutions have no padding, so an item's valid frames never read past its end; the first
    layer's GroupNorm (one group per channel) takes its mean and variance over the item's own
    frames only; the transformer gets the frame mask (padded frames zeroed before the positional
    convolution, and never attended to).
    """
    layers = hubert.feature_extractor.conv_layers
    norm = getattr(layers[0], "layer_norm", None)
    if not isinstance(norm, nn.GroupNorm) or norm.num_groups != norm.num_channels:
        raise ValueError("batched HuBERT features need the base layout: a per-channel GroupNorm after the first "
                         "convolution")
    x = layers[0].conv(waves[:, None])
    counts = _conv_output_lengths(lengths, CONV_KERNELS[:1], CONV_STRIDES[:1])
    with torch.autocast(waves.device.type, enabled=False):
        x = x.float()
        valid = (torch.arange(x.shape[-1], device=x.device)[None, :] < counts[:, None])[:, None, :]
        count = counts[:, None, None].to(x.dtype)
        mean = (x * valid).sum(-1, keepdim=True) / count
        variance = (((x - mean) * valid) ** 2).sum(-1, keepdim=True) / count
        x = (x - mean) * torch.rsqrt(variance + norm.eps) * norm.weight[:, None] + norm.bias[:, None]
    x = layers[0].activation(x)
    for layer in layers[1:]:
        x = layer(x)
    frames = _conv_output_lengths(lengths)
    hidden = hubert.feature_projection(x.transpose(1, 2))
    mask = torch.arange(hidden.shape[1], device=hidden.device)[None, :] < frames[:, None]
    return hubert.encoder(hidden, attention_mask=mask).last_hidden_state, frames


@torch.inference_mode()
def encode_lower_precision(encoder: nn.Module, waves: list[np.ndarray],
                           dtype: torch.dtype = torch.bfloat16) -> list[np.ndarray]:
    """Float32 content per utterance from ``encoder`` ((1, L) -> (1, frames, dim)) run under ``dtype`` autocast.

    For :class:`SoftContentEncoder` and the HuBERT-soft encoder alike: matrix products and
    convolutions in ``dtype``, normalisations in float32 (:func:`float32_normalisations`), one
    utterance at a time as in ``encode``. Accuracy, bfloat16 against float32 on random
    HuBERT-base weights and 5 s of speech-like audio: content SNR about 37 dB, every frame's
    cosine similarity above 0.9998.
    """
    device = next(encoder.parameters()).device
    outputs = []
    with torch.autocast(device.type, dtype=dtype), float32_normalisations(encoder):
        for wave in waves:
            x = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))[None].to(device)
            outputs.append(encoder(x)[0].float().cpu().numpy())
    return outputs


@torch.inference_mode()
def encode_on_device(encoder: nn.Module, waves: list[np.ndarray], dtype: torch.dtype = torch.float32,
                     max_items: int | None = None) -> list[np.ndarray]:
    """Float32 content per utterance from ``encoder`` on whatever device it is on (the GPU path of the
    content stage; on CPU it computes the same values, which is how it is tested).

    :class:`SoftContentEncoder` runs groups of similar length (:func:`~voxanon.models.precision.length_groups`,
    at most ``max_items`` each) as padded batches (:meth:`SoftContentEncoder.forward_batch`); other
    encoders one utterance at a time. ``dtype`` other than float32 runs under that autocast with the
    normalisations in float32, as :func:`encode_lower_precision`.
    """
    device = next(encoder.parameters()).device
    outputs: list[np.ndarray] = [np.empty(0)] * len(waves)
    tensors = [torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)) for w in waves]
    lower_precision = (torch.autocast(device.type, dtype=dtype) if dtype != torch.float32
                       else contextlib.nullcontext())
    with lower_precision, float32_normalisations(encoder):
        if not isinstance(encoder, SoftContentEncoder):
            return [encoder(x[None].to(device))[0].float().cpu().numpy() for x in tensors]
        for group in length_groups([len(w) for w in waves], max_items):
            lengths = torch.tensor([len(tensors[i]) for i in group])
            padded = torch.zeros(len(group), int(lengths.max()))
            for row, i in enumerate(group):
                padded[row, :len(tensors[i])] = tensors[i]
            for i, content in zip(group, encoder.forward_batch(padded.to(device), lengths.to(device))):
                outputs[i] = content.float().cpu().numpy()
    return outputs
