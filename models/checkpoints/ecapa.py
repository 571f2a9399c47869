"""ECAPA-TDNN speaker encoders from weights: a speechbrain model folder, an installed set, or a state dict.

Sizes are read off the checkpoint's tensor shapes (:func:`ecapa_config_from_state`); the dilations, which no
weight shows, come from the folder's ``hyperparams.yaml``. Every load is strict and names the file.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .safe import CheckpointError, built_with_weights, safe_load
from .speechbrain_dirs import ecapa_dilations
from ..nets.speaker import EcapaConfig, EcapaEncoder, ecapa_tdnn

EMBEDDING_FILE = "embedding_model.ckpt"
EMBEDDING_NORM_FILE = "mean_var_norm_emb.ckpt"


def ecapa_config_from_state(state: dict[str, torch.Tensor], embedding_mean_norm: bool = False,
                            dilations: tuple[int, ...] | None = None) -> EcapaConfig:
    """Channel and kernel sizes read off an ECAPA_TDNN state dict; the dilations, which no weight shows,
    are given (a model folder's ``hyperparams.yaml`` has them) or the standard ones."""
    try:
        blocks = {k.split(".")[4] for k in state if k.startswith("blocks.1.res2net_block.blocks.")}
        return EcapaConfig(channels=tuple(int(state[f"blocks.{i}.conv.conv.weight" if i == 0 else
                                                    f"blocks.{i}.tdnn1.conv.conv.weight"].shape[0]) for i in range(4))
                           + (int(state["mfa.conv.conv.weight"].shape[0]),),
                           kernel_sizes=tuple(int(state[key].shape[-1]) for key in (
                               "blocks.0.conv.conv.weight", *(f"blocks.{i}.res2net_block.blocks.0.conv.conv.weight"
                                                              for i in range(1, 4)), "mfa.conv.conv.weight")),
                           lin_neurons=int(state["fc.conv.weight"].shape[0]),
                           n_mels=int(state["blocks.0.conv.conv.weight"].shape[1]),
                           attention_channels=int(state["asp.tdnn.conv.conv.weight"].shape[0]),
                           res2net_scale=len(blocks) + 1,
                           se_channels=int(state["blocks.1.se_block.conv1.conv.weight"].shape[0]),
                           dilations=dilations or EcapaConfig.dilations, embedding_mean_norm=embedding_mean_norm)
    except KeyError as error:
        raise CheckpointError(f"not a speechbrain ECAPA_TDNN state dict (missing {error})") from None


def ecapa_with_weights(config: EcapaConfig, state: dict[str, torch.Tensor],
                       embedding_mean: torch.Tensor | None = None, source: str = "ECAPA weights") -> EcapaEncoder:
    """The encoder holding ``state``'s tensors themselves (strict, naming ``source``; no random
    initialisation, no copy: about 30 ms less start-up for the SSL-SAS size)."""
    model = built_with_weights(lambda: ecapa_tdnn(config), state, source,
                               f"not the speechbrain ECAPA_TDNN of channels {list(config.channels)}")
    encoder = EcapaEncoder(config, model)
    if config.embedding_mean_norm:
        if embedding_mean is None:
            raise CheckpointError(f"this ECAPA config needs {EMBEDDING_NORM_FILE} (embedding mean)")
        encoder.embedding_mean.copy_(embedding_mean.reshape(-1))
    return encoder


def ecapa_from_model_set(model_set) -> EcapaEncoder:
    """An installed set's speaker encoder."""
    return ecapa_with_weights(EcapaConfig.from_dict(model_set.config["speaker"]), model_set.tensors("speaker"),
                              source=str(model_set.weights_file("speaker")))


def ecapa_from_directory(directory: str | Path, config: EcapaConfig | None = None, *,
                         embedding_mean_norm: bool = False) -> EcapaEncoder:
    """A speechbrain model folder (``embedding_model.ckpt``, optionally ``mean_var_norm_emb.ckpt``). Without
    ``config``, the sizes are read off the checkpoint and the dilations off the folder's hyperparams.yaml."""
    directory = Path(directory)
    state = safe_load(directory / EMBEDDING_FILE)
    if config is None:
        config = ecapa_config_from_state(state, embedding_mean_norm, ecapa_dilations(directory))
        if len(config.dilations) != len(config.kernel_sizes):
            raise CheckpointError(f"{directory}: hyperparams.yaml gives {len(config.dilations)} dilations for "
                                  f"{len(config.kernel_sizes)} ECAPA blocks")
    mean = None
    if config.embedding_mean_norm:
        stats = safe_load(directory / EMBEDDING_NORM_FILE)
        if "glob_mean" not in stats:
            raise CheckpointError(f"{directory / EMBEDDING_NORM_FILE}: no 'glob_mean' entry")
        mean = stats["glob_mean"]
    return ecapa_with_weights(config, state, mean, source=str(directory / EMBEDDING_FILE))
