"""B3's speaker-side files written as their publishers' code writes them, from random weights:

- ``tts/Embedding/embedding_function.pt``: ``torch.save({"style_emb_func": embed.state_dict()}, ...)``, the one
  entry IMS-Toucan's embedding scripts write (``finetune_embeddings_to_tasks.py``) and every reader takes;
- ``anonymization/gan_style-embed/style-embed_wgan.pt``: ``WassersteinGanQuadraticCost.save_model_checkpoint``'s
  dict (generator and critic wrapped in ``nn.DataParallel``, both Adam states after a training step, the
  training JSON as ``model_parameters``, ``iterations``, the data's scalar ``mean`` and ``std``), written by the
  transcribed ``save_model_checkpoint`` under its ``<timestamp>_wgan`` name and renamed as the release names it.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from tests.reference.toucan import gst as gst_ref
from tests.reference.toucan import wgan as wgan_ref
from voxanon.models.checkpoints.sttts_speaker import random_style, random_wgan

EMBEDDING_FILE = Path("tts/Embedding/embedding_function.pt")
WGAN_FILE = Path("anonymization/gan_style-embed/style-embed_wgan.pt")
TRAINING_ITERATIONS = 1200


def reference_style(size: str = "tiny", seed: int = 0) -> gst_ref.StyleEmbedding:
    """The transcribed IMS-Toucan StyleEmbedding holding ``random_style(size, seed)``'s weights."""
    state, config = random_style(size, seed)
    embed = gst_ref.StyleEmbedding(idim=config["n_mels"], gst_tokens=config["tokens"],
                                   gst_token_dim=config["token_dim"], gst_heads=config["heads"],
                                   conv_layers=len(config["conv_channels"]),
                                   conv_chans_list=tuple(config["conv_channels"]), gru_units=config["gru_units"])
    embed.load_state_dict(state)
    return embed


def write_embedding_function(path: Path, size: str = "tiny", seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"style_emb_func": reference_style(size, seed).state_dict()}, path)
    return path


def training_parameters(size: str = "tiny") -> dict:
    """The recipe's ``configs/train_gan.json`` for 128-d style embeddings (``full``), or a small one (``tiny``)."""
    _, config = random_wgan(size, 0)
    return {"model": "resnet", "gan_variant": "wgan-qc", "epochs": 1, "cycles": 2000, "n_max_iterations": 10000000,
            "learning_rate": 1e-5, "betas": [0.5, 0.999], "z_dim": config["z_dim"], "size": config["size"],
            "nfilter": config["nfilter"], "nfilter_max": config["nfilter_max"], "batch_size": 128,
            "data_dim": [1, 1, config["data_dim"]], "activation": "leaky_relu", "num_workers": 8,
            "conv_filters": 40, "gamma": 1, "milestones": [1500, 3000, 5000], "save_every": 1,
            "normalize_data": False}


def reference_wgan(size: str = "tiny", seed: int = 0) -> tuple[nn.DataParallel, nn.DataParallel, dict, dict]:
    """(generator, critic, parameters, normalisation): the recipe's networks, wrapped as it wraps them, the
    generator holding ``random_wgan(size, seed)``'s weights, the critic initialised as ``init_resnet`` does."""
    parameters = training_parameters(size)
    state, _ = random_wgan(size, seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        generator, critic = wgan_ref.init_resnet(parameters)
    normalisation = {"mean": state.pop("mean"), "std": state.pop("std")}
    generator.load_state_dict(state)
    return nn.DataParallel(generator), nn.DataParallel(critic), parameters, normalisation


def write_wgan(path: Path, size: str = "tiny", seed: int = 0) -> Path:
    generator, critic, parameters, normalisation = reference_wgan(size, seed)
    optimizer_g, optimizer_d = wgan_ref.create_optimizers(generator, critic, parameters)
    # One Adam step each on a stand-in loss, so the optimizers hold the moment estimates a trained file holds;
    # the weights saved are the ones before it.
    weights = {name: tensor.detach().clone() for name, tensor in generator.state_dict().items()}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        latent = torch.randn(4, parameters["z_dim"])
        fake = generator(latent)
        critic(fake.detach()).mean().backward()
        generator(latent).pow(2).mean().backward()
    optimizer_g.step()
    optimizer_d.step()
    generator.load_state_dict(weights)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = wgan_ref.save_model_checkpoint(generator, critic, optimizer_g, optimizer_d, TRAINING_ITERATIONS,
                                             str(path.parent), parameters, "07-12-2026-04-00-00",
                                             normalisation["mean"], normalisation["std"])
    os.replace(written, path)
    return path


def write_speaker_release(models_dir: Path, size: str = "tiny", seed: int = 0) -> dict[str, Path]:
    """Both files under a recipe ``models_dir`` (``exp/sttts_models``)."""
    return {"style": write_embedding_function(models_dir / EMBEDDING_FILE, size, seed),
            "wgan": write_wgan(models_dir / WGAN_FILE, size, seed + 1)}
