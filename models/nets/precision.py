"""Inference helpers shared by the content encoders, the speaker encoder and the vocoder: loading without
random initialisation, the form each network takes on each device, lower precision (bfloat16, float16),
and grouping utterances into padded batches for a GPU.

Forms (:func:`prepared_for_device`):

* ``cpu``, float32: the networks as built, with their CPU-specific forms (the vocoder's spectral
  convolutions on channels-last activations, HuBERT's FFT positional convolution): oneDNN on few cores.
* ``cpu``, bfloat16/float16: :func:`lower_precision_copy` run under CPU autocast. Under autocast a
  float32 weight would be cast on every call, and the cast copies dropped when the context ends (for
  HuBERT-base 95 M values per utterance, about a fifth of its bfloat16 encoding time); the copy's
  matrix-product and convolution weights are already in the lower precision, so autocast has nothing to
  cast; since autocast rounds to the nearest value as ``Tensor.to`` does, its outputs are the same, bit
  for bit.
* any other device (``cuda``, ``cuda:N``; ``cpu:N`` runs this form on the CPU, how it is tested): the
  direct form. Every matrix product, convolution and layer norm holds its weights in the run's precision,
  cast once when the model is prepared, and the network runs in that precision without autocast: no
  weight casts per call, no float32 activations between layers that the next layer would cast back.
  Convolutions are plain ``conv1d`` on (batch, channels, time) tensors (cuDNN), never the CPU's spectral
  forms or their float64 plans. float32 remains only where accuracy needs it, each an explicit island
  in the model code: HuBERT's first GroupNorm (statistics over a whole utterance), the SSL-SAS time
  normalisation and centroid cosines, the vocoder's conditioning layer norms, the speaker encoder (its
  filter bank, statistics pooling and batch norms; it runs in float32 throughout).

Padded batches on a device (:func:`device_groups`): the utterances of a batch are grouped by length and
each group is padded to a length from a fixed grid and to a row count from a fixed set, so that a long
run meets a bounded set of tensor shapes. cuDNN builds an execution plan for every new convolution shape
(and cuFFT one for every new transform size); with the utterances' own lengths every padded batch was a
new shape, so each paid for new plans in each of the vocoder's hundred convolutions, a cost fixed per
batch that outweighed the arithmetic at small batches (measured on an H200 before this change: bfloat16
slower than float32 below batch 32, content RTF 0.00072 against 0.00426 at batch 8).
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn

@contextlib.contextmanager
def float32_products(tf32: bool):
    """How CUDA computes float32 matrix products and convolutions while the context lasts: strict FP32
    (``tf32`` false: ``--precision float32``, products as exact as the CPU's up to summation order) or TF32
    (``--precision tf32``: inputs rounded to 10-bit mantissas, float32 accumulation; tensor cores). torch's own
    defaults mix the two (matrix products strict, cuDNN convolutions TF32). The switches are the process's:
    the device process runs one stage at a time, each under its own. No effect on a CPU (no TF32 there)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(tf32)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


CAST_MODULES = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d)
"""Modules whose weights autocast casts (matrix products and convolutions); norms keep float32."""
DIRECT_CAST_MODULES = CAST_MODULES + (nn.LayerNorm,)
"""Modules whose parameters the direct form holds in the run's precision. A layer norm's kernel
accumulates its statistics in float32 whatever its input's precision; in float32 it would only make
the next matrix product cast its output back."""
LENGTH_STEPS_PER_OCTAVE = 8
"""Padded lengths of a device batch (:func:`padded_length`): 8 per octave, at most 12.5 % padding on top
of the group's longest utterance, about 40 lengths between 1 and 35 s."""


def lower_precision_copy(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` whose :data:`CAST_MODULES` hold ``dtype`` parameters, to run under ``dtype``
    autocast; every other parameter (norms, centroid matrices) stays float32. ``model`` is unchanged."""
    lowered = copy.deepcopy(model)
    for module in lowered.modules():
        if isinstance(module, CAST_MODULES):
            module.to(dtype)
    return lowered.eval()


def prepared_for_device(model: nn.Module, device: str, dtype: torch.dtype = torch.float32, *,
                        move: bool = True) -> nn.Module:
    """``model`` in the form it runs in on ``device`` (see the module doc), in eval mode.

    ``cpu``: float32 gives ``model`` itself, another ``dtype`` its :func:`lower_precision_copy`.
    Any other device name gives a copy in the direct form: ``cpu_forms`` off on every module that has
    CPU-specific forms, the parameters of :data:`DIRECT_CAST_MODULES` in ``dtype`` (but for modules marked
    ``keeps_float32``: the float32 islands accuracy needs), everything moved to
    ``device`` once (``move=False`` leaves the tensors where they are: the form for ``device``, run
    where ``model`` is; how the CUDA form is tested on a CPU). Tensors that need neither cast nor move
    are shared with ``model``, not copied, and ``model`` itself is unchanged.
    """
    if device == "cpu":
        return model.eval() if dtype == torch.float32 else lower_precision_copy(model, dtype)
    if str(device).startswith("cuda"):
        # The process's default: strict FP32 wherever a stage does not choose (float32_products).
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    target = device if move else None
    cast = {id(tensor) for module in model.modules()
            if isinstance(module, DIRECT_CAST_MODULES) and not getattr(module, "keeps_float32", False)
            for tensor in module.parameters(recurse=False)}
    memo: dict[int, torch.Tensor] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        converted = tensor.detach().to(target, dtype if id(tensor) in cast else None)
        memo[id(tensor)] = (nn.Parameter(converted, requires_grad=False) if isinstance(tensor, nn.Parameter)
                            else converted)
    prepared = copy.deepcopy(model, memo)  # the module tree, holding the converted tensors
    for module in prepared.modules():
        if hasattr(type(module), "cpu_forms"):
            module.cpu_forms = False
    return prepared.eval()


def model_dtype(model: nn.Module) -> torch.dtype:
    """The precision a prepared model runs in: that of its first matrix-product or convolution weight."""
    return next(m.weight.dtype for m in model.modules() if isinstance(m, CAST_MODULES))


@contextlib.contextmanager
def float32_normalisations(model: nn.Module):
    """Layer and group norms of ``model`` take float32 inputs while the context lasts.

    CPU autocast leaves them in the input's dtype; in float32 they add about 2.5 dB of
    content SNR against float32 for about 13 % of the bfloat16 encoder's time (measured on
    HuBERT-base, 5 s). The hooks are removed on exit, so a model cached for float32 use
    is left as it was.
    """
    handles = [module.register_forward_pre_hook(lambda _, inputs: tuple(x.float() for x in inputs))
               for module in model.modules() if isinstance(module, (nn.LayerNorm, nn.GroupNorm))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def length_groups(lengths: list[int], max_items: int | None = None, max_padding: float = 0.25) -> list[list[int]]:
    """Indices of ``lengths`` in groups to run as padded batches: longest first, at most ``max_items`` per
    group (no limit for None), and a new group whenever padding to the group's longest would exceed
    ``max_padding`` of it."""
    max_items = len(lengths) if max_items is None else max_items
    if max_items < 1 and lengths:
        raise ValueError(f"max_items must be at least 1, got {max_items}")
    groups: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        group = groups[-1] if groups else None
        if (group is None or len(group) >= max_items
                or lengths[index] < (1 - max_padding) * lengths[group[0]]):
            groups.append([index])
        else:
            group.append(index)
    return groups


def padded_length(length: int, multiple: int = 1, steps_per_octave: int = LENGTH_STEPS_PER_OCTAVE) -> int:
    """The smallest length of the grid that holds ``length``: a multiple of ``2**floor(log2(length)) /
    steps_per_octave`` (so at most ``1 / steps_per_octave`` longer), rounded up to a multiple of ``multiple``.
    The same for every length in one step of the grid."""
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    quantum = max(1, (1 << (length.bit_length() - 1)) // steps_per_octave)
    return math.ceil(math.ceil(length / quantum) * quantum / multiple) * multiple


def padded_rows(count: int) -> int:
    """The batch rows a group of ``count`` utterances is padded to: the next of 1, 2, 3, 4, 6, 8, 12, 16, 24,
    ... (powers of two and one and a half times them): at most a third of the rows are padding."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    power = 1 << (count - 1).bit_length()
    return power * 3 // 4 if power >= 4 and count <= power * 3 // 4 else power


@dataclass(frozen=True)
class DeviceGroup:
    """Utterances (indices into the batch) to run as one padded batch of ``rows`` x ``length``; rows
    past ``len(indices)`` are padding (an all-zero input of the full length)."""

    indices: list[int]
    length: int
    rows: int


def device_groups(lengths: list[int], max_items: int | None = None, multiple: int = 1) -> list[DeviceGroup]:
    """Groups of :func:`length_groups` with their padded shapes: the length of :func:`padded_length` (of the
    group's longest, a multiple of ``multiple``) and the rows of :func:`padded_rows`, capped at ``max_items``."""
    groups = []
    for group in length_groups(lengths, max_items):
        rows = padded_rows(len(group))
        rows = rows if max_items is None else max(len(group), min(rows, max_items))
        groups.append(DeviceGroup(group, padded_length(lengths[group[0]], multiple), rows))
    return groups


def staging_zeros(*shape: int, device: torch.device) -> torch.Tensor:
    """A CPU tensor of zeros to fill and send to ``device`` with :func:`to_device`: in pinned memory where
    ``device`` is a GPU, so that the send needs no copy of its own."""
    return torch.zeros(*shape, pin_memory=device.type == "cuda")


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the CPU) on ``device``; to a GPU from pinned memory without waiting: a plain copy
    from pageable memory synchronises the stream, so the host would wait for every queued kernel."""
    if device.type != "cuda":
        return tensor.to(device)
    return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)
