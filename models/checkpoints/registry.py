"""The models directory: installed model sets in our own format, with a sha256 manifest.

Layout: ``$VOXANON_HOME/models/<set>/`` (``$VOXANON_HOME`` defaults to
``~/.cache/voxanon``) holding one ``<component>.safetensors`` per component, a
``config.json`` with every component's configuration, and ``manifest.json``::

    {"name": "ssl-sas", "random": false, "source": "...", "components": [...],
     "files": {"generator.safetensors": "<sha256>", ...}}

A set imported with ``--random-init`` has ``"random": true``; every command that
loads it logs a loud warning. safetensors holds tensors only, so loading runs no code.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...data_prep.atomic import atomic_path, atomic_write_text
from ...data_prep.digest import sha256_file
from ...data_prep.errors import VoxanonError
from .catalogue import install_hint

if TYPE_CHECKING:  # torch loads in seconds; the CLI's commands import this module at start-up
    import torch

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MODEL_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
CONFIG = "config.json"
class ModelNotInstalledError(VoxanonError):
    """A model set, or one of its files, is not in the models directory."""


def voxanon_home() -> Path:
    return Path(os.environ.get("VOXANON_HOME") or Path.home() / ".cache" / "voxanon")


def default_cache_dir() -> Path:
    """Where embeddings and transcripts are cached unless a command is told otherwise."""
    return voxanon_home() / "cache"


def models_dir() -> Path:
    return voxanon_home() / "models"


ASSET_KINDS = ("pools", "flows")


def asset_dir(kind: str, name: str | os.PathLike) -> Path:
    """Where a named asset of ``kind`` lives: ``$VOXANON_HOME/<kind>/<name>``, or ``name`` itself
    when it is a path (it contains a path separator or starts with ``.`` or ``~``)."""
    if kind not in ASSET_KINDS:
        raise ValueError(f"asset kind must be one of {ASSET_KINDS}, got {kind!r}")
    text = str(name)
    if os.sep in text or "/" in text or text.startswith((".", "~")):
        return Path(text).expanduser()
    return voxanon_home() / kind / text


@dataclass
class ModelSet:
    name: str
    path: Path
    manifest: dict
    config: dict

    @property
    def random(self) -> bool:
        return bool(self.manifest.get("random"))

    def tensors(self, component: str) -> dict[str, torch.Tensor]:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from .safe import CheckpointError

        path = self.weights_file(component)
        try:
            return load_file(path)
        except (SafetensorError, OSError) as error:  # truncated, or not safetensors: the file, in one line
            raise CheckpointError(f"{path}: not a readable safetensors file ({' '.join(str(error).split())}); "
                                  f"reinstall model set {self.name!r}") from None

    def weights_file(self, component: str) -> Path:
        return self.path / f"{component}.safetensors"

    def build(self, component: str, build, what: str = ""):
        """``build()`` holding the component's weights, loaded strictly: every key and shape must fit, or a
        CheckpointError names the file and the keys (:func:`voxanon.models.checkpoints.safe.built_with_weights`)."""
        from .safe import built_with_weights

        return built_with_weights(build, self.tensors(component), str(self.weights_file(component)), what)


def write_model_set(name: str, components: dict[str, dict[str, torch.Tensor]], config: dict, *, source: str,
                    random: bool, root: Path | None = None) -> Path:
    """Write (or replace) a model set; the manifest is written last, so a set without one is incomplete."""
    from safetensors.torch import save_file

    if not MODEL_SET_NAME.fullmatch(name):
        raise VoxanonError(f"model set name {name!r}: use letters, digits, '.', '_' and '-' only "
                           "(a name, not a path)")
    target = (root or models_dir()) / name
    target.mkdir(parents=True, exist_ok=True)
    stale = target / MANIFEST
    if stale.exists():
        stale.unlink()
    files = {}
    for component, state in components.items():
        path = target / f"{component}.safetensors"
        with atomic_path(path) as tmp:
            save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
        files[path.name] = sha256_file(path)
    atomic_write_text(target / CONFIG, json.dumps(config, indent=2) + "\n")
    files[CONFIG] = sha256_file(target / CONFIG)
    manifest = {"name": name, "random": random, "source": source, "components": sorted(components), "files": files}
    atomic_write_text(target / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return target


def installed(root: Path | None = None) -> dict[str, dict]:
    """Manifests of the complete model sets in the models directory."""
    root = root or models_dir()
    if not root.is_dir():
        return {}
    sets = {}
    for folder in sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()):
        sets[folder.name] = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    return sets


def load_model_set(name: str, root: Path | None = None, verify: bool = True) -> ModelSet:
    """An installed set, its files checked against the manifest's sha256 sums."""
    folder = (root or models_dir()) / name
    how = install_hint(name)
    if not (folder / MANIFEST).is_file():
        raise ModelNotInstalledError(f"model set {name!r} is not installed ({folder / MANIFEST} missing); "
                                     f"install it with: {how}")
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    for filename, digest in manifest["files"].items():
        path = folder / filename
        if not path.is_file():
            raise ModelNotInstalledError(f"model set {name!r}: {path} is missing; reinstall with: {how}")
        if verify and sha256_file(path) != digest:
            raise ModelNotInstalledError(f"model set {name!r}: {path} does not match its manifest checksum; "
                                         f"reinstall with: {how}")
    _warn_if_random(folder, manifest)
    config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    return ModelSet(name, folder, manifest, config)


_random_warned: set[str] = set()
_random_warnings_quiet = False


def _warn_if_random(folder: Path, manifest: dict) -> None:
    key = str(folder.resolve())
    if manifest.get("random") and key not in _random_warned:
        _random_warned.add(key)
        log.log(logging.DEBUG if _random_warnings_quiet else logging.WARNING,
                "MODEL SET %r HAS RANDOM WEIGHTS (imported with --random-init): its output is noise, "
                "useful only to test plumbing and speed", folder.name)


def warn_if_random(name: str, root: Path | None = None) -> None:
    """The loud random-weights warning for an installed set, once per process and folder (loading the set
    later in the same process, or in a process forked from it, does not repeat it); nothing for a set that
    is not installed."""
    folder = (root or models_dir()) / name
    if (folder / MANIFEST).is_file():
        _warn_if_random(folder, json.loads((folder / MANIFEST).read_text(encoding="utf-8")))


def quiet_random_warnings() -> None:
    """In a worker process of a run whose driver has already warned (:func:`warn_if_random`): the warning
    goes to the debug log, so that a run prints it once, not once per worker."""
    global _random_warnings_quiet
    _random_warnings_quiet = True
