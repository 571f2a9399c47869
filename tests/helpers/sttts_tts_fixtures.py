"""B3's FastSpeech2 and HiFi-GAN files with random weights, written as IMS-Toucan's train loops save them
(``fastspeech2_train_loop.py``, ``hifigan_train_loop.py`` in the VoicePrivacy 2024 recipe's vendored copy): every
entry, the optimizers, schedulers, AMP scaler and step counters included, as they are after one training step.

``real_training``: the training entries from torch's own Adam/RAdam, schedulers and scaler, each optimizer stepped
once with zero gradients (the weights stay the random ones). Creating a torch optimizer imports ``torch._dynamo``
(4 s on a quiet machine, over 10 under load), so by default the entries are written as those objects' state
dicts are, from :data:`ADAM_GROUP` and its kind (torch 2.x's layout); a slow test checks that both agree."""
from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import torch
from torch.optim.lr_scheduler import MultiStepLR

from tests.reference.toucan.fastspeech2 import FastSpeech2 as ReferenceFastSpeech2
from tests.reference.toucan.fastspeech2 import WarmupScheduler
from tests.reference.toucan.hifigan import HiFiGANMultiScaleMultiPeriodDiscriminator, TrainingHiFiGANGenerator
from voxanon.models.checkpoints.safe import split_weight_norm
from voxanon.models.checkpoints.sttts_tts import random_fastspeech2, random_hifigan

TINY_DISCRIMINATOR = {
    "scale_discriminator_params": {"in_channels": 1, "out_channels": 1, "kernel_sizes": [15, 41, 5, 3], "channels": 16,
                                   "max_downsample_channels": 32, "max_groups": 16, "bias": True,
                                   "downsample_scales": [4, 4, 4, 4, 1], "nonlinear_activation": "LeakyReLU",
                                   "nonlinear_activation_params": {"negative_slope": 0.1}},
    "period_discriminator_params": {"in_channels": 1, "out_channels": 1, "kernel_sizes": [5, 3], "channels": 4,
                                    "downsample_scales": [3, 3, 3, 3, 1], "max_downsample_channels": 32, "bias": True,
                                    "nonlinear_activation": "LeakyReLU",
                                    "nonlinear_activation_params": {"negative_slope": 0.1},
                                    "use_weight_norm": True, "use_spectral_norm": False}}
"""Toucan's discriminator, narrowed for the tiny files (its layout and keys unchanged)."""


ADAM_GROUP = {"lr": 5.0000000000000004e-08, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": 0, "amsgrad": False,
              "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None,
              "decoupled_weight_decay": False, "initial_lr": 0.0001}
"""``torch.optim.Adam(lr=0.0001)``'s parameter group after one step of Toucan's ``WarmupScheduler(warmup_steps=4000)``."""
RADAM_GROUP = {"lr": None, "betas": (0.5, 0.9), "eps": 1e-08, "weight_decay": 0.0, "maximize": False, "foreach": None,
               "capturable": False, "decoupled_weight_decay": False, "differentiable": False, "initial_lr": None}
"""``torch.optim.RAdam(betas=(0.5, 0.9), weight_decay=0.0)``'s parameter group (``lr`` as given)."""
WARMUP_SCHEDULER = {"warmup_steps": 4000, "base_lrs": [0.0001], "last_epoch": 1, "_step_count": 2, "_is_initial": False,
                    "_get_lr_called_within_step": False, "_last_lr": [5.0000000000000004e-08]}
SCALER = {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 0}
MILESTONES = [200000, 400000, 600000, 800000]


def multistep_scheduler(lr: float) -> dict:
    return {"milestones": Counter(MILESTONES), "gamma": 0.5, "base_lrs": [lr], "last_epoch": 1, "_step_count": 2,
            "_is_initial": False, "_get_lr_called_within_step": False, "_last_lr": [lr]}


def optimizer_state(parameters, group: dict) -> dict:
    """An Adam-family optimizer's state dict after one step with zero gradients."""
    parameters = list(parameters)
    return {"state": {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                      for i, p in enumerate(parameters)},
            "param_groups": [{**group, "params": list(range(len(parameters)))}]}


def _stepped(optimizer: torch.optim.Optimizer, scheduler, parameters) -> None:
    for parameter in parameters:
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    scheduler.step()


def write_fastspeech2(path: Path, size: str = "tiny", seed: int = 0, real_training: bool = False) -> Path:
    """``prosody_cloning.pt`` as ``fastspeech2_train_loop.py`` saves it."""
    state, config = random_fastspeech2(size, seed)
    net = ReferenceFastSpeech2(weights=state, **config)  # our config's names are its arguments'
    if real_training:
        optimizer = torch.optim.Adam(net.parameters(), lr=0.0001)
        scheduler = WarmupScheduler(optimizer, warmup_steps=4000)
        _stepped(optimizer, scheduler, net.parameters())
        training = {"optimizer": optimizer.state_dict(), "scaler": torch.amp.GradScaler("cpu").state_dict(),
                    "scheduler": scheduler.state_dict()}
    else:
        training = {"optimizer": optimizer_state(net.parameters(), ADAM_GROUP), "scaler": dict(SCALER),
                    "scheduler": dict(WARMUP_SCHEDULER)}
    default_embedding = torch.randn(config["utt_embed_dim"], generator=torch.Generator().manual_seed(seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "model": net.state_dict(),
        "optimizer": training["optimizer"],
        "step_counter": 1,
        "scaler": training["scaler"],
        "scheduler": training["scheduler"],
        "default_emb": default_embedding,
    }, path)
    return path


JIK876_TO_TOUCAN = [
    (r"conv_pre\.(weight|bias)", r"input_conv.\1"),
    (r"ups\.(\d+)\.(weight|bias)", r"upsamples.\1.1.\2"),
    (r"resblocks\.(\d+)\.convs([12])\.(\d+)\.(weight|bias)", r"blocks.\1.convs\2.\3.1.\4"),
    (r"conv_post\.(weight|bias)", r"output_conv.1.\1"),
]
"""The inverse of :data:`~voxanon.models.nets.tts.hifigan.TOUCAN_TO_JIK876`."""


def toucan_generator_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our generator's plain weights -> Toucan's keys with ``torch.nn.utils.weight_norm``'s g/v pairs (dim 0)."""
    toucan = {}
    for key, value in state.items():
        name = next(re.sub(pattern, replacement, key) for pattern, replacement in JIK876_TO_TOUCAN
                    if re.fullmatch(pattern, key))
        if name.endswith(".weight"):
            toucan[name + "_g"], toucan[name + "_v"] = split_weight_norm(value, 0)
        else:
            toucan[name] = value
    return toucan


def write_hifigan(path: Path, size: str = "tiny", seed: int = 0, real_training: bool = False) -> Path:
    """``best.pt`` as ``hifigan_train_loop.py`` saves it (the recipe's ``train_vocoder_model.py`` networks)."""
    state, config = random_hifigan(size, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm, as Toucan uses it
        g = TrainingHiFiGANGenerator(channels=config["upsample_initial_channel"])
        g.load_state_dict(toucan_generator_state(state))
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            d = HiFiGANMultiScaleMultiPeriodDiscriminator(**({} if size == "full" else TINY_DISCRIMINATOR))
    training = {}
    for name, net, lr in (("generator", g, 0.001), ("discriminator", d, 0.0005)):
        if real_training:
            optimizer = torch.optim.RAdam(net.parameters(), betas=(0.5, 0.9), lr=lr, weight_decay=0.0)
            scheduler = MultiStepLR(optimizer, gamma=0.5, milestones=MILESTONES)
            _stepped(optimizer, scheduler, net.parameters())
            training[name] = (optimizer.state_dict(), scheduler.state_dict())
        else:
            group = {**RADAM_GROUP, "lr": lr, "initial_lr": lr}
            training[name] = (optimizer_state(net.parameters(), group), multistep_scheduler(lr))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "generator": g.state_dict(),
        "discriminator": d.state_dict(),
        "generator_optimizer": training["generator"][0],
        "discriminator_optimizer": training["discriminator"][0],
        "generator_scheduler": training["generator"][1],
        "discriminator_scheduler": training["discriminator"][1],
        "step_counter": 1
    }, path)
    return path
