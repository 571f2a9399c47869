"""Reading checkpoints as data, and the strict fit of a state dict to a module.

:func:`safe_load` never runs code from a checkpoint. It tries ``torch.load(weights_only=True)`` and,
for fairseq checkpoints (whose ``args``/``cfg`` entries are ``argparse.Namespace`` / omegaconf
objects), falls back to an allow-listed unpickler: tensors, storages, dtypes and plain containers are
rebuilt; config objects from a short list of modules become inert :class:`OpaqueConfig` placeholders;
any other global (``os.system``, ``builtins.eval``, ...) raises :class:`UnsafeCheckpointError` before
anything is called. Weight-norm pairs are folded here too (:func:`fold_weight_norm`), since every
importer meets them.

:func:`check_state_fits` and :func:`built_with_weights` are the one strict load every importer and every
installed set goes through: a missing, unexpected or mis-shaped key names the file and the keys.
"""
from __future__ import annotations

import _compat_pickle
import pickle
import types
from pathlib import Path

import torch
from torch import nn

from ...data_prep.atomic import atomic_path
from ...data_prep.errors import VoxanonError


class CheckpointError(VoxanonError):
    """A checkpoint file is missing, unreadable or not in the expected layout."""


class ImplausibleConfigError(CheckpointError):
    """A configuration declares sizes no network of its kind has: refused before anything is read or built (it
    would take minutes and gigabytes), by ``models check`` too, which otherwise reports what it finds."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint's pickle refers to code outside the allow-list."""


class OpaqueConfig:
    """Stands in for a configuration object inside a checkpoint; keeps nothing, runs nothing."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass

    def __repr__(self) -> str:
        return "OpaqueConfig()"


TOLERATED_CONFIG_MODULES = ("argparse", "omegaconf", "fairseq", "typing", "enum", "pathlib", "dataclasses",
                            "copyreg")
"""Modules whose objects appear in fairseq checkpoints as configuration; replaced by OpaqueConfig."""

_SAFE_GLOBALS = {
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"), ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch", "Size"), ("torch", "device"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"),
    ("builtins", "tuple"), ("builtins", "list"), ("builtins", "dict"),
    # omegaconf's pickled metadata names value types (fairseq configs); calling these runs no code.
    ("builtins", "int"), ("builtins", "float"), ("builtins", "str"), ("builtins", "bool"), ("builtins", "bytes"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
}


class AllowListUnpickler(pickle.Unpickler):
    """Unpickles tensors and plain containers only; subclass it to allow more globals explicitly."""

    def find_class(self, module: str, name: str):
        # torch.save writes pickle protocol 2, which names globals the Python 2 way (``__builtin__``).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.split(".")[0] in TOLERATED_CONFIG_MODULES:
            return OpaqueConfig
        raise UnsafeCheckpointError(f"checkpoint refers to {module}.{name}, which is not allowed in a weights "
                                    "file; refusing to load it")


def restricted_pickle_module(unpickler: type[pickle.Unpickler]) -> types.SimpleNamespace:
    """The ``pickle_module`` interface ``torch.load`` needs, with every pickle read through ``unpickler``:
    torch's legacy (non-zip) format reads its header records with ``pickle_module.load``, so that must
    not be the unrestricted ``pickle.load``."""
    return types.SimpleNamespace(Unpickler=unpickler, load=lambda file, **kwargs: unpickler(file, **kwargs).load(),
                                 __name__=f"voxanon_{unpickler.__name__}")


_AllowListPickleModule = restricted_pickle_module(AllowListUnpickler)


def atomic_torch_save(obj, path: str | Path) -> None:
    """``torch.save`` written atomically. Saved through a file object, so the archive's inner folder is
    torch's fixed ``archive`` rather than the temporary file's name: identical objects give identical bytes."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        torch.save(obj, handle)


def safe_load(path: str | Path) -> dict:
    """A checkpoint's tensors and containers, without executing any code it contains."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        pass
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: {error})") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_AllowListPickleModule)
    except UnsafeCheckpointError as error:
        raise UnsafeCheckpointError(f"{path}: {error}") from None
    except Exception as error:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: {error})") from None


def norm_except_dim(v: torch.Tensor, dim: int) -> torch.Tensor:
    others = [d for d in range(v.ndim) if d != dim]
    return v.pow(2).sum(dim=others, keepdim=True).sqrt()


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace every weight-norm pair (either PyTorch layout) by the plain weight g·v/‖v‖."""
    folded: dict[str, torch.Tensor] = {}
    pairs = {}
    for key, value in state.items():
        dotted = "." + key
        for g_suffix, v_suffix in ((".weight_g", ".weight_v"),
                                   (".parametrizations.weight.original0", ".parametrizations.weight.original1")):
            suffix = g_suffix if dotted.endswith(g_suffix) else v_suffix if dotted.endswith(v_suffix) else None
            if suffix is not None:
                base = dotted[1:-len(suffix)] if len(dotted) > len(suffix) else ""
                pairs.setdefault((base, g_suffix, v_suffix), {})["g" if suffix == g_suffix else "v"] = value
                break
        else:
            folded[key] = value
    for (base, g_suffix, v_suffix), pair in pairs.items():
        if set(pair) != {"g", "v"}:
            missing = v_suffix if "v" not in pair else g_suffix
            raise CheckpointError(f"weight-norm pair for {base!r} lacks {base}{missing}")
        g, v = pair["g"], pair["v"]
        if g.ndim != v.ndim:
            raise CheckpointError(f"weight-norm pair for {base!r}: g {tuple(g.shape)} and v {tuple(v.shape)}")
        kept = [d for d in range(v.ndim) if g.shape[d] != 1]
        if len(kept) > 1 or any(g.shape[d] != v.shape[d] for d in kept):
            raise CheckpointError(f"weight-norm pair for {base!r}: g {tuple(g.shape)} does not match v "
                                  f"{tuple(v.shape)}")
        dim = kept[0] if kept else 0
        folded[f"{base}.weight" if base else "weight"] = (v.double() * (g.double() / norm_except_dim(v.double(), dim))).to(v.dtype)
    return folded


def split_weight_norm(weight: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight_g, weight_v) with ``torch.nn.utils.weight_norm``'s shapes, for writing old-layout files."""
    return norm_except_dim(weight, dim), weight.clone()


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}


KEY_LIST_LIMIT = 20


def key_list(keys) -> str:
    """Keys for an error message: sorted, at most :data:`KEY_LIST_LIMIT`, with the number left out."""
    keys = sorted(keys)
    shown = ", ".join(keys[:KEY_LIST_LIMIT])
    return shown + (f", ... and {len(keys) - KEY_LIST_LIMIT} more" if len(keys) > KEY_LIST_LIMIT else "")


def check_state_fits(module: torch.nn.Module, state: dict, what: str, source: str) -> None:
    """Raise a :class:`CheckpointError` naming ``source`` and listing the missing, unexpected and
    mis-shaped keys, unless ``state`` loads strictly into ``module``."""
    expected = module.state_dict()
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    shapes = [f"{key} {tuple(state[key].shape)} (expected {tuple(value.shape)})" for key, value in expected.items()
              if isinstance(state.get(key), torch.Tensor) and state[key].shape != value.shape]
    if missing or unexpected or shapes:
        details = [f"{label} {key_list(keys)}" for label, keys in
                   (("missing", missing), ("unexpected", unexpected), ("shapes differ:", shapes)) if keys]
        raise CheckpointError(f"{source}: {what}: " + "; ".join(details))


def check_state_builds(build, state: dict, what: str, source: str) -> None:
    """:func:`check_state_fits` on ``build()`` made on the meta device: the importer's key-by-key check of a
    published file without memory for a second copy of its weights."""
    with torch.device("meta"):
        module = build()
    check_state_fits(module, state, what, source)


def built_with_weights(build, state: dict[str, torch.Tensor], source: str = "weights", what: str = "") -> nn.Module:
    """``build()`` made on the meta device (no parameter initialisation), then given ``state``'s tensors
    themselves (``load_state_dict(assign=True)``): a full-size HuBERT skips about 2 s of random initialisation
    and a copy. The load is strict: a missing, unexpected or mis-shaped key is a
    :class:`CheckpointError` naming ``source`` (the file) and the keys
    (:func:`check_state_fits`, the same check every importer makes). Each tensor
    keeps the module's own dtype (a half-precision checkpoint still gives a float32 model), as a copying load
    would."""
    with torch.device("meta"):
        module = build()
    check_state_fits(module, state, what or f"not the {type(module).__name__} its configuration describes", source)
    expected = module.state_dict()
    module.load_state_dict({key: value.to(expected[key].dtype) for key, value in state.items()}, assign=True)
    left = [name for name, tensor in [*module.named_parameters(), *module.named_buffers()] if tensor.is_meta]
    if left:
        raise RuntimeError(f"{type(module).__name__}: no weights given for {left[:4]}")
    return module.eval()
