"""B3's speaker side from its published files, read as data: the style embedding
(``tts/Embedding/embedding_function.pt``: ``{"style_emb_func": state_dict}``) and the WGAN
(``anonymization/gan_style-embed/style-embed_wgan.pt``, as ``WassersteinGanQuadraticCost.save_model_checkpoint``
writes it: ``generator_state_dict`` and ``critic_state_dict`` with ``nn.DataParallel``'s ``module.`` prefix,
both optimizers' states, ``model_parameters`` (the training JSON), ``iterations``, and the training data's
scalar ``mean`` and ``std``); and Silero VAD's 16 kHz weights from the installed ``silero-vad`` package
(``silero_vad/data/silero_vad_16k.safetensors``), which the recipe's ``torch.hub`` load stands for.

Each ``convert_*`` checks the weights key by key against the module its shapes describe; the critic, the
optimizers and the counters are training state, accepted and dropped.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from ...data_prep.errors import VoxanonError
from ..nets.tts.style import StyleConfig, StyleEmbedding
from ..nets.tts.vad import SileroVad
from ..nets.tts.wgan import EmbeddingGenerator, WganConfig
from .safe import CheckpointError, check_state_builds, safe_load

STYLE_ENTRY = "style_emb_func"
WGAN_GENERATOR_ENTRY = "generator_state_dict"
WGAN_CRITIC_ENTRY = "critic_state_dict"
WGAN_PARAMETERS_ENTRY = "model_parameters"
DATA_PARALLEL_PREFIX = "module."
WGAN_PARAMETER_KEYS = ("z_dim", "size", "nfilter", "nfilter_max")


def read_style(path: Path) -> dict:
    """``embedding_function.pt`` as data (a pickle naming any code is refused before anything runs)."""
    return safe_load(path)


def read_wgan(path: Path) -> dict:
    """``style-embed_wgan.pt`` as data."""
    return safe_load(path)


def _tensor_state(value, what: str, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(tensor, torch.Tensor) for tensor in value.values()):
        raise CheckpointError(f"{path}: {what} is not a state dict of tensors")
    return dict(value)


def _entry(checkpoint, key: str, path: Path):
    if not isinstance(checkpoint, dict) or key not in checkpoint:
        found = sorted(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{path}: expected a dict with a {key!r} entry, found {found}")
    return checkpoint[key]


def _style_config_from_state(state: dict[str, torch.Tensor], path: Path) -> StyleConfig:
    try:
        channels = []
        while f"gst.ref_enc.convs.{3 * len(channels)}.weight" in state:
            channels.append(int(state[f"gst.ref_enc.convs.{3 * len(channels)}.weight"].shape[0]))
        tokens, token_part = state["gst.stl.gst_embs"].shape
        token_dim = int(state["gst.stl.mha.linear_out.weight"].shape[0])
        gru_units = int(state["gst.ref_enc.gru.weight_hh_l0"].shape[1])
    except (KeyError, ValueError) as error:
        raise CheckpointError(f"{path}: {STYLE_ENTRY}: not a GST style embedding (missing or malformed "
                              f"{error})") from None
    if not channels or token_part == 0 or token_dim % token_part:
        raise CheckpointError(f"{path}: {STYLE_ENTRY}: not a GST style embedding (convs {channels}, style "
                              f"tokens {tokens}x{token_part}, attention width {token_dim})")
    return StyleConfig(conv_channels=tuple(channels), gru_units=gru_units, tokens=int(tokens), token_dim=token_dim,
                       heads=token_dim // int(token_part))


def convert_style(checkpoint, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, config) of :class:`StyleEmbedding` from ``embedding_function.pt`` read as data; other entries
    (a FastSpeech2 checkpoint's ``model``, ``default_emb``, optimizer, ...) are dropped."""
    state = _tensor_state(_entry(checkpoint, STYLE_ENTRY, path), STYLE_ENTRY, path)
    config = _style_config_from_state(state, path)
    check_state_builds(lambda: StyleEmbedding(config), state, STYLE_ENTRY, str(path))
    return {key: value.float() if value.is_floating_point() else value for key, value in state.items()}, \
        config.to_dict()


def _wgan_config(parameters, path: Path) -> WganConfig:
    if not isinstance(parameters, dict) or parameters.get("model") != "resnet":
        raise CheckpointError(f"{path}: {WGAN_PARAMETERS_ENTRY} does not describe the recipe's ResNet WGAN "
                              f"(model {parameters.get('model') if isinstance(parameters, dict) else parameters!r})")
    try:
        values = {key: int(parameters[key]) for key in WGAN_PARAMETER_KEYS}
        data_dim = int(parameters["data_dim"][-1])
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise CheckpointError(f"{path}: {WGAN_PARAMETERS_ENTRY} lacks or garbles {error}") from None
    return WganConfig(data_dim=data_dim, **values)


def _normalisation(checkpoint, key: str, path: Path) -> torch.Tensor:
    value = _entry(checkpoint, key, path)
    if isinstance(value, (int, float)):
        value = torch.tensor(float(value))
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise CheckpointError(f"{path}: {key} should be the training data's scalar {key}, found "
                              f"{tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__}")
    return value.reshape(()).float()


def convert_wgan(checkpoint, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, config) of :class:`EmbeddingGenerator` from ``style-embed_wgan.pt`` read as data: the
    generator's weights without the ``module.`` prefix plus ``mean`` and ``std``; the critic is checked to be a
    state dict and dropped with the other training state."""
    config = _wgan_config(_entry(checkpoint, WGAN_PARAMETERS_ENTRY, path), path)
    generator = _tensor_state(_entry(checkpoint, WGAN_GENERATOR_ENTRY, path), WGAN_GENERATOR_ENTRY, path)
    _tensor_state(_entry(checkpoint, WGAN_CRITIC_ENTRY, path), WGAN_CRITIC_ENTRY, path)
    unprefixed = [key for key in generator if not key.startswith(DATA_PARALLEL_PREFIX)]
    if unprefixed:
        raise CheckpointError(f"{path}: {WGAN_GENERATOR_ENTRY}: keys without the {DATA_PARALLEL_PREFIX!r} prefix "
                              f"the recipe's nn.DataParallel writes: {', '.join(sorted(unprefixed)[:5])}")
    state = {key[len(DATA_PARALLEL_PREFIX):]: value for key, value in generator.items()}
    state["mean"] = _normalisation(checkpoint, "mean", path)
    state["std"] = _normalisation(checkpoint, "std", path)
    check_state_builds(lambda: EmbeddingGenerator(config), state, WGAN_GENERATOR_ENTRY, str(path))
    return state, config.to_dict()


def build_style(config: dict) -> StyleEmbedding:
    return StyleEmbedding(StyleConfig.from_dict(config))


def build_wgan(config: dict) -> EmbeddingGenerator:
    return EmbeddingGenerator(WganConfig.from_dict(config))


TINY_STYLE = StyleConfig(conv_channels=(4, 4, 8, 8, 8, 8), gru_units=16, tokens=4, token_dim=16, heads=2)
TINY_WGAN = WganConfig(data_dim=16, z_dim=4, size=8, nfilter=2, nfilter_max=4)


def _random_state(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Every parameter and batch-norm statistic drawn from ``seed`` (running variances kept positive), so that
    parity tests exercise each of them."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, value in module.state_dict().items():
        if not value.is_floating_point():
            state[key] = value.clone()
        elif key.endswith("running_var") or key == "std":
            state[key] = torch.rand(value.shape, generator=generator) + 0.5
        else:
            state[key] = torch.randn(value.shape, generator=generator) * 0.2
    return state


def _size(size: str, full, tiny):
    if size not in ("full", "tiny"):
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    return full if size == "full" else tiny


def random_style(size: str, seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    """Random :class:`StyleEmbedding` weights: ``full`` = the published shapes, ``tiny`` for fast tests."""
    config = _size(size, StyleConfig(), TINY_STYLE)
    return _random_state(StyleEmbedding(config), seed), config.to_dict()


def random_wgan(size: str, seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    """Random :class:`EmbeddingGenerator` weights: ``full`` = the recipe's training configuration's shapes
    (``configs/train_gan.json`` for 128-d style embeddings), ``tiny`` for fast tests."""
    config = _size(size, WganConfig(), TINY_WGAN)
    return _random_state(EmbeddingGenerator(config), seed), config.to_dict()


SILERO_PACKAGE = "silero_vad"
SILERO_WEIGHTS = "data/silero_vad_16k.safetensors"


def packaged_vad_path() -> Path:
    """The installed ``silero-vad`` package's 16 kHz weights, found without importing the package (its
    ``__init__`` loads TorchScript models' helpers and sets torch's thread count)."""
    spec = importlib.util.find_spec(SILERO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("the silero-vad package is not installed (pip install silero-vad); B3 cuts silence "
                              "with its weights")
    return Path(next(iter(spec.submodule_search_locations))) / SILERO_WEIGHTS


def read_vad(path: Path) -> dict[str, torch.Tensor]:
    """Silero VAD's safetensors file: tensors only, nothing to run."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise CheckpointError(f"Silero VAD weights not found: {path}")
    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from None


def convert_vad(checkpoint, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    state = _tensor_state(checkpoint, "Silero VAD weights", path)
    check_state_builds(SileroVad, state, "Silero VAD weights", str(path))
    return state, {}


def build_vad(config: dict) -> SileroVad:
    return SileroVad()


def random_vad(size: str, seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    """Random :class:`SileroVad` weights (one size: the network is small)."""
    _size(size, None, None)
    return _random_state(SileroVad(), seed), {}
