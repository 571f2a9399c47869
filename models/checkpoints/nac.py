"""VoicePrivacy 2024 B4 (NAC, Panariello et al.): importing its published files as data, and its semantic front end.

``voxanon models import nac DIR`` reads, in ``DIR`` (any depth, each found once):

* ``coarse_2.pt``, ``fine_2.pt`` (Bark's, as the challenge's coqui fork downloads them): nanoGPT training
  checkpoints, torch pickles of ``model_args``, ``model`` (nanoGPT keys, each with an ``_orig_mod.`` prefix, or
  without), ``best_val_loss`` (a numpy scalar) and, as nanoGPT's ``train.py`` saves them, ``optimizer`` (AdamW's
  state dict: both moments of every parameter, twice the weights), ``iter_num`` and ``config`` (the training
  settings), read by :class:`BarkUnpickler`: tensors, ``OrderedDict`` and the numpy scalar (with its dtype and
  the ``_codecs.encode`` protocol 2 writes its bytes with), nothing else; a ``__reduce__`` payload names a
  global outside that list and is refused before it is called. torch's zip format is memory-mapped, so the
  optimizer's tensors are never read (its entries are checked by type and dropped); the legacy (non-zip)
  format cannot be mapped and is read whole. An
  ``attn.bias`` causal-mask buffer (nanoGPT without flash attention) must be the lower-triangular mask and is
  dropped; the fine model's ``lm_heads.i`` must equal its tied ``transformer.wtes.i+1``;
* ``encodec_24khz-d7cc33bc.th``: EnCodec's state dict; the decoder and the codebooks kept
  (:mod:`voxanon.models.nets.nac.encodec`), the encoder and the quantiser's k-means state checked by family and dropped;
* the quantiser (``quantifier_hubert_base_ls960_14.pth``, or ``tokenizer.pth`` as the coqui fork names it): a
  state dict (``lstm.*``, ``fc.*``) in a torch zip whose ``<name>/.info`` JSON, when present, gives its sizes
  and version (0: LSTM + linear, the only one B4 uses);
* HuBERT-base (``facebook/hubert-base-ls960``'s ``pytorch_model.bin`` or ``model.safetensors``; transformers'
  ``HubertModel`` keys, the positional convolution's weight norm folded);
* the voice prompts: every ``*.npz`` with exactly ``semantic_prompt``, ``coarse_prompt``, ``fine_prompt``
  (Bark's keys), named after the folder holding it (``nac_speaker_mappings.zip`` keeps each in its own
  folder) or, for one directly in ``DIR``, after the file.

Any other file is ignored; a missing one, an unknown or missing key, or a wrong shape fails with one
:class:`~voxanon.models.checkpoints.ssl_sas.CheckpointError` naming the file and the key.

The semantic front end is :mod:`voxanon.models.nets.nac.semantic`; the 24 kHz output goes back to 16 kHz
with :func:`voxanon.models.dsp.resample.resample_kaiser_best`.
"""
from __future__ import annotations

import json
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from ...data_prep.errors import VoxanonError
from ..nets.nac.bark import (CODEBOOK_SIZE, COARSE_FULL, FINE_FULL, N_COARSE_CODEBOOKS, N_FINE_CODEBOOKS,
                         SEMANTIC_VOCAB_SIZE, CoarseGPT, FineGPT, GptConfig, VoicePrompt, init_random)
from .safe import CheckpointError, UnsafeCheckpointError, check_state_fits, fold_weight_norm, key_list, restricted_pickle_module, safe_load
from ..nets.nac.encodec import TRAINING_BUFFERS, EncodecConfig, EncodecDecoder
from ..nets.nac.encodec import init_random as init_random_encodec
from ..nets.hubert import HubertBackboneConfig, plain_hubert
from ..nets.nac.semantic import SAMPLE_RATE, SemanticQuantiser

RELEASE = "nac"
FILES = {"coarse": ("coarse_2.pt",), "fine": ("fine_2.pt",), "encodec": ("encodec_24khz-d7cc33bc.th",),
         "quantiser": ("quantifier_hubert_base_ls960_14.pth", "tokenizer.pth"),
         "hubert": ("pytorch_model.bin", "model.safetensors")}
"""The files the import reads (the first name found of each)."""
HUBERT_LAYER = 9
PROMPT_KEYS = ("semantic_prompt", "coarse_prompt", "fine_prompt")
MODEL_ENTRIES = {"model_args", "model", "best_val_loss"}
TRAINING_ENTRIES = {"optimizer", "iter_num", "config"}
"""What nanoGPT's ``train.py`` saves beside the model entries; checked by type, then dropped."""
ORIG_MOD = "_orig_mod."


class BarkUnpickler(pickle.Unpickler):
    """Unpickles a Bark checkpoint: tensors, ``OrderedDict`` and the numpy scalar of ``best_val_loss``; any
    other global is refused (:class:`~voxanon.models.checkpoints.ssl_sas.UnsafeCheckpointError`) before it is called."""

    ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_parameter"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
               ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        import _compat_pickle

        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise UnsafeCheckpointError(f"the pickle refers to {module}.{name}; a Bark checkpoint holds tensors and "
                                    "one numpy scalar only, so it is refused (not allowed)")


def read_bark_checkpoint(path: Path) -> dict:
    """``coarse_2.pt`` / ``fine_2.pt``'s model entries, read as data: memory-mapped (torch's zip format) or
    read whole (the legacy format, which cannot be mapped); the training entries checked and dropped."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=zipfile.is_zipfile(path),
                                pickle_module=restricted_pickle_module(BarkUnpickler))
    except UnsafeCheckpointError as error:
        raise UnsafeCheckpointError(f"{path}: {error}") from None
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable Bark checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or not MODEL_ENTRIES <= set(checkpoint) <= MODEL_ENTRIES | TRAINING_ENTRIES:
        found = key_list(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{path}: a Bark checkpoint holds {', '.join(sorted(MODEL_ENTRIES))} (and from "
                              f"training {', '.join(sorted(TRAINING_ENTRIES))}); this holds {found}")
    check_training_entries(checkpoint, path)
    return {key: checkpoint[key] for key in MODEL_ENTRIES}


def check_training_entries(checkpoint: dict, path: Path) -> None:
    """nanoGPT's training entries, where present, by type only (their tensors stay unread): ``optimizer`` a
    torch optimizer's state dict (``state``: parameter index -> tensors and numbers; ``param_groups``: dicts
    each with the indices of its ``params``), ``iter_num`` an int, ``config`` a dict of settings by name."""
    if "optimizer" in checkpoint:
        optimizer = checkpoint["optimizer"]
        if not (isinstance(optimizer, dict) and set(optimizer) == {"state", "param_groups"}
                and _is_optimizer_state(optimizer["state"]) and _are_param_groups(optimizer["param_groups"])):
            raise CheckpointError(f"{path}: optimizer is not an optimizer's state dict (state: parameter index -> "
                                  "tensors; param_groups: settings with their params' indices)")
    iter_num = checkpoint.get("iter_num", 0)
    if isinstance(iter_num, bool) or not isinstance(iter_num, int):
        raise CheckpointError(f"{path}: iter_num is a {type(iter_num).__name__}, not an int")
    config = checkpoint.get("config", {})
    if not isinstance(config, dict) or not all(isinstance(key, str) for key in config):
        raise CheckpointError(f"{path}: config is a {type(config).__name__}, not the training settings by name")


def _is_optimizer_state(state) -> bool:
    return isinstance(state, dict) and all(
        isinstance(index, int) and isinstance(entry, dict)
        and all(isinstance(value, (torch.Tensor, int, float)) for value in entry.values())
        for index, entry in state.items())


def _are_param_groups(groups) -> bool:
    return isinstance(groups, list) and all(
        isinstance(group, dict) and isinstance(group.get("params"), list)
        and all(isinstance(index, int) for index in group["params"]) for group in groups)


def _gpt_config(args, path: Path, fine: bool) -> GptConfig:
    if not isinstance(args, dict):
        raise CheckpointError(f"{path}: model_args is a {type(args).__name__}, not a dict")
    args = dict(args)
    if "vocab_size" in args and "input_vocab_size" not in args:  # older checkpoints, as Bark's loader reads them
        args["input_vocab_size"] = args["output_vocab_size"] = args.pop("vocab_size")
    known = {"n_layer", "n_head", "n_embd", "block_size", "bias", "dropout", "input_vocab_size", "output_vocab_size"}
    known |= {"n_codes_total", "n_codes_given"} if fine else set()
    unknown = sorted(map(str, set(args) - known))
    if unknown:
        raise CheckpointError(f"{path}: model_args holds {', '.join(unknown)}, which Bark's "
                              f"{'FineGPTConfig' if fine else 'GPTConfig'} does not take")
    defaults = {"block_size": 1024, "bias": True, "dropout": 0.0}  # GPTConfig's defaults
    try:
        config = GptConfig(**{**defaults, **args})
    except TypeError as error:
        raise CheckpointError(f"{path}: model_args incomplete ({error})") from None
    if fine and (config.n_codes_total != N_FINE_CODEBOOKS or config.n_codes_given != 1):
        raise CheckpointError(f"{path}: model_args n_codes_total {config.n_codes_total}, n_codes_given "
                              f"{config.n_codes_given}; B4's fine model has 8 and 1")
    return config


def convert_bark(checkpoint: dict, path: Path, fine: bool) -> tuple[dict, GptConfig]:
    """(state dict for :class:`~voxanon.models.nets.nac.bark.CoarseGPT` / :class:`~voxanon.models.nets.nac.bark.FineGPT`, config)."""
    config = _gpt_config(checkpoint["model_args"], path, fine)
    loss = checkpoint["best_val_loss"]  # Bark's a numpy scalar; nanoGPT's train.py saves a 0-d tensor
    if not isinstance(loss, (np.generic, float)) and not (isinstance(loss, torch.Tensor) and loss.ndim == 0):
        raise CheckpointError(f"{path}: best_val_loss is a {type(loss).__name__}, not a number")
    state = checkpoint["model"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: model is a {type(state).__name__}, not a state dict")
    state = {(key[len(ORIG_MOD):] if key.startswith(ORIG_MOD) else key): value for key, value in state.items()}
    for key in [key for key in state if re.fullmatch(r"transformer\.h\.\d+\.attn\.bias", key)]:
        mask = state.pop(key)
        size = config.block_size
        if tuple(mask.shape) != (1, 1, size, size) or not torch.equal(mask.float(), torch.ones(size, size).tril()[None, None]):
            raise CheckpointError(f"{path}: key {ORIG_MOD}{key} is not nanoGPT's causal mask ({tuple(mask.shape)})")
    with torch.device("meta"):
        module = FineGPT(config) if fine else CoarseGPT(config)
    check_state_fits(module, state, f"not Bark's {'FineGPT' if fine else 'GPT'} as its model_args describe "
                                    f"(keys without the {ORIG_MOD} prefix)", str(path))
    if fine:
        for i in range(config.n_codes_total - config.n_codes_given):
            head, embedding = f"lm_heads.{i}.weight", f"transformer.wtes.{i + 1}.weight"
            if not torch.equal(state[head], state[embedding]):
                raise CheckpointError(f"{path}: key {head} differs from {embedding}; the fine model ties them")
    # Tied tensors are stored as copies: safetensors keeps no shared storage.
    return {key: value.detach().clone() for key, value in state.items()}, config


def convert_encodec(state, path: Path) -> tuple[dict, EncodecConfig]:
    """The decoder and codebooks of the 24 kHz model (published layout), the rest checked by family and dropped."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected EnCodec's state dict, got {type(state).__name__}")
    kept = {key: value for key, value in state.items() if key.startswith("decoder.")
            or re.fullmatch(r"quantizer\.vq\.layers\.\d+\._codebook\.embed", key)}
    dropped = [key for key in state if key not in kept]
    unknown = [key for key in dropped if not key.startswith("encoder.")
               and not re.fullmatch(rf"quantizer\.vq\.layers\.\d+\._codebook\.({'|'.join(TRAINING_BUFFERS)})", key)]
    if unknown:
        raise CheckpointError(f"{path}: unknown key(s) {key_list(unknown)} (EnCodec holds encoder.*, decoder.* and "
                              "quantizer.vq.layers.N._codebook.*)")
    n_q = len([key for key in kept if key.startswith("quantizer.")])
    embed = kept.get("quantizer.vq.layers.0._codebook.embed")
    first = kept.get("decoder.model.0.conv.conv.weight_v")
    if embed is None or first is None:
        raise CheckpointError(f"{path}: key {'quantizer.vq.layers.0._codebook.embed' if embed is None else 'decoder.model.0.conv.conv.weight_v'} missing")
    config = EncodecConfig(dimension=int(embed.shape[1]), bins=int(embed.shape[0]), n_q=n_q,
                           n_filters=int(first.shape[0]) // 2 ** len(EncodecConfig.ratios))
    with torch.device("meta"):
        module = EncodecDecoder(config)
    check_state_fits(module, kept, "not EnCodec 24 kHz's decoder (SEANet, causal, weight norm)", str(path))
    return dict(kept), config


def convert_quantiser(state, path: Path) -> tuple[dict, dict]:
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected the quantiser's state dict, got {type(state).__name__}")
    info = {"input_size": 768, "hidden_size": 1024, "output_size": SEMANTIC_VOCAB_SIZE, "version": 0}
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.endswith("/.info")]
        if names:
            try:
                info.update(json.loads(archive.read(names[0]).decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as error:
                raise CheckpointError(f"{path}: {names[0]} is not JSON ({error})") from None
    if info["version"] != 0:
        raise CheckpointError(f"{path}: quantiser version {info['version']} (.info); B4's is version 0 (LSTM + linear)")
    sizes = {key: int(info[key]) for key in ("input_size", "hidden_size", "output_size")}
    if sizes["output_size"] != SEMANTIC_VOCAB_SIZE:
        raise CheckpointError(f"{path}: quantiser output_size {sizes['output_size']}; Bark's semantic vocabulary "
                              f"has {SEMANTIC_VOCAB_SIZE}")
    with torch.device("meta"):
        module = SemanticQuantiser(**sizes)
    check_state_fits(module, state, "not the HuBERT quantiser (2-layer LSTM + fc) its sizes describe", str(path))
    return dict(state), sizes


def convert_hubert(state, path: Path) -> tuple[dict, HubertBackboneConfig]:
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected HubertModel's state dict, got {type(state).__name__}")
    state = {(key[len("hubert."):] if key.startswith("hubert.") else key): value for key, value in state.items()
             if key != "masked_spec_embed"}
    try:
        state = fold_weight_norm(state)
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    layers = {int(m.group(1)) for key in state if (m := re.match(r"encoder\.layers\.(\d+)\.", key))}
    hidden = state.get("feature_projection.projection.weight")
    if hidden is None:
        raise CheckpointError(f"{path}: key feature_projection.projection.weight missing (not a HubertModel)")
    conv = state.get("feature_extractor.conv_layers.0.conv.weight")
    pos_conv = state.get("encoder.pos_conv_embed.conv.weight")
    intermediate = state.get("encoder.layers.0.feed_forward.intermediate_dense.weight")
    if conv is None or pos_conv is None or intermediate is None:
        raise CheckpointError(f"{path}: HubertModel keys missing (feature_extractor.conv_layers.0.conv.weight, "
                              "encoder.pos_conv_embed.conv.weight_g/v, encoder.layers.0.feed_forward.*)")
    # HuBERT-base has 64-wide heads (768 / 12); the head count is not in the weights.
    config = HubertBackboneConfig(num_layers=len(layers), hidden_size=int(hidden.shape[0]),
                                  num_heads=max(1, int(hidden.shape[0]) // 64),
                                  intermediate_size=int(intermediate.shape[0]), conv_channels=int(conv.shape[0]),
                                  pos_conv_kernel=int(pos_conv.shape[2]),
                                  pos_conv_groups=int(hidden.shape[0]) // int(pos_conv.shape[1]))
    if config.num_layers < HUBERT_LAYER:
        raise CheckpointError(f"{path}: {config.num_layers} transformer layers; B4 takes layer {HUBERT_LAYER}")
    with torch.device("meta"):
        module = plain_hubert(config)
    check_state_fits(module, state, "not HuBERT-base (transformers' HubertModel keys)", str(path))
    return state, config


def read_voice(path: Path) -> VoicePrompt:
    """A Bark voice prompt, checked: the three keys, their shapes and token ranges."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = set(archive.files)
            if keys != set(PROMPT_KEYS):
                raise CheckpointError(f"{path}: a voice prompt holds {', '.join(PROMPT_KEYS)}; this holds "
                                      f"{key_list(keys)}")
            semantic, coarse, fine = (np.asarray(archive[key]) for key in PROMPT_KEYS)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: not a readable .npz voice prompt ({error})") from None
    for key, array, rows, top in (("semantic_prompt", semantic, None, SEMANTIC_VOCAB_SIZE),
                                  ("coarse_prompt", coarse, N_COARSE_CODEBOOKS, CODEBOOK_SIZE),
                                  ("fine_prompt", fine, N_FINE_CODEBOOKS, CODEBOOK_SIZE)):
        shape_ok = array.ndim == 1 if rows is None else (array.ndim == 2 and array.shape[0] == rows)
        if not shape_ok or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
            raise CheckpointError(f"{path}: key {key} has shape {array.shape} ({array.dtype}); expected integer "
                                  f"{'(n,)' if rows is None else f'({rows}, m)'}")
        if array.min() < 0 or array.max() >= top:
            raise CheckpointError(f"{path}: key {key} holds tokens outside 0..{top - 1}")
    if coarse.shape[1] != fine.shape[1]:
        raise CheckpointError(f"{path}: key coarse_prompt has {coarse.shape[1]} frames, fine_prompt {fine.shape[1]}")
    return VoicePrompt(semantic.astype(np.int64), coarse.astype(np.int64), fine.astype(np.int64))


def voices_state(voices: dict[str, VoicePrompt]) -> dict[str, torch.Tensor]:
    return {f"{name}.{key}": torch.from_numpy(np.ascontiguousarray(array)) for name, prompt in voices.items()
            for key, array in zip(PROMPT_KEYS, (prompt.semantic, prompt.coarse, prompt.fine))}


def find_voices(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.npz")):
        name = path.stem if path.parent == root else path.parent.name
        if name in found:
            raise CheckpointError(f"{path}: a second voice named {name!r} (the first is {found[name]}); one .npz per "
                                  "voice folder")
        found[name] = path
    if not found:
        raise CheckpointError(f"{root}: no voice prompt (*.npz) found; unpack nac_speaker_mappings.zip there")
    return found


def find_release_files(root: Path) -> dict[str, Path]:
    """The file of each part under ``root`` (module doc); one line names every missing one."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a folder (give the folder holding B4's files)")
    found, missing = {}, []
    for part, names in FILES.items():
        matches = [path for name in names for path in sorted(root.rglob(name))]
        if not matches:
            missing.append(" or ".join(names))
        else:
            found[part] = matches[0]
    if missing:
        raise CheckpointError(f"{root}: missing {', '.join(missing)} (B4 needs Bark's coarse_2.pt and fine_2.pt, "
                              "encodec_24khz-d7cc33bc.th, the HuBERT quantiser and facebook/hubert-base-ls960)")
    return found


def import_nac(root: str | Path, read=None) -> tuple[dict, dict]:
    """Components (name -> state dict) and config of B4's files under ``root``; ``read`` as
    :func:`~voxanon.models.checkpoints.ssl_sas.safe_load` (the EnCodec, quantiser and HuBERT files)."""
    read = read or safe_load
    files = find_release_files(Path(root))
    components, config = {}, {"release": RELEASE, "sample_rate": SAMPLE_RATE, "hubert_layer": HUBERT_LAYER}
    for part, fine in (("coarse", False), ("fine", True)):
        components[part], gpt = convert_bark(read_bark_checkpoint(files[part]), files[part], fine)
        config[part] = gpt.to_dict()
    components["encodec"], encodec = convert_encodec(read(files["encodec"]), files["encodec"])
    components["quantiser"], config["quantiser"] = convert_quantiser(read(files["quantiser"]), files["quantiser"])
    hubert_path = files["hubert"]
    if hubert_path.suffix == ".safetensors":
        from safetensors.torch import load_file

        hubert_state = load_file(hubert_path)
    else:
        hubert_state = read(hubert_path)
    components["hubert"], hubert = convert_hubert(hubert_state, hubert_path)
    voices = {name: read_voice(path) for name, path in find_voices(Path(root)).items()}
    components["voices"] = voices_state(voices)
    config.update(encodec=encodec.to_dict(), hubert=hubert.to_dict(), voices=sorted(voices),
                  files={part: str(path.relative_to(root)) for part, path in files.items()})
    return components, config


# Random weights with the published shapes, and loading an installed set ------------------------------------

TINY = {"coarse": GptConfig(n_layer=2, n_head=2, n_embd=32, input_vocab_size=12_096, output_vocab_size=12_096),
        "fine": GptConfig(n_layer=2, n_head=2, n_embd=32, input_vocab_size=1056, output_vocab_size=1056,
                          n_codes_total=8, n_codes_given=1),
        "hubert": HubertBackboneConfig(hidden_size=64, num_layers=HUBERT_LAYER, num_heads=1, intermediate_size=64,
                                       conv_channels=16, pos_conv_kernel=16, pos_conv_groups=4),
        "quantiser": {"input_size": 64, "hidden_size": 16, "output_size": SEMANTIC_VOCAB_SIZE},
        "encodec": EncodecConfig(dimension=16, n_filters=4)}
RANDOM_VOICES = {"full": 130, "tiny": 4}


def random_voice(rng: np.random.Generator, seconds: float = 4.0) -> VoicePrompt:
    frames = int(seconds * 75)
    return VoicePrompt(rng.integers(0, SEMANTIC_VOCAB_SIZE, int(seconds * 49.9)),
                       rng.integers(0, CODEBOOK_SIZE, (N_COARSE_CODEBOOKS, frames)),
                       rng.integers(0, CODEBOOK_SIZE, (N_FINE_CODEBOOKS, frames)))


def random_nac(size: str = "full", seed: int = 0) -> tuple[dict, dict]:
    """Components and config with random weights: ``full`` has the published shapes (130 voices), ``tiny``
    small networks (HuBERT 64 wide, one 64-wide head as the importer assumes; Bark 32 wide, 2 layers), for tests."""
    if size not in RANDOM_VOICES:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    full = size == "full"
    coarse, fine = (COARSE_FULL, FINE_FULL) if full else (TINY["coarse"], TINY["fine"])
    hubert = HubertBackboneConfig() if full else TINY["hubert"]
    quantiser = {"input_size": 768, "hidden_size": 1024, "output_size": SEMANTIC_VOCAB_SIZE} if full \
        else TINY["quantiser"]
    encodec = EncodecConfig() if full else TINY["encodec"]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    voices = {f"random_{i:03d}": random_voice(rng) for i in range(RANDOM_VOICES[size])}
    components = {"coarse": init_random(CoarseGPT(coarse)).state_dict(),
                  "fine": {k: v.clone() for k, v in init_random(FineGPT(fine)).state_dict().items()},
                  "hubert": plain_hubert(hubert).state_dict(), "quantiser": SemanticQuantiser(**quantiser).state_dict(),
                  "encodec": init_random_encodec(EncodecDecoder(encodec)).state_dict(), "voices": voices_state(voices)}
    config = {"release": RELEASE, "sample_rate": SAMPLE_RATE, "hubert_layer": HUBERT_LAYER,
              "coarse": coarse.to_dict(), "fine": fine.to_dict(), "quantiser": quantiser,
              "encodec": encodec.to_dict(), "hubert": hubert.to_dict(), "voices": sorted(voices),
              "files": {"random_init": size}}
    return components, config


def require_nac(model_set) -> None:
    if model_set.config.get("release") != RELEASE:
        raise VoxanonError(f"model set {model_set.name!r} is not a B4 import (voxanon models import nac DIR)")


def load_component(model_set, component: str):
    """One network of an installed B4 set, loaded strictly (each key and shape)."""
    require_nac(model_set)
    config = model_set.config
    if component == "coarse":
        return model_set.build("coarse", lambda: CoarseGPT(GptConfig.from_dict(config["coarse"])))
    if component == "fine":
        model = model_set.build("fine", lambda: FineGPT(GptConfig.from_dict(config["fine"])))
        for i, head in enumerate(model.lm_heads):  # the load assigned both copies; tie them again
            model.transformer.wtes[i + 1].weight = head.weight
        return model
    if component == "encodec":
        return model_set.build("encodec", lambda: EncodecDecoder(EncodecConfig.from_dict(config["encodec"])))
    if component == "quantiser":
        return model_set.build("quantiser", lambda: SemanticQuantiser(**config["quantiser"]))
    if component == "hubert":
        return model_set.build("hubert", lambda: plain_hubert(HubertBackboneConfig.from_dict(config["hubert"])))
    if component == "voices":
        return load_voices(model_set)
    raise ValueError(f"unknown B4 component {component!r}")


COMPONENTS = ("hubert", "quantiser", "coarse", "fine", "encodec", "voices")


def load_voices(model_set) -> dict[str, VoicePrompt]:
    require_nac(model_set)
    tensors = model_set.tensors("voices")
    names = list(model_set.config["voices"])
    missing = [f"{name}.{key}" for name in names for key in PROMPT_KEYS if f"{name}.{key}" not in tensors]
    if missing or len(tensors) != 3 * len(names):
        raise CheckpointError(f"{model_set.weights_file('voices')}: voices missing {key_list(missing)} or extra keys "
                              "beside the config's")
    return {name: VoicePrompt(*(tensors[f"{name}.{key}"].numpy() for key in PROMPT_KEYS)) for name in names}
