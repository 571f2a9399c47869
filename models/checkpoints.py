"""Reading published checkpoints safely and converting their keys to our modules.

Safety: :func:`safe_load` never runs code from a checkpoint. It tries
``torch.load(weights_only=True)`` and, for fairseq checkpoints (whose ``args``/``cfg``
entries are ``argparse.Namespace`` / omegaconf objects), falls back to an allow-listed
unpickler: tensors, storages, dtypes and plain containers are rebuilt; config objects
from a short list of modules become inert :class:`OpaqueConfig` placeholders; any
other global (``os.system``, ``builtins.eval``, ...) raises
:class:`UnsafeCheckpointError` before anything is called.

Conversions:

* weight norm: ``weight_g``/``weight_v`` pairs (``torch.nn.utils.weight_norm``) and
  ``parametrizations.weight.original0/1`` pairs are folded into plain ``weight``;
* SSL-SAS ``g_*``: ``{'generator': state}`` split into the generator, the content
  model (``latent_encoder.*``) and the speaker encoder (``xv_model.*``); the speaker front
  end's non-learned state (``fbank.compute_deltas.kernel``, any ``mean_var_norm.*``) must equal
  what speechbrain's own ``Fbank``/``InputNormalization`` hold and is dropped, a zLLR-VC ``g_*``
  may also hold its sex flow (``xv_dis_model.*``, dropped), and any other key is an error that
  lists the keys and names the file;
* fairseq HuBERT keys <-> transformers ``HubertModel`` keys;
* bshall/hubert (HuBERT-soft) keys -> fairseq names -> transformers keys.
"""
from __future__ import annotations

import _compat_pickle
import json
import pickle
import types
import re
from pathlib import Path

import torch

from voxanon.data_prep.atomic import atomic_path
from voxanon.data_prep.errors import VoxanonError


class CheckpointError(VoxanonError):
    """A checkpoint file is missing, unreadable or not in the expected layout."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint's pickle refers to code outside the allow-list."""


class OpaqueConfig:
    """Stands in for a configuration object inside a checkpoint; keeps nothing, runs nothing."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass

    def __repr__(self) -> str:
        return "OpaqueConfig()"


TOLERATED_CONFIG_MODULES = ("argparse", "omegaconf", "fairseq", "typing", "enum", "pathlib", "dataclasses",
                            "copyreg")
"""Modules whose objects appear in fairseq checkpoints as configuration; replaced by OpaqueConfig."""

_SAFE_GLOBALS = {
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"), ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch", "Size"), ("torch", "device"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"),
    ("builtins", "tuple"), ("builtins", "list"), ("builtins", "dict"),
    # omegaconf's pickled metadata names value types (fairseq configs); calling these runs no code.
    ("builtins", "int"), ("builtins", "float"), ("builtins", "str"), ("builtins", "bool"), ("builtins", "bytes"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
}


class AllowListUnpickler(pickle.Unpickler):
    """Unpickles tensors and plain containers only; subclass it to allow more globals explicitly."""

    def find_class(self, module: str, name: str):
        # torch.save writes pickle protocol 2, which names globals the Python 2 way (``__builtin__``).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.split(".")[0] in TOLERATED_CONFIG_MODULES:
            return OpaqueConfig
        raise UnsafeCheckpointError(f"checkpoint refers to {module}.{name}, which is not allowed in a weights "
                                    "file; refusing to load it")


def restricted_pickle_module(unpickler: type[pickle.Unpickler]) -> types.SimpleNamespace:
    """The ``pickle_module`` interface ``torch.load`` needs, with every pickle read through ``unpickler``:
    torch's legacy (non-zip) format reads its header records with ``pickle_module.load``, so that must
    not be the unrestricted ``pickle.load``."""
    return types.SimpleNamespace(Unpickler=unpickler, load=lambda file, **kwargs: unpickler(file, **kwargs).load(),
                                 __name__=f"voxanon_{unpickler.__name__}")


_AllowListPickleModule = restricted_pickle_module(AllowListUnpickler)


def atomic_torch_save(obj, path: str | Path) -> None:
    """``torch.save`` written atomically. Saved through a file object, so the archive's inner folder is
    torch's fixed ``archive`` rather than the temporary file's name: identical objects give identical bytes."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        torch.save(obj, handle)


def safe_load(path: str | Path) -> dict:
    """A checkpoint's tensors and containers, without executing any code it contains."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        pass
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: {error})") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_AllowListPickleModule)
    except UnsafeCheckpointError as error:
        raise UnsafeCheckpointError(f"{path}: {error}") from None
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: {error})") from None


def _norm_except_dim(v: torch.Tensor, dim: int) -> torch.Tensor:
    others = [d for d in range(v.ndim) if d != dim]
    return v.pow(2).sum(dim=others, keepdim=True).sqrt()


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace every weight-norm pair (either PyTorch layout) by the plain weight g·v/‖v‖."""
    folded: dict[str, torch.Tensor] = {}
    pairs = {}
    for key, value in state.items():
        dotted = "." + key
        for g_suffix, v_suffix in ((".weight_g", ".weight_v"),
                                   (".parametrizations.weight.original0", ".parametrizations.weight.original1")):
            suffix = g_suffix if dotted.endswith(g_suffix) else v_suffix if dotted.endswith(v_suffix) else None
            if suffix is not None:
                base = dotted[1:-len(suffix)] if len(dotted) > len(suffix) else ""
                pairs.setdefault((base, g_suffix, v_suffix), {})["g" if suffix == g_suffix else "v"] = value
                break
        else:
            folded[key] = value
    for (base, g_suffix, v_suffix), pair in pairs.items():
        if set(pair) != {"g", "v"}:
            missing = v_suffix if "v" not in pair else g_suffix
            raise CheckpointError(f"weight-norm pair for {base!r} lacks {base}{missing}")
        g, v = pair["g"], pair["v"]
        if g.ndim != v.ndim:
            raise CheckpointError(f"weight-norm pair for {base!r}: g {tuple(g.shape)} and v {tuple(v.shape)}")
        kept = [d for d in range(v.ndim) if g.shape[d] != 1]
        if len(kept) > 1 or any(g.shape[d] != v.shape[d] for d in kept):
            raise CheckpointError(f"weight-norm pair for {base!r}: g {tuple(g.shape)} does not match v "
                                  f"{tuple(v.shape)}")
        dim = kept[0] if kept else 0
        folded[f"{base}.weight" if base else "weight"] = (v.double() * (g.double() / _norm_except_dim(v.double(), dim))).to(v.dtype)
    return folded


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}


SSL_SAS_SUBMODELS = ("latent_encoder.", "xv_model.")
SPEAKER_FRONT_END = ("fbank.", "mean_var_norm.")
"""``latentGenerator``'s speechbrain ``Fbank(n_mels=80)`` and ``InputNormalization(norm_type='sentence',
std_norm=False)``: no learned weights, but ``Fbank`` registers its deltas kernel as a persistent buffer,
so every ``g_*`` holds ``fbank.compute_deltas.kernel``."""
SEX_FLOW_PREFIX = "xv_dis_model."
"""zLLR-VC's ``latentGenerator`` holds the pickled sex flow named by its config's
``xv_disentanglement_model`` as a submodule; the flow is imported from its own file instead."""

GENERATOR_KEY = re.compile(r"(conv_pre|conv_post|ups\.\d+|resblocks\.\d+\.convs[12]?\.\d+)\."
                           r"(weight|bias|weight_g|weight_v|parametrizations\.weight\.original[01])")
"""Keys of jik876's HiFi-GAN generator (resblock 1 or 2; weight norm in either PyTorch layout, or folded)."""
SEX_FLOW_KEY = re.compile(r"lmu|cpl\.\d+\.(mask|[st]\.\d+\.(weight|bias))")
"""Keys of the ICASSP 2023 release's ``RealNVP`` (its ``classes.py``): coupling layers ``cpl.<k>`` with
their ``s``/``t`` networks (``s.6`` the rescale) and ``mask``, and ``lmu`` (log μ)."""
RELEASES = ("ssl-sas", "zllr-vc")

_KEY_LIST_LIMIT = 20


def key_list(keys) -> str:
    """Keys for an error message: sorted, at most :data:`_KEY_LIST_LIMIT`, with the number left out."""
    keys = sorted(keys)
    shown = ", ".join(keys[:_KEY_LIST_LIMIT])
    return shown + (f", ... and {len(keys) - _KEY_LIST_LIMIT} more" if len(keys) > _KEY_LIST_LIMIT else "")


def generator_families(checkpoint, source: str, *, sex_flow: bool = False) -> dict[str, dict]:
    """A ``{'generator': state}`` checkpoint's keys by component, prefixes stripped:
    ``generator`` (weight norm not folded), ``content``, ``speaker``, ``front_end`` (keys kept whole),
    ``sex_flow`` (only with ``sex_flow``: the zLLR-VC layout) and ``unknown`` (whole keys, and any
    checkpoint entry other than ``generator``)."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("generator"), dict):
        found = sorted(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{source}: expected a dict with a 'generator' state dict (jik876 g_* layout), got "
                              f"{found}")
    families: dict[str, dict] = {name: {} for name in ("generator", "content", "speaker", "front_end", "sex_flow",
                                                       "unknown")}
    for entry in checkpoint:
        if entry != "generator":
            families["unknown"][f"entry {entry!r} beside 'generator'"] = checkpoint[entry]
    for key, value in checkpoint["generator"].items():
        if key.startswith("latent_encoder."):
            families["content"][key[len("latent_encoder."):]] = value
        elif key.startswith("xv_model."):
            families["speaker"][key[len("xv_model."):]] = value
        elif key.startswith(SPEAKER_FRONT_END):
            families["front_end"][key] = value
        elif sex_flow and key.startswith(SEX_FLOW_PREFIX) and SEX_FLOW_KEY.fullmatch(key[len(SEX_FLOW_PREFIX):]):
            families["sex_flow"][key[len(SEX_FLOW_PREFIX):]] = value
        elif GENERATOR_KEY.fullmatch(key):
            families["generator"][key] = value
        else:
            families["unknown"][key] = value
    return families


def speaker_front_end_reference(n_mels: int = 80) -> dict[str, object]:
    """What the ECAPA front end holds besides weights, recomputed with speechbrain's own classes:
    ``Fbank(n_mels)``'s persistent buffers (the deltas kernel, ``arange(-2, 3)`` repeated per mel band)
    under ``fbank.``, and under ``mean_var_norm.`` the sentence normaliser's state dict and the
    statistics its checkpoint hook saves (``count``, ``glob_mean``, ``glob_std``)."""
    from voxanon.models.speaker import ecapa_front_end

    fbank, normaliser = ecapa_front_end(n_mels)
    reference: dict[str, object] = {f"fbank.{k}": v for k, v in fbank.state_dict().items()}
    reference.update({f"mean_var_norm.{k}": v for k, v in normaliser.state_dict().items()})
    statistics = getattr(normaliser, "_statistics_dict", dict)()
    reference.update({f"mean_var_norm.{k}": v for k, v in statistics.items()})
    return reference


def _never_updated(value) -> bool:
    """A sentence normaliser never updates its global statistics: count 0 and the initial mean and std
    (empty in speechbrain >= 1.1, ``tensor([0])`` in 0.5)."""
    if isinstance(value, torch.Tensor):
        return value.numel() <= 1 and not bool(value.ne(0).any())
    return isinstance(value, (int, float)) and value == 0


def front_end_problems(front_end: dict, n_mels: int, source: str) -> tuple[list[str], list[str]]:
    """(keys speechbrain's front end does not hold, one message per key whose value differs from it)."""
    reference = speaker_front_end_reference(n_mels)
    unknown, mismatched = [], []
    for key, value in front_end.items():
        if key not in reference:
            unknown.append(key)
            continue
        expected = reference[key]
        if isinstance(expected, torch.Tensor):
            same = isinstance(value, torch.Tensor) and value.shape == expected.shape and \
                torch.equal(value.detach().cpu().to(expected.dtype), expected)
            if not same and key.startswith("mean_var_norm."):
                same = _never_updated(value)
            described = f"{tuple(expected.shape)} {expected.flatten()[:5].tolist()}..."
        else:
            same = value == expected or (key.startswith("mean_var_norm.") and _never_updated(value))
            described = repr(expected)
        if not same:
            got = f"{tuple(value.shape)} {value.flatten()[:5].tolist()}..." if isinstance(value, torch.Tensor) \
                else repr(value)
            what = (f"speechbrain Fbank(n_mels={n_mels})" if key.startswith("fbank.") else
                    "speechbrain InputNormalization(norm_type='sentence', std_norm=False), which never updates it")
            mismatched.append(f"{source}: {key} is {got}, but {what} holds {described}: the checkpoint's speaker "
                              "front end differs from the one voxanon computes")
    return unknown, mismatched


def speaker_input_size(speaker: dict, default: int = 80) -> int:
    """The ECAPA's input width (mel bands), read off its first convolution; SSL-SAS builds ``Fbank(n_mels=80)``."""
    weight = speaker.get("blocks.0.conv.conv.weight")
    return int(weight.shape[1]) if isinstance(weight, torch.Tensor) and weight.ndim == 3 else default


def generator_problems(families: dict[str, dict], source: str, sex_flow: bool) -> list[str]:
    """What makes a split ``g_*`` (:func:`generator_families`) unusable: unknown keys, front-end state that differs."""
    unknown_front_end, mismatched = front_end_problems(families["front_end"], speaker_input_size(families["speaker"]),
                                                       source)
    unknown = list(families["unknown"]) + unknown_front_end
    problems = []
    if unknown:
        known = ("jik876 generator keys (conv_pre, ups.N, resblocks.N.convs*, conv_post), latent_encoder.*, "
                 "xv_model.*, fbank.* and mean_var_norm.* front-end state"
                 + (", xv_dis_model.* (the sex flow)" if sex_flow else ""))
        problems.append(f"{source}: {len(unknown)} key(s) that no component of "
                        f"{'a zLLR-VC' if sex_flow else 'an SSL-SAS'} g_* holds: {key_list(unknown)} (known: {known})")
    return problems + mismatched


def split_ssl_sas_generator(checkpoint: dict, source: str = "g_* checkpoint", *,
                            sex_flow: bool = False) -> dict[str, dict[str, torch.Tensor]]:
    """``{'generator': state}`` -> {'generator', 'content', 'speaker'} state dicts, weight norm folded.

    The speaker front-end state (``fbank.*``, ``mean_var_norm.*``) is checked against speechbrain's
    own front end and dropped; with ``sex_flow`` (zLLR-VC) the embedded flow's keys are checked by name
    and dropped. Any other key is an error that lists them and names ``source``.
    """
    families = generator_families(checkpoint, source, sex_flow=sex_flow)
    problems = generator_problems(families, source, sex_flow)
    if problems:
        raise CheckpointError("\n".join(problems))
    try:
        generator = fold_weight_norm(families["generator"])
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    return {"generator": generator, "content": families["content"], "speaker": families["speaker"]}


# fairseq HuBERT <-> transformers HubertModel ------------------------------------------------

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
        more = len(unknown) - _KEY_LIST_LIMIT
        raise CheckpointError(f"not a {what} state dict: unexpected keys {unknown[:_KEY_LIST_LIMIT]}"
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


def split_weight_norm(weight: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight_g, weight_v) with ``torch.nn.utils.weight_norm``'s shapes, for writing old-layout files."""
    return _norm_except_dim(weight, dim), weight.clone()


# SSL-SAS model set: import from the release, or random weights with the published shapes ------------

SSL_SAS_VOCODER_DIR = "HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze"
ZLLR_VC_LAYOUT = {"standardise_content": True, "l2_normalise_speaker": True, "layer_norm_speaker": False}
"""The conditioning the ICASSP 2023 zLLR-VC vocoder was trained with (anchors Part A §6.3)."""


def _ssl_sas_configs(size: str, layout: dict) -> dict:
    from voxanon.models.hifigan import ConditioningLayout, GeneratorConfig
    from voxanon.models.hubert import SoftContentConfig
    from voxanon.models.speaker import SSL_SAS_ECAPA, EcapaConfig

    if size == "full":
        generator, content, speaker = GeneratorConfig(), SoftContentConfig(), SSL_SAS_ECAPA
    elif size == "tiny":
        generator = GeneratorConfig(upsample_initial_channel=32)
        content = SoftContentConfig(hidden_size=64, num_layers=2, num_heads=1, intermediate_size=96,
                                    conv_channels=32, pos_conv_kernel=16, pos_conv_groups=4)
        speaker = EcapaConfig(channels=(32, 32, 32, 32, 96), attention_channels=16, se_channels=16, res2net_scale=4)
    else:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    return {"sample_rate": 16000, "generator": generator.to_dict(), "layout": ConditioningLayout(**layout).to_dict(),
            "content": content.to_dict(), "speaker": speaker.to_dict()}


def random_ssl_sas(size: str = "full", seed: int = 0, layout: dict | None = None
                   ) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """SSL-SAS-layout components with random weights: ``full`` has the published shapes, ``tiny`` is for tests.

    ``layout`` sets :class:`~voxanon.models.hifigan.ConditioningLayout` fields (e.g. :data:`ZLLR_VC_LAYOUT`).
    """
    from voxanon.models.hifigan import GeneratorConfig, HifiganGenerator
    from voxanon.models.hubert import SoftContentConfig, SoftContentEncoder
    from voxanon.models.speaker import EcapaConfig, EcapaEncoder

    config = _ssl_sas_configs(size, dict(layout or {}))
    torch.manual_seed(seed)
    generator = HifiganGenerator(GeneratorConfig.from_dict(config["generator"]))
    content = SoftContentEncoder(SoftContentConfig.from_dict(config["content"]))
    content.W.data.normal_()
    speaker = EcapaEncoder(EcapaConfig.from_dict(config["speaker"]))
    components = {"generator": generator.state_dict(), "content": content.state_dict(),
                  "speaker": speaker.embedding_model.state_dict()}
    return components, config


def find_vocoder_dir(release_dir: str | Path) -> str:
    """The one ``HiFi-GAN/<model>`` folder of a release that holds ``g_*`` files (relative to the release)."""
    release = Path(release_dir)
    found = sorted({path.parent.name for path in release.glob("HiFi-GAN/*/g_*")})
    if len(found) != 1:
        raise CheckpointError(f"expected one HiFi-GAN/<model> folder with g_* files in {release}, found "
                              f"{found or 'none'} (is {release} the unpacked pretrained_models_anon_xv folder?)")
    return f"HiFi-GAN/{found[0]}"


def check_state_fits(module: torch.nn.Module, state: dict, what: str, source: str) -> None:
    """Raise a :class:`CheckpointError` naming ``source`` and listing the missing, unexpected and
    mis-shaped keys, unless ``state`` loads strictly into ``module``."""
    expected = module.state_dict()
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    shapes = [f"{key} {tuple(state[key].shape)} (expected {tuple(value.shape)})" for key, value in expected.items()
              if isinstance(state.get(key), torch.Tensor) and state[key].shape != value.shape]
    if missing or unexpected or shapes:
        details = [f"{label} {key_list(keys)}" for label, keys in
                   (("missing", missing), ("unexpected", unexpected), ("shapes differ:", shapes)) if keys]
        raise CheckpointError(f"{source}: {what}: " + "; ".join(details))


def read_vocoder_config(path: Path):
    """The generator config of a jik876/SSL-SAS ``config.json`` (SSL-SAS's values where it has none)."""
    from voxanon.models.hifigan import GeneratorConfig

    if not path.is_file():
        return GeneratorConfig()
    try:
        published = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(published, dict):
            raise ValueError(f"a JSON object is expected, got {type(published).__name__}")
        defaults = {k: v for k, v in GeneratorConfig().to_dict().items() if k != "in_channels"}
        if not {"in_channels", "model_in_dim", "num_mels"} & set(published):
            published["in_channels"] = GeneratorConfig().in_channels
        return GeneratorConfig.from_dict({**defaults, **published})
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not a usable vocoder config ({type(error).__name__}: {error})") from None


def soft_content_from_state(state, source: str):
    """The SSL-SAS soft content encoder from a ``SoftPredictor`` state; unknown keys are an error naming ``source``."""
    from voxanon.models.hubert import SoftContentEncoder

    if not isinstance(state, dict):
        raise CheckpointError(f"{source}: expected a state dict, got {type(state).__name__}")
    unknown = unknown_soft_content_keys(state)
    if unknown:
        raise CheckpointError(f"{source}: {len(unknown)} key(s) that an SSL-SAS soft content model (centroids W and "
                              f"fairseq HuBERT keys under ssl_model.) does not hold: {key_list(unknown)}")
    try:
        return SoftContentEncoder.from_ssl_sas_state(state)
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None


def ecapa_from_state(state, source: str):
    """The speaker encoder from a speechbrain ``ECAPA_TDNN`` state; unknown keys are an error naming ``source``."""
    from voxanon.models.speaker import EcapaConfig, EcapaEncoder

    if not isinstance(state, dict):
        raise CheckpointError(f"{source}: expected a state dict, got {type(state).__name__}")
    try:
        config = EcapaConfig.from_state(state)
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    return EcapaEncoder.with_weights(config, state, source=source)


def import_ssl_sas(release_dir: str | Path, hubert_path: str | Path | None = None, *,
                   vocoder_dir: str | None = SSL_SAS_VOCODER_DIR, layout: dict | None = None,
                   release: str = "ssl-sas") -> tuple[dict, dict]:
    """Components and config from an unpacked ``pretrained_models_anon_xv`` release (SSL-SAS or zLLR-VC).

    The vocoder is the lexicographically last ``g_*`` in ``vocoder_dir`` (default
    ``HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze``, as SSL-SAS ``inference.py`` picks it;
    ``None``: the release's only ``HiFi-GAN/<model>`` folder). ``layout`` sets the fields of the
    conditioning layout the vocoder was trained with (:data:`ZLLR_VC_LAYOUT` for zLLR-VC);
    ``release`` (``ssl-sas`` or ``zllr-vc``) says which keys its ``g_*`` may hold
    (:func:`import_ssl_sas_files`).
    """
    root = Path(release_dir)
    folder = root / (vocoder_dir or find_vocoder_dir(root))
    candidates = sorted(folder.glob("g_*"))
    if not candidates:
        raise CheckpointError(f"no g_* vocoder checkpoint in {folder} (is {root} the unpacked "
                              "pretrained_models_anon_xv release?)")
    return import_ssl_sas_files(candidates[-1], config_path=folder / "config.json",
                                soft_model_path=root / "HuBERT_soft" / "soft_model.pt",
                                embedding_path=root / "ECAPA-TDNN" / "embedding_model.ckpt",
                                hubert_path=hubert_path, layout=layout, release=release)


def import_ssl_sas_files(generator_path: Path, *, config_path: Path, soft_model_path: Path, embedding_path: Path,
                         hubert_path: str | Path | None = None, layout: dict | None = None,
                         release: str = "ssl-sas", read=None) -> tuple[dict, dict]:
    """Components and config from a ``g_*`` file and the files beside it in the release.

    The ``g_*``'s ``latent_encoder.*`` (fine-tuned HuBERT + centroids) and ``xv_model.*`` (ECAPA)
    are used; if it lacks them, ``soft_model_path`` and ``embedding_path`` are read instead. Its
    speaker front-end state must equal speechbrain's, and a zLLR-VC ``g_*`` may also hold the sex flow
    (:func:`split_ssl_sas_generator`). ``hubert_base_ls960.pt``, when given, is checked to be a
    fairseq HuBERT whose shapes match. Every component is loaded strictly into our modules; nothing
    is written. ``read`` reads a file (default :func:`safe_load`; ``models check`` passes one that reads
    each file once for its inspection and this import).
    """
    from voxanon.models.hifigan import ConditioningLayout, HifiganGenerator, Vocoder
    from voxanon.models.precision import built_with_weights

    if release not in RELEASES:
        raise VoxanonError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
    read = read or safe_load
    conditioning = ConditioningLayout(**(layout or {}))
    parts = split_ssl_sas_generator(read(generator_path), str(generator_path), sex_flow=release == "zllr-vc")
    generator_config = read_vocoder_config(Path(config_path))
    if parts["content"]:
        content = soft_content_from_state(parts["content"], f"{generator_path} (latent_encoder.*)")
    else:
        content = soft_content_from_state(read(soft_model_path), str(soft_model_path))
    if parts["speaker"]:
        speaker = ecapa_from_state(parts["speaker"], f"{generator_path} (xv_model.*)")
    else:
        speaker = ecapa_from_state(read(embedding_path), str(embedding_path))

    generator = built_with_weights(lambda: HifiganGenerator(generator_config), parts["generator"], str(generator_path),
                                   f"generator shapes do not match its config {config_path}")
    Vocoder(generator, conditioning)
    if hubert_path is not None:
        base = read(hubert_path)
        if not isinstance(base, dict) or not isinstance(base.get("model"), dict):
            raise CheckpointError(f"{hubert_path}: not a fairseq checkpoint (no 'model' entry)")
        try:
            hf_base = fairseq_hubert_to_hf(base["model"])
        except CheckpointError as error:
            raise CheckpointError(f"{hubert_path}: {error}") from None
        mismatched = [k for k, v in content.hubert.state_dict().items()
                      if k not in hf_base or hf_base[k].shape != v.shape]
        if mismatched:
            raise CheckpointError(f"{hubert_path}: HuBERT shapes differ from the vocoder's content model "
                                  f"({mismatched[:3]})")
    config = {"sample_rate": 16000, "generator": generator_config.to_dict(),
              "layout": conditioning.to_dict(), "content": content.config.to_dict(),
              "speaker": speaker.config.to_dict()}
    components = {"generator": generator.state_dict(), "content": content.state_dict(),
                  "speaker": speaker.embedding_model.state_dict()}
    return components, config
