"""The stage registry: every stage a recipe can name, ``"name" -> "module:Class"``, filled from each family's table.

A system family is a sub-package of :mod:`voxanon.pipeline.systems` (``ssl_sas``, ``asrbn``, ``nac``), or a
module an installed distribution names in the entry-point group ``voxanon.families``. Its module declares
``STAGES = {"stage_name": "module:Class"}`` (a module starting with a dot is relative to the family's package)
and imports nothing heavy: the registry reads every family's table the first time a stage is looked up, and
imports a stage's module only when a system names the stage, so that listing systems or building the
command-line parser imports no torch. The stages of the modules at this package's root (the F0 stage the
neural families share, McAdams) are in its ``__init__``'s table. Two families declaring one stage name are
refused, naming both.

A family may keep recipes in a ``recipes/`` folder beside its module (``<family>/recipes/<system>.yaml``):
they are systems as the shipped ones in ``recipes/systems/`` are (:mod:`voxanon.pipeline.systems.recipes`).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ...data_prep.errors import VoxanonError
from .plugins import PLUGINS_KEY, add_code_path, plugin_class

if TYPE_CHECKING:
    from .stage import Stage

FAMILY_GROUP = "voxanon.families"


@dataclass(frozen=True)
class Family:
    module: str
    """The module holding the family's ``STAGES`` table."""
    stages: dict[str, str]
    """Stage name -> absolute ``"module:Class"``."""
    recipes: Path | None
    """The family's own ``recipes/`` folder, where it has one."""


def _family(module_name: str, recipes: bool = True) -> Family:
    module = importlib.import_module(module_name)
    table = getattr(module, "STAGES", None)
    if not isinstance(table, dict):
        raise VoxanonError(f"system family {module_name}: its module declares no STAGES table "
                           "(a dict of stage name -> 'module:Class')")
    package = module_name if hasattr(module, "__path__") else module_name.rpartition(".")[0]
    stages = {}
    for name, entry in table.items():
        path, _, attribute = str(entry).partition(":")
        if not path or not attribute:
            raise VoxanonError(f"system family {module_name}: stage {name!r} is {entry!r}, not 'module:Class'")
        stages[name] = f"{importlib.util.resolve_name(path, package)}:{attribute}"
    folder = Path(module.__file__).parent / "recipes" if recipes and module.__file__ else None
    return Family(module_name, stages, folder if folder is not None and folder.is_dir() else None)


@functools.cache
def shipped_families() -> tuple[Family, ...]:
    """This package's own table, then each sub-package's (by name)."""
    found = [_family(__package__, recipes=False)]  # the shared recipes/ folder is the shipped systems'
    shipped = importlib.import_module(__package__).__path__
    return tuple(found + [_family(f"{__package__}.{info.name}")
                          for info in sorted(pkgutil.iter_modules(shipped), key=lambda info: info.name) if info.ispkg])


@functools.cache
def installed_families() -> tuple[Family, ...]:
    """The families other distributions install (by entry-point name). Found through their metadata, which
    ``voxanon --help`` does not read: importing importlib.metadata and scanning every installed distribution
    costs the command line about a tenth of a second."""
    from importlib.metadata import entry_points

    found = []
    for entry in sorted(entry_points(group=FAMILY_GROUP), key=lambda entry: entry.name):
        where = f"entry point {entry.name!r} of {entry.dist.name if entry.dist else 'an installed distribution'}"
        try:
            found.append(_family(entry.value))
        except ImportError as error:
            raise VoxanonError(f"system family {entry.value} ({where}): cannot import it ({error})") from None
    return tuple(found)


def families(installed: bool = True) -> tuple[Family, ...]:
    """The shipped families, and with ``installed`` the installed ones after them."""
    return shipped_families() + (installed_families() if installed else ())


def _declared_stages() -> dict[str, str]:
    stages: dict[str, str] = {}
    declared_by: dict[str, str] = {}
    for family in families():
        for name, entry in family.stages.items():
            if name in stages:
                raise VoxanonError(f"stage {name!r} is declared twice: by {declared_by[name]} ({stages[name]}) and "
                                   f"by {family.module} ({entry}); a stage name belongs to one family")
            stages[name], declared_by[name] = entry, family.module
    return stages


class StageRegistry(MutableMapping):
    """Stage name -> stage class, each class imported from its ``"module:Class"`` entry on first use.

    The families' tables are read on first use too, so importing this module reads none of them.
    """

    def __init__(self):
        self._loaded: dict[str, Any] | None = None

    @property
    def _entries(self) -> dict[str, Any]:
        if self._loaded is None:
            self._loaded = dict(_declared_stages())
        return self._loaded

    def __getitem__(self, name: str) -> type[Stage]:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = self._entries[name] = getattr(importlib.import_module(module), attribute)
        return entry

    def __setitem__(self, name: str, stage_class: type[Stage]) -> None:
        self._entries[name] = stage_class

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


STAGES = StageRegistry()
"""Every stage a recipe can name; each class's ``name`` is its key here."""


def stage_class(name: str, config: dict | None = None) -> type[Stage]:
    """The stage class a recipe's ``stages`` entry ``name`` names: the one lookup every system is built with. With
    the system's resolved ``config``, a plugin stage it records (:mod:`voxanon.pipeline.systems.plugins`) is
    imported from where the configuration says."""
    plugins = (config or {}).get(PLUGINS_KEY) or {}
    if name in plugins:
        add_code_path(config)
        return plugin_class(config["name"], name, plugins[name])
    if name not in STAGES:
        raise VoxanonError(f"unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}, or a plugin named "
                           "module:Class")
    return STAGES[name]
