"""Convolutions computed through the frequency domain, for CPU inference.

Used where a network's direct convolution spends far more multiply-adds than its spectral form:
HuBERT's positional convolution (kernel 128, 16 groups) here, through the FFT; the HiFi-GAN
generator's wide residual convolutions through small DFT matrices (``voxanon.models.nets.hifigan``).
Both compute the same convolution to float rounding and apply only to float32 CPU tensors outside
autograd and autocast (:func:`cpu_inference`), from weights precomputed per module; a plan is
rebuilt when its module's weights change (:func:`weights_stamp`). A model prepared for another device
(:func:`voxanon.models.nets.precision.prepared_for_device`: ``cpu_forms`` off) never uses them, nor builds
their float64 plans: on a GPU the direct convolutions are cuDNN's.
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

FFT_MIN_KERNEL = 32
"""Kernels from which :func:`fft_form` is used. Measured on one core over 400 frames of 768 channels
in 16 groups (HuBERT-base's positional convolution has a kernel of 128), against oneDNN's direct
convolution: 11.6 against 59 ms at a kernel of 128, 5.9 against 30 ms at 64, 4.3 against 15 ms at 32."""


def weights_stamp(module: nn.Module) -> tuple:
    """What changes when ``module``'s weight or bias is written in place or replaced."""
    return tuple(None if t is None else (t._version, t.data_ptr()) for t in (module.weight, module.bias))


class WeightsPlan:
    """Precomputed from one convolution's weights: valid while that convolution still holds them."""

    def __init__(self, conv: nn.Conv1d):
        self._stamp = weights_stamp(conv)

    def matches(self, conv: nn.Conv1d) -> bool:
        """Whether ``conv`` still holds the weights this was built from."""
        return self._stamp == weights_stamp(conv)


def current_plan(plans: weakref.WeakKeyDictionary, conv: nn.Conv1d, build) -> WeightsPlan:
    """``plans[conv]``, built by ``build(conv)`` where it is missing or ``conv``'s weights have changed."""
    plan = plans.get(conv)
    if plan is None or not plan.matches(conv):
        plan = plans[conv] = build(conv)
    return plan


def cpu_inference(x: torch.Tensor) -> bool:
    """Whether ``x`` is a float32 CPU tensor outside autograd and autocast: where the spectral forms apply."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu"))


class FftConvolution(WeightsPlan):
    """A stride-1, undilated ``Conv1d`` (any groups, zero padding of at least (kernel - 1) / 2 each side)
    as an overlap-save FFT convolution: blocks of the smallest power of two at least twice the kernel,
    each block's real FFT, per frequency and group a complex matrix product with the kernel's
    conjugate spectrum, the inverse FFT. Gives the first T outputs for T input frames (HuBERT's
    positional convolution, whose even kernel makes one output too many, drops the last)."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__(conv)
        kernel = conv.kernel_size[0]
        if (conv.stride[0] != 1 or conv.dilation[0] != 1 or isinstance(conv.padding, str)
                or 2 * conv.padding[0] < kernel - 1):
            raise ValueError("an FFT convolution needs stride 1, no dilation and at least 'same' zero padding")
        self.kernel, self.padding, self.groups = kernel, conv.padding[0], conv.groups
        self.block = 1 << (2 * kernel - 1).bit_length()
        self.hop = self.block - kernel + 1
        out_channels, group_inputs, _ = conv.weight.shape
        spectrum = torch.fft.rfft(conv.weight.detach().double(), n=self.block).conj()   # (C_out, C_in/g, F)
        frequencies = spectrum.shape[-1]
        group_outputs = out_channels // self.groups
        # (groups·F, C_in/g, C_out/g): one matrix per group and frequency.
        self.mixing = (spectrum.view(self.groups, group_outputs, group_inputs, frequencies).permute(0, 3, 2, 1)
                       .reshape(self.groups * frequencies, group_inputs, group_outputs).to(torch.complex64)
                       .contiguous())
        self.bias = None if conv.bias is None else conv.bias.detach().clone()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(C_in, T) -> (C_out, T)."""
        channels, length = x.shape
        blocks = -(-length // self.hop)
        padded = F.pad(x, (self.padding, (blocks - 1) * self.hop + self.block - length - self.padding))
        spectra = torch.fft.rfft(padded.unfold(-1, self.block, self.hop), dim=-1)      # (C_in, blocks, F)
        frequencies = spectra.shape[-1]
        group_inputs = channels // self.groups
        spectra = (spectra.view(self.groups, group_inputs, blocks, frequencies).permute(0, 3, 2, 1)
                   .reshape(self.groups * frequencies, blocks, group_inputs))
        mixed = torch.bmm(spectra, self.mixing)                                         # (groups·F, blocks, C_out/g)
        group_outputs = mixed.shape[-1]
        mixed = (mixed.view(self.groups, frequencies, blocks, group_outputs).permute(0, 3, 2, 1)
                 .reshape(self.groups * group_outputs, blocks, frequencies))
        out = torch.fft.irfft(mixed, n=self.block, dim=-1)[..., :self.hop].reshape(-1, blocks * self.hop)
        out = out[:, :length]
        return out if self.bias is None else out + self.bias[:, None]


_fft_plans: "weakref.WeakKeyDictionary[nn.Conv1d, FftConvolution]" = weakref.WeakKeyDictionary()


def fft_form(conv: nn.Conv1d, x: torch.Tensor) -> FftConvolution | None:
    """The FFT form of ``conv`` for the input batch ``x`` (batch first), built on first use in this process
    (and again after the weights change), or None where the direct convolution is used: more than one
    item, another device or precision, gradients, or a kernel below :data:`FFT_MIN_KERNEL`."""
    if x.shape[0] != 1 or conv.kernel_size[0] < FFT_MIN_KERNEL or not cpu_inference(x):
        return None
    return current_plan(_fft_plans, conv, FftConvolution)
