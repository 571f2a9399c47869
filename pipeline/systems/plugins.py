"""Stage plugins: stages of your own, named in a recipe by an importable path or by an entry point.

A recipe's ``stages`` may name, beside the built-in stages, a class by its import path (``mypackage.anon:MyStage``)
or by the name of an entry point in the ``voxanon.stages`` group of an installed distribution. The class is a
subclass of :class:`~voxanon.pipeline.systems.stage.Stage` with a ``name`` of its own and a ``process`` or
``process_batch``; its settings are the recipe's section of that name (``--set NAME.KEY=VALUE``).

When a recipe is loaded, each plugin is imported and checked, and the recipe's configuration records it:
``stages`` lists it by its name, and ``plugins`` maps that name to the class's import path, which is what every
worker process (forked, spawned, a Ray actor) imports it from. A recipe given as a file imports code: its folder is
searched for the plugin's module too (after the installed packages), so a stage may live beside its recipe; the
configuration records that folder as ``code_path``. Both keys are part of the configuration's hash, so a run's
journal tells a plugin's output from another's.
"""
from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ...data_prep.errors import VoxanonError

if TYPE_CHECKING:
    from .stage import Stage

ENTRY_POINT_GROUP = "voxanon.stages"
PLUGINS_KEY = "plugins"
CODE_PATH_KEY = "code_path"
# A stage's name is its recipe section and the first part of --set NAME.KEY=VALUE.
_STAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PluginError(VoxanonError):
    """A recipe's plugin stage that cannot be imported, is not a stage, or clashes with another stage."""


def is_import_path(entry: str) -> bool:
    """Whether a recipe's stage entry names a class by its import path (``module:Class``)."""
    return ":" in entry


def entry_point_stages() -> dict[str, metadata.EntryPoint]:
    """The ``voxanon.stages`` entry points of the installed distributions, by name."""
    return {entry_point.name: entry_point for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def add_code_path(config: dict) -> None:
    """The recipe's ``code_path`` (the folder of a recipe file that names plugins) searched for modules, after the
    installed packages; every process that builds the system calls it before importing a plugin."""
    folder = config.get(CODE_PATH_KEY)
    if folder is not None and folder not in sys.path:
        sys.path.append(folder)


def plugin_class(system: str, label: str, import_path: str) -> type[Stage]:
    """The stage class at ``import_path`` (``module:Class``), imported and checked against the stage protocol;
    ``label``: how the recipe named it, for the one-line error naming ``system`` and the stage."""
    from .stage import one_line

    where = f"system {system!r}, stage {label!r}"
    module_name, _, attribute = import_path.partition(":")
    if not module_name or not attribute:
        raise PluginError(f"{where}: a plugin is named as module:Class, got {import_path!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # the plugin's own import may fail in any way: it is its fault, in one line
        raise PluginError(f"{where}: cannot import module {module_name!r} ({one_line(error)})") from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise PluginError(f"{where}: module {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    check_stage_class(where, found)
    return found


def check_stage_class(where: str, found: Any) -> None:
    """Refuse (:class:`PluginError`) what is not a stage class: a subclass of ``voxanon.Stage`` with a ``name`` that
    can be a recipe section and a ``process`` or ``process_batch`` of its own."""
    from .stage import Stage

    if not (isinstance(found, type) and issubclass(found, Stage)):
        raise PluginError(f"{where}: {found!r} is not a stage (a subclass of voxanon.Stage)")
    name = getattr(found, "name", None)
    if not isinstance(name, str) or not _STAGE_NAME.fullmatch(name):
        raise PluginError(f"{where}: {found.__name__} has no stage name (a class attribute name = 'my_stage', "
                          f"letters, digits and '_'), got {name!r}")
    if found.process is Stage.process and found.process_batch is Stage.process_batch:
        raise PluginError(f"{where}: {found.__name__} is not a stage: it defines neither process(utt) nor "
                          "process_batch(batch)")


def resolve_plugins(config: dict, builtin: set[str], recipe_dir: str | None) -> None:
    """Rewrite ``config`` so that its plugins are named as the module doc says: each plugin entry of ``stages``
    (an import path, or an entry point's name that is no built-in stage) imported, checked and replaced by its
    stage's name, with ``plugins`` mapping that name to its import path (and ``code_path``: ``recipe_dir``, the
    folder of a recipe file, when one is given). A configuration resolved already (a run's) is checked as it is."""
    system = config.get("name")
    plugins = dict(config.get(PLUGINS_KEY) or {})
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in plugins.items()):
        raise PluginError(f"system {system!r}: {PLUGINS_KEY} maps stage names to module:Class paths, got {plugins!r}")
    entries = config.get("stages", [])
    if recipe_dir is not None and any(entry not in builtin and entry not in plugins for entry in entries):
        config.setdefault(CODE_PATH_KEY, recipe_dir)
    add_code_path(config)
    named = []
    for entry in entries:
        if entry in builtin and entry not in plugins:
            named.append(entry)
            continue
        if entry in plugins:
            import_path = plugins[entry]
        elif is_import_path(entry):
            import_path = entry
        else:
            entry_point = entry_point_stages().get(entry)
            if entry_point is None:
                raise PluginError(f"system {system!r}: unknown stage {entry!r}; known stages: "
                                  f"{', '.join(sorted(builtin | set(entry_point_stages())))}, or a plugin named "
                                  "module:Class")
            import_path = entry_point.value
        stage_class = plugin_class(system, entry, import_path)
        if stage_class.name in builtin:
            raise PluginError(f"system {system!r}, stage {entry!r}: its name {stage_class.name!r} is a built-in "
                              "stage's; give the class another name")
        if plugins.setdefault(stage_class.name, import_path) != import_path:
            raise PluginError(f"system {system!r}, stage {entry!r}: stage name {stage_class.name!r} is also "
                              f"{plugins[stage_class.name]!r}'s")
        named.append(stage_class.name)
    if plugins:
        config["stages"] = named
        config[PLUGINS_KEY] = {name: plugins[name] for name in named if name in plugins}


def import_path_of(stage_class: Any) -> str:
    """A stage class given in Python (a recipe mapping's ``stages``) as the import path every worker imports it
    from: ``module:QualifiedName``."""
    if not isinstance(stage_class, type):
        raise PluginError(f"a recipe's stages are stage names, module:Class paths or stage classes, got "
                          f"{stage_class!r}")
    return f"{stage_class.__module__}:{stage_class.__qualname__}"
