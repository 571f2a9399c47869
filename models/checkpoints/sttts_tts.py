"""B3's (STTTS) synthesis checkpoints: IMS-Toucan's FastSpeech2 (``tts/FastSpeech2_Multi/prosody_cloning.pt``) and
HiFi-GAN (``tts/HiFiGAN_combined/best.pt``), read as data and checked key by key.

* ``prosody_cloning.pt``, as Toucan's ``fastspeech2_train_loop.py`` saves it: ``model`` (the FastSpeech2 state dict,
  :class:`~voxanon.models.nets.tts.fastspeech2.FastSpeech2`'s keys), ``default_emb`` (the 128-d embedding of its
  first training utterance; B3 always gives the target's, so it is checked and dropped) and, from training,
  ``optimizer`` (Adam), ``scheduler`` (Toucan's ``WarmupScheduler``), ``scaler`` (AMP's ``GradScaler``) and
  ``step_counter``;
* ``best.pt``, as ``hifigan_train_loop.py`` saves it: ``generator`` (weight-norm ``weight_g``/``weight_v`` pairs,
  folded here into plain weights and renamed to :class:`~voxanon.models.nets.hifigan.HifiganGenerator`'s keys,
  :data:`~voxanon.models.nets.tts.hifigan.TOUCAN_TO_JIK876`) and, from training, ``discriminator``,
  ``generator_optimizer``, ``discriminator_optimizer`` (RAdam), ``generator_scheduler``,
  ``discriminator_scheduler`` (``MultiStepLR``) and ``step_counter``.

The training entries are checked by type and dropped; any other entry, a missing one, an unknown, missing or
mis-shaped key is one :class:`~voxanon.models.checkpoints.safe.CheckpointError` naming the file and the key. Both
files are read by :func:`~voxanon.models.checkpoints.safe.safe_load` (``torch.load(weights_only=True)``, then an
allow-listed unpickler): a ``__reduce__`` payload is refused, never run.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ...data_prep.errors import VoxanonError
from ..nets.hifigan import GeneratorConfig, HifiganGenerator
from ..nets.tts.fastspeech2 import FastSpeech2, FastSpeech2Config
from ..nets.tts.hifigan import TOUCAN_GENERATOR, jik876_key
from .safe import CheckpointError, check_state_builds, fold_weight_norm, key_list, safe_load

FASTSPEECH2_ENTRIES = {"model", "default_emb"}
FASTSPEECH2_TRAINING = {"optimizer", "scheduler", "scaler", "step_counter"}
HIFIGAN_ENTRIES = {"generator"}
HIFIGAN_TRAINING = {"discriminator", "generator_optimizer", "discriminator_optimizer", "generator_scheduler",
                    "discriminator_scheduler", "step_counter"}
OPTIMIZERS = {"optimizer", "generator_optimizer", "discriminator_optimizer"}
SETTINGS = {"scheduler", "scaler", "generator_scheduler", "discriminator_scheduler"}

TINY_FASTSPEECH2 = FastSpeech2Config(adim=64, aheads=2, elayers=2, eunits=128, dlayers=2, dunits=128,
                                     conformer_dec_kernel_size=7, postnet_layers=3, postnet_chans=32,
                                     duration_predictor_chans=32, pitch_predictor_layers=2, pitch_predictor_chans=32,
                                     energy_predictor_chans=32)
"""Small enough for the default test suite; phone vectors (62), mel bins (80) and style (128) keep their sizes."""
TINY_HIFIGAN = GeneratorConfig(**{**TOUCAN_GENERATOR.to_dict(), "upsample_initial_channel": 16})
SIZES = ("full", "tiny")


def read_fastspeech2(path: Path) -> dict:
    return _read(Path(path), FASTSPEECH2_ENTRIES, FASTSPEECH2_TRAINING)


def read_hifigan(path: Path) -> dict:
    return _read(Path(path), HIFIGAN_ENTRIES, HIFIGAN_TRAINING)


def _read(path: Path, entries: set[str], training: set[str]) -> dict:
    """The file's model entries, read as data; its training entries checked by type and dropped."""
    checkpoint = safe_load(path)
    if not isinstance(checkpoint, dict) or not entries <= set(checkpoint) <= entries | training:
        found = key_list(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{path}: an IMS-Toucan checkpoint holds {', '.join(sorted(entries))} (and from "
                              f"training {', '.join(sorted(training))}); this holds {found}")
    for name in training & set(checkpoint):
        _check_training_entry(name, checkpoint[name], path)
    return {name: checkpoint[name] for name in entries}


def _check_training_entry(name: str, value, path: Path) -> None:
    if name == "step_counter":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif name in OPTIMIZERS:
        ok = (isinstance(value, dict) and set(value) == {"state", "param_groups"} and isinstance(value["state"], dict)
              and isinstance(value["param_groups"], list) and all(isinstance(g, dict) for g in value["param_groups"]))
    elif name in SETTINGS:
        ok = isinstance(value, dict) and all(isinstance(key, str) for key in value)
    else:  # the discriminator
        ok = isinstance(value, dict) and all(isinstance(t, torch.Tensor) for t in value.values())
    if not ok:
        raise CheckpointError(f"{path}: {name} is a {type(value).__name__} that is not what Toucan's train loop saves "
                              "there")


def _state(value, what: str, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                              for k, t in value.items()):
        raise CheckpointError(f"{path}: {what} is not a state dict (names -> tensors)")
    return {key: tensor.float() for key, tensor in value.items()}


def _dim(state: dict, key: str, axis: int, path: Path) -> int:
    if key not in state:
        raise CheckpointError(f"{path}: missing {key}")
    return int(state[key].shape[axis])


def _count(state: dict, pattern: str) -> int:
    return len({m.group(1) for key in state if (m := re.match(pattern, key))})


def convert_fastspeech2(checkpoint: dict, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """``model`` checked key by key against the FastSpeech2 its shapes describe; ``default_emb`` checked, dropped."""
    path = Path(path)
    state = _state(checkpoint["model"], "model", path)
    heads, head_dim = (_dim(state, "encoder.encoders.0.self_attn.pos_bias_u", axis, path) for axis in (0, 1))
    config = FastSpeech2Config(
        idim=_dim(state, "encoder.embed.0.weight", 1, path), odim=_dim(state, "feat_out.weight", 0, path),
        adim=heads * head_dim, aheads=heads,
        elayers=_count(state, r"encoder\.encoders\.(\d+)\."), dlayers=_count(state, r"decoder\.encoders\.(\d+)\."),
        eunits=_dim(state, "encoder.encoders.0.feed_forward.w_1.weight", 0, path),
        dunits=_dim(state, "decoder.encoders.0.feed_forward.w_1.weight", 0, path),
        conformer_enc_kernel_size=_dim(state, "encoder.encoders.0.conv_module.depthwise_conv.weight", 2, path),
        conformer_dec_kernel_size=_dim(state, "decoder.encoders.0.conv_module.depthwise_conv.weight", 2, path),
        postnet_layers=_count(state, r"postnet\.postnet\.(\d+)\."),
        postnet_chans=_dim(state, "postnet.postnet.0.0.weight", 0, path),
        postnet_filts=_dim(state, "postnet.postnet.0.0.weight", 2, path),
        **{f"{name}_predictor_{field}": value for name in ("duration", "pitch", "energy") for field, value in (
            ("layers", _count(state, rf"{name}_predictor\.conv\.(\d+)\.")),
            ("chans", _dim(state, f"{name}_predictor.conv.0.0.weight", 0, path)),
            ("kernel_size", _dim(state, f"{name}_predictor.conv.0.0.weight", 2, path)))},
        utt_embed_dim=_dim(state, "encoder.embedding_expansion.weight", 1, path))
    check_state_builds(lambda: FastSpeech2(config), state, "model", str(path))
    default = checkpoint["default_emb"]
    if not isinstance(default, torch.Tensor) or default.shape != (config.utt_embed_dim,):
        shape = tuple(default.shape) if isinstance(default, torch.Tensor) else type(default).__name__
        raise CheckpointError(f"{path}: default_emb {shape} (expected ({config.utt_embed_dim},))")
    return state, config.to_dict()


def convert_hifigan(checkpoint: dict, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """``generator``'s weight norm folded, its keys renamed to our generator's and checked key by key against
    Toucan's generator of its width."""
    path = Path(path)
    try:
        folded = fold_weight_norm(_state(checkpoint["generator"], "generator", path))
    except CheckpointError as error:
        raise CheckpointError(f"{path}: generator: {error}") from None
    unknown = [key for key in folded if jik876_key(key) is None]
    if unknown:
        raise CheckpointError(f"{path}: generator: unexpected {key_list(unknown)}")
    state = {jik876_key(key): value for key, value in folded.items()}
    if "conv_pre.weight" not in state:
        raise CheckpointError(f"{path}: generator: missing input_conv.weight_g / input_conv.weight_v")
    config = GeneratorConfig(**{**TOUCAN_GENERATOR.to_dict(),
                                "in_channels": int(state["conv_pre.weight"].shape[1]),
                                "upsample_initial_channel": int(state["conv_pre.weight"].shape[0])})
    check_state_builds(lambda: HifiganGenerator(config), state, "generator", str(path))
    return state, config.to_dict()


def build_fastspeech2(config: dict) -> FastSpeech2:
    return FastSpeech2(FastSpeech2Config.from_dict(config))


def build_hifigan(config: dict) -> HifiganGenerator:
    return HifiganGenerator(GeneratorConfig.from_dict(config))


def _size(size: str) -> bool:
    if size not in SIZES:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    return size == "full"


def random_weights(build, seed: int) -> dict[str, torch.Tensor]:
    """The state dict of the module ``build()`` makes, with random values from a generator of its own: matrices
    and kernels N(0, 1/fan-in), norm scales (the only 1-d weights here) 1 + N(0, 0.1²), biases N(0, 0.1²)."""
    with torch.device("meta"):
        shapes = {key: tensor.shape for key, tensor in build().state_dict().items()}
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        noise = torch.randn(shape, generator=generator)
        if len(shape) >= 2:
            state[key] = noise / shape[1:].numel() ** 0.5
        elif key.endswith(".weight"):
            state[key] = 1.0 + 0.1 * noise
        else:
            state[key] = 0.1 * noise
    return state


def random_fastspeech2(size: str = "full", seed: int = 0) -> tuple[dict[str, torch.Tensor], dict]:
    config = FastSpeech2Config() if _size(size) else TINY_FASTSPEECH2
    return random_weights(lambda: FastSpeech2(config), seed), config.to_dict()


def random_hifigan(size: str = "full", seed: int = 0) -> tuple[dict[str, torch.Tensor], dict]:
    config = TOUCAN_GENERATOR if _size(size) else TINY_HIFIGAN
    return random_weights(lambda: HifiganGenerator(config), seed + 1), config.to_dict()
