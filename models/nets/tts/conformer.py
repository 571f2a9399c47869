"""IMS-Toucan's Conformer (ESPnet's, as Toucan adapts it): relative-position self-attention, macaron feed-forward
pair, depthwise convolution module; the state-dict keys of Toucan's ``Layers/Conformer.py``.

Inference only, on (B, T, D) activations. Toucan's feed-forward "convolutions" have a kernel of 1 and the
convolution module's pointwise convolutions too: here they are matrix products on the (B, T, D) layout (the same
values, without the transposes to and from (B, D, T)). ``lengths`` marks each item's valid frames in a zero-padded
batch: attention ignores the padding, and every convolution and group norm sees zeros past an item's end, as
the single-utterance reference does, so an item's output equals its one-at-a-time output (to float rounding).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LAYER_NORM_EPS = 1e-12
"""Toucan's ``LayerNorm`` (ESPnet's) epsilon."""


def relative_positions(length: int, dim: int, like: torch.Tensor) -> torch.Tensor:
    """ESPnet's ``RelPositionalEncoding`` table for ``length`` frames: (1, 2·length - 1, dim), positions
    length-1 ... -(length-1)."""
    position = torch.arange(0, length, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    positive = torch.zeros(length, dim)
    negative = torch.zeros(length, dim)
    positive[:, 0::2] = torch.sin(position * div_term)
    positive[:, 1::2] = torch.cos(position * div_term)
    negative[:, 0::2] = torch.sin(-1 * position * div_term)
    negative[:, 1::2] = torch.cos(-1 * position * div_term)
    table = torch.cat([torch.flip(positive, [0]), negative[1:]], dim=0)
    return table.unsqueeze(0).to(device=like.device, dtype=like.dtype)


def pointwise(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A kernel-1 ``Conv1d`` on (B, T, C): a matrix product."""
    return F.linear(x, conv.weight[:, :, 0], conv.bias)


def frame_mask(lengths: torch.Tensor | None, total: int) -> torch.Tensor | None:
    """(B, T, 1) ones on each item's valid frames, or None for a batch of one unpadded item."""
    if lengths is None:
        return None
    return (torch.arange(total, device=lengths.device)[None, :] < lengths[:, None]).unsqueeze(-1)


def masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x.masked_fill(~mask, 0.0)


def masked_group_norm(norm: nn.GroupNorm, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``norm`` on (B, T, C) activations, each item's statistics over its own valid frames only."""
    if mask is None:
        return norm(x.transpose(1, 2)).transpose(1, 2)
    batch, frames, channels = x.shape
    groups = norm.num_groups
    counts = mask.sum(dim=1, keepdim=True).to(x.dtype) * (channels // groups)           # (B, 1, 1)
    grouped = masked(x, mask).view(batch, frames, groups, channels // groups)
    mean = grouped.sum(dim=(1, 3), keepdim=True) / counts.unsqueeze(-1)
    variance = (masked((grouped - mean).view(batch, frames, channels), mask)
                .view(batch, frames, groups, channels // groups).pow(2).sum(dim=(1, 3), keepdim=True)
                / counts.unsqueeze(-1))
    normalised = ((grouped - mean) / torch.sqrt(variance + norm.eps)).view(batch, frames, channels)
    return normalised * norm.weight + norm.bias


class RelPositionAttention(nn.Module):
    """ESPnet's ``RelPositionMultiHeadedAttention`` (Transformer-XL's relative positions, no upper triangle
    zeroing)."""

    def __init__(self, heads: int, dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.empty(heads, self.head_dim))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        batch, frames, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], -1, self.heads, self.head_dim)

        q = heads(self.linear_q(x))                                    # (B, T, H, d)
        k = heads(self.linear_k(x)).transpose(1, 2)                    # (B, H, T, d)
        v = heads(self.linear_v(x)).transpose(1, 2)
        p = heads(self.linear_pos(positions)).transpose(1, 2)          # (1, H, 2T-1, d)
        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        position = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        scores = (content + rel_shift(position)) / math.sqrt(self.head_dim)
        if key_mask is not None:
            blocked = ~key_mask[:, None, None, :]
            scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0)
        else:
            weights = torch.softmax(scores, dim=-1)
        context = torch.matmul(weights, v).transpose(1, 2).reshape(batch, frames, -1)
        return self.linear_out(context)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, 2T-1) scores by relative position -> (B, H, T, T) by key position: query i, key j takes relative
    position T-1-i+j, what ESPnet's shifting trick (pad, reshape, slice) selects, here as a strided view."""
    batch, heads, frames, width = x.shape
    x = x.contiguous()
    return x.as_strided((batch, heads, frames, frames), (heads * frames * width, frames * width, width - 1, 1),
                        storage_offset=x.storage_offset() + frames - 1)


class FeedForward(nn.Module):
    """Toucan's ``MultiLayeredConv1d`` with a kernel of 1: ReLU between two position-wise projections."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Conv1d(dim, hidden, 1)
        self.w_2 = nn.Conv1d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise(self.w_2, torch.relu(pointwise(self.w_1, x)))


class ConvolutionModule(nn.Module):
    """Pointwise convolution, GLU, depthwise convolution, group norm (32 groups), Swish, pointwise convolution."""

    def __init__(self, dim: int, kernel_size: int):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise_conv = nn.Conv1d(dim, dim, kernel_size, padding=(kernel_size - 1) // 2, groups=dim)
        self.norm = nn.GroupNorm(32, dim)
        self.pointwise_conv2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = masked(F.glu(pointwise(self.pointwise_conv1, x), dim=-1), mask)
        x = self.depthwise_conv(x.transpose(1, 2)).transpose(1, 2)
        x = masked_group_norm(self.norm, x, mask)
        return pointwise(self.pointwise_conv2, F.silu(x))


class ConformerLayer(nn.Module):
    """Toucan's ``EncoderLayer`` as its FastSpeech2 builds it: layer norms before each module, half-step macaron
    feed-forwards, no concatenation."""

    def __init__(self, dim: int, heads: int, hidden: int, kernel_size: int):
        super().__init__()
        self.self_attn = RelPositionAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.feed_forward_macaron = FeedForward(dim, hidden)
        self.conv_module = ConvolutionModule(dim, kernel_size)
        for name in ("norm_ff", "norm_mha", "norm_ff_macaron", "norm_conv", "norm_final"):
            setattr(self, name, nn.LayerNorm(dim, eps=LAYER_NORM_EPS))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        key_mask = None if mask is None else mask[:, :, 0]
        x = x + 0.5 * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn(self.norm_mha(x), positions, key_mask)
        x = x + self.conv_module(self.norm_conv(x), mask)
        x = x + 0.5 * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class Conformer(nn.Module):
    """A stack of :class:`ConformerLayer` with the relative positional encoding and a final layer norm; the
    encoder's phone embedding (``embed``) and utterance-embedding projection (``embedding_expansion``) where
    given."""

    def __init__(self, dim: int, heads: int, hidden: int, layers: int, kernel_size: int,
                 input_dim: int | None = None, utterance_dim: int | None = None):
        super().__init__()
        self.dim = dim
        if input_dim is not None:
            self.embed = nn.Sequential(nn.Linear(input_dim, 100), nn.Tanh(), nn.Linear(100, dim))
        self.encoders = nn.ModuleList(ConformerLayer(dim, heads, hidden, kernel_size) for _ in range(layers))
        self.after_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        if utterance_dim is not None:
            self.embedding_expansion = nn.Linear(utterance_dim, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None,
                utterance: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, input) -> (B, T, dim); ``utterance`` (B, utterance_dim) is added to every frame at the end."""
        if hasattr(self, "embed"):
            x = self.embed(x)
        mask = frame_mask(lengths, x.shape[1])
        positions = relative_positions(x.shape[1], self.dim, x)
        x = x * math.sqrt(self.dim)
        for layer in self.encoders:
            x = layer(x, positions, mask)
        x = self.after_norm(x)
        if utterance is not None:
            x = x + self.embedding_expansion(utterance).unsqueeze(1)
        return x
