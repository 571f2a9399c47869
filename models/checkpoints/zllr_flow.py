"""Importing the zLLR-VC release's pickled sex flow (``classes.RealNVP``) as data, into :class:`ZeroLLRFlow`.

The pickle is read with a restricted unpickler that rebuilds the module tree from inert stand-ins (no class of
the release's code is imported or run); the tensors are then mapped key by key and checked.
"""
from __future__ import annotations

import functools
import math
import os
import re
import warnings
from pathlib import Path

import torch

from .safe import AllowListUnpickler, CheckpointError, UnsafeCheckpointError, key_list, restricted_pickle_module
from ..nets.flow import ZeroLLRFlow
from ..nets.flow_config import FlowConfig

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
