"""transformers' ``HubertModel`` laid out as fairseq's HuBERT-base (and our :class:`HubertBackbone`): the
reference our backbone is tested against (``tests/models/test_hubert_parity.py``) and the stand-in for
fairseq's HuBERT in ``benchmarks/pipeline.py``. Imports transformers."""
from __future__ import annotations

import torch

from voxanon.models.nets.hubert import CONV_KERNELS, CONV_STRIDES, HubertBackboneConfig


def transformers_hubert(config: HubertBackboneConfig, attention: str = "sdpa"):
    """A ``HubertModel`` of ``config``'s sizes in eval mode, randomly initialised as transformers does,
    its positional convolution's weight norm folded into a plain weight as our importers fold it."""
    from transformers import HubertConfig, HubertModel

    hf_config = HubertConfig(hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
                             num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size,
                             conv_dim=(config.conv_channels,) * 7, conv_kernel=CONV_KERNELS,
                             conv_stride=CONV_STRIDES, conv_bias=False, feat_extract_norm="group",
                             feat_proj_layer_norm=True, do_stable_layer_norm=False,
                             num_conv_pos_embeddings=config.pos_conv_kernel,
                             num_conv_pos_embedding_groups=config.pos_conv_groups, hidden_act="gelu",
                             layer_norm_eps=1e-5, mask_time_prob=0.0, mask_feature_prob=0.0, hidden_dropout=0.0,
                             attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
                             attn_implementation=attention)
    model = HubertModel(hf_config).eval()
    torch.nn.utils.parametrize.remove_parametrizations(model.encoder.pos_conv_embed.conv, "weight",
                                                       leave_parametrized=True)
    return model
