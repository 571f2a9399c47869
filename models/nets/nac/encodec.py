"""EnCodec's 24 kHz decoder (Meta, MIT) with the published state-dict keys: codes -> waveform.

The layout of ``encodec_24khz-d7cc33bc.th`` (``encodec/modules/seanet.py``'s ``SEANetDecoder``, causal, weight
norm, reflect padding; ``encodec/quantization/core_vq.py``'s residual vector quantiser), keys kept:
``decoder.model.N.conv.conv.weight_g|weight_v|bias``, ``decoder.model.N.convtr.convtr.*``,
``decoder.model.N.block.K.conv.conv.*``, ``decoder.model.N.shortcut.conv.conv.*``, ``decoder.model.1.lstm.*``
and ``quantizer.vq.layers.N._codebook.embed``. Weight norm is computed at each call (``torch._weight_norm``),
as the reference's hook computes it, so a decode is bit-identical to the reference decoder's. Only decoding
is implemented: B4 never encodes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class EncodecConfig:
    """``EncodecModel.encodec_model_24khz``'s decoder settings (SEANet defaults)."""

    dimension: int = 128
    n_filters: int = 32
    ratios: tuple[int, ...] = (8, 5, 4, 2)
    kernel_size: int = 7
    last_kernel_size: int = 7
    residual_kernel_size: int = 3
    dilation_base: int = 2
    n_residual_layers: int = 1
    compress: int = 2
    lstm_layers: int = 2
    n_q: int = 32
    bins: int = 1024
    sample_rate: int = 24000

    def to_dict(self) -> dict:
        return {**asdict(self), "ratios": list(self.ratios)}

    @classmethod
    def from_dict(cls, values: dict) -> "EncodecConfig":
        return cls(**{**values, "ratios": tuple(values.get("ratios", cls.ratios))})


class _WeightNormed(nn.Module):
    """A convolution whose weight is g·v/‖v‖ (``torch.nn.utils.weight_norm``'s ``weight_g``/``weight_v``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1, dilation: int = 1,
                 transposed: bool = False):
        super().__init__()
        shape = (in_channels, out_channels, kernel) if transposed else (out_channels, in_channels, kernel)
        # Left uninitialised (built on the meta device for a checkpoint's tensors; arithmetic on meta tensors
        # imports torch._dynamo): init_random draws random weights.
        self.weight_g = nn.Parameter(torch.empty(shape[0], 1, 1))
        self.weight_v = nn.Parameter(torch.empty(shape))
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.kernel, self.stride, self.dilation, self.transposed = kernel, stride, dilation, transposed

    def forward(self, x):
        weight = torch._weight_norm(self.weight_v, self.weight_g, 0)
        if self.transposed:
            return F.conv_transpose1d(x, weight, self.bias, self.stride)
        return F.conv1d(x, weight, self.bias, self.stride, 0, self.dilation)


class _Wrapped(nn.Module):
    """The reference's ``NormConv1d`` level (its norm is an identity under weight norm): keys ``.conv.``."""

    def __init__(self, inner: nn.Module, name: str):
        super().__init__()
        self.add_module(name, inner)
        self.inner = name

    def forward(self, x):
        return getattr(self, self.inner)(x)


class CausalConv1d(nn.Module):
    """``SConv1d`` (causal): reflect padding of (effective kernel − stride) on the left and what the last frame
    needs on the right."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, dilation: int = 1):
        super().__init__()
        self.conv = _Wrapped(_WeightNormed(in_channels, out_channels, kernel, dilation=dilation), "conv")

    def forward(self, x):
        inner = self.conv.conv
        kernel = (inner.kernel - 1) * inner.dilation + 1
        padding = kernel - inner.stride
        frames = (x.shape[-1] - kernel + padding) / inner.stride + 1
        extra = (math.ceil(frames) - 1) * inner.stride + (kernel - padding) - x.shape[-1]
        return self.conv(_reflect_pad(x, padding, extra))


def _reflect_pad(x, left: int, right: int):
    """Reflect padding that also works on signals no longer than the padding (zeros first, as the reference)."""
    length, extra = x.shape[-1], 0
    if length <= max(left, right):
        extra = max(left, right) - length + 1
        x = F.pad(x, (0, extra))
    padded = F.pad(x, (left, right), "reflect")
    return padded[..., :padded.shape[-1] - extra]


class CausalConvTranspose1d(nn.Module):
    """``SConvTranspose1d`` (causal, ``trim_right_ratio`` 1): the kernel − stride extra samples cut on the right."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int):
        super().__init__()
        self.convtr = _Wrapped(_WeightNormed(in_channels, out_channels, kernel, stride, transposed=True), "convtr")

    def forward(self, x):
        inner = self.convtr.convtr
        y = self.convtr(x)
        return y[..., :y.shape[-1] - (inner.kernel - inner.stride)]


class Lstm(nn.Module):
    """``SLSTM``: an LSTM over time with a skip connection."""

    def __init__(self, channels: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(channels, channels, layers)

    def forward(self, x):
        x = x.permute(2, 0, 1)
        return (self.lstm(x)[0] + x).permute(1, 2, 0)


class ResnetBlock(nn.Module):
    """``SEANetResnetBlock`` with a convolution as the shortcut (the decoder's ``true_skip=False``)."""

    def __init__(self, dim: int, kernel: int, dilation: int, compress: int):
        super().__init__()
        hidden = dim // compress
        self.block = nn.Sequential(nn.ELU(), CausalConv1d(dim, hidden, kernel, dilation), nn.ELU(),
                                   CausalConv1d(hidden, dim, 1))
        self.shortcut = CausalConv1d(dim, dim, 1)

    def forward(self, x):
        return self.shortcut(x) + self.block(x)


class SeanetDecoder(nn.Module):
    def __init__(self, config: EncodecConfig):
        super().__init__()
        mult = 2 ** len(config.ratios)
        layers: list[nn.Module] = [CausalConv1d(config.dimension, mult * config.n_filters, config.kernel_size),
                                   Lstm(mult * config.n_filters, config.lstm_layers)]
        for ratio in config.ratios:
            channels = mult * config.n_filters
            layers += [nn.ELU(), CausalConvTranspose1d(channels, channels // 2, 2 * ratio, ratio)]
            layers += [ResnetBlock(channels // 2, config.residual_kernel_size, config.dilation_base ** j,
                                   config.compress) for j in range(config.n_residual_layers)]
            mult //= 2
        layers += [nn.ELU(), CausalConv1d(config.n_filters, 1, config.last_kernel_size)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class _Codebook(nn.Module):
    def __init__(self, bins: int, dimension: int):
        super().__init__()
        self.register_buffer("embed", torch.empty(bins, dimension))


class _QuantiserLayer(nn.Module):
    def __init__(self, bins: int, dimension: int):
        super().__init__()
        self._codebook = _Codebook(bins, dimension)


class _ResidualVq(nn.Module):
    def __init__(self, config: EncodecConfig):
        super().__init__()
        self.layers = nn.ModuleList(_QuantiserLayer(config.bins, config.dimension) for _ in range(config.n_q))


class _Quantiser(nn.Module):
    def __init__(self, config: EncodecConfig):
        super().__init__()
        self.vq = _ResidualVq(config)


class EncodecDecoder(nn.Module):
    """Codes (batch, codebooks, frames) at 75 Hz -> waveform (batch, samples) at 24 kHz, 320 samples a frame."""

    def __init__(self, config: EncodecConfig):
        super().__init__()
        self.config = config
        self.quantizer = _Quantiser(config)
        self.decoder = SeanetDecoder(config)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        embedding = torch.tensor(0.0, device=codes.device)
        for i in range(codes.shape[1]):
            embedding = embedding + F.embedding(codes[:, i], self.quantizer.vq.layers[i]._codebook.embed).transpose(1, 2)
        return self.decoder(embedding)[:, 0]


def init_random(model: EncodecDecoder) -> EncodecDecoder:
    """Random weights for a random model set: each convolution's weight of norm 1 per output channel (g = 1),
    zero biases, normal codebooks."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _WeightNormed):
                module.weight_v.normal_()
                module.weight_g.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, _Codebook):
                module.embed.normal_()
    return model


TRAINING_BUFFERS = ("inited", "cluster_size", "embed_avg")
"""The quantiser's k-means state, in the release beside each codebook: not used to decode."""
