"""Zero-LLR normalizing-flow discriminant analysis (spec §9.1–9.5; [S4] Ch. 5).

A Real NVP flow ``g`` maps the data space to a base space where the two classes are

    z | C1 ~ N(+μ e1, Σ),   z | C2 ~ N(−μ e1, Σ),   Σ = diag(2μ, 1, ..., 1),

so the natural-log LLR of ``x`` is exactly ``z1 = [g⁻¹(x)]_1`` (the Jacobians cancel). C1 is
the class of positive LLRs (female for sex). Protection maps to the base space, sets
``z1 = 0`` and maps back.

Architecture (§9.2): an affine standardisation of the input (fixed, from the training
data; any bijection keeps the LLR identity) followed by ``n_layers`` affine coupling
layers with alternating even/odd-dimension masks (ASSUMPTION of the spec). Each layer
``y = m⊙x + (1−m)⊙(x⊙exp(s(m⊙x)) + t(m⊙x))`` with ``s = rescale ⊙ tanh(MLP)`` and ``t`` an
MLP, both Linear–LeakyReLU–Linear–LeakyReLU–Linear. With ``zero_init`` the rescale vector
and the last layer of ``t`` start at 0 (EXT), so the untrained flow is the identity.

μ is stored as ``log_mu``. Two training strategies (§9.3): ``mle`` updates μ after each
gradient step by ``μ ← α μ + (1 − α) μ̂_MLE(z1)`` (α = 0.99); ``learned`` trains ``log μ`` by
gradient with the flow (the ICASSP 2023 code). Both start from the shared-covariance
Gaussian KL of the training data unless μ is given.

Models are saved as a safetensors state dict plus a JSON config. The published pickled
flows (``classes.RealNVP`` of the ICASSP 2023 zLLR-VC release and of the ICASSP 2022
bridge-features-evidence code) are imported by :func:`import_reference_flow`, which rebuilds
their module tree through an allow-listed unpickler and runs none of their code;
:func:`flow_from_reference_state_dict` builds the flow from the same state-dict keys (a zLLR-VC
``g_*`` carries them under ``xv_dis_model.``, which the model-set import checks and leaves to
``voxanon zllr import``). Their z1 is the LLR of the class the release trained
with label 0 (prior mean +μ), whichever sex that was.
"""
from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from voxanon.data_prep.atomic import atomic_path, atomic_write_text
from voxanon.data_prep.vectors import l2_normalise
from voxanon.models.checkpoints import (AllowListUnpickler, CheckpointError, UnsafeCheckpointError, key_list,
                                        restricted_pickle_module)
from voxanon.models.flow_config import FlowConfig, FlowError, TrainingConfig
from voxanon.models.lda import LinearDiscriminant

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

REFERENCE_CODE_MODULES = ("classes", "__main__")
"""Modules of the releases' own classes (``classes.py``, or a script run as ``__main__``)."""

REFERENCE_SCALE_NET = ("Linear", "LeakyReLU", "Linear", "LeakyReLU", "Linear", "Tanh")
"""Class names of a coupling layer's ``s`` network; the ICASSP 2023 one appends a ``Rescale``."""
REFERENCE_TRANSLATION_NET = ("Linear", "LeakyReLU", "Linear", "LeakyReLU", "Linear")
"""Class names of ``t`` (ICASSP 2023: the last one is ``classes.Linear``, the same affine map)."""
RESCALE_CLASS = "Rescale"

_REFERENCE_KEY = re.compile(r"cpl\.(?P<layer>\d+)\.(?:(?P<mask>mask)|s\.6\.weight|"
                            r"(?P<net>[st])\.(?P<index>[024])\.(?P<kind>weight|bias))")


def ours_from_reference_key(key: str) -> str | None:
    """The :class:`ZeroLLRFlow` state-dict key of a reference ``RealNVP`` state-dict key, ``None`` if it
    has none; the one place where the reference names are renamed."""
    if key == "lmu":
        return "log_mu"
    match = _REFERENCE_KEY.fullmatch(key)
    if match is None:
        return None
    layer = f"layers.{match['layer']}"
    if match["mask"]:
        return f"{layer}.mask"
    if match["net"] is None:
        return f"{layer}.rescale"
    net = "scale_net" if match["net"] == "s" else "translation_net"
    return f"{layer}.{net}.{match['index']}.{match['kind']}"


class _PickledObject:
    """Stands in for a pickled module; keeps its class name and attribute dict, runs nothing."""

    pickled_class = ""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        self.state = {}

    def __setstate__(self, state):
        self.state = state[0] if isinstance(state, tuple) and state and isinstance(state[0], dict) else state


@functools.lru_cache(maxsize=None)
def _stand_in(qualified_name: str) -> type:
    return type(qualified_name.rsplit(".", 1)[-1], (_PickledObject,), {"pickled_class": qualified_name})


class _ModuleTreeUnpickler(AllowListUnpickler):
    """The checkpoint allow-list, plus inert stand-ins for ``torch.nn`` classes and the releases' own
    classes, so that a whole pickled ``nn.Module`` yields its attribute tree and tensors."""

    def find_class(self, module: str, name: str):
        if module.startswith("torch.nn.modules.") or module.split(".")[0] in REFERENCE_CODE_MODULES:
            return _stand_in(f"{module}.{name}")
        return super().find_class(module, name)


_ModuleTreePickleModule = restricted_pickle_module(_ModuleTreeUnpickler)


def _load_module_tree(path: Path):
    if not path.is_file():
        raise CheckpointError(f"pickled flow not found: {path}")
    try:
        with warnings.catch_warnings():
            # The legacy format stores each module class's source; stand-ins have none to compare it with.
            warnings.filterwarnings("ignore", message="Couldn't retrieve source code for container")
            return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_ModuleTreePickleModule)
    except UnsafeCheckpointError as error:
        raise UnsafeCheckpointError(f"{path}: {error}") from None
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable pickled PyTorch module "
                              f"({type(error).__name__}: {error})") from None


def _tensors(root) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    _collect(root, "", tensors)
    return tensors


def _collect(node, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
    if isinstance(node, torch.Tensor):
        tensors[prefix.rstrip(".")] = node.detach()
    elif isinstance(node, _PickledObject) and isinstance(node.state, dict):
        state = node.state
        for registry in ("_parameters", "_buffers", "_modules"):
            for name, child in (state.get(registry) or {}).items():
                if child is not None:
                    _collect(child, f"{prefix}{name}.", tensors)
        for name, value in state.items():
            if not name.startswith("_") and isinstance(value, (torch.Tensor, list, tuple)):
                _collect(value, f"{prefix}{name}.", tensors)
    elif isinstance(node, (list, tuple)):
        for index, child in enumerate(node):
            if isinstance(child, torch.Tensor):
                _collect(child, f"{prefix}{index}.", tensors)


def _children(node) -> dict:
    return dict(node.state.get("_modules") or {}) if isinstance(node, _PickledObject) else {}


def _class_names(node) -> tuple[str, ...]:
    return tuple(type(child).__name__ for child in _children(node).values())


def _reference_negative_slope(root, source: str) -> float:
    """Check that ``root`` is the releases' ``RealNVP`` module tree; its LeakyReLU slope."""
    def wrong(what: str) -> CheckpointError:
        return CheckpointError(f"{source}: not the release's pickled classes.RealNVP ({what})")

    if not isinstance(root, _PickledObject) or type(root).__name__ != "RealNVP" \
            or root.pickled_class.split(".")[0] not in REFERENCE_CODE_MODULES:
        raise wrong(f"the file holds {getattr(root, 'pickled_class', type(root).__name__)}")
    layers = _children(_children(root).get("cpl"))
    if not layers or any(type(layer).__name__ != "CouplingLayer" for layer in layers.values()):
        raise wrong("no cpl ModuleList of CouplingLayer modules")
    slopes = set()
    for k, layer in layers.items():
        nets = _children(layer)
        scale, translation = _class_names(nets.get("s")), _class_names(nets.get("t"))
        if scale not in (REFERENCE_SCALE_NET, REFERENCE_SCALE_NET + (RESCALE_CLASS,)) \
                or translation != REFERENCE_TRANSLATION_NET:
            raise wrong(f"coupling layer {k} has s = [{', '.join(scale)}], t = [{', '.join(translation)}]")
        slopes |= {float(child.state.get("negative_slope", 0.01)) for net in ("s", "t")
                   for child in _children(nets[net]).values() if type(child).__name__ == "LeakyReLU"}
    if len(slopes) != 1:
        raise wrong(f"LeakyReLU slopes {sorted(slopes)} differ")
    return slopes.pop()


def flow_from_reference_state_dict(state: dict[str, torch.Tensor], *, l2_normalise_input: bool = True,
                                   negative_slope: float = 0.01, mu: float | None = None,
                                   source: str = "reference flow") -> ZeroLLRFlow:
    """Our :class:`ZeroLLRFlow` from the ``state_dict()`` of a release's ``RealNVP`` (its ``classes.py``).

    Keys: ``cpl.<k>.mask`` (layer k's mask, a frozen parameter), ``cpl.<k>.s.{0,2,4}.{weight,bias}``
    (the Linear layers of ``s``; 1 and 3 are LeakyReLU, 5 is Tanh), ``cpl.<k>.s.6.weight`` (ICASSP
    2023's ``Rescale``), ``cpl.<k>.t.{0,2,4}.{weight,bias}`` and ``lmu`` (log μ, ICASSP 2023). A
    zLLR-VC ``g_*`` holds the same keys under ``xv_dis_model.``. The ICASSP 2022 flow has no
    ``Rescale`` (a rescale of ones is the same map) and no ``lmu``: its μ stayed in the training
    script (``mu.txt``), so ``mu`` must be given for it, and only for it. The release's data → base
    map ``f`` applies ``cpl.0`` first, as :meth:`ZeroLLRFlow.to_base` does; neither release
    standardises inside the module, so ours keeps the identity standardisation.
    """
    mask_keys = sorted((int(key.split(".")[1]), key) for key in state if re.fullmatch(r"cpl\.\d+\.mask", key))
    if not mask_keys or [k for k, _ in mask_keys] != list(range(len(mask_keys))) \
            or "cpl.0.s.0.weight" not in state:
        raise CheckpointError(f"{source}: expected the keys of the release's RealNVP (cpl.<k>.mask, "
                              f"cpl.<k>.s.<i>.weight, cpl.<k>.t.<i>.weight, lmu); found {key_list(state)}")
    if ("lmu" in state) == (mu is not None):
        raise CheckpointError(f"{source}: the flow holds lmu (log μ); μ is not to be given" if mu is not None
                              else f"{source}: the flow holds no lmu (the ICASSP 2022 RealNVP keeps μ in its "
                                   "training script, mu.txt): give μ")
    if mu is not None and not mu > 0:
        raise CheckpointError(f"{source}: μ must be positive, got {mu}")
    rescaled = "cpl.0.s.6.weight" in state
    expected = {"lmu"} if mu is None else set()
    for k, _ in mask_keys:
        expected |= {f"cpl.{k}.mask"} | ({f"cpl.{k}.s.6.weight"} if rescaled else set()) \
            | {f"cpl.{k}.{net}.{index}.{kind}" for net in "st" for index in (0, 2, 4) for kind in ("weight", "bias")}
    if set(state) != expected:
        wrong = [f"{what} {key_list(keys)}" for what, keys in (("missing", expected - set(state)),
                                                               ("unexpected", set(state) - expected)) if keys]
        raise CheckpointError(f"{source}: not the release's RealNVP layout; {'; '.join(wrong)}")
    masks = torch.stack([state[key].detach().float().reshape(-1) for _, key in mask_keys])
    n_layers, dim = masks.shape
    config = FlowConfig(dim=dim, hidden=state["cpl.0.s.0.weight"].shape[0], n_layers=n_layers,
                        negative_slope=negative_slope, l2_normalise_input=l2_normalise_input)
    model = ZeroLLRFlow(config, masks=masks)
    given = {ours_from_reference_key(key): value.detach().float() for key, value in state.items()}
    if not rescaled:
        given.update({f"layers.{k}.rescale": torch.ones(dim) for k in range(n_layers)})
    if mu is not None:
        given["log_mu"] = torch.tensor(math.log(mu))
    given.update(input_shift=model.input_shift, input_scale=model.input_scale)
    try:
        model.load_state_dict(given)
    except RuntimeError as error:
        raise CheckpointError(f"{source}: tensor shapes do not fit a Real NVP of dimension {dim} "
                              f"and width {config.hidden} ({error})") from None
    model.log_mu.requires_grad_(False)
    return model.eval()


def import_reference_flow(path: str | os.PathLike, *, l2_normalise_input: bool = True,
                          mu: float | None = None) -> ZeroLLRFlow:
    """Read a release's pickled ``RealNVP`` (zLLR-VC: ``xv_disentanglement_model/model.pt``; the ICASSP
    2022 bridge-features-evidence ``exp/models/model_<epoch>.pt``) without running its code.

    The pickle is ``torch.save(model)`` of ``classes.RealNVP``: attributes ``input_dim``, ``masks`` (an
    ``[L, d]`` tensor, not registered), ``cpl`` (a ``ModuleList`` of ``classes.CouplingLayer`` with
    ``input_dim``, ``hidden_dim``, ``s``, ``t`` and the ``mask`` parameter) and, ICASSP 2023, ``lmu``.
    The tree is checked class by class; its registered tensors are the ``state_dict()`` keys that
    :func:`flow_from_reference_state_dict` reads, and ``masks`` must repeat the layers' masks.
    """
    path = Path(path)
    root = _load_module_tree(path)
    negative_slope = _reference_negative_slope(root, str(path))
    state = _tensors(root)
    listed = state.pop("masks", None)
    model = flow_from_reference_state_dict(state, l2_normalise_input=l2_normalise_input,
                                           negative_slope=negative_slope, mu=mu, source=str(path))
    # The release's f and g loop over range(len(masks)), not over cpl.
    layer_masks = torch.stack([layer.mask for layer in model.layers])
    if listed is None or listed.shape != layer_masks.shape or not torch.equal(listed.float(), layer_masks):
        raise CheckpointError(f"{path}: RealNVP.masks does not list its coupling layers' masks")
    return model
