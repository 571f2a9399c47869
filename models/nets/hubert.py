"""The SSL-SAS 200-centroid soft content encoder, on our own HuBERT-base backbone.

SSL-SAS (``SoftPredictor`` in its ``models_test.py``) takes the last layer of a fairseq
HuBERT-base, then, kept here because the published vocoder was trained on them:

* ``normalise_over_time``: ``F.normalize(x)`` on a (batch, time, 768) tensor uses the
  default ``dim=1``, i.e. each feature channel is scaled to unit norm *over time*, not
  each frame over its features (its multilingual successor's trainer uses ``dim=-1``);
* the 200 centroids ``W`` are unit-normalised rows, logits = x · Wᵀ (a cosine only in
  the time-normalised sense above);
* ``replicate_last_frame``: HuBERT gives L/320 − 1 frames for L samples (L a multiple
  of 320); the last frame is repeated so content has exactly L/320 frames at 50 Hz.

The backbone (:class:`HubertBackbone`) computes what transformers' ``HubertModel`` computes for
HuBERT-base and holds the same state-dict keys, but is a few compact modules of our own (in the
manner of bshall/hubert), so the neural chain never imports transformers (2.7 s of start-up,
mostly ``torch._dynamo``). It is loaded from fairseq keys through
:func:`voxanon.models.checkpoints.keymaps.fairseq_hubert_to_hf`; fairseq is never imported.
HuBERT-base normalises its first convolution over the whole utterance (GroupNorm), so
plain zero padding would change the features. On CPU utterances are encoded one at a time;
on a GPU :func:`encode_on_device` runs groups of similar length as one padded batch whose
GroupNorm statistics, attention, positional convolution and time normalisation each see
only their own item's frames (:func:`batch_hubert_features`): each output equals the
utterance's one-at-a-time output to float rounding. There the encoder is in the direct form
(:func:`voxanon.models.nets.precision.prepared_for_device`): weights already in the run's precision, no
autocast, the positional convolution a plain grouped convolution (never the CPU's FFT form), float32
only for the first GroupNorm's statistics and the time normalisation with the centroid cosines.

:func:`encode_lower_precision` runs any such content encoder under bfloat16 autocast
(about 1.5x faster on CPUs with AMX, on a copy whose weights are already bfloat16:
:func:`voxanon.models.nets.precision.lower_precision_copy`), keeping its normalisations in float32.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


from .precision import device_groups, float32_normalisations, staging_zeros, to_device
from .spectral import fft_form

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


class ChannelLayerNorm(nn.LayerNorm):
    """Layer norm over the channels of each frame of a (batch, channels, frames) tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(-2, -1)).transpose(-2, -1)


class ResidualLayerNorm(nn.LayerNorm):
    """A transformer layer norm whose output is the residual stream (HuBERT's post-norm layers): it
    normalises in its own weights' precision, float32 also in a lower-precision direct form
    (``keeps_float32``: :func:`voxanon.models.nets.precision.prepared_for_device` leaves it as it is). Rounding
    the residual stream to bfloat16 after every layer cost 2.1 dB of content SNR against float32 (34.2
    against 36.3 dB, full-size HuBERT-base with random weights, 2 s utterances, measured on CPU); the
    matrix products that read it cast their input once."""

    keeps_float32 = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.weight.dtype))


class FeatureConv(nn.Module):
    """One convolution of the feature encoder and GELU; the first also normalises each channel over the
    whole utterance (GroupNorm, one group per channel) before the GELU. wav2vec2's ``layer_norm`` feature
    encoder (``frame_norm``) instead has conv biases and normalises every frame over its channels, in every
    layer."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, group_norm: bool, *,
                 frame_norm: bool = False):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel, stride, bias=frame_norm)
        self.layer_norm = (ChannelLayerNorm(out_channels) if frame_norm else
                           nn.GroupNorm(out_channels, out_channels) if group_norm else nn.Identity())
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.layer_norm(self.conv(x)))


class FeatureEncoder(nn.Module):
    """(batch, samples) -> (batch, channels, frames): seven strided convolutions, 320 samples a frame."""

    def __init__(self, channels: int, *, frame_norm: bool = False):
        super().__init__()
        self.conv_layers = nn.ModuleList(
            FeatureConv(channels if i else 1, channels, kernel, stride, group_norm=i == 0, frame_norm=frame_norm)
            for i, (kernel, stride) in enumerate(zip(CONV_KERNELS, CONV_STRIDES)))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x = wave[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class FeatureProjection(nn.Module):
    def __init__(self, channels: int, hidden_size: int):
        super().__init__()
        self.layer_norm = nn.LayerNorm(channels)
        self.projection = nn.Linear(channels, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.layer_norm(x))


class PositionalConvEmbedding(nn.Module):
    """Grouped convolution over time, padded by kernel // 2 each side; with HuBERT's even kernel that
    gives one frame too many, and the last is dropped. One utterance in float32 on CPU runs it through
    the FFT (:func:`voxanon.models.nets.spectral.fft_form`: the same outputs to float rounding, 5x faster),
    unless ``cpu_forms`` is off (a model prepared for another device): then always the direct convolution."""

    cpu_forms: bool = True

    def __init__(self, hidden_size: int, kernel: int, groups: int):
        super().__init__()
        self.conv = nn.Conv1d(hidden_size, hidden_size, kernel, padding=kernel // 2, groups=groups)
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, frames, hidden) -> the same shape."""
        frames = x.shape[1]
        spectral = fft_form(self.conv, x) if self.cpu_forms else None
        convolved = (spectral(x[0].T)[None] if spectral is not None
                     else self.conv(x.transpose(1, 2))[..., :frames])
        return self.activation(convolved).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden size {hidden_size} is not a multiple of {num_heads} heads")
        self.num_heads = num_heads
        # Created in transformers' order (k, v, q) so that seeded random weights draw as its HubertModel's did.
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, frames, hidden) -> the same shape; ``key_mask`` (batch, 1, 1, frames) is True where
        a frame may be attended to."""
        batch, frames, hidden = x.shape
        x = x.to(self.q_proj.weight.dtype)  # once for the three projections (a float32 residual stream)
        heads = [projection(x).view(batch, frames, self.num_heads, -1).transpose(1, 2)
                 for projection in (self.q_proj, self.k_proj, self.v_proj)]
        attended = F.scaled_dot_product_attention(*heads, attn_mask=key_mask)
        return self.out_proj(attended.transpose(1, 2).reshape(batch, frames, hidden))


class FeedForward(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.intermediate_dense = nn.Linear(hidden_size, intermediate_size)
        self.output_dense = nn.Linear(intermediate_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(F.gelu(self.intermediate_dense(x.to(self.intermediate_dense.weight.dtype))))


class EncoderLayer(nn.Module):
    """Post-layer-norm transformer layer: attention, residual, norm, feed-forward, residual, norm.
    ``layer_norm_first`` (wav2vec2 large): each branch normalises its own input instead, and the
    residual stream is never normalised."""

    def __init__(self, config: HubertBackboneConfig, *, layer_norm_first: bool = False):
        super().__init__()
        self.layer_norm_first = layer_norm_first
        self.attention = SelfAttention(config.hidden_size, config.num_heads)
        self.layer_norm = ResidualLayerNorm(config.hidden_size)
        self.feed_forward = FeedForward(config.hidden_size, config.intermediate_size)
        self.final_layer_norm = ResidualLayerNorm(config.hidden_size)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.layer_norm_first:
            x = x + self.attention(self.layer_norm(x), key_mask)
            return x + self.feed_forward(self.final_layer_norm(x))
        x = self.layer_norm(x + self.attention(x, key_mask))
        return self.final_layer_norm(x + self.feed_forward(x))


class Encoder(nn.Module):
    """``layer_norm_first`` (wav2vec2 large): pre-norm layers, and ``layer_norm`` is not applied to the
    layers' input; torchaudio's ``extract_features``, whose last-layer output SA-toolkit's ASR-BN extractor
    takes, does not apply it to their output either, so it is held (for the checkpoint's keys) and unused."""

    def __init__(self, config: HubertBackboneConfig, *, layer_norm_first: bool = False):
        super().__init__()
        self.layer_norm_first = layer_norm_first
        self.pos_conv_embed = PositionalConvEmbedding(config.hidden_size, config.pos_conv_kernel,
                                                      config.pos_conv_groups)
        self.layer_norm = ResidualLayerNorm(config.hidden_size)
        self.layers = nn.ModuleList(EncoderLayer(config, layer_norm_first=layer_norm_first)
                                    for _ in range(config.num_layers))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, frames, hidden) projected features -> last-layer features of the same shape.

        ``attention_mask`` (batch, frames), True on an item's own frames: padded frames are zeroed
        before the positional convolution and never attended to (their own outputs are meaningless).
        """
        key_mask = None
        if attention_mask is not None:
            x = x.masked_fill(~attention_mask[..., None], 0.0)
            key_mask = attention_mask[:, None, None, :]
        x = x + self.pos_conv_embed(x)
        if self.layer_norm_first:
            # Pre-norm layers never normalise the residual stream: keep it in its norms' precision (float32 in
            # a lower-precision direct form too, as ResidualLayerNorm keeps the post-norm layers' stream).
            x = x.to(self.layer_norm.weight.dtype)
        else:
            x = self.layer_norm(x)
        for layer in self.layers:
            x = layer(x, key_mask)
        return x


class HubertBackbone(nn.Module):
    """HuBERT-base-layout network, (batch, samples) at 16 kHz -> last-layer features (batch, frames, hidden).

    The computation of transformers' ``HubertModel`` for the configuration fairseq's HuBERT-base uses
    (GroupNorm feature encoder without conv biases, layer-normed feature projection, post-layer-norm
    transformer, eval mode), with its state-dict keys, written out so that loading it needs no
    transformers import (about 2.7 s of start-up); the positional convolution holds a plain weight
    (weight norm folded by the importers).
    """

    def __init__(self, config: HubertBackboneConfig, *, wav2vec2_large: bool = False):
        """``wav2vec2_large``: the wav2vec2 large layout instead (fairseq ``extractor_mode: layer_norm``,
        ``layer_norm_first``: conv biases and per-frame layer norms in the feature encoder, pre-norm layers),
        with the features of torchaudio's ``extract_features``' last layer (no final layer norm)."""
        super().__init__()
        self.feature_extractor = FeatureEncoder(config.conv_channels, frame_norm=wav2vec2_large)
        self.feature_projection = FeatureProjection(config.conv_channels, config.hidden_size)
        self.encoder = Encoder(config, layer_norm_first=wav2vec2_large)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.feature_projection(self.feature_extractor(wave).transpose(1, 2)))


def plain_hubert(config: HubertBackboneConfig) -> HubertBackbone:
    """A :class:`HubertBackbone` in eval mode. Its random weights are drawn as transformers'
    ``HubertModel`` draws them from the same seed, so seeded random model sets keep their weights:
    normal(0, 0.02) linear layers, Kaiming-normal feature convolutions, zero biases, unit norms, and
    the positional convolution as PyTorch initialises it, through weight norm and folded back.
    Built on the meta device (to be given a checkpoint's tensors) it draws nothing: ``normal_`` on
    meta tensors would import ``torch._dynamo`` (about 1 s)."""
    model = HubertBackbone(config)
    if next(model.parameters()).is_meta:
        return model.eval()
    with torch.no_grad():
        for module in _children_first(model):
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, 0.02)
                module.bias.zero_()
            elif isinstance(module, nn.Conv1d):
                # transformers draws normal, then Kaiming, for every convolution; on the weight-normed
                # positional one both land on a recomputed copy of the weight and are lost.
                drawn = nn.init.kaiming_normal_(torch.empty_like(module.weight).normal_(0.0, 0.02))
                if module.bias is None:
                    module.weight.copy_(drawn)
                else:
                    module.bias.zero_()
                    module.weight.copy_(_weight_norm_round_trip(module.weight))
            elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)):
                module.weight.fill_(1.0)
                module.bias.zero_()
    return model.eval()


def _children_first(module: nn.Module):
    for child in module.children():
        yield from _children_first(child)
    yield module


def _weight_norm_round_trip(weight: torch.Tensor) -> torch.Tensor:
    holder = nn.Module()  # not a new Conv1d: its initialisation would draw from the generator
    holder.weight = nn.Parameter(weight.clone())
    nn.utils.parametrizations.weight_norm(holder, dim=2)
    nn.utils.parametrize.remove_parametrizations(holder, "weight", leave_parametrized=True)
    return holder.weight


class SoftContentEncoder(nn.Module):
    """waveform (16 kHz) -> (frames at 50 Hz, n_centroids) soft content, SSL-SAS style."""

    def __init__(self, config: SoftContentConfig = SoftContentConfig()):
        super().__init__()
        self.config = config
        self.hubert = plain_hubert(config)
        self.W = nn.Parameter(torch.zeros(config.n_centroids, config.hidden_size))

    def features(self, wave: torch.Tensor) -> torch.Tensor:
        """Last-layer HuBERT features (1, frames, hidden) for one (1, samples) waveform."""
        return self.hubert(wave)

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

    input_padding = 0
    """Zeros :func:`encode_on_device` puts before (and after) each utterance: none."""

    def forward_batch(self, waves: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """Zero-padded (B, L_max) waveforms on the model's device with their lengths (B,) on the CPU -> the
        float32 content (B, T, n_centroids) and each item's frame count: item b's content,
        ``content[b, :counts[b]]``, is what :meth:`forward` gives for it alone (to float rounding). Nothing
        here waits for the device: the counts come from the CPU lengths."""
        device_lengths = to_device(lengths, waves.device)
        x, frames = batch_hubert_features(self.hubert, waves, device_lengths)
        x = x.float()  # the time normalisation and the centroid cosines in float32: small per-channel norms
        valid = torch.arange(x.shape[1], device=x.device)[None, :, None] < frames[:, None, None]
        x = F.normalize(x * valid, dim=1 if self.config.normalise_over_time else -1)
        logits = F.linear(x, F.normalize(self.W.float(), dim=1))
        counts = _conv_output_lengths(lengths)
        if self.config.replicate_last_frame:
            last = torch.minimum(torch.arange(x.shape[1] + 1, device=x.device)[None, :], frames[:, None] - 1)
            logits = logits.gather(1, last[..., None].expand(-1, -1, logits.shape[-1]))
            counts = counts + 1
        return logits, counts.tolist()


def _conv_output_lengths(lengths: torch.Tensor, kernels=CONV_KERNELS, strides=CONV_STRIDES) -> torch.Tensor:
    for kernel, stride in zip(kernels, strides):
        lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
    return lengths


def batch_hubert_features(hubert, waves: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Last-layer features (B, T_max, hidden) of a zero-padded batch and each item's frame count (B,).

    What makes each item's frames equal its one-at-a-time features: the feature encoder's
    convolutions have no padding, so an item's valid frames never read past its end; the first
    layer's GroupNorm (one group per channel) takes its mean and variance over the item's own
    frames only (wav2vec2 large's per-frame layer norms need nothing); the transformer gets the frame mask (padded frames zeroed before the positional
    convolution, and never attended to).
    """
    layers = hubert.feature_extractor.conv_layers
    norm = getattr(layers[0], "layer_norm", None)
    if isinstance(norm, ChannelLayerNorm):
        # Frames normalised one by one: padding changes no valid frame.
        x = hubert.feature_extractor(waves.to(layers[0].conv.weight.dtype))
    else:
        x = _group_normed_features(layers, waves, lengths)
    frames = _conv_output_lengths(lengths)
    hidden = hubert.feature_projection(x.transpose(1, 2))
    mask = torch.arange(hidden.shape[1], device=hidden.device)[None, :] < frames[:, None]
    return hubert.encoder(hidden, attention_mask=mask), frames


def _group_normed_features(layers, waves: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The HuBERT-base feature encoder on a zero-padded batch, its first GroupNorm over each item's own frames."""
    norm = getattr(layers[0], "layer_norm", None)
    if not isinstance(norm, nn.GroupNorm) or norm.num_groups != norm.num_channels:
        raise ValueError("batched HuBERT features need the base layout (a per-channel GroupNorm after the first "
                         "convolution) or wav2vec2 large's (per-frame layer norms)")
    # The model's precision from the input on (the direct form holds no float32 convolution weights);
    # the statistics over each whole utterance in float32 whatever it is.
    x = layers[0].conv(waves[:, None].to(layers[0].conv.weight.dtype))
    counts = _conv_output_lengths(lengths, CONV_KERNELS[:1], CONV_STRIDES[:1])
    with torch.autocast(waves.device.type, enabled=False):
        x = x.float()
        valid = (torch.arange(x.shape[-1], device=x.device)[None, :] < counts[:, None])[:, None, :]
        count = counts[:, None, None].to(x.dtype)
        mean = (x * valid).sum(-1, keepdim=True) / count
        variance = (((x - mean) * valid) ** 2).sum(-1, keepdim=True) / count
        x = (x - mean) * torch.rsqrt(variance + norm.eps) * norm.weight.float()[:, None] + norm.bias.float()[:, None]
    x = layers[0].activation(x).to(layers[1].conv.weight.dtype)
    for layer in layers[1:]:
        x = layer(x)
    return x


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
def encode_on_device(encoder: nn.Module, waves: list[np.ndarray], *, max_items: int | None = None) -> list[np.ndarray]:
    """Float32 content per utterance from ``encoder`` (:class:`SoftContentEncoder` or the HuBERT-soft
    encoder, prepared for its device by :func:`~voxanon.models.nets.precision.prepared_for_device`) on whatever
    device it is on: the GPU path of the content stage (on CPU the same values, which is how it is tested).

    Groups of similar length (:func:`~voxanon.models.nets.precision.device_groups`, at most ``max_items`` each,
    padded to the grid's lengths and row counts so that shapes repeat) run as padded batches
    (``forward_batch``) in the model's own precision. Every group is queued before any result is read:
    the inputs go from pinned memory without waiting, and the host waits for the device once, for the
    first result.
    """
    device = next(encoder.parameters()).device
    pad = encoder.input_padding
    queued = []
    for group in device_groups([len(w) + 2 * pad for w in waves], max_items, multiple=320):
        padded = staging_zeros(group.rows, group.length, device=device)
        lengths = torch.full((group.rows,), group.length)  # padding rows: silence of the full length
        for row, i in enumerate(group.indices):
            padded[row, pad:pad + len(waves[i])] = torch.from_numpy(np.asarray(waves[i], dtype=np.float32))
            lengths[row] = len(waves[i]) + 2 * pad
        queued.append((group.indices, *encoder.forward_batch(to_device(padded, device), lengths)))
    outputs: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(waves)
    for indices, content, counts in queued:
        content = content.cpu().numpy()
        for row, i in enumerate(indices):
            outputs[i] = content[row, :counts[row]].copy()
    return outputs
