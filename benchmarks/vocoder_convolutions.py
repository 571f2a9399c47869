"""The HiFi-GAN generator's dilated narrow convolutions on one CPU thread: oneDNN's direct dilated convolution (what
``voxanon.models.nets.hifigan`` runs) against the same convolution over the signal's interleaved phases.

A convolution of dilation d with "same" padding equals the undilated kernel applied to each of the d phases of the
signal (samples r, r + d, r + 2d, ...), the signal's zero padding becoming each phase's own. Two ways to get there
from the generator's (1, C, 1, T) channels-last activations (memory: T rows of C channels) are measured:

* ``view``: no copy at all. The memory read as (1, C, T/d, d) channels-last holds phase r in column r, so a 2-D
  convolution with a (k, 1) kernel over the first axis is the phase form (T padded to a multiple of d first).
* ``fused``: the phases as a batch of d utterances of T/d samples, written by the leaky ReLU before the convolution
  and read back into time order by the one after it (``torch.ops.aten.leaky_relu.out`` on strided views), so that
  reordering costs no pass of its own: the form ResBlock1 could run.

Printed:

1. Per layer shape (the SSL-SAS generator's dilated residual convolutions that are not spectral, at the samples
   of a ``--frames`` window of each stage): CPU milliseconds of leaky ReLU + convolution + leaky ReLU as today, in
   each phase form, and of the undilated convolution of the same shape (what a free reordering would reach); the
   ratios to today; the phase forms' largest difference relative to the largest output (float rounding: they
   reorder the sums, so the bytes differ).
2. The whole generator (random full-size SSL-SAS weights, spectral plans built) over one ``--frames`` window: CPU
   seconds per audio second with today's residual blocks, with the ``fused`` form for the dilated convolutions of
   at most ``--phase-channels`` channels and kernels of at least ``--phase-kernel``, and with those dilations set
   to 1 (the bound, a different network); the SNR of the fused form's waveform to today's.

3. The upsampling layers (transposed convolutions of stride u) as regular convolutions on their input: per output
   phase r, the taps of the transposed kernel that reach it, all phases as u x C_out outputs of one convolution
   whose channels-last output, read as u times as many rows of C_out, is the upsampled signal (no copy). Kernel
   3 for every SSL-SAS layer, some of its taps zero. CPU ms of each form and the largest difference.

Every figure is the median of ``--rounds`` rounds in which the variants alternate (which goes first rotates),
and each ratio the median of the per-round ratios with its quartiles: other processes on the machine move CPU
times by several per cent from one round to the next.

    .venv/bin/python -m benchmarks.vocoder_convolutions [--rounds 15] [--frames 512] [--phase-channels 32]
                                                        [--phase-kernel 7] [--generator-only]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from voxanon.models.nets.hifigan import (LRELU_SLOPE, SPECTRAL_MIN_KERNEL, SPECTRAL_MIN_KERNEL_CHANNELS,
                                         GeneratorConfig, HifiganGenerator, ResBlock1, _conv, _masked,
                                         plan_spectral_convolutions)


def today(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """As ResBlock1 runs a dilated convolution: leaky ReLU, oneDNN's direct convolution, leaky ReLU in place."""
    return F.leaky_relu(_conv(conv, F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE, inplace=True)


def phases_by_view(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The phase form without copies: the activations read as (1, C, T/d, d), a (k, 1) kernel down the rows."""
    _, channels, _, length = x.shape
    d, kernel = conv.dilation[0], conv.kernel_size[0]
    rows = -(-length // d)
    activated = F.leaky_relu(x, LRELU_SLOPE)
    if rows * d != length:
        activated = F.pad(activated, (0, rows * d - length))
    grid = activated.permute(0, 2, 3, 1).reshape(1, rows, d, channels).permute(0, 3, 1, 2)
    out = F.conv2d(grid, conv.weight.unsqueeze(3), conv.bias, 1, ((kernel - 1) // 2, 0))
    out = out.permute(0, 2, 3, 1).reshape(1, 1, rows * d, -1).permute(0, 3, 1, 2)[..., :length]
    return F.leaky_relu(out, LRELU_SLOPE, inplace=True)


def phases_fused(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The phase form as a batch of d phases, reordered by the leaky ReLUs on either side of the convolution."""
    _, channels, _, length = x.shape
    d, kernel = conv.dilation[0], conv.kernel_size[0]
    rows, whole = -(-length // d), length // d * d
    samples = x.permute(0, 2, 3, 1).reshape(length, channels)
    phases = x.new_empty(d, rows, channels)
    torch.ops.aten.leaky_relu.out(samples[:whole].view(length // d, d, channels).transpose(0, 1), LRELU_SLOPE,
                                  out=phases[:, :length // d])
    if whole < length:
        phases[:, -1].zero_()
        torch.ops.aten.leaky_relu.out(samples[whole:], LRELU_SLOPE, out=phases[:length - whole, -1])
    out = F.conv2d(phases.view(d, 1, rows, channels).permute(0, 3, 1, 2), conv.weight.unsqueeze(2), conv.bias,
                   1, (0, (kernel - 1) // 2))
    out_channels = out.shape[1]
    in_time = x.new_empty(rows, d, out_channels)
    torch.ops.aten.leaky_relu.out(out.permute(0, 2, 3, 1).reshape(d, rows, out_channels).transpose(0, 1),
                                  LRELU_SLOPE, out=in_time)
    return in_time.view(1, 1, rows * d, out_channels)[:, :, :length].permute(0, 3, 1, 2)


class PhasedResBlock1(ResBlock1):
    """ResBlock1 with :func:`phases_fused` for the dilated convolutions that :data:`PHASED` selects."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        assert mask is None, "measured on whole windows only"
        for conv1, conv2 in zip(self.convs1, self.convs2):
            phased = (conv1.dilation[0] > 1 and conv1.in_channels <= PHASED["channels"]
                      and conv1.kernel_size[0] >= PHASED["kernel"])
            xt = phases_fused(conv1, x) if phased else today(conv1, x)
            x = _conv(conv2, _masked(xt, mask)).add_(x)
        return x


PHASED = {"channels": 32, "kernel": 7}


def cpu_seconds(run) -> float:
    began = time.process_time()
    run()
    return time.process_time() - began


def alternate(variants: dict, rounds: int) -> dict[str, list[float]]:
    """CPU seconds of each variant per round, the order rotating from round to round (after one warm-up call)."""
    for run in variants.values():
        run()
    names = list(variants)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            seconds[name].append(cpu_seconds(variants[name]))
    return seconds


def ratio_text(base: list[float], other: list[float]) -> str:
    ratios = [a / b for a, b in zip(base, other)]
    low, _, high = statistics.quantiles(ratios, n=4)
    return f"x{statistics.median(ratios):.2f} ({low:.2f}-{high:.2f})"


def per_shape(config: GeneratorConfig, frames: int, rounds: int) -> None:
    print(f"1. per layer shape, a {frames}-frame window, one thread: CPU ms (median of {rounds}), ratio to today "
          "(median of the rounds' ratios, quartiles); largest difference relative to the largest output")
    samples = frames
    for stage, rate in enumerate(config.upsample_rates):
        samples *= rate
        channels = config.upsample_initial_channel // 2 ** (stage + 1)
        for kernel, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes):
            if kernel >= SPECTRAL_MIN_KERNEL and kernel * channels >= SPECTRAL_MIN_KERNEL_CHANNELS:
                continue   # spectral: dilation is already handled by phases there
            for d in sorted({d for d in dilations if d > 1}):
                torch.manual_seed(stage * 100 + kernel * 10 + d)
                conv = nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2)
                undilated = nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2)
                x = torch.randn(1, channels, 1, samples).contiguous(memory_format=torch.channels_last)
                reference = today(conv, x)
                errors = {name: float((form(conv, x) - reference).abs().max() / reference.abs().max())
                          for name, form in (("view", phases_by_view), ("fused", phases_fused))}
                seconds = alternate({"today": lambda: today(conv, x), "view": lambda: phases_by_view(conv, x),
                                     "fused": lambda: phases_fused(conv, x),
                                     "undilated": lambda: today(undilated, x)}, rounds)
                ms = {name: 1e3 * statistics.median(values) for name, values in seconds.items()}
                print(f"  C={channels:3d} k={kernel:2d} d={d} T={samples:6d}: today {ms['today']:6.2f}  "
                      f"view {ms['view']:6.2f} {ratio_text(seconds['today'], seconds['view'])}  "
                      f"fused {ms['fused']:6.2f} {ratio_text(seconds['today'], seconds['fused'])}  "
                      f"undilated {ms['undilated']:6.2f} {ratio_text(seconds['today'], seconds['undilated'])}  "
                      f"difference view {errors['view']:.0e} fused {errors['fused']:.0e}", flush=True)


def whole_generator(config: GeneratorConfig, frames: int, rounds: int) -> None:
    torch.manual_seed(0)
    generator = HifiganGenerator(config).eval()
    for parameter in generator.parameters():
        parameter.data.normal_(0, 0.02)
    phased = copy.deepcopy(generator)
    for block in phased.resblocks:
        block.__class__ = PhasedResBlock1
    bound = copy.deepcopy(generator)
    for conv in bound.modules():
        if (isinstance(conv, nn.Conv1d) and conv.dilation[0] > 1 and conv.in_channels <= PHASED["channels"]
                and conv.kernel_size[0] >= PHASED["kernel"]):
            conv.dilation, conv.padding = (1,), ((conv.kernel_size[0] - 1) // 2,)
    for network in (generator, phased, bound):
        plan_spectral_convolutions(network)   # outside inference mode: the plans stamp the weights' versions
    x = torch.randn(1, config.in_channels, frames)
    with torch.inference_mode():
        today_wave, phased_wave = generator(x)[0, 0].double().numpy(), phased(x)[0, 0].double().numpy()
        seconds = alternate({"today": lambda: generator(x), "fused": lambda: phased(x), "bound": lambda: bound(x)},
                            rounds)
    snr = 10 * np.log10((today_wave ** 2).sum() / ((phased_wave - today_wave) ** 2).sum())
    audio = frames * config.hop_length / 16000
    print(f"2. the generator over a {frames}-frame window ({audio:.2f} s of audio), one thread, phase form for "
          f"dilated convolutions of at most {PHASED['channels']} channels and kernels of at least "
          f"{PHASED['kernel']}: CPU s per audio s (median of {rounds})")
    for name, label in (("today", "today"), ("fused", "phase form (fused)"), ("bound", "those dilations set to 1")):
        ratio = "" if name == "today" else " " + ratio_text(seconds["today"], seconds[name])
        print(f"  {label:26s} {statistics.median(seconds[name]) / audio:.4f}{ratio}")
    print(f"  phase form's waveform to today's: SNR {snr:.1f} dB, largest difference "
          f"{np.abs(phased_wave - today_wave).max():.1e}")


def transposed_as_regular(up: nn.ConvTranspose1d) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """The weight (u·C_out, C_in, 1, L), bias and padding of the regular convolution computing ``up`` (part 3).

    Output sample q·u + r takes input q + s - i through tap i·u + t of the transposed kernel, where
    r + padding = s·u + t."""
    weight, rate, padding = up.weight.detach(), up.stride[0], up.padding[0]
    in_channels, out_channels, kernel = weight.shape
    taps = {}
    for phase in range(rate):
        shift, first = divmod(phase + padding, rate)
        for i in range(-(-(kernel - first) // rate)):
            taps[(phase, shift - i)] = i * rate + first
    half = max(abs(offset) for _, offset in taps)
    regular = weight.new_zeros(rate, out_channels, in_channels, 2 * half + 1)
    for (phase, offset), tap in taps.items():
        regular[phase, :, :, offset + half] = weight[:, :, tap].T
    bias = None if up.bias is None else up.bias.detach().repeat(rate)
    return regular.reshape(rate * out_channels, in_channels, 1, 2 * half + 1), bias, half


def upsampling(config: GeneratorConfig, frames: int, rounds: int) -> None:
    print(f"3. upsampling layers, a {frames}-frame window, one thread: CPU ms (median of {rounds}), ratio to today")
    channels, samples = config.upsample_initial_channel, frames
    for rate, kernel in zip(config.upsample_rates, config.upsample_kernel_sizes):
        torch.manual_seed(rate * 100 + channels)
        up = nn.ConvTranspose1d(channels, channels // 2, kernel, rate, padding=(kernel - rate) // 2)
        weight, bias, half = transposed_as_regular(up)
        x = torch.randn(1, channels, 1, samples).contiguous(memory_format=torch.channels_last)

        def regular():
            out = F.conv2d(x, weight, bias, 1, (0, half))   # (1, u·C_out, 1, T) channels-last: T·u rows of C_out
            return out.permute(0, 2, 3, 1).reshape(1, 1, samples * rate, -1).permute(0, 3, 1, 2)

        reference = _conv(up, x)
        difference = float((regular() - reference).abs().max() / reference.abs().max())
        seconds = alternate({"today": lambda: _conv(up, x), "regular": regular}, rounds)
        print(f"  {channels:3d} -> {channels // 2:3d}, u={rate} K={kernel:2d}, {samples:6d} input samples: transposed "
              f"{1e3 * statistics.median(seconds['today']):6.2f}  regular (kernel {2 * half + 1}) "
              f"{1e3 * statistics.median(seconds['regular']):6.2f} {ratio_text(seconds['today'], seconds['regular'])}  "
              f"difference {difference:.0e}", flush=True)
        channels, samples = channels // 2, samples * rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--frames", type=int, default=512, help="window length in frames (the largest CPU window)")
    parser.add_argument("--phase-channels", type=int, default=PHASED["channels"])
    parser.add_argument("--phase-kernel", type=int, default=PHASED["kernel"])
    parser.add_argument("--generator-only", action="store_true", help="only part 2")
    args = parser.parse_args()
    PHASED.update(channels=args.phase_channels, kernel=args.phase_kernel)
    torch.set_num_threads(1)
    config = GeneratorConfig()
    if not args.generator_only:
        with torch.inference_mode():
            per_shape(config, args.frames, args.rounds)
    whole_generator(config, args.frames, args.rounds)
    if not args.generator_only:
        with torch.inference_mode():
            upsampling(config, args.frames, args.rounds)


if __name__ == "__main__":
    main()
