"""Key renaming between published HuBERT layouts and our modules: fairseq <-> transformers, bshall -> fairseq.

Pure functions on state dicts; written once here, used by every importer that meets these layouts.
"""
from __future__ import annotations

import re

import torch

from .safe import KEY_LIST_LIMIT, CheckpointError, fold_weight_norm


_FAIRSEQ_TO_HF = [
    (r"feature_extractor\.conv_layers\.(\d+)\.0\.weight", r"feature_extractor.conv_layers.\1.conv.weight"),
    (r"feature_extractor\.conv_layers\.0\.2\.(weight|bias)", r"feature_extractor.conv_layers.0.layer_norm.\1"),
    (r"layer_norm\.(weight|bias)", r"feature_projection.layer_norm.\1"),
    (r"post_extract_proj\.(weight|bias)", r"feature_projection.projection.\1"),
    (r"encoder\.pos_conv\.0\.(weight|bias)", r"encoder.pos_conv_embed.conv.\1"),
    (r"encoder\.layer_norm\.(weight|bias)", r"encoder.layer_norm.\1"),
    (r"encoder\.layers\.(\d+)\.self_attn\.(q|k|v|out)_proj\.(weight|bias)", r"encoder.layers.\1.attention.\2_proj.\3"),
    (r"encoder\.layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)", r"encoder.layers.\1.layer_norm.\2"),
    (r"encoder\.layers\.(\d+)\.fc1\.(weight|bias)", r"encoder.layers.\1.feed_forward.intermediate_dense.\2"),
    (r"encoder\.layers\.(\d+)\.fc2\.(weight|bias)", r"encoder.layers.\1.feed_forward.output_dense.\2"),
    (r"encoder\.layers\.(\d+)\.final_layer_norm\.(weight|bias)", r"encoder.layers.\1.final_layer_norm.\2"),
]
FAIRSEQ_PRETRAINING_ONLY = re.compile(r"(mask_emb|label_embs_concat|final_proj\..*|label_embs\..*|target_glu\..*)$")
"""Keys used only by HuBERT's masked-prediction training (``remove_pretraining_modules`` drops the
``final_proj`` and ``target_glu`` modules; ``mask_emb`` and ``label_embs_concat`` stay in the state)."""


def _swap_pattern(pattern: str) -> str:
    """Turn a replacement template into the regex matching its output (for the inverse map)."""
    regex, group = "", 0
    for part in re.split(r"(\\\d)", pattern):
        if re.fullmatch(r"\\\d", part):
            group += 1
            regex += r"(\w+)"
        else:
            regex += re.escape(part)
    return regex


def _rename_keys(state: dict[str, torch.Tensor], table: list[tuple[str, str]], what: str,
                 converted: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Every key renamed by the first ``(pattern, replacement)`` of ``table`` that matches it whole;
    a key no pattern matches makes the state dict not ``what``."""
    converted = {} if converted is None else converted
    unknown = []
    for key, value in state.items():
        for pattern, replacement in table:
            if re.fullmatch(pattern, key):
                converted[re.sub(f"^{pattern}$", replacement, key)] = value
                break
        else:
            unknown.append(key)
    if unknown:
        more = len(unknown) - KEY_LIST_LIMIT
        raise CheckpointError(f"not a {what} state dict: unexpected keys {unknown[:KEY_LIST_LIMIT]}"
                              f"{f' ... and {more} more' if more > 0 else ''}")
    return converted


def fairseq_hubert_to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fairseq HuBERT state dict (weight norm folded here) -> transformers ``HubertModel`` keys."""
    state = {key: value for key, value in fold_weight_norm(state).items() if not FAIRSEQ_PRETRAINING_ONLY.match(key)}
    return _rename_keys(state, _FAIRSEQ_TO_HF, "fairseq HuBERT")


def _folded_name(key: str) -> str:
    """The plain weight a weight-norm piece folds into (the key itself otherwise)."""
    for suffix in (".weight_g", ".weight_v", ".parametrizations.weight.original0",
                   ".parametrizations.weight.original1"):
        if key.endswith(suffix):
            return key[:-len(suffix)] + ".weight"
    return key


def is_fairseq_hubert_key(key: str) -> bool:
    return bool(FAIRSEQ_PRETRAINING_ONLY.match(key)) or \
        any(re.fullmatch(pattern, _folded_name(key)) for pattern, _ in _FAIRSEQ_TO_HF)


def unknown_soft_content_keys(state: dict) -> list[str]:
    """Keys of an SSL-SAS ``SoftPredictor`` state (``soft_model.pt``, or ``latent_encoder.*`` of a ``g_*``)
    that are neither its centroids ``W`` nor fairseq HuBERT keys under ``ssl_model.``."""
    return [key for key in state if key != "W" and
            not (key.startswith("ssl_model.") and is_fairseq_hubert_key(key[len("ssl_model."):]))]


def hf_hubert_to_fairseq(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of :func:`fairseq_hubert_to_hf` (plain ``weight`` for the positional conv)."""
    converted = {}
    for key, value in state.items():
        for pattern, replacement in _FAIRSEQ_TO_HF:
            match = re.fullmatch(_swap_pattern(replacement), key)
            if match:
                fairseq_key = pattern
                for group in match.groups():
                    fairseq_key = re.sub(r"\([^)]*\)", group, fairseq_key, count=1)
                converted[fairseq_key.replace("\\.", ".")] = value
                break
        else:
            raise CheckpointError(f"no fairseq name for HubertModel key {key!r}")
    return converted


# bshall/hubert (HuBERT-soft) -> fairseq names -> transformers HubertModel ------------------------------

_BSHALL_TO_FAIRSEQ = [
    (r"feature_extractor\.conv(\d)\.weight", r"feature_extractor.conv_layers.\1.0.weight"),
    (r"feature_extractor\.norm0\.(weight|bias)", r"feature_extractor.conv_layers.0.2.\1"),
    (r"feature_projection\.norm\.(weight|bias)", r"layer_norm.\1"),
    (r"feature_projection\.projection\.(weight|bias)", r"post_extract_proj.\1"),
    (r"positional_embedding\.conv\.(.+)", r"encoder.pos_conv.0.\1"),
    (r"norm\.(weight|bias)", r"encoder.layer_norm.\1"),
    (r"encoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"encoder.layers.\1.self_attn.out_proj.\2"),
    (r"encoder\.layers\.(\d+)\.linear1\.(weight|bias)", r"encoder.layers.\1.fc1.\2"),
    (r"encoder\.layers\.(\d+)\.linear2\.(weight|bias)", r"encoder.layers.\1.fc2.\2"),
    (r"encoder\.layers\.(\d+)\.norm1\.(weight|bias)", r"encoder.layers.\1.self_attn_layer_norm.\2"),
    (r"encoder\.layers\.(\d+)\.norm2\.(weight|bias)", r"encoder.layers.\1.final_layer_norm.\2"),
]
_BSHALL_FUSED_QKV = re.compile(r"encoder\.layers\.(\d+)\.self_attn\.in_proj_(weight|bias)")
BSHALL_HEAD_KEYS = ("proj.weight", "proj.bias", "label_embedding.weight")
"""The HuBERT-soft head: ``proj`` (hidden -> units) and the label embeddings its training logits use."""
BSHALL_TRAINING_ONLY = ("masked_spec_embed",)


def bshall_hubert_to_hf(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """bshall/hubert state (``module.`` prefix optional) -> (``HubertModel`` backbone state, head state).

    bshall's encoder layers are ``nn.TransformerEncoderLayer``s whose fused ``in_proj_*`` is
    split into the q, k, v projections (in that order); the renamed keys then go through
    :func:`fairseq_hubert_to_hf`, which folds either weight-norm layout of the positional conv.
    """
    state = {(key[len("module."):] if key.startswith("module.") else key): value for key, value in state.items()}
    fairseq: dict[str, torch.Tensor] = {}
    head = {key: state[key] for key in BSHALL_HEAD_KEYS if key in state}
    missing_head = [key for key in BSHALL_HEAD_KEYS if key not in state]
    if missing_head:
        raise CheckpointError(f"not a bshall HuBERT-soft state dict: no {missing_head}")
    rest = {}
    for key, value in state.items():
        if key in BSHALL_HEAD_KEYS or key in BSHALL_TRAINING_ONLY:
            continue
        fused = _BSHALL_FUSED_QKV.fullmatch(key)
        if not fused:
            rest[key] = value
            continue
        layer, kind = fused.groups()
        if value.shape[0] % 3:
            raise CheckpointError(f"{key}: fused projection of {value.shape[0]} rows is not 3 equal parts")
        for name, part in zip("qkv", value.chunk(3, dim=0)):
            fairseq[f"encoder.layers.{layer}.self_attn.{name}_proj.{kind}"] = part.clone()
    _rename_keys(rest, _BSHALL_TO_FAIRSEQ, "bshall HuBERT-soft", fairseq)
    return fairseq_hubert_to_hf(fairseq), head


# SSL-SAS model set: import from the release, or random weights with the published shapes ------------
