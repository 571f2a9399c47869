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
  model (``latent_encoder.*``) and the speaker encoder (``xv_model.*``);
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


def split_ssl_sas_generator(checkpoint: dict, source: str = "g_* checkpoint") -> dict[str, dict[str, torch.Tensor]]:
    """``{'generator': state}`` -> {'generator', 'content', 'speaker'} state dicts, weight norm folded."""
    if not isinstance(checkpoint, dict) or "generator" not in checkpoint:
        raise CheckpointError(f"{source}: expected a dict with a 'generator' entry (jik876 g_* layout), got "
                              f"{sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__}")
    state = checkpoint["generator"]
    generator = {k: v for k, v in state.items() if not k.startswith(SSL_SAS_SUBMODELS)}
    return {"generator": fold_weight_norm(generator),
            "content": strip_prefix(state, "latent_encoder."),
            "speaker": strip_prefix(state, "xv_model.")}


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
FAIRSEQ_PRETRAINING_ONLY = re.compile(r"(mask_emb|label_embs_concat|final_proj\..*|label_embs\..*)$")
"""Keys used only by HuBERT's masked-prediction training (dropped by ``remove_pretraining_modules``)."""


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
        raise CheckpointError(f"not a {what} state dict: unexpected keys {unknown[:5]}"
                              f"{' ...' if len(unknown) > 5 else ''}")
    return converted


def fairseq_hubert_to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fairseq HuBERT state dict (weight norm folded here) -> transformers ``HubertModel`` keys."""
    state = {key: value for key, value in fold_weight_norm(state).items() if not FAIRSEQ_PRETRAINING_ONLY.match(key)}
    return _rename_keys(state, _FAIRSEQ_TO_HF, "fairseq HuBERT")


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


def import_ssl_sas(release_dir: str | Path, hubert_path: str | Path | None = None, *,
                   vocoder_dir: str | None = SSL_SAS_VOCODER_DIR, layout: dict | None = None) -> tuple[dict, dict]:
    """Components and config from an unpacked ``pretrained_models_anon_xv`` release (SSL-SAS or zLLR-VC).

    The vocoder is the lexicographically last ``g_*`` in ``vocoder_dir`` (default
    ``HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze``, as SSL-SAS ``inference.py`` picks it;
    ``None``: the release's only ``HiFi-GAN/<model>`` folder). ``layout`` sets the fields of the
    conditioning layout the vocoder was trained with (:data:`ZLLR_VC_LAYOUT` for zLLR-VC). Its
    ``latent_encoder.*`` (fine-tuned HuBERT + centroids) and ``xv_model.*`` (ECAPA) are used; if a
    ``g_*`` lacks them, ``HuBERT_soft/soft_model.pt`` and ``ECAPA-TDNN/embedding_model.ckpt`` are read instead. ``hubert_base_ls960.pt``, when given, is
    checked to be a fairseq HuBERT whose shapes match. Every component is loaded strictly into our
    modules before anything is written.
    """
    from voxanon.models.hifigan import ConditioningLayout, GeneratorConfig, HifiganGenerator, Vocoder
    from voxanon.models.hubert import SoftContentEncoder
    from voxanon.models.speaker import EcapaConfig, EcapaEncoder

    release = Path(release_dir)
    conditioning = ConditioningLayout(**(layout or {}))
    vocoder_dir = release / (vocoder_dir or find_vocoder_dir(release))
    candidates = sorted(vocoder_dir.glob("g_*"))
    if not candidates:
        raise CheckpointError(f"no g_* vocoder checkpoint in {vocoder_dir} (is {release} the unpacked "
                              "pretrained_models_anon_xv release?)")
    parts = split_ssl_sas_generator(safe_load(candidates[-1]), str(candidates[-1]))
    config_path = vocoder_dir / "config.json"
    published = json.loads(config_path.read_text()) if config_path.is_file() else {}
    defaults = {k: v for k, v in GeneratorConfig().to_dict().items() if k != "in_channels"}
    if not {"in_channels", "model_in_dim", "num_mels"} & set(published):
        published["in_channels"] = GeneratorConfig().in_channels
    generator_config = GeneratorConfig.from_dict({**defaults, **published})
    content_state = parts["content"] or safe_load(release / "HuBERT_soft" / "soft_model.pt")
    speaker_state = parts["speaker"] or safe_load(release / "ECAPA-TDNN" / "embedding_model.ckpt")

    generator = HifiganGenerator(generator_config)
    try:
        generator.load_state_dict(parts["generator"])
    except RuntimeError as error:
        raise CheckpointError(f"{candidates[-1]}: generator shapes do not match its config: "
                              f"{str(error).splitlines()[0]}") from None
    Vocoder(generator, conditioning)
    content = SoftContentEncoder.from_ssl_sas_state(content_state)
    if hubert_path is not None:
        base = safe_load(hubert_path)
        if not isinstance(base, dict) or "model" not in base:
            raise CheckpointError(f"{hubert_path}: not a fairseq checkpoint (no 'model' entry)")
        hf_base = fairseq_hubert_to_hf(base["model"])
        mismatched = [k for k, v in content.hubert.state_dict().items()
                      if k not in hf_base or hf_base[k].shape != v.shape]
        if mismatched:
            raise CheckpointError(f"{hubert_path}: HuBERT shapes differ from the vocoder's content model "
                                  f"({mismatched[:3]})")
    speaker = EcapaEncoder(EcapaConfig.from_state(speaker_state))
    speaker.load_embedding_state(speaker_state)
    config = {"sample_rate": 16000, "generator": generator_config.to_dict(),
              "layout": conditioning.to_dict(), "content": content.config.to_dict(),
              "speaker": speaker.config.to_dict()}
    components = {"generator": generator.state_dict(), "content": content.state_dict(),
                  "speaker": speaker.embedding_model.state_dict()}
    return components, config
