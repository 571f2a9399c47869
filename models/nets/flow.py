"""Zero-LLR normalizing-flow discriminant analysis (Noé 2023 thesis, ch. 5).

A Real NVP flow ``g`` maps the data space to a base space where the two classes are

    z | C1 ~ N(+μ e1, Σ),   z | C2 ~ N(−μ e1, Σ),   Σ = diag(2μ, 1, ..., 1),

so the natural-log LLR of ``x`` is exactly ``z1 = [g⁻¹(x)]_1`` (the Jacobians cancel). C1 is
the class of positive LLRs (female for sex). Protection maps to the base space, sets
``z1 = 0`` and maps back.

Architecture (thesis §5.2; LIAvignon/bridge-features-evidence): an affine standardisation of the
input (fixed, from the training data; any bijection keeps the LLR identity) followed by
``n_layers`` affine coupling layers with alternating even/odd-dimension masks (an assumption:
the ICASSP 2023 masks are not published). Each layer
``y = m⊙x + (1−m)⊙(x⊙exp(s(m⊙x)) + t(m⊙x))`` with ``s = rescale ⊙ tanh(MLP)`` and ``t`` an
MLP, both Linear–LeakyReLU–Linear–LeakyReLU–Linear. With ``zero_init`` the rescale vector
and the last layer of ``t`` start at 0 (as in nii-yamagishilab/speaker_sex_attribute_privacy), so
the untrained flow is the identity.

μ is stored as ``log_mu``. Two training strategies (thesis §5.2.3): ``mle`` updates μ after each
gradient step by ``μ ← α μ + (1 − α) μ̂_MLE(z1)`` (α = 0.99); ``learned`` trains ``log μ`` by
gradient with the flow (the ICASSP 2023 code). Both start from the shared-covariance
Gaussian KL of the training data unless μ is given.

Models are saved as a safetensors state dict plus a JSON config. The published pickled
flows (``classes.RealNVP`` of the ICASSP 2023 zLLR-VC release and of the ICASSP 2022
bridge-features-evidence code) are imported by :func:`voxanon.models.checkpoints.zllr_flow.import_reference_flow`, which rebuilds
their module tree through an allow-listed unpickler and runs none of their code;
:func:`voxanon.models.checkpoints.zllr_flow.flow_from_reference_state_dict` builds the flow from the same state-dict keys (a zLLR-VC
``g_*`` carries them under ``xv_dis_model.``, which the model-set import checks and leaves to
``voxanon zllr import``). Their z1 is the LLR of the class the release trained
with label 0 (prior mean +μ), whichever sex that was.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from ...data_prep.atomic import atomic_path, atomic_write_text
from ...data_prep.vectors import l2_normalise
from .flow_config import FlowConfig, FlowError, TrainingConfig
from ..speakers.lda import LinearDiscriminant

log = logging.getLogger(__name__)

MIN_MU = 1e-6
CONFIG_FILE = "flow.json"
WEIGHTS_FILE = "flow.safetensors"


def alternating_masks(dim: int, n_layers: int) -> torch.Tensor:
    """Layer k conditions on the even dimensions when k is even, on the odd ones otherwise."""
    even = (torch.arange(dim) % 2 == 0).float()
    return torch.stack([even if k % 2 == 0 else 1.0 - even for k in range(n_layers)])


def _mlp(dim: int, hidden: int, slope: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.LeakyReLU(slope), nn.Linear(hidden, hidden),
                         nn.LeakyReLU(slope), nn.Linear(hidden, dim))


class AffineCoupling(nn.Module):
    """One Real NVP layer; ``forward`` goes data → base and returns ``log|det J|`` per row."""

    def __init__(self, mask: torch.Tensor, hidden: int, zero_init: bool, negative_slope: float):
        super().__init__()
        dim = mask.numel()
        self.register_buffer("mask", mask.clone())
        self.scale_net = _mlp(dim, hidden, negative_slope)
        self.rescale = nn.Parameter(torch.zeros(dim) if zero_init else torch.ones(dim))
        self.translation_net = _mlp(dim, hidden, negative_slope)
        if zero_init:
            nn.init.zeros_(self.translation_net[-1].weight)
            nn.init.zeros_(self.translation_net[-1].bias)

    def _scale_translation(self, conditioner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        free = 1.0 - self.mask
        scale = self.rescale * torch.tanh(self.scale_net(conditioner)) * free
        return scale, self.translation_net(conditioner) * free

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conditioner = x * self.mask
        scale, translation = self._scale_translation(conditioner)
        return conditioner + (1.0 - self.mask) * (x * torch.exp(scale) + translation), scale.sum(dim=1)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        conditioner = y * self.mask
        scale, translation = self._scale_translation(conditioner)
        return conditioner + (1.0 - self.mask) * ((y - translation) * torch.exp(-scale))


class ZeroLLRFlow(nn.Module):
    """The flow, its input standardisation and ``log μ``; the base-space first coordinate is the LLR."""

    def __init__(self, config: FlowConfig, masks: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        masks = alternating_masks(config.dim, config.n_layers) if masks is None else masks
        if tuple(masks.shape) != (config.n_layers, config.dim):
            raise FlowError(f"masks of shape {tuple(masks.shape)} do not fit {config.n_layers} layers "
                            f"of dimension {config.dim}")
        self.layers = nn.ModuleList(AffineCoupling(mask, config.hidden, config.zero_init, config.negative_slope)
                                    for mask in masks)
        self.register_buffer("input_shift", torch.zeros(config.dim))
        self.register_buffer("input_scale", torch.ones(config.dim))
        self.log_mu = nn.Parameter(torch.tensor(0.0))

    @property
    def mu(self) -> float:
        return float(self.log_mu.detach().exp())

    def to_base(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z = g⁻¹(x)`` and ``log|det ∂z/∂x|`` per row."""
        z = (x - self.input_shift) / self.input_scale
        log_det = -torch.log(self.input_scale).sum().expand(x.shape[0])
        for layer in self.layers:
            z, layer_log_det = layer(z)
            log_det = log_det + layer_log_det
        return z, log_det

    def from_base(self, z: torch.Tensor) -> torch.Tensor:
        """``x = g(z)``."""
        for layer in reversed(self.layers):
            z = layer.inverse(z)
        return z * self.input_scale + self.input_shift

    def base_log_density(self, z: torch.Tensor, is_class1: torch.Tensor) -> torch.Tensor:
        """``log N(z; ±μ e1, diag(2μ, 1, …, 1))``, + for class 1."""
        mu = self.log_mu.exp()
        sign = is_class1.to(z.dtype) * 2.0 - 1.0
        quadratic = (z[:, 0] - sign * mu) ** 2 / (2.0 * mu) + (z[:, 1:] ** 2).sum(dim=1)
        return -0.5 * quadratic - 0.5 * torch.log(2.0 * mu) - 0.5 * z.shape[1] * math.log(2.0 * math.pi)

    def log_likelihood(self, x: torch.Tensor, is_class1: torch.Tensor) -> torch.Tensor:
        """``log f(x | class)`` by the change of variables."""
        z, log_det = self.to_base(x)
        return self.base_log_density(z, is_class1) + log_det

    def llr(self, x: torch.Tensor) -> torch.Tensor:
        """``ln f(x|C1)/f(x|C2) = z1``."""
        return self.to_base(x)[0][:, 0]

    def protect(self, x: torch.Tensor) -> torch.Tensor:
        """``g(z with z1 = 0)``: the vector without evidence about the class."""
        z, _ = self.to_base(x)
        return self.from_base(torch.cat((torch.zeros_like(z[:, :1]), z[:, 1:]), dim=1))

    def _prepared(self, vectors) -> torch.Tensor:
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[1] != self.config.dim:
            raise FlowError(f"vectors of shape {vectors.shape} do not fit a flow of dimension {self.config.dim}")
        if self.config.l2_normalise_input:
            vectors = l2_normalise(vectors)
        return torch.as_tensor(vectors, dtype=self.log_mu.dtype)

    @torch.no_grad()
    def llr_numpy(self, vectors) -> np.ndarray:
        """LLRs of an ``(n, dim)`` array (after the configured L2 normalisation)."""
        return self.llr(self._prepared(vectors)).double().numpy()

    @torch.no_grad()
    def protect_numpy(self, vectors) -> np.ndarray:
        """Protected copies of an ``(n, dim)`` array."""
        return self.protect(self._prepared(vectors)).double().numpy()


def mu_mle(z1) -> float:
    """``μ̂ = −1 + sqrt(1 + mean(z1²))``, the maximiser of the batch likelihood in μ (App. 10.4), ≥ 1e-6."""
    z1 = torch.as_tensor(z1, dtype=torch.float64)
    return max(MIN_MU, float(-1.0 + torch.sqrt(1.0 + torch.mean(z1 ** 2))))


@dataclass
class TrainingHistory:
    """Per-epoch mean training NLL, validation NLL (nats per vector) and μ; the epoch kept."""

    train_nll: list[float] = field(default_factory=list)
    validation_nll: list[float] = field(default_factory=list)
    mu: list[float] = field(default_factory=list)
    best_epoch: int = 0


def _validation_split(is_class1: np.ndarray, groups: Sequence[str] | None, fraction: float,
                      generator: np.random.Generator) -> np.ndarray:
    """A boolean mask of validation rows, stratified by class (each class gives at least one row, or one
    whole speaker when ``groups`` is given), so a small corpus never validates on one class."""
    mask = np.zeros(len(is_class1), dtype=bool)
    units = np.arange(len(is_class1)) if groups is None else np.asarray(groups, dtype=object)
    for label in (False, True):
        candidates = sorted(set(units[is_class1 == label].tolist()))
        chosen = generator.permutation(len(candidates))[:max(1, int(round(fraction * len(candidates))))]
        mask |= np.isin(units, [candidates[i] for i in chosen])
    return mask


def train_zero_llr_flow(vectors, is_class1, config: FlowConfig, training: TrainingConfig | None = None, *,
                        groups: Sequence[str] | None = None,
                        progress: bool = True) -> tuple[ZeroLLRFlow, TrainingHistory]:
    """Fit a zero-LLR flow by maximum likelihood; returns the best-validation model."""
    training = training or TrainingConfig()
    vectors = np.asarray(vectors, dtype=np.float64)
    is_class1 = np.asarray(is_class1, dtype=bool)
    if vectors.ndim != 2 or vectors.shape[1] != config.dim or len(vectors) != len(is_class1):
        raise FlowError(f"training data of shape {vectors.shape} with {len(is_class1)} labels "
                        f"does not fit a flow of dimension {config.dim}")
    if groups is not None and len(groups) != len(vectors):
        raise FlowError(f"{len(groups)} speaker ids for {len(vectors)} vectors")
    if config.l2_normalise_input:
        vectors = l2_normalise(vectors)
    generator = np.random.default_rng(training.seed)
    torch.manual_seed(training.seed)
    validation = _validation_split(is_class1, groups, training.validation_fraction, generator)
    train_x, train_y = vectors[~validation], is_class1[~validation]
    for name, labels in (("training", train_y), ("validation", is_class1[validation])):
        if labels.all() or not labels.any():
            raise FlowError(f"the {name} split holds one class only; give more data of each class")

    model = ZeroLLRFlow(config).double()
    scale = train_x.std(axis=0)
    if np.any(scale == 0):
        raise FlowError("a dimension of the training vectors is constant; the flow cannot standardise it")
    model.input_shift.copy_(torch.as_tensor(train_x.mean(axis=0)))
    model.input_scale.copy_(torch.as_tensor(scale))
    mu0 = training.initial_mu or LinearDiscriminant.fit(train_x, train_y).kl_divergence
    with torch.no_grad():
        model.log_mu.fill_(math.log(max(mu0, MIN_MU)))
    model = model.float()
    learned = training.mu_strategy == "learned"
    model.log_mu.requires_grad_(learned)
    parameters = [p for name, p in model.named_parameters() if learned or name != "log_mu"]
    optimiser = torch.optim.Adam(parameters, lr=training.learning_rate)

    x_train = torch.as_tensor(train_x, dtype=torch.float32)
    y_train = torch.as_tensor(train_y)
    x_valid = torch.as_tensor(vectors[validation], dtype=torch.float32)
    y_valid = torch.as_tensor(is_class1[validation])
    history = TrainingHistory()
    best_state, best_nll, stale = copy.deepcopy(model.state_dict()), math.inf, 0
    epochs = tqdm(range(1, training.max_epochs + 1), desc="zero-LLR flow", unit="epoch", disable=not progress)
    for epoch in epochs:
        model.train()
        order = torch.as_tensor(generator.permutation(len(x_train)))
        total = 0.0
        for start in range(0, len(order), training.batch_size):
            rows = order[start:start + training.batch_size]
            z, log_det = model.to_base(x_train[rows])
            loss = -(model.base_log_density(z, y_train[rows]) + log_det).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            if not learned:
                with torch.no_grad():
                    mu = training.alpha * model.mu + (1.0 - training.alpha) * mu_mle(z[:, 0].detach())
                    model.log_mu.fill_(math.log(max(mu, MIN_MU)))
            total += loss.item() * len(rows)
        model.eval()
        with torch.no_grad():
            valid_nll = float(-model.log_likelihood(x_valid, y_valid).mean())
        if not math.isfinite(valid_nll):
            raise FlowError(f"training diverged at epoch {epoch} (validation NLL {valid_nll}); "
                            "lower the learning rate")
        history.train_nll.append(total / len(x_train))
        history.validation_nll.append(valid_nll)
        history.mu.append(model.mu)
        epochs.set_postfix(valid_nll=f"{valid_nll:.3f}", mu=f"{model.mu:.3f}")
        if valid_nll < best_nll:
            best_state, best_nll, stale, history.best_epoch = copy.deepcopy(model.state_dict()), valid_nll, 0, epoch
        else:
            stale += 1
            if stale >= training.patience:
                break
    model.load_state_dict(best_state)
    model.log_mu.requires_grad_(False)
    model.eval()
    return model, history


def save_flow(model: ZeroLLRFlow, directory: str | os.PathLike) -> None:
    """Write ``flow.json`` (config) and ``flow.safetensors`` (state dict) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().contiguous().cpu() for name, tensor in model.state_dict().items()}
    with atomic_path(directory / WEIGHTS_FILE) as tmp:
        save_file(state, str(tmp))
    atomic_write_text(directory / CONFIG_FILE, json.dumps(asdict(model.config), indent=2) + "\n")


def load_flow(directory: str | os.PathLike) -> ZeroLLRFlow:
    """The model :func:`save_flow` wrote."""
    directory = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise FlowError(f"{directory}: {name} is missing; not a saved zero-LLR flow")
    try:
        config = FlowConfig(**json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8")))
    except (TypeError, ValueError) as error:
        raise FlowError(f"{directory / CONFIG_FILE}: not a flow config ({error})") from error
    state = load_file(str(directory / WEIGHTS_FILE))
    model = ZeroLLRFlow(config).to(state["log_mu"].dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise FlowError(f"{directory / WEIGHTS_FILE}: does not match {CONFIG_FILE} ({error})") from error
    model.log_mu.requires_grad_(False)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Import of the pickled flows published with the ICASSP 2022 and 2023 releases.
