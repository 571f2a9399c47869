"""Tiny fairseq-layout HuBERT soft content models with random weights."""
from __future__ import annotations

import torch

from voxanon.models.checkpoints.keymaps import hf_hubert_to_fairseq
from voxanon.models.checkpoints.safe import split_weight_norm
from voxanon.models.nets.hubert import SoftContentConfig, plain_hubert


TINY = SoftContentConfig(hidden_size=64, num_layers=2, num_heads=1, intermediate_size=96, conv_channels=32,
                         pos_conv_kernel=16, pos_conv_groups=4)


def random_fairseq_soft_model(config: SoftContentConfig, seed: int = 0):
    """A randomly initialised HuBERT in fairseq's key layout (weight-norm pair and pretraining keys included)."""
    torch.manual_seed(seed)
    hubert = plain_hubert(config)
    for name, parameter in hubert.named_parameters():
        if "layer_norm" in name:
            parameter.data.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    fairseq = hf_hubert_to_fairseq(hubert.state_dict())
    g, v = split_weight_norm(fairseq.pop("encoder.pos_conv.0.weight"), dim=2)
    fairseq.update({"encoder.pos_conv.0.weight_g": g, "encoder.pos_conv.0.weight_v": v,
                    "mask_emb": torch.rand(config.hidden_size), "label_embs_concat": torch.rand(504, 16)})
    centroids = torch.randn(config.n_centroids, config.hidden_size)
    state = {"W": centroids, **{f"ssl_model.{k}": t for k, t in fairseq.items()}}
    return hubert, state
