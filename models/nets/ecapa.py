"""speechbrain's ECAPA-TDNN and its Fbank front end at inference, as compact modules of our own.

The neural chain's speaker stage loads ECAPA in the parent process before it forks, so it must
not import speechbrain (0.3-0.7 s of one-core start-up). These modules compute what
speechbrain 1.x computes in eval mode, to float rounding (``tests/models/test_ecapa_parity.py``):

* :class:`Fbank` is ``speechbrain.lobes.features.Fbank(n_mels)`` without deltas or context:
  a centred, zero-padded 400-point STFT of 25 ms Hamming windows every 10 ms, power spectra,
  speechbrain's triangular mel filters, ``10·log10`` clamped at 1e-10 and floored 80 dB below
  the utterance's maximum;
* :func:`sentence_mean_normalised` is ``InputNormalization(norm_type="sentence",
  std_norm=False)`` on full-length utterances;
* :class:`EcapaTdnn` holds exactly the state-dict keys of ``ECAPA_TDNN`` (``blocks.0.conv.conv.*``,
  ``blocks.N.tdnn1/res2net_block/tdnn2/se_block/shortcut``, ``mfa``, ``asp``, ``asp_bn``, ``fc``,
  batch-norm buffers included) and builds its parameters in speechbrain's order, so a seed gives
  the same random weights as speechbrain's class.

The network runs time-major, (batch, frames, channels), where every convolution is one matrix
product (kernel-1 convolutions directly, wider ones on frames gathered per tap): about 1.5x
faster than speechbrain's channel-major convolutions on one thread (SSL-SAS size, 8 s). Each convolution pads by
reflection as speechbrain's "same" padding does (``d·(k-1)//2`` frames each side; kernel-1
convolutions need none), so on CPU utterances are embedded unpadded, one per batch item of equal length.
A zero-padded batch of utterances of different lengths (the GPU path) gives each item its own
frames' computation through :class:`FrameCounts`: reflection at its own last frame, means, the
filter bank's 80 dB floor and the attention's softmax over its own frames only; each vector equals
the utterance's one-at-a-time vector to float rounding.
The global mean and standard deviation that attentive pooling appends to every frame enter
its first projection once, as a per-utterance bias. Batch norms use their running statistics:
these modules are for inference; the ASV attacker is trained as speechbrain's own classes
(:mod:`voxanon.models.nets.asv_model`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SAMPLE_RATE = 16000
VARIANCE_FLOOR = 1e-12  # speechbrain's AttentiveStatisticsPooling clamps its variances here before the square root


class FrameCounts:
    """Each item's frame count in a zero-padded time-major batch (B, T, C): what ECAPA's per-utterance steps
    (reflect padding, means over frames, the attention's softmax, the filter bank's floor) see of each item.
    Counts are given on the CPU (checked there, without waiting for a device) and copied to ``device``."""

    def __init__(self, counts: list[int], total: int, device: torch.device):
        from .precision import to_device

        self.host = counts
        self.total = total
        self.counts = to_device(torch.tensor(counts), torch.device(device))
        self.valid = (torch.arange(total, device=self.counts.device)[None, :] < self.counts[:, None])[..., None]
        self._reflections: dict[int, torch.Tensor] = {}

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, 1, C): each item's mean over its own frames."""
        return (x * self.valid).sum(dim=1, keepdim=True) / self.counts[:, None, None].to(x.dtype)

    def reflected(self, x: torch.Tensor, pad: int) -> torch.Tensor:
        """(B, T, C) -> (B, T + 2·pad, C), each item reflect-padded by ``pad`` frames at its own ends (frames
        past an item's right padding repeat its first frame: never read by a valid output)."""
        index = self._reflections.get(pad)
        if index is None:
            if pad >= min(self.host):
                raise ValueError(f"ECAPA's reflect padding of {pad} frames needs more than {pad} frames, got "
                                 f"{min(self.host)}")
            positions = torch.arange(-pad, self.total + pad, device=self.counts.device)[None, :]
            last = (self.counts - 1)[:, None]
            index = torch.where(positions < 0, -positions,
                                torch.where(positions > last, 2 * last - positions, positions)).clamp_(0)
            self._reflections[pad] = index
        return x.gather(1, index[..., None].expand(-1, -1, x.shape[2]))


def frame_mean(x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
    """(B, T, C) -> (B, 1, C): the mean over frames (each item's own, given ``frames``)."""
    return x.sum(dim=1, keepdim=True) / x.shape[1] if frames is None else frames.mean(x)


def mel_filters(n_mels: int, n_fft: int = 400, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """speechbrain's triangular filters from 0 Hz to Nyquist, (n_fft // 2 + 1, n_mels), computed as it does."""
    def to_mel(hz: float) -> float:
        return 2595 * math.log10(1 + hz / 700)

    mel = torch.linspace(to_mel(0), to_mel(sample_rate // 2), n_mels + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    band, centre = (hz[1:] - hz[:-1])[:-1], hz[1:-1]
    slope = (torch.linspace(0, sample_rate // 2, n_fft // 2 + 1) - centre[:, None]) / band[:, None]
    return torch.clamp(torch.minimum(slope + 1.0, -slope + 1.0), min=0.0).T.contiguous()


class Fbank(nn.Module):
    """(batch, samples) 16 kHz waves -> (batch, frames, n_mels) log mel energies in dB; frames = samples // 160 + 1."""

    def __init__(self, n_mels: int = 80, n_fft: int = 400, sample_rate: int = SAMPLE_RATE, top_db: float = 80.0):
        super().__init__()
        self.n_fft, self.top_db = n_fft, top_db
        self.win_length = int(round(sample_rate / 1000.0 * 25))
        self.hop_length = int(round(sample_rate / 1000.0 * 10))
        self.register_buffer("window", torch.hamming_window(self.win_length), persistent=False)
        self.register_buffer("filters", mel_filters(n_mels, n_fft, sample_rate), persistent=False)

    def forward(self, wave: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        """``frames`` (each item's ``samples // 160 + 1``) for a zero-padded batch: the floor is each item's."""
        spectra = torch.stft(wave.float(), self.n_fft, self.hop_length, self.win_length, self.window, center=True,
                             pad_mode="constant", normalized=False, onesided=True, return_complex=True)
        power = torch.view_as_real(spectra).pow(2).sum(-1).transpose(1, 2)
        decibels = 10 * torch.log10(torch.clamp(torch.matmul(power, self.filters), min=1e-10))
        loudest = decibels if frames is None else decibels.masked_fill(~frames.valid, -math.inf)
        return torch.maximum(decibels, loudest.amax(dim=(1, 2), keepdim=True) - self.top_db)


def sentence_mean_normalised(feats: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
    """(batch, frames, features) less each utterance's mean over its frames."""
    return feats - frame_mean(feats, frames)


class Conv(nn.Module):
    """speechbrain's ``Conv1d`` (weights under ``conv.``) on time-major input, reflect "same" padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, dilation: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        """(batch, frames, in_channels) -> (batch, frames, out_channels)."""
        weight, bias = self.conv.weight, self.conv.bias
        kernel, dilation = self.conv.kernel_size[0], self.conv.dilation[0]
        if kernel == 1:
            return F.linear(x, weight[:, :, 0], bias)
        pad, length = dilation * (kernel - 1) // 2, x.shape[1]
        if frames is not None:
            padded = frames.reflected(x, pad)
        elif pad >= length:
            raise ValueError(f"ECAPA's reflect padding of {pad} frames needs more than {pad} frames, got {length}")
        else:
            padded = torch.cat([x[:, 1:pad + 1].flip(1), x, x[:, length - pad - 1:length - 1].flip(1)], dim=1)
        out_frames = padded.shape[1] - dilation * (kernel - 1)
        taps = torch.cat([padded[:, j * dilation:j * dilation + out_frames] for j in range(kernel)], dim=2)
        return F.linear(taps, weight.permute(0, 2, 1).reshape(weight.shape[0], -1), bias)

    def of_concatenated(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """``self(torch.cat(parts, dim=2))``; a kernel-1 convolution sums one product per part instead of copying."""
        weight = self.conv.weight
        if weight.shape[2] != 1:
            return self(torch.cat(parts, dim=2))
        out = None
        for part, part_weight in zip(parts, weight[:, :, 0].split([p.shape[2] for p in parts], dim=1)):
            rows = part.reshape(-1, part.shape[2])
            out = torch.addmm(self.conv.bias, rows, part_weight.T) if out is None else out.addmm_(rows, part_weight.T)
        return out.view(*parts[0].shape[:2], -1)


class BatchNorm(nn.Module):
    """speechbrain's ``BatchNorm1d`` (``norm.``) with its running statistics, on the last dimension."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)

    def scale_and_shift(self) -> tuple[torch.Tensor, torch.Tensor]:
        norm = self.norm
        scale = torch.sqrt(norm.running_var + norm.eps).reciprocal() * norm.weight
        return scale, norm.bias - norm.running_mean * scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale, shift = self.scale_and_shift()
        return torch.addcmul(shift, x, scale)


class TdnnBlock(nn.Module):
    """Convolution, ReLU, batch norm."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.conv = Conv(in_channels, out_channels, kernel_size, dilation)
        self.norm = BatchNorm(out_channels)

    def activated(self, convolved: torch.Tensor) -> torch.Tensor:
        """``convolved`` is overwritten: it is a fresh product that autograd does not keep."""
        return self.norm(torch.relu_(convolved))

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        return self.activated(self.conv(x, frames))


class Res2NetBlock(nn.Module):
    """Channels in ``scale`` groups; each group after the first is convolved with the previous group's output added."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        width = channels // scale
        self.blocks = nn.ModuleList(TdnnBlock(width, width, kernel_size, dilation) for _ in range(scale - 1))
        self.scale = scale

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        groups = torch.chunk(x, self.scale, dim=2)
        outputs = [groups[0]]
        for i, block in enumerate(self.blocks, start=1):
            outputs.append(block(groups[i] if i == 1 else groups[i] + outputs[-1], frames))
        return torch.cat(outputs, dim=2)


class SqueezeExcitation(nn.Module):
    """Per-channel gates in (0, 1) from the utterance's mean frame."""

    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = Conv(channels, se_channels)
        self.conv2 = Conv(se_channels, channels)

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        """(batch, frames, channels) -> (batch, 1, channels) gates."""
        mean = frame_mean(x, frames)
        return torch.sigmoid(self.conv2(torch.relu(self.conv1(mean))))


class SeRes2NetBlock(nn.Module):
    """TDNN, Res2Net, TDNN, squeeze-excitation gates, plus the input (through a kernel-1 shortcut if it is narrower)."""

    def __init__(self, in_channels: int, out_channels: int, scale: int, se_channels: int, kernel_size: int,
                 dilation: int):
        super().__init__()
        self.tdnn1 = TdnnBlock(in_channels, out_channels, 1, 1)
        self.res2net_block = Res2NetBlock(out_channels, scale, kernel_size, dilation)
        self.tdnn2 = TdnnBlock(out_channels, out_channels, 1, 1)
        self.se_block = SqueezeExcitation(out_channels, se_channels)
        self.shortcut = Conv(in_channels, out_channels) if in_channels != out_channels else None

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        residual = x if self.shortcut is None else self.shortcut(x)
        x = self.tdnn2(self.res2net_block(self.tdnn1(x), frames))
        return torch.addcmul(residual, x, self.se_block(x, frames))


def weighted_statistics(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation over frames (dim 1) under per-frame weights that sum to 1."""
    mean = (weights * x).sum(dim=1)
    variance = (x - mean[:, None]).square_().mul_(weights).sum(dim=1)
    return mean, torch.sqrt(variance.clamp(min=VARIANCE_FLOOR))


class AttentiveStatisticsPooling(nn.Module):
    """Per-channel attention over frames (seeing each frame and the utterance's global mean and std) ->
    the attention-weighted mean and standard deviation, (batch, 2 * channels)."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TdnnBlock(channels * 3, attention_channels, 1, 1)
        self.conv = Conv(attention_channels, channels)

    def forward(self, x: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        channels = x.shape[2]
        mean = frame_mean(x, frames)
        variance = frame_mean((x - mean).square_(), frames)[:, 0]
        mean = mean[:, 0]
        projection = self.tdnn.conv.conv
        weight = projection.weight[:, :, 0]
        # The global mean and std are the same at every frame: their share of the projection is one bias per utterance.
        context = torch.addmm(projection.bias, torch.cat([mean, torch.sqrt(variance.clamp(min=VARIANCE_FLOOR))], dim=1),
                              weight[:, channels:].T)
        hidden = self.tdnn.activated(torch.matmul(x, weight[:, :channels].T).add_(context[:, None]))
        scores = self.conv(torch.tanh(hidden))
        attention = torch.softmax(scores if frames is None else scores.masked_fill(~frames.valid, -math.inf), dim=1)
        return torch.cat(weighted_statistics(x, attention), dim=1)


class EcapaTdnn(nn.Module):
    """(batch, frames, n_mels) sentence-normalised Fbank -> (batch, lin_neurons) embeddings."""

    def __init__(self, n_mels: int = 80, lin_neurons: int = 192, channels=(512, 512, 512, 512, 1536),
                 kernel_sizes=(5, 3, 3, 3, 1), dilations=(1, 2, 3, 4, 1), attention_channels: int = 128,
                 res2net_scale: int = 8, se_channels: int = 128):
        super().__init__()
        if not len(channels) == len(kernel_sizes) == len(dilations):
            raise ValueError(f"ECAPA needs as many kernel sizes and dilations as channels, got {len(channels)} "
                             f"channels, {len(kernel_sizes)} kernel sizes, {len(dilations)} dilations")
        self.blocks = nn.ModuleList([TdnnBlock(n_mels, channels[0], kernel_sizes[0], dilations[0])])
        self.blocks.extend(SeRes2NetBlock(channels[i - 1], channels[i], res2net_scale, se_channels, kernel_sizes[i],
                                          dilations[i]) for i in range(1, len(channels) - 1))
        self.mfa = TdnnBlock(channels[-2] * (len(channels) - 2), channels[-1], kernel_sizes[-1], dilations[-1])
        self.asp = AttentiveStatisticsPooling(channels[-1], attention_channels)
        self.asp_bn = BatchNorm(channels[-1] * 2)
        self.fc = Conv(channels[-1] * 2, lin_neurons)

    def forward(self, feats: torch.Tensor, frames: FrameCounts | None = None) -> torch.Tensor:
        """``frames``: each item's frame count where ``feats`` is a zero-padded batch of utterances."""
        x = self.blocks[0](feats, frames)
        aggregated = []
        for block in self.blocks[1:]:
            x = block(x, frames)
            aggregated.append(x)
        pooled = self.asp(self.mfa.activated(self.mfa.conv.of_concatenated(aggregated)), frames)
        return self.fc(self.asp_bn(pooled))
