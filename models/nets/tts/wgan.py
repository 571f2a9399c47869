"""B3's target speakers: the generator of the recipe's Wasserstein GAN (``anonymization/utils/WGAN/resnet_1.py``
``ResNet_G``, trained with the quadratic-cost WGAN of ``wgan_qc.py``) with the keys of ``style-embed_wgan.pt``'s
``generator_state_dict`` (without ``nn.DataParallel``'s ``module.`` prefix) plus the training data's ``mean``
and ``std``; :func:`generate_vectors` (``EmbeddingsGenerator.generate_embeddings``) and :func:`assign_targets`
(``GANAnonymizer._select_gan_vector`` over a set's utterances).

Where the recipe draws from the global RNGs (``torch.randn``, ``np.random.choice``), these take explicit
generators, so a run's seed decides its speakers.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.spatial.distance import cosine
from torch import nn

SEED_SIDE = 4
RESIDUAL_RATIO = 0.1
LEAK = 0.2
IMAGE_CHANNELS = 3


@dataclass(frozen=True)
class WganConfig:
    """The generator's part of the checkpoint's ``model_parameters``."""
    data_dim: int = 128
    z_dim: int = 16
    size: int = 8
    nfilter: int = 8
    nfilter_max: int = 16

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> WganConfig:
        return cls(**values)

    @property
    def layers(self) -> int:
        return int(math.log2(self.size / SEED_SIDE))

    @property
    def seed_channels(self) -> int:
        return min(self.nfilter_max, self.nfilter * 2 ** (self.layers + 1))


class ResidualBlock(nn.Module):
    """Two 3x3 convs with batch norm, added at 0.1 to a (learned, when the width changes) shortcut."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        hidden = min(channels_in, channels_out)
        self.conv_0 = nn.Conv2d(channels_in, hidden, 3, padding=1, bias=False)
        self.bn2d_0 = nn.BatchNorm2d(hidden)
        self.conv_1 = nn.Conv2d(hidden, channels_out, 3, padding=1, bias=False)
        self.bn2d_1 = nn.BatchNorm2d(channels_out)
        self.learned_shortcut = channels_in != channels_out
        if self.learned_shortcut:
            self.conv_s = nn.Conv2d(channels_in, channels_out, 1, bias=False)
            self.bn2d_s = nn.BatchNorm2d(channels_out)
        self.relu = nn.LeakyReLU(LEAK)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.bn2d_s(self.conv_s(x)) if self.learned_shortcut else x
        dx = self.bn2d_1(self.conv_1(self.relu(self.bn2d_0(self.conv_0(x)))))
        return self.relu(shortcut + RESIDUAL_RATIO * dx)


class EmbeddingGenerator(nn.Module):
    """Latent (n, z_dim) -> (n, data_dim) normalised speaker vectors; ``mean`` and ``std`` undo the training
    data's normalisation (:func:`generate_vectors`)."""

    def __init__(self, config: WganConfig = WganConfig()):
        super().__init__()
        self.config = config
        nf, nf_max = config.nfilter, config.nfilter_max
        self.fc = nn.Linear(config.z_dim, config.seed_channels * SEED_SIDE * SEED_SIDE)
        self.bn1d = nn.BatchNorm1d(config.seed_channels * SEED_SIDE * SEED_SIDE)
        self.relu = nn.LeakyReLU(LEAK)
        blocks: list[nn.Module] = []
        for level in range(config.layers, 0, -1):
            blocks += [ResidualBlock(min(nf * 2 ** (level + 1), nf_max), min(nf * 2 ** level, nf_max)),
                       nn.Upsample(scale_factor=2)]
        blocks += [ResidualBlock(min(nf * 2, nf_max), min(nf, nf_max)),
                   ResidualBlock(min(nf, nf_max), min(nf, nf_max))]
        self.resnet = nn.Sequential(*blocks)
        self.conv_img = nn.Conv2d(nf, IMAGE_CHANNELS, 3, padding=1)
        self.fc_out = nn.Linear(IMAGE_CHANNELS * config.size * config.size, config.data_dim)
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("std", torch.ones(()))

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1d(self.fc(latent)))
        out = self.resnet(out.view(latent.size(0), self.config.seed_channels, SEED_SIDE, SEED_SIDE))
        return self.fc_out(self.relu(self.conv_img(out)).flatten(1))


def generate_vectors(generator_model: EmbeddingGenerator, mean: torch.Tensor, std: torch.Tensor, n: int,
                     torch_generator: torch.Generator) -> np.ndarray:
    """(n, data_dim) float32 artificial speaker vectors: the generator in eval mode on ``n`` standard normal
    latents drawn from ``torch_generator`` at once (as the recipe draws its 5,000), times ``std`` plus ``mean``."""
    latent = torch.randn((n, generator_model.config.z_dim), generator=torch_generator)
    was_training = generator_model.training
    generator_model.eval()
    with torch.inference_mode():
        vectors = generator_model(latent) * std + mean
    generator_model.train(was_training)
    return vectors.numpy().astype(np.float32)


def assign_targets(originals: list[np.ndarray], vectors: np.ndarray, rng: np.random.Generator,
                   threshold: float = 0.7, tries: int = 20) -> list[int]:
    """For each original embedding in order, the index of its target among ``vectors``: an unused one drawn
    from ``rng``, redrawn (with replacement) while its cosine similarity to the original is at least
    ``threshold``, at most ``tries`` draws, the last one kept; then marked used. When every vector is used,
    all become unused again. The recipe's rule and draws exactly, cosine included (scipy's)."""
    unused = np.arange(len(vectors))
    chosen: list[int] = []
    for original in originals:
        for _ in range(tries):
            if len(unused) == 0:
                unused = np.arange(len(vectors))
            index = rng.choice(unused)
            if 1 - cosine(original, vectors[index]) < threshold:
                break
        unused = unused[unused != index]
        chosen.append(int(index))
    return chosen
