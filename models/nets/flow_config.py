"""The zero-LLR flow's architecture and training settings (:mod:`voxanon.models.nets.flow`), without torch:
the command line shows their defaults and choices without importing it."""
from __future__ import annotations

from dataclasses import dataclass

from ...data_prep.errors import VoxanonError

MU_STRATEGIES = ("mle", "learned")
PROTECTION_METHODS = ("zllr", "lda", "global")
"""What a flow folder can protect vectors with: the flow (zero the LLR), or its LDA or global-average baseline."""


class FlowError(VoxanonError):
    """A flow model or its training data that cannot be used."""


@dataclass(frozen=True)
class FlowConfig:
    """The architecture. ``l2_normalise_input``: inputs are L2-normalised before the flow
    (the ICASSP 2023 ECAPA set-up); that step is not part of the bijection."""

    dim: int
    hidden: int = 512
    n_layers: int = 6
    zero_init: bool = True
    negative_slope: float = 0.01
    l2_normalise_input: bool = False

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise FlowError(f"a coupling flow needs at least 2 dimensions, got {self.dim}")
        if self.hidden < 1 or self.n_layers < 1:
            raise FlowError("hidden width and number of layers must be positive")


@dataclass(frozen=True)
class TrainingConfig:
    """Maximum-likelihood training; early stopping on the validation NLL (an assumption: Noé 2023 thesis §5.3
    gives no batch size or epoch count)."""

    mu_strategy: str = "mle"
    alpha: float = 0.99
    learning_rate: float = 1e-4
    batch_size: int = 256
    max_epochs: int = 100
    patience: int = 5
    validation_fraction: float = 0.1
    initial_mu: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mu_strategy not in MU_STRATEGIES:
            raise FlowError(f"unknown μ strategy {self.mu_strategy!r}; choose one of {', '.join(MU_STRATEGIES)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise FlowError(f"α must lie in [0, 1], got {self.alpha}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise FlowError(f"validation fraction must lie in (0, 1), got {self.validation_fraction}")
        if self.initial_mu is not None and self.initial_mu <= 0:
            raise FlowError(f"initial μ must be positive, got {self.initial_mu}")
        if self.batch_size < 1 or self.max_epochs < 1 or self.patience < 1:
            raise FlowError("batch size, epochs and patience must be positive")
