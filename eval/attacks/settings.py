"""Attack settings the command line shows (defaults and choices), kept free of NumPy so that
``voxanon attack --help`` starts quickly."""
from __future__ import annotations

from dataclasses import dataclass

from ...data_prep.errors import VoxanonError

CLASSIFIERS = ("logistic", "mlp")
"""The sex-attribute attack's classifiers (:mod:`.sex`)."""


@dataclass(frozen=True)
class WassersteinProcrustesConfig:
    """Hyper-parameters of Wasserstein-Procrustes; defaults are the reference code's of
    Champion et al., *On the invertibility of a voice privacy system using embedding alignment*, ASRU 2021."""

    learning_rate: float = 10.0
    batch_size: int = 8
    iterations: int = 512
    max_epochs: int = 15
    sinkhorn_reg: float = 0.05
    refine_sinkhorn_reg: float = 0.025
    init_samples: int = 1000
    init_iterations: int = 100
    seed: int = 1111

    def __post_init__(self) -> None:
        for name in ("learning_rate", "sinkhorn_reg", "refine_sinkhorn_reg"):
            if not getattr(self, name) > 0:
                raise VoxanonError(f"Wasserstein-Procrustes: {name} must be positive")
        for name in ("batch_size", "iterations", "max_epochs", "init_samples", "init_iterations"):
            if getattr(self, name) < 1:
                raise VoxanonError(f"Wasserstein-Procrustes: {name} must be at least 1")
