"""B3's aligner from its published file, read as data: ``tts/Aligner/aligner.pt`` as IMS-Toucan's
``autoaligner_train_loop`` saves it: ``asr_model`` (the aligner's state dict), ``optimizer`` (its RAdam state),
``tts_model`` and ``tts_optimizer`` (the TinyTTS that gave the training its reconstruction loss, and its RAdam
state) and ``step_counter``.

:func:`convert_aligner` checks ``asr_model`` key by key against :class:`Aligner` at the sizes its shapes give and
keeps it; the training entries are checked to be what the loop writes and dropped; other entries are ignored, as
the recipe (which reads ``asr_model`` only) ignores them.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..nets.tts.aligner import Aligner, AlignerConfig
from ..nets.tts.articulatory import NUM_SYMBOLS
from ..nets.tts.audio import N_MELS
from .safe import CheckpointError, check_state_builds, safe_load

ALIGNER_ENTRY = "asr_model"
STATE_DICT_ENTRIES = ("tts_model",)
OPTIMIZER_ENTRIES = ("optimizer", "tts_optimizer")
STEP_ENTRY = "step_counter"
TINY = AlignerConfig(conv_dim=16, lstm_dim=16)
SIZES = {"full": AlignerConfig(), "tiny": TINY}


def read_aligner(path: Path) -> dict:
    """``aligner.pt`` as data (a pickle naming any code is refused before anything runs)."""
    return safe_load(path)


def _config_from_state(state: dict[str, torch.Tensor], path: Path) -> AlignerConfig:
    try:
        conv_dim, n_mels, _ = state["convs.0.conv.weight"].shape
        lstm_dim = state["rnn.weight_hh_l0"].shape[1]
        num_symbols = state["proj.weight"].shape[0]
    except (KeyError, ValueError) as error:
        raise CheckpointError(f"{path}: {ALIGNER_ENTRY}: not IMS-Toucan's aligner (missing or malformed "
                              f"{error})") from None
    if n_mels != N_MELS:
        raise CheckpointError(f"{path}: {ALIGNER_ENTRY}: convs.0.conv.weight takes {n_mels} mel bands, B3's "
                              f"front end gives {N_MELS}")
    if num_symbols != NUM_SYMBOLS:
        raise CheckpointError(f"{path}: {ALIGNER_ENTRY}: proj.weight scores {num_symbols} CTC states, IMS-Toucan's "
                              f"phone IDs are {NUM_SYMBOLS} (blank included)")
    return AlignerConfig(n_mels=int(n_mels), num_symbols=int(num_symbols), lstm_dim=int(lstm_dim),
                         conv_dim=int(conv_dim))


def _check_training_entries(checkpoint: dict, path: Path) -> None:
    """The train loop's other entries, where present, by type only (their tensors stay unread)."""
    for key in STATE_DICT_ENTRIES:
        if key in checkpoint and not (isinstance(checkpoint[key], dict)
                                      and all(isinstance(value, torch.Tensor) for value in checkpoint[key].values())):
            raise CheckpointError(f"{path}: {key} is not a state dict of tensors")
    for key in OPTIMIZER_ENTRIES:
        if key in checkpoint:
            optimizer = checkpoint[key]
            if not (isinstance(optimizer, dict) and set(optimizer) == {"state", "param_groups"}
                    and isinstance(optimizer["state"], dict) and isinstance(optimizer["param_groups"], list)):
                raise CheckpointError(f"{path}: {key} is not an optimizer's state dict (state, param_groups)")
    step = checkpoint.get(STEP_ENTRY, 0)
    if isinstance(step, bool) or not isinstance(step, int):
        raise CheckpointError(f"{path}: {STEP_ENTRY} is a {type(step).__name__}, not an int")


def convert_aligner(checkpoint, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, config) of :class:`Aligner` from ``aligner.pt`` read as data."""
    if not isinstance(checkpoint, dict) or ALIGNER_ENTRY not in checkpoint:
        found = sorted(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{path}: expected IMS-Toucan's aligner checkpoint with an {ALIGNER_ENTRY!r} entry, "
                              f"found {found}")
    state = checkpoint[ALIGNER_ENTRY]
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise CheckpointError(f"{path}: {ALIGNER_ENTRY} is not a state dict of tensors")
    _check_training_entries(checkpoint, path)
    config = _config_from_state(state, path)
    check_state_builds(lambda: Aligner(config), state, ALIGNER_ENTRY, str(path))
    return {key: value.float() if value.is_floating_point() else value for key, value in state.items()}, \
        config.to_dict()


def build_aligner(config: dict) -> Aligner:
    return Aligner(AlignerConfig.from_dict(config))


def random_aligner(size: str = "full", seed: int = 0) -> tuple[dict[str, torch.Tensor], dict]:
    """Random weights (PyTorch's initialisation, BatchNorm statistics drawn too) at the published sizes
    (``"full"``) or small ones (``"tiny"``)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    config = SIZES[size]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Aligner(config)
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0.0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    return {key: value.detach().clone() for key, value in model.state_dict().items()}, config.to_dict()
