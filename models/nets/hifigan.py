"""HiFi-GAN generator (jik876 architecture) and the SSL-SAS conditioning assembly.

The module names match jik876/hifi-gan and the SSL-SAS ``g_*`` checkpoints
(``conv_pre``, ``ups.N``, ``resblocks.N.convs1/convs2.M``, ``conv_post``), so a folded
state dict from :mod:`voxanon.models.checkpoints.ssl_sas` loads strictly. Weights are plain
convolutions (weight norm removed, as at inference); :meth:`HifiganGenerator.apply_weight_norm`
puts the training parametrisation back.

Batching: utterances of different lengths are zero-padded to the longest one, and
every convolution's input is zeroed beyond each item's own length. A convolution then
sees exactly the zeros the single-utterance reference pads with, so each item's output
equals its one-at-a-time output (to float rounding) whatever else is in the batch.
:meth:`Vocoder.synthesise` uses that padded pass on a GPU (:meth:`Vocoder.synthesise_padded`, in groups
of similar length); on CPU it is slower than running the utterances one after the other.

Forms: on CPU the activations are (B, C, 1, T) channels-last and the wide residual convolutions spectral
(below); a generator prepared for another device (``cpu_forms`` off:
:func:`voxanon.models.nets.precision.prepared_for_device`) runs plain ``conv1d``/``conv_transpose1d`` on
(B, C, T) activations, in the precision its weights were cast to once (cuDNN's own layout and kernels;
no autocast, no float32 round trips: its length masks are in that precision too).

Windows: an output sample depends on the input frames within
:func:`receptive_field_frames` of it, so an utterance can be synthesised in overlapping
windows of a few fixed lengths (:func:`synthesis_windows`), each window's outputs kept
only where that whole field lies inside it: the same waveform, to float rounding. On CPU
this is how it runs (see :meth:`Vocoder.synthesise`).

Spectral convolutions: on CPU in float32, the residual blocks' wide convolutions (kernel 7 at 128
channels or more, kernel 11 at 64 or more: two thirds of the generator's arithmetic) run as overlap-save
convolutions in blocks of :data:`SPECTRAL_BLOCK` samples (:class:`SpectralConvolution`): each block's real DFT,
channel mixing per frequency, the inverse DFT, every step a matrix product. A kernel of 11 then
costs about 2.1 multiply-adds per output and channel pair in the mixing (47 real products per 22
outputs) where the direct convolution spends 11: measured against oneDNN's direct convolution on one
core, 2.5x faster at 256 channels, 1.7x for a kernel of 7, 1.1-1.2x for 11 at 64 channels. The
output is the same convolution, to float rounding (relative 1e-6). The precomputed per-frequency
weights take about 200 MB for the SSL-SAS generator; they are built once per process
(:func:`plan_spectral_convolutions`), before the runner forks its workers, which then share them.

Dilated convolutions that are not spectral stay oneDNN's direct ones. The same convolution as the undilated
kernel over the signal's d interleaved phases was measured (``benchmarks/vocoder_convolutions.py``, one core): oneDNN
runs dilation as fast as the undilated kernel from 64 channels up, and the 1.4-1.6x left at 16-32 channels (kernels
7 and 11) is mostly spent reordering into and out of the phases, so the whole generator was no faster (x0.98, SNR
135 dB to the direct form). The upsampling layers as regular convolutions on their input were slower as well.
"""
from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...data_prep.errors import VoxanonError
from .spectral import WeightsPlan, cpu_inference, current_plan

LRELU_SLOPE = 0.1
CPU_WINDOW_FRAMES = (64, 128, 192, 256, 384, 512)
"""Window lengths (frames) of CPU synthesis. oneDNN builds kernels for each new input length of a direct
convolution the first time it meets it, and whole utterances of several seconds run slower per frame
than windows (their activations leave the caches). With the spectral convolutions, windows up to 512
frames (9 % overlap at the receptive field's 23 frames a side) beat windows up to 256 (18 %) by about
7 % over 6-10 s utterances on one core (0.218 against 0.233 s per second of audio); windows up to 768
were slower than both."""


class GeneratorSizeError(VoxanonError, ValueError):
    """A generator config declares sizes beyond :data:`GENERATOR_LIMITS`: no HiFi-GAN, and a network that would
    take minutes and gigabytes to build before its weights could be compared with it."""


GENERATOR_LIMITS = {"upsampling layers": 8, "residual kernels": 8, "dilations per kernel": 8, "kernel size": 64,
                    "upsample rate": 64, "dilation": 64, "channels": 8192}
"""Upper bounds (the lower is 1) well above every published jik876-style generator (HiFi-GAN V1-V3: 3 or 4 upsampling layers of rates
up to 8 and kernels up to 16, 3 residual kernels up to 11 wide with 3 dilations up to 5, 512 channels; SSL-SAS: 5
layers, 393 inputs)."""


@dataclass(frozen=True)
class GeneratorConfig:
    """Generator hyper-parameters; the defaults are the SSL-SAS vocoder's (393 inputs, hop 160)."""

    in_channels: int = 393
    upsample_rates: tuple[int, ...] = (5, 4, 2, 2, 2)
    upsample_kernel_sizes: tuple[int, ...] = (11, 8, 4, 4, 4)
    upsample_initial_channel: int = 512
    resblock: str = "1"
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))

    def __post_init__(self):
        self._check_limits()
        if self.resblock not in ("1", "2"):
            raise ValueError(f"resblock must be '1' or '2', got {self.resblock!r}")
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ValueError("upsample_rates and upsample_kernel_sizes differ in length")
        for rate, kernel in zip(self.upsample_rates, self.upsample_kernel_sizes):
            if (kernel - rate) % 2:
                raise ValueError(f"upsample kernel {kernel} with rate {rate}: kernel - rate must be even "
                                 "for the output to be exactly rate times the input")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("resblock_kernel_sizes and resblock_dilation_sizes differ in length")

    def _check_limits(self) -> None:
        """Each declared size within :data:`GENERATOR_LIMITS` (and at least 1), before anything is built."""
        def check(what: str, values, name: str) -> None:
            outside = [value for value in values if not 1 <= value <= GENERATOR_LIMITS[what]]
            if outside:
                raise GeneratorSizeError(f"{name} {outside[0]}; a HiFi-GAN generator has 1 to "
                                         f"{GENERATOR_LIMITS[what]} {what}")

        check("upsampling layers", [len(self.upsample_rates)], "upsample_rates declares")
        check("residual kernels", [len(self.resblock_kernel_sizes)], "resblock_kernel_sizes declares")
        check("dilations per kernel", [len(ds) for ds in self.resblock_dilation_sizes],
              "resblock_dilation_sizes declares")
        check("upsample rate", self.upsample_rates, "upsample_rates holds")
        check("kernel size", [*self.upsample_kernel_sizes, *self.resblock_kernel_sizes], "a kernel size is")
        check("dilation", [d for ds in self.resblock_dilation_sizes for d in ds], "resblock_dilation_sizes holds")
        check("channels", [self.in_channels, self.upsample_initial_channel], "a channel count is")
        if self.upsample_initial_channel < 2 ** len(self.upsample_rates):
            raise GeneratorSizeError(f"upsample_initial_channel {self.upsample_initial_channel} cannot be halved "
                                     f"{len(self.upsample_rates)} times (once per upsampling layer)")

    @property
    def hop_length(self) -> int:
        return int(np.prod(self.upsample_rates))

    @classmethod
    def from_dict(cls, values: dict) -> "GeneratorConfig":
        """From our JSON or a jik876/SSL-SAS ``config.json`` (``model_in_dim`` or ``num_mels``)."""
        in_channels = values.get("in_channels", values.get("model_in_dim", values.get("num_mels")))
        if in_channels is None:
            raise ValueError("generator config has none of in_channels, model_in_dim, num_mels")
        return cls(in_channels=int(in_channels),
                   upsample_rates=tuple(int(v) for v in values["upsample_rates"]),
                   upsample_kernel_sizes=tuple(int(v) for v in values["upsample_kernel_sizes"]),
                   upsample_initial_channel=int(values["upsample_initial_channel"]),
                   resblock=str(values["resblock"]),
                   resblock_kernel_sizes=tuple(int(v) for v in values["resblock_kernel_sizes"]),
                   resblock_dilation_sizes=tuple(tuple(int(d) for d in ds)
                                                 for ds in values["resblock_dilation_sizes"]))

    def to_dict(self) -> dict:
        return asdict(self)


def _padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


SPECTRAL_BLOCK = 32
"""Samples per overlap-save block of a spectral convolution. Measured on one core over the SSL-SAS
generator's shapes in 256-frame windows: 32 beats 16 and 64 for kernels of 7 and 11."""
SPECTRAL_MIN_KERNEL = 7
"""Kernels of 3 gain nothing from the spectral form (measured: as fast as the direct convolution at
256 channels, slower below)."""
SPECTRAL_MIN_KERNEL_CHANNELS = 11 * 64
"""Kernel x input channels from which the spectral form is used. Below it the DFTs, not the channel
mixing, dominate: measured on one core, a kernel of 11 gains 8-19 % at 64 channels (3 % of the whole
vocoder), a kernel of 7 at 64 channels and anything at 32 are slower than the direct convolution."""


def _spectral_matrices(block: int, hop: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward, inverse and kernel transforms of a spectral convolution with ``block``-sample blocks.

    Forward (R, block): per frequency of the real DFT, the rows giving Re X, Im X and Re X + Im X
    (Gauss's three-product complex multiplication: Re(XW) = P1 - P2, Im(XW) = P3 - P1 - P2 with
    P1 = Re X Re W, P2 = Im X Im W, P3 = (Re X + Im X)(Re W + Im W)); frequency 0 and, for an even
    block, block/2 are real and get one row. Inverse (hop, R): the first ``hop`` samples of the
    inverse real DFT, written directly on the products P. Built in float64, rounded once. Kernel
    (R, block), kept in float64: the same rows for the kernel's conjugate spectrum (Re W, -Im W,
    Re W - Im W), so that one matrix product gives the mixing weights of every frequency."""
    frequencies = block // 2 + 1
    real_only = [f == 0 or 2 * f == block for f in range(frequencies)]
    times = torch.arange(block, dtype=torch.float64)
    outputs = torch.arange(hop, dtype=torch.float64)
    forward, inverse, kernel = [], [], []
    for f in range(frequencies):
        cosine = torch.cos(2 * math.pi * f * times / block)
        sine = -torch.sin(2 * math.pi * f * times / block)
        weight = (1.0 if real_only[f] else 2.0) / block
        back_real = weight * torch.cos(2 * math.pi * f * outputs / block)   # sample = back_real·Re + back_imag·Im
        back_imag = -weight * torch.sin(2 * math.pi * f * outputs / block)
        if real_only[f]:
            forward.append(cosine)
            inverse.append(back_real)
            kernel.append(cosine)
        else:
            forward += [cosine, sine, cosine + sine]
            inverse += [back_real - back_imag, -back_real - back_imag, back_imag]
            kernel += [cosine, -sine, cosine - sine]
    return torch.stack(forward).float(), torch.stack(inverse, 1).float(), torch.stack(kernel)


class SpectralConvolution(WeightsPlan):
    """A stride-1 ``Conv1d`` with "same" zero padding as an overlap-save convolution (module doc).

    Each block of ``block`` samples gives ``block - kernel + 1`` outputs (a circular correlation is
    exact there); per frequency the blocks' spectra are mixed across channels by the kernel's
    conjugate spectrum with three real matrix products (:func:`_spectral_matrices`), all
    frequencies in one batched product. Dilation d is handled polyphase: the d interleaved phases
    of the signal are each convolved with the undilated kernel, as extra blocks of the same products.
    """

    def __init__(self, conv: nn.Conv1d, block: int = SPECTRAL_BLOCK):
        super().__init__(conv)
        kernel = conv.kernel_size[0]
        if conv.stride[0] != 1 or conv.groups != 1 or 2 * conv.padding[0] != conv.dilation[0] * (kernel - 1):
            raise ValueError("a spectral convolution needs stride 1, one group and 'same' padding")
        if block <= kernel:
            raise ValueError(f"block ({block}) must exceed the kernel ({kernel})")
        self.kernel, self.dilation, self.block = kernel, conv.dilation[0], block
        self.hop = block - kernel + 1
        self.forward_transform, self.inverse_transform, kernel_transform = _spectral_matrices(block, self.hop)
        out_channels, in_channels, _ = conv.weight.shape
        kernel_first = conv.weight.detach().double().permute(2, 1, 0).reshape(kernel, -1)   # (kernel, C_in·C_out)
        self.mixing = (kernel_transform[:, :kernel] @ kernel_first).view(-1, in_channels, out_channels).float()
        self.bias = None if conv.bias is None else conv.bias.detach().clone()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(1, C_in, 1, T) channels-last -> (1, C_out, 1, T) channels-last."""
        signal = x[0, :, 0, :].T                                           # (T, C_in), contiguous
        length, channels = signal.shape
        d, hop, block = self.dilation, self.hop, self.block
        padding = d * (self.kernel - 1) // 2
        blocks = -(-(-(-length // d)) // hop)
        phase_length = (blocks - 1) * hop + block
        # Zeros written only where the padding lies (F.pad fills the whole tensor, then copies the signal over it).
        padded = signal.new_empty(phase_length * d, channels)
        padded[:padding].zero_()
        padded[padding + length:].zero_()
        padded[padding:padding + length] = signal
        # windows[m, r, i, c] = padded[(m·hop + i)·d + r, c]: block m of phase r
        windows = padded.as_strided((blocks, d, block, channels), (hop * d * channels, channels, d * channels, 1))
        rows = self.mixing.shape[0]
        spectra = torch.matmul(self.forward_transform, windows).view(blocks * d, rows, channels).transpose(0, 1)
        products = torch.bmm(spectra, self.mixing)                         # (rows, blocks·d, C_out)
        out_channels = products.shape[2]
        products = products.view(rows, blocks, d, out_channels).permute(1, 2, 0, 3)
        out = torch.matmul(self.inverse_transform, products)               # (blocks, d, hop, C_out)
        # Back to time order in one pass, the bias added on the way.
        in_time = out.new_empty(blocks * hop * d, out_channels)
        ordered = in_time.view(blocks, hop, d, out_channels)
        if self.bias is None:
            ordered.copy_(out.transpose(1, 2))
        else:
            torch.add(out.transpose(1, 2), self.bias, out=ordered)
        return in_time[:length].T[None, :, None, :]


spectral_convolutions: "weakref.WeakKeyDictionary[nn.Conv1d, SpectralConvolution]" = weakref.WeakKeyDictionary()


def plan_spectral_convolutions(generator: "HifiganGenerator") -> None:
    """Build (or rebuild, where the weights changed) the spectral form of ``generator``'s wide residual
    convolutions; :func:`_conv` then uses it for single utterances on CPU in float32 without gradients.
    Nothing for a generator in the direct form (``cpu_forms`` off), which never uses it."""
    if not generator.cpu_forms:
        return
    for block in generator.resblocks:
        for conv in block.modules():
            if (isinstance(conv, nn.Conv1d) and conv.kernel_size[0] >= SPECTRAL_MIN_KERNEL
                    and conv.kernel_size[0] * conv.in_channels >= SPECTRAL_MIN_KERNEL_CHANNELS
                    and conv.weight.device.type == "cpu"
                    and conv.weight.dtype == torch.float32):
                current_plan(spectral_convolutions, conv, SpectralConvolution)


def _spectral_form(conv: nn.Module, x: torch.Tensor) -> SpectralConvolution | None:
    plan = spectral_convolutions.get(conv)
    if plan is None or x.shape[0] != 1 or not cpu_inference(x) or not plan.matches(conv):
        return None
    return plan


def _masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


def _conv(conv: nn.Conv1d | nn.ConvTranspose1d, x: torch.Tensor) -> torch.Tensor:
    """``conv`` on (B, C, 1, T) channels-last activations, as a 2-D convolution of height 1 (or, in the
    direct form, on (B, C, T) activations as the plain 1-D convolution).

    oneDNN runs CPU convolutions on channels-last data: fed the (B, C, T) layout, it converts
    every input and output, which took 40 % of a bfloat16 generator pass and 15 % of a float32
    one. Kept channels-last from end to end, the activations are never converted (the same
    values as with ``Conv1d``, to float rounding).
    """
    if x.ndim == 3:  # the direct form (module doc): (B, C, T)
        if isinstance(conv, nn.ConvTranspose1d):
            return F.conv_transpose1d(x, conv.weight, conv.bias, conv.stride, conv.padding)
        return F.conv1d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation)
    spectral = _spectral_form(conv, x)
    if spectral is not None:
        return spectral(x)
    weight = conv.weight.unsqueeze(2)
    if isinstance(conv, nn.ConvTranspose1d):
        return F.conv_transpose2d(x, weight, conv.bias, (1, conv.stride[0]), (0, conv.padding[0]))
    return F.conv2d(x, weight, conv.bias, (1, conv.stride[0]), (0, conv.padding[0]), (1, conv.dilation[0]))


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilation: Sequence[int]):
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                              padding=_padding(kernel_size, d)) for d in dilation)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                              padding=_padding(kernel_size)) for _ in dilation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for conv1, conv2 in zip(self.convs1, self.convs2):
            # In place where the tensor is a convolution's fresh output: fewer passes over memory, same values.
            xt = _conv(conv1, _masked(F.leaky_relu(x, LRELU_SLOPE), mask))
            xt = _conv(conv2, _masked(F.leaky_relu(xt, LRELU_SLOPE, inplace=True), mask))
            x = xt.add_(x)
        return x


class ResBlock2(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilation: Sequence[int]):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                             padding=_padding(kernel_size, d)) for d in dilation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for conv in self.convs:
            x = _conv(conv, _masked(F.leaky_relu(x, LRELU_SLOPE), mask)) + x
        return x


class HifiganGenerator(nn.Module):
    """(B, in_channels, T) frames -> (B, 1, leading_samples + T·hop) waveform in [-1, 1]."""

    cpu_forms: bool = True
    """Channels-last activations and spectral convolutions (the CPU's); off: the direct form (module doc)."""

    leading_samples = 0
    """Output samples before the first frame's ``hop`` (one in SA-toolkit's ``CoreHifiGan``, whose output
    layer reflects one sample in front)."""

    def __init__(self, config: GeneratorConfig = GeneratorConfig()):
        super().__init__()
        self.config = config
        self.num_kernels = len(config.resblock_kernel_sizes)
        channels = config.upsample_initial_channel
        self.conv_pre = nn.Conv1d(config.in_channels, channels, 7, 1, padding=3)
        resblock = ResBlock1 if config.resblock == "1" else ResBlock2
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes)):
            self.ups.append(nn.ConvTranspose1d(channels // 2 ** i, channels // 2 ** (i + 1), kernel, rate,
                                               padding=(kernel - rate) // 2))
            for size, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes):
                self.resblocks.append(resblock(channels // 2 ** (i + 1), size, dilations))
        self.conv_post = nn.Conv1d(channels // 2 ** len(config.upsample_rates), 1, 7, 1, padding=3)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``lengths`` (B,) in frames marks each item's valid part of a zero-padded batch."""
        if self.cpu_forms:
            x = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)  # see _conv
        else:
            x = x.to(self.conv_pre.weight.dtype).contiguous()
        mask = None if lengths is None else _length_mask(lengths, x.shape[-1], x)
        x = _conv(self.conv_pre, _masked(x, mask))
        for i, up in enumerate(self.ups):
            x = _conv(up, _masked(F.leaky_relu(x, LRELU_SLOPE, inplace=True), mask))
            if lengths is not None:
                lengths = lengths * self.config.upsample_rates[i]
                mask = _length_mask(lengths, x.shape[-1], x)
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = blocks[0](x, mask)
            for block in blocks[1:]:
                total.add_(block(x, mask))
            x = total.div_(self.num_kernels)
        return self.output_layer(x, mask)

    def output_layer(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The last stage's activations ((B, C, 1, T) channels-last, or (B, C, T) in the direct form) ->
        (B, 1, T) waveform."""
        # jik876 uses leaky_relu's default slope (0.01) here, not LRELU_SLOPE.
        x = _conv(self.conv_post, _masked(F.leaky_relu(x, inplace=True), mask))
        return torch.tanh(x if x.ndim == 3 else x.squeeze(2)).contiguous()

    def apply_weight_norm(self) -> None:
        """The training parametrisation (weight = g · v / ‖v‖) on every convolution."""
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
                nn.utils.parametrizations.weight_norm(module)

    def remove_weight_norm(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)) and nn.utils.parametrize.is_parametrized(module):
                nn.utils.parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def _length_mask(lengths: torch.Tensor, total: int, like: torch.Tensor) -> torch.Tensor:
    """Ones on each item's valid part, shaped and typed to multiply ``like``: built on its device."""
    positions = torch.arange(total, device=like.device)
    mask = (positions[None, :] < lengths[:, None]).to(like.dtype)
    return mask[:, None, :] if like.ndim == 3 else mask[:, None, None, :]


def receptive_field_frames(config: GeneratorConfig) -> int:
    """Input frames on either side of an output sample that can change it, rounded up.

    Summed layer by layer from the output back, each layer's reach divided by its rate
    (samples per input frame): ``conv_post`` and ``conv_pre`` (kernel 7), per stage the widest
    residual block (the sum of its convolutions' dilated half-widths) and the transposed
    convolution (kernel K, stride u, padding p reaches (K - 1 - p)/u input samples back and
    p/u ahead). 23 frames for the SSL-SAS generator (22.4 back, 21.4 ahead; a perturbed
    frame measurably reaches 22.0 and 21.2).
    """
    rates = np.cumprod((1,) + tuple(config.upsample_rates))
    back = ahead = 3 / rates[-1] + 3
    for stage, (rate, kernel) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes)):
        padding = (kernel - rate) // 2
        back += (kernel - 1 - padding) / rate / rates[stage]
        ahead += padding / rate / rates[stage]
        undilated = 1 if config.resblock == "1" else 0  # ResBlock1 follows each dilated conv with a plain one
        blocks = max(sum((size - 1) / 2 * (d + undilated) for d in dilations)
                     for size, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes))
        back += blocks / rates[stage + 1]
        ahead += blocks / rates[stage + 1]
    return int(np.ceil(max(back, ahead)))


@dataclass(frozen=True)
class SynthesisWindow:
    """Input frames ``[start, start + size)`` (zero-padded and length-masked past the utterance's
    end), whose outputs for frames ``[keep_from, keep_to)`` are kept."""

    start: int
    size: int
    keep_from: int
    keep_to: int


def synthesis_windows(n_frames: int, sizes: Sequence[int], margin: int) -> list[SynthesisWindow]:
    """Windows of the given ``sizes`` whose kept parts tile ``[0, n_frames)``, each kept frame at
    least ``margin`` frames from its window's edges except at the utterance's own ends.

    An utterance that fits the largest size is one window, the smallest that holds it. A longer
    one gets windows of the largest size stepping by ``largest - 2·margin`` kept frames, and a last
    window, the smallest size that reaches from ``margin`` frames before the remainder to the end.
    """
    sizes = sorted(sizes)
    largest = sizes[-1]
    if largest <= 2 * margin:
        raise ValueError(f"the largest window ({largest} frames) must exceed twice the margin ({margin})")
    if n_frames <= largest:
        return [SynthesisWindow(0, next(s for s in sizes if s >= n_frames), 0, n_frames)]
    windows = [SynthesisWindow(0, largest, 0, largest - margin)]
    while n_frames - windows[-1].keep_to + margin > largest:
        start = windows[-1].keep_to - margin
        windows.append(SynthesisWindow(start, largest, start + margin, start + largest - margin))
    size = next(s for s in sizes if s >= n_frames - windows[-1].keep_to + margin)
    windows.append(SynthesisWindow(n_frames - size, size, windows[-1].keep_to, n_frames))
    return windows


@dataclass(frozen=True)
class ConditioningLayout:
    """How content, F0 and a speaker vector become the generator's input frames.

    SSL-SAS defaults: 200-d soft content at 50 Hz repeated ×2 to the 100 Hz F0 rate,
    F0 in raw Hz (0 unvoiced), a 192-d speaker vector broadcast to every frame, channel
    order [content | F0 | speaker]. ``layer_norm_content`` / ``layer_norm_speaker``
    standardise each utterance's whole tensor (SSL-SAS calls ``F.layer_norm(x, x.shape)``
    on a batch of one); here it is done per item so batching does not change results.

    The zLLR-VC vocoder (ICASSP 2023) was trained with two more steps, both off by default:
    ``standardise_content`` standardises each content dimension over the utterance's frames,
    ``(x - mean_t) / (std_t + 1e-6)``, before the layer norm; ``l2_normalise_speaker`` scales the
    speaker vector to unit length (that vocoder's speaker input, with ``layer_norm_speaker`` off).
    """

    content_dim: int = 200
    speaker_dim: int = 192
    content_repeat: int = 2
    order: tuple[str, ...] = ("content", "f0", "speaker")
    layer_norm_content: bool = True
    layer_norm_speaker: bool = True
    standardise_content: bool = False
    l2_normalise_speaker: bool = False
    eps: float = 1e-5

    def __post_init__(self):
        if sorted(self.order) != ["content", "f0", "speaker"]:
            raise ValueError(f"layout order must list content, f0 and speaker once each, got {self.order}")
        if self.content_repeat < 1:
            raise ValueError(f"content_repeat must be at least 1, got {self.content_repeat}")

    @property
    def channels(self) -> int:
        return self.content_dim + 1 + self.speaker_dim

    @classmethod
    def from_dict(cls, values: dict) -> "ConditioningLayout":
        values = dict(values)
        if "order" in values:
            values["order"] = tuple(values["order"])
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    def _check(self, content: torch.Tensor, f0: torch.Tensor, speaker: torch.Tensor) -> None:
        if content.ndim != 2 or content.shape[1] != self.content_dim:
            raise ValueError(f"content must be (frames, {self.content_dim}), got {tuple(content.shape)}")
        if speaker.shape != (self.speaker_dim,):
            raise ValueError(f"speaker vector must have shape ({self.speaker_dim},), got {tuple(speaker.shape)}")
        if f0.ndim != 1 or f0.shape[0] != content.shape[0] * self.content_repeat:
            raise ValueError(f"misaligned conditioning: {content.shape[0]} content frames x{self.content_repeat} "
                             f"!= {f0.shape[0]} F0 frames")

    def frames(self, content: torch.Tensor, f0: torch.Tensor, speaker: torch.Tensor) -> torch.Tensor:
        """One utterance: content (Tc, content_dim), f0 (Tf,), speaker (speaker_dim,) -> (channels, Tf)."""
        self._check(content, f0, speaker)
        if self.standardise_content:
            # torch.std is the unbiased estimate, as in the ICASSP 2023 code.
            content = (content - content.mean(dim=0)) / (content.std(dim=0) + 1e-6)
        if self.l2_normalise_speaker:
            speaker = F.normalize(speaker, dim=0)
        if self.layer_norm_content:
            content = F.layer_norm(content, content.shape, eps=self.eps)
        if self.layer_norm_speaker:
            speaker = F.layer_norm(speaker, speaker.shape, eps=self.eps)
        n_frames = f0.shape[0]
        streams = {"content": content.T.repeat_interleave(self.content_repeat, dim=1),
                   "f0": f0[None, :].to(content.dtype),
                   "speaker": speaker[:, None].to(content.dtype).expand(-1, n_frames)}
        return torch.cat([streams[name] for name in self.order], dim=0)

    def batch(self, items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Several utterances -> zero-padded (B, channels, T_max) frames and their lengths (B,)."""
        frames = [self.frames(*item) for item in items]
        lengths = torch.tensor([f.shape[1] for f in frames])
        padded = torch.zeros(len(frames), self.channels, int(lengths.max()), dtype=frames[0].dtype)
        for i, f in enumerate(frames):
            padded[i, :, :f.shape[1]] = f
        return padded, lengths

    def device_batch(self, items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], length: int, rows: int,
                     device: torch.device) -> tuple[torch.Tensor, list[int]]:
        """Several utterances' frames, as :meth:`batch` gives them (to float rounding), built on ``device`` as one
        (rows, channels, length) float32 tensor, and each item's frame count. Only the content (at its own,
        lower, frame rate), the F0 and the speaker vectors cross from the CPU (from pinned memory, without
        waiting); the normalisations run batched, each over its own item's frames. Frames past an item's
        count are not zero (the generator masks its input); rows past the items are silence of ``length``."""
        from .precision import staging_zeros, to_device

        for item in items:
            self._check(*item)
        repeat = self.content_repeat
        content_length = -(-length // repeat)
        device = torch.device(device)
        content = staging_zeros(rows, content_length, self.content_dim, device=device)
        f0 = staging_zeros(rows, length, device=device)
        speaker = staging_zeros(rows, self.speaker_dim, device=device)
        counts, lengths = [content_length] * rows, [length] * rows
        for row, (item_content, item_f0, item_speaker) in enumerate(items):
            content[row, :len(item_content)], f0[row, :len(item_f0)], speaker[row] = item_content, item_f0, item_speaker
            counts[row], lengths[row] = len(item_content), len(item_f0)
        content, f0, speaker = (to_device(tensor, device) for tensor in (content, f0, speaker))
        frames = to_device(torch.tensor(counts, dtype=torch.float32), device)[:, None, None]
        valid = torch.arange(content_length, device=device)[None, :, None] < frames
        if self.standardise_content:
            mean = (content * valid).sum(dim=1, keepdim=True) / frames
            std = ((((content - mean) * valid) ** 2).sum(dim=1, keepdim=True) / (frames - 1)).sqrt()
            content = (content - mean) / (std + 1e-6)
        if self.l2_normalise_speaker:
            speaker = F.normalize(speaker, dim=1)
        if self.layer_norm_content:
            elements = frames * self.content_dim
            mean = (content * valid).sum(dim=(1, 2), keepdim=True) / elements
            variance = (((content - mean) * valid) ** 2).sum(dim=(1, 2), keepdim=True) / elements
            content = (content - mean) * torch.rsqrt(variance + self.eps)
        if self.layer_norm_speaker:
            speaker = F.layer_norm(speaker, speaker.shape[1:], eps=self.eps)
        streams = {"content": content.transpose(1, 2).repeat_interleave(repeat, dim=2)[..., :length],
                   "f0": f0[:, None, :], "speaker": speaker[:, :, None].expand(-1, -1, length)}
        return torch.cat([streams[name] for name in self.order], dim=1), lengths


@dataclass
class Vocoder:
    """A generator with the conditioning layout it was trained on."""

    generator: HifiganGenerator
    layout: ConditioningLayout = field(default_factory=ConditioningLayout)

    def __post_init__(self):
        if self.generator.config.in_channels != self.layout.channels:
            raise ValueError(f"generator takes {self.generator.config.in_channels} input channels, the layout "
                             f"gives {self.layout.channels}")

    @torch.inference_mode()
    def synthesise(self, items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                   dtype: torch.dtype = torch.float32) -> list[np.ndarray]:
        """(content, f0, speaker) per utterance -> float32 waveforms of F0 frames × hop samples each (after the
        generator's :attr:`~HifiganGenerator.leading_samples`).

        On CPU each utterance runs alone, in windows of :data:`CPU_WINDOW_FRAMES`
        (:func:`synthesis_windows`; the same waveform as one whole-utterance pass, to float
        rounding), with the wide residual convolutions in their spectral form in float32 (module
        doc). oneDNN builds kernels for each new input length of a direct convolution (in bfloat16
        that cost about four times the synthesis itself), and whole utterances of 10 s and more run
        slower per frame than windows, their activations no longer fitting the caches; the windows'
        kernels are built once per process, the first time each window length is met. Measured on the
        full-size generator over 6-10 s utterances of new lengths, one thread, float32: 0.22 s per second
        of audio in windows up to 512 frames (0.30 before the spectral convolutions), bfloat16 (AMX)
        0.066. A padded batch does not help on CPU: the convolutions already keep the cores busy on
        one utterance, and padding adds work and masking passes (padded batches of four 3-5 s
        utterances took twice as long as one by one). On a GPU, utterances of similar length run as
        padded, length-masked batches (:meth:`synthesise_padded`); each output again equals the
        utterance's one-at-a-time output.

        ``dtype`` other than float32 runs the generator under that autocast on CPU (the conditioning
        frames, with their layer norms, are still built in float32). On random full-size SSL-SAS
        weights bfloat16 waveforms are about 38 dB SNR from float32's (largest sample error about
        6e-4, i.e. 20 steps of 16 bits). A generator in the direct form (prepared for a GPU) runs in the
        precision it was prepared in, which ``dtype`` must name.
        """
        device = next(self.generator.parameters()).device
        if device.type != "cpu" or not self.generator.cpu_forms:
            own = self.generator.conv_pre.weight.dtype
            if dtype != own:
                raise ValueError(f"this generator runs in {own} (prepared for its device in it: "
                                 f"voxanon.models.nets.precision.prepared_for_device), not {dtype}")
            return self.synthesise_padded(items)
        lower_precision = (torch.autocast(device.type, dtype=dtype) if dtype != torch.float32
                           else contextlib.nullcontext())
        if dtype == torch.float32:
            plan_spectral_convolutions(self.generator)
        frames = [self.layout.frames(*item) for item in items]
        with lower_precision:
            return [self._synthesise_in_windows(f) for f in frames]

    @torch.inference_mode()
    def synthesise_padded(self, items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], *,
                          max_items: int | None = None) -> list[np.ndarray]:
        """:meth:`synthesise` on whatever device the generator is on, in the precision of its weights, as
        padded, length-masked batches of utterances of similar length (:func:`~voxanon.models.nets.precision.device_groups`,
        at most ``max_items`` each, padded to the grid's lengths and row counts so that shapes repeat): the GPU
        path. On CPU it computes the same values (how it is tested). The conditioning frames are built on the
        device, in float32 (:meth:`ConditioningLayout.device_batch`); every group is queued before the host
        waits for the first waveform."""
        from .precision import device_groups, to_device

        device = next(self.generator.parameters()).device
        hop, lead = self.generator.config.hop_length, self.generator.leading_samples
        queued = []
        for group in device_groups([int(item[1].shape[0]) for item in items], max_items):
            frames, lengths = self.layout.device_batch([items[i] for i in group.indices], group.length, group.rows,
                                                       device)
            audio = self.generator(frames, to_device(torch.tensor(lengths), device))[:, 0]
            queued.append((group.indices, lengths, audio))
        waves: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(items)
        for indices, lengths, audio in queued:
            audio = audio.float().cpu().numpy()
            for row, i in enumerate(indices):
                waves[i] = audio[row, :lengths[row] * hop + lead].copy()
        return waves

    def _synthesise_in_windows(self, frames: torch.Tensor, sizes: Sequence[int] = CPU_WINDOW_FRAMES) -> np.ndarray:
        """One utterance's (channels, T) frames -> its waveform, window by window."""
        hop, lead = self.generator.config.hop_length, self.generator.leading_samples
        n_frames = frames.shape[1]
        wave = np.empty(lead + n_frames * hop, dtype=np.float32)
        for window in synthesis_windows(n_frames, sizes, receptive_field_frames(self.generator.config)):
            chunk = frames[None, :, window.start:window.start + window.size]
            inside = chunk.shape[-1]
            lengths = None if inside == window.size else torch.tensor([inside])
            audio = self.generator(F.pad(chunk, (0, window.size - inside)), lengths)[0, 0]
            # Leading samples belong to the utterance's first window; in later windows they lie in the margin.
            begin = 0 if window.start == 0 else lead + (window.keep_from - window.start) * hop
            kept = slice(begin, lead + (window.keep_to - window.start) * hop)
            wave[begin + window.start * hop:lead + window.keep_to * hop] = audio[kept].float().numpy()
        return wave


def generator_config_of(model_set) -> GeneratorConfig:
    """An installed set's generator config; sizes beyond :data:`GENERATOR_LIMITS` name the set's config.json
    (one line, before anything is built)."""
    try:
        return GeneratorConfig.from_dict(model_set.config["generator"])
    except GeneratorSizeError as error:
        raise GeneratorSizeError(f"{model_set.path / 'config.json'}: {error}") from None


def load_vocoder(model_set, cpu_plans: bool = True) -> Vocoder:
    """An installed SSL-SAS-layout set's vocoder: its generator, loaded strictly, with the conditioning layout it
    was trained on; ``cpu_plans``: the spectral convolutions of CPU synthesis planned here (once, before a
    runner forks its workers, which share them)."""
    config = generator_config_of(model_set)
    generator = model_set.build("generator", lambda: HifiganGenerator(config))
    if cpu_plans:
        plan_spectral_convolutions(generator)
    return Vocoder(generator, ConditioningLayout.from_dict(model_set.config["layout"]))
