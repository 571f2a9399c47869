"""Importing bshall's HuBERT-soft (``hubert-soft-35d9f29f.pt``) as the ``hubert-soft`` model set, or random weights.

bshall's keys go to fairseq names and then to ours (:func:`voxanon.models.checkpoints.keymaps.bshall_hubert_to_hf`);
the sizes are read off the converted tensors, and the load is strict.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ...data_prep.errors import VoxanonError
from .keymaps import bshall_hubert_to_hf
from .safe import CheckpointError, built_with_weights, safe_load
from ..nets.hubert_soft import CONTENT_KIND, HubertSoftConfig, HubertSoftEncoder
from ..nets.hifigan import ConditioningLayout


def hubert_soft_config_from_hf_state(backbone: dict[str, torch.Tensor],
                                     head: dict[str, torch.Tensor]) -> HubertSoftConfig:
    """Sizes read off the converted tensors; heads = hidden / 64, as in HuBERT base and large."""
    try:
        layers = {int(m.group(1)) for k in backbone if (m := re.match(r"encoder\.layers\.(\d+)\.", k))}
        pos = backbone["encoder.pos_conv_embed.conv.weight"]
        hidden = int(head["proj.weight"].shape[1])
        intermediate = backbone["encoder.layers.0.feed_forward.intermediate_dense.weight"]
        return HubertSoftConfig(hidden_size=hidden, num_layers=len(layers), num_heads=max(1, hidden // 64),
                                intermediate_size=int(intermediate.shape[0]),
                                conv_channels=int(backbone["feature_extractor.conv_layers.0.conv.weight"].shape[0]),
                                pos_conv_kernel=int(pos.shape[2]), pos_conv_groups=hidden // int(pos.shape[1]),
                                units_dim=int(head["proj.weight"].shape[0]),
                                n_labels=int(head["label_embedding.weight"].shape[0]))
    except (KeyError, IndexError) as error:
        raise CheckpointError(f"not a HuBERT-soft state dict (missing {error})") from None


def hubert_soft_from_bshall_state(state: dict[str, torch.Tensor]) -> HubertSoftEncoder:
    """From the ``"hubert"`` entry of ``hubert-soft-*.pt`` (prefixed or not)."""
    backbone, head = bshall_hubert_to_hf(state)
    config = hubert_soft_config_from_hf_state(backbone, head)
    return built_with_weights(lambda: HubertSoftEncoder(config), {**{f"hubert.{k}": v for k, v in backbone.items()},
                                                                   **head},
                              "HuBERT-soft weights", "do not fit the backbone and head their shapes describe")


def _model_set_config(content: HubertSoftConfig) -> dict:
    return {"sample_rate": 16000, "content_kind": CONTENT_KIND, "content": content.to_dict(),
            "layout": ConditioningLayout(content_dim=content.units_dim).to_dict()}


def import_hubert_soft(path: str | Path, read=safe_load) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """Components and config of the ``hubert-soft`` model set from ``hubert-soft-35d9f29f.pt``.

    The config records ``content_kind: hubert-soft`` and the layout of a vocoder trained on
    these units (449 channels); the set itself holds only the ``content`` component. ``read`` reads the file.
    """
    checkpoint = read(path)
    if not isinstance(checkpoint, dict) or "hubert" not in checkpoint:
        raise CheckpointError(f"{path}: expected a dict with a 'hubert' entry (bshall hubert-soft layout), got "
                              f"{sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__}")
    try:
        encoder = hubert_soft_from_bshall_state(checkpoint["hubert"])
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    return {"content": encoder.state_dict()}, _model_set_config(encoder.config)


def random_hubert_soft(size: str = "full", seed: int = 0) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """The ``hubert-soft`` set with random weights: ``full`` has the published shapes, ``tiny`` is for tests."""
    if size == "full":
        config = HubertSoftConfig()
    elif size == "tiny":
        config = HubertSoftConfig(hidden_size=64, num_layers=2, num_heads=1, intermediate_size=96, conv_channels=32,
                                  pos_conv_kernel=16, pos_conv_groups=4)
    else:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    torch.manual_seed(seed)
    encoder = HubertSoftEncoder(config)
    return {"content": encoder.state_dict()}, _model_set_config(config)
