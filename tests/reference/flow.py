"""Stand-ins for the ``classes.py`` whose ``RealNVP`` the zero-evidence releases pickle.

Both the ICASSP 2023 zLLR-VC release (nii-yamagishilab/speaker_sex_attribute_privacy) and the ICASSP
2022 bridge-features-evidence code (LIAvignon) save their flow with ``torch.save(model)`` from a
script that imports ``classes``, so the pickle names ``classes.RealNVP``, ``classes.CouplingLayer``
and, in 2023, ``classes.Rescale`` and ``classes.Linear``, besides ``torch.nn`` classes. The classes
here have those names and module and the same attribute trees (every plain attribute, parameter and
submodule, in the reference's order). Their ``f`` (data → base) and ``g`` (base → data) are the
published maps written out from their equations; nothing here uses voxanon, so a test can compare
voxanon's import against them. Written for these tests; no code of either release is copied.
"""
from __future__ import annotations

import contextlib
import math
import sys

import torch
from torch import nn
from torch.nn import functional

PICKLED_MODULE = "classes"


class Rescale(nn.Module):
    """ICASSP 2023: a learned per-dimension factor after the Tanh of ``s``, initialised to 0."""

    __module__ = PICKLED_MODULE

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return self.weight * x


class Linear(nn.Module):
    """ICASSP 2023: the last layer of ``t``, an affine map initialised to 0 (no ``reset_parameters``)."""

    __module__ = PICKLED_MODULE

    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.zeros(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)


class CouplingLayer(nn.Module):
    __module__ = PICKLED_MODULE

    def __init__(self, input_dim, hidden_dim, mask, zllr_vc=True):
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        scale_tail = [nn.Tanh(), Rescale(input_dim)] if zllr_vc else [nn.Tanh()]
        self.s = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.LeakyReLU(), nn.Linear(hidden_dim, hidden_dim),
                               nn.LeakyReLU(), nn.Linear(hidden_dim, input_dim), *scale_tail)
        last = Linear(hidden_dim, input_dim) if zllr_vc else nn.Linear(hidden_dim, input_dim)
        self.t = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.LeakyReLU(), nn.Linear(hidden_dim, hidden_dim),
                               nn.LeakyReLU(), last)
        self.mask = nn.Parameter(mask, requires_grad=False)

    def f(self, x):
        kept = 1 - self.mask
        conditioner = x * self.mask
        scale, shift = self.s(conditioner), self.t(conditioner)
        return conditioner + kept * (x * torch.exp(scale) + shift), (scale * kept).sum(dim=1)

    def g(self, y):
        conditioner = y * self.mask
        return conditioner + (1 - self.mask) * (y - self.t(conditioner)) * torch.exp(-self.s(conditioner))


def half_masks(dim, pairs=3):
    """The bridge code's masks: first half, then second half, ``pairs`` times."""
    first = (torch.arange(dim) < dim // 2).float()
    return torch.stack([first, 1 - first] * pairs)


class RealNVP(nn.Module):
    """``zllr_vc``: the ICASSP 2023 tree (Rescale, ``classes.Linear``, ``lmu``); else the ICASSP 2022 one,
    whose μ is not part of the model. Neither flag nor default is stored: the tree is the reference's."""

    __module__ = PICKLED_MODULE

    def __init__(self, input_dim, hidden_dim, masks=None, muinit=10.0, zllr_vc=True):
        super().__init__()
        masks = half_masks(input_dim) if masks is None else masks
        self.input_dim = input_dim
        self.masks = masks
        self.cpl = nn.ModuleList([CouplingLayer(input_dim, hidden_dim, masks[i], zllr_vc) for i in range(len(masks))])
        if zllr_vc:
            self.lmu = nn.Parameter(torch.tensor(math.log(muinit)))

    def f(self, x):
        log_det = 0
        for i in range(len(self.masks)):
            x, layer_log_det = self.cpl[i].f(x)
            log_det = log_det + layer_log_det
        return x, log_det

    def g(self, z):
        for i in reversed(range(len(self.masks))):
            z = self.cpl[i].g(z)
        return z


@torch.no_grad()
def randomise(model, seed=0):
    """Random values for every trainable parameter, the zero-initialised Rescale and last Linear of ``t``
    included (else the flow is the identity and a test could not fail); masks stay the constructor's."""
    generator = torch.Generator().manual_seed(seed)
    for layer in model.cpl:
        for parameter in layer.parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


@contextlib.contextmanager
def installed_as_classes():
    """This module as ``classes`` in ``sys.modules``, as the release's scripts import it."""
    previous = sys.modules.get(PICKLED_MODULE)
    sys.modules[PICKLED_MODULE] = sys.modules[__name__]
    try:
        yield sys.modules[__name__]
    finally:
        if previous is None:
            sys.modules.pop(PICKLED_MODULE, None)
        else:
            sys.modules[PICKLED_MODULE] = previous


def save(model, path):
    """``torch.save(model, path)`` as the release's scripts run it."""
    with installed_as_classes():
        torch.save(model, path)
