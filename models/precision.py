"""Inference helpers shared by the content encoders and the vocoder: loading without random
initialisation, lower precision (bfloat16, float16), and grouping utterances by length for a GPU.

Under CPU autocast a float32 weight is cast to bfloat16 on every call, and the cast
copies are dropped when the context ends: for HuBERT-base that is 95 M values per
utterance, about a fifth of its bfloat16 encoding time. :func:`lower_precision_copy`
keeps a copy whose matrix-product and convolution weights are already in the lower
precision, so autocast has nothing to cast; since autocast rounds to the nearest
value as ``Tensor.to`` does, its outputs are the same, bit for bit.
"""
from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

CAST_MODULES = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d)
"""Modules whose weights autocast casts (matrix products and convolutions); norms keep float32."""


def lower_precision_copy(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` whose :data:`CAST_MODULES` hold ``dtype`` parameters, to run under ``dtype``
    autocast; every other parameter (norms, centroid matrices) stays float32. ``model`` is unchanged."""
    lowered = copy.deepcopy(model)
    for module in lowered.modules():
        if isinstance(module, CAST_MODULES):
            module.to(dtype)
    return lowered.eval()


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


def built_with_weights(build, state: dict[str, torch.Tensor]) -> nn.Module:
    """``build()`` made on the meta device (no parameter initialisation), then given ``state``'s tensors
    themselves (``load_state_dict(assign=True)``, strict): a full-size HuBERT skips about 2 s of random
    initialisation and a copy. Every parameter and buffer must come from ``state``; each keeps the
    module's own dtype (a half-precision checkpoint still gives a float32 model), as a copying load would."""
    with torch.device("meta"):
        module = build()
    expected = module.state_dict()
    module.load_state_dict({key: value.to(expected[key].dtype) if key in expected else value
                            for key, value in state.items()}, assign=True)
    left = [name for name, tensor in [*module.named_parameters(), *module.named_buffers()] if tensor.is_meta]
    if left:
        raise RuntimeError(f"{type(module).__name__}: no weights given for {left[:4]}")
    return module.eval()


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
