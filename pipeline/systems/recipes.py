"""Systems: YAML recipes in ``recipes/systems/`` (and in each family's ``recipes/`` folder), command-line
overrides, and the built chain."""
from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ...data_prep.errors import VoxanonError
from .plugins import CODE_PATH_KEY, PLUGINS_KEY, PluginError, resolve_plugins
from .registry import STAGES, families, stage_class

if TYPE_CHECKING:
    from .stage import Stage, Utterance


RUN_KEYS = {"description", "sample_rate", "max_seconds", "seed", "batch_size", "batch_seconds", "needs", "stages",
            "stochastic", PLUGINS_KEY, CODE_PATH_KEY}


def _recipe_dir(kind: str = "systems"):
    return resources.files("voxanon.recipes") / kind


def _recipe_files(kind: str, installed: bool = True) -> dict[str, Any]:
    """Recipe name -> file: ``recipes/<kind>/``'s, and for systems each family's own ``recipes/`` folder's too
    (with ``installed``, the installed families' as well)."""
    folders = [_recipe_dir(kind)] + ([family.recipes for family in families(installed) if family.recipes]
                                     if kind == "systems" else [])
    files: dict[str, Any] = {}
    for folder in folders:
        for path in sorted(folder.iterdir(), key=lambda path: path.name):
            if path.name.endswith(".yaml"):
                name = path.name[:-5]
                if name in files:
                    raise VoxanonError(f"two {kind[:-1]} recipes are named {name!r}: {files[name]} and {path}")
                files[name] = path
    return files


def available_recipes(kind: str, installed: bool = True) -> list[str]:
    return sorted(_recipe_files(kind, installed))


def available_systems(installed: bool = True) -> list[str]:
    """Every system's name; without ``installed``, the shipped ones only (what a help text lists)."""
    return available_recipes("systems", installed)


def parse_override(text: str, option: str = "--set") -> tuple[list[str], Any]:
    """``key.sub=value`` with the value read as YAML (numbers, lists, booleans, strings); ``option`` is the
    command's option that gave it, named in the error."""
    import yaml

    if "=" not in text:
        raise VoxanonError(f"{option} {text!r}: expected key=value, e.g. "
                           f"{'mcadams.alpha=0.7' if option == '--set' else 'number_of_epochs=20'}")
    key, value = text.split("=", 1)
    try:
        return key.strip().split("."), yaml.safe_load(value)
    except yaml.YAMLError as error:  # a !!python tag among them: safe_load refuses it, and so do we
        raise VoxanonError(f"--set {text!r}: not a YAML value ({' '.join(str(error).split())})") from None


def apply_overrides(config: dict, overrides: list[str], option: str = "--set") -> dict:
    config = copy.deepcopy(config)
    for text in overrides:
        path, value = parse_override(text, option)
        node = config
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                if child is not None:
                    raise VoxanonError(f"{option} {text!r}: {part!r} is not a section")
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    return config


def read_recipe(kind: str, name: str, overrides: list[str] = ()) -> dict:
    """A recipe of ``recipes/<kind>/`` by name, or a YAML file by path, with overrides applied."""
    import yaml

    if name.endswith((".yaml", ".yml")):
        recipe, stem = Path(name), Path(name).stem
        if not recipe.is_file():
            raise VoxanonError(f"{name}: no such recipe file")
    else:
        recipe, stem = _recipe_files(kind).get(name), name
        if recipe is None:
            raise VoxanonError(f"unknown {kind[:-1]} {name!r}; available: {', '.join(available_recipes(kind))} "
                               "(or give the path of a recipe .yaml)")
    try:
        config = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as error:
        raise VoxanonError(f"{name}: cannot read it ({error})") from None
    except yaml.YAMLError as error:
        raise VoxanonError(f"{name}: not valid YAML ({' '.join(str(error).split())})") from None
    if not isinstance(config, dict):
        raise VoxanonError(f"{name}: a recipe is a YAML mapping of settings (key: value lines), not a "
                           f"{type(config).__name__}")
    config.setdefault("name", stem)
    return apply_overrides(config, list(overrides))


def load_system_config(system: str, overrides: list[str] = (), device: str | None = None,
                       precision: str | None = None, *, keep_placed: bool = False) -> dict:
    """The resolved configuration of a named system, or of a YAML file given by path, with ``overrides``.

    ``device`` and ``precision`` (a command's ``--device``, ``--precision``) are set on every stage that takes
    them (:func:`stage_setting_overrides`), before ``overrides``, so that an explicit ``--set`` wins; a system
    with no such stage is refused. ``keep_placed`` (an evaluation that reuses finished runs): a system without
    a device stage runs where it is, and the stages already on ``device`` keep their configuration (and
    with it the configuration hash of the outputs they made).
    """
    return configure(lambda extra: _load_system_config(system, extra), overrides, device, precision,
                     keep_placed=keep_placed)


def configure(resolve: Callable[[list[str]], dict], overrides: list[str] = (), device: str | None = None,
              precision: str | None = None, *, keep_placed: bool = False) -> dict:
    """``resolve(overrides)`` (a recipe read and resolved with those overrides), with ``device`` and ``precision``
    set on every stage that takes them before ``overrides``, as :func:`load_system_config` describes."""
    config = resolve(list(overrides))
    stage_wide = (precision_overrides(config, precision) if precision is not None else []) + (
        [] if device is None else _placed_overrides(config, device) if keep_placed else device_overrides(config, device))
    return resolve(stage_wide + list(overrides)) if stage_wide else config


def _placed_overrides(config: dict, device: str) -> list[str]:
    try:
        overrides = device_overrides(config, device)
    except VoxanonError:  # no stage with a device (McAdams, the DSP systems): they run on the CPU
        return []
    return [override for override in overrides
            if str((config.get(override.split(".")[0]) or {}).get("device", "cpu")) != device]


def _load_system_config(system: str, overrides: list[str]) -> dict:
    config = read_recipe("systems", system, overrides)
    recipe_dir = str(Path(system).resolve().parent) if system.endswith((".yaml", ".yml")) else None
    return resolve_system_config(config, recipe_dir)


def resolve_system_config(config: dict, recipe_dir: str | None = None) -> dict:
    """A system's configuration (a recipe's mapping, with its ``name``) checked, with its plugin stages resolved
    (:func:`voxanon.pipeline.systems.plugins.resolve_plugins`; ``recipe_dir``: the folder of its recipe file)."""
    name = config["name"]
    check_stage_list(config)
    resolve_plugins(config, set(STAGES), recipe_dir)
    unknown = set(config) - RUN_KEYS - {"name"} - set(config.get("stages", []))
    if unknown:
        raise VoxanonError(f"system {name!r}: unknown setting(s) {sorted(unknown)}; sections are "
                           f"{sorted(RUN_KEYS | set(config.get('stages', [])))}")
    check_run_settings(config)
    return config


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# Each run-wide setting's test and what it must be, for the message.
RUN_SETTING_CHECKS = {
    "sample_rate": (lambda v: _is_integer(v) and v > 0, "a positive integer (Hz)"),
    "max_seconds": (lambda v: v is None or (_is_number(v) and v > 0), "a positive number of seconds"),
    "seed": (_is_integer, "an integer"),
    "batch_size": (lambda v: _is_integer(v) and v >= 1, "an integer of at least 1"),
    "batch_seconds": (lambda v: _is_number(v) and v > 0, "a positive number of seconds"),
    "stochastic": (lambda v: isinstance(v, bool), "true or false"),
}


def check_stage_list(config: dict) -> None:
    stages = config.get("stages", [])
    if not isinstance(stages, list) or not all(isinstance(stage, str) for stage in stages):
        raise VoxanonError(f"system {config.get('name')!r}: stages must be a list of stage names, got {stages!r}")


def check_run_settings(config: dict) -> None:
    """The run-wide settings' types and ranges, and each stage's section a mapping: refused here, before any
    utterance, rather than by every utterance in turn (or by a worker, mid-run)."""
    name = config.get("name")
    check_stage_list(config)
    stages = config.get("stages", [])
    for key, (valid, expected) in RUN_SETTING_CHECKS.items():
        if key in config and not valid(config[key]):
            raise VoxanonError(f"system {name!r}: {key} must be {expected}, got {config[key]!r}")
    for stage in stages:
        if config.get(stage) is not None and not isinstance(config[stage], dict):
            raise VoxanonError(f"system {name!r}: {stage} is a section of settings (e.g. --set {stage}.KEY=VALUE), "
                               f"got {config[stage]!r}")


def stage_setting_overrides(config: dict, setting: str, value: str) -> list[str]:
    """``STAGE.<setting>=VALUE`` for every stage of the system that has ``setting``: what a command-line flag
    (``--device``, ``--precision``) sets on every stage that has it."""
    def has(stage_class: type[Stage]) -> bool:
        return setting in inspect.signature(stage_class.__init__).parameters

    stages = [name for name in config.get("stages", [])
              if has(stage_class(name, config)) and
              stage_class(name, config).takes_stage_wide(setting, config.get(name) or {})]
    if not stages:
        raise VoxanonError(f"system {config['name']!r} has no stage with a {setting} setting (stages with one: "
                           f"{', '.join(sorted(name for name in STAGES if has(STAGES[name])))})")
    return [f"{name}.{setting}={value}" for name in stages]


def precision_overrides(config: dict, precision: str) -> list[str]:
    return stage_setting_overrides(config, "precision", precision)


def device_overrides(config: dict, device: str) -> list[str]:
    return stage_setting_overrides(config, "device", device)


def config_hash(config: dict) -> str:
    """Identity of everything that shapes the output (the description does not)."""
    relevant = {k: v for k, v in config.items() if k != "description"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class System:
    name: str
    config: dict
    stages: list[Stage]

    @property
    def sample_rate(self) -> int:
        return int(self.config.get("sample_rate", 16000))

    @property
    def max_seconds(self) -> float | None:
        value = self.config.get("max_seconds")
        return None if value is None else float(value)

    @property
    def run_seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def batch_size(self) -> int:
        return max(1, int(self.config.get("batch_size", 1)))

    @property
    def stochastic(self) -> bool:
        """Whether two runs with different seeds differ (B2r's drawn alpha, B1's random target)."""
        return bool(self.config.get("stochastic", False))

    @property
    def needs(self) -> list[str]:
        """The recipe's ``needs`` and every stage's, in order, each once."""
        needs = list(self.config.get("needs", []))
        for stage in self.stages:
            needs += stage.needs()
        return list(dict.fromkeys(needs))

    @property
    def needs_gender(self) -> bool:
        return "spk2gender" in self.needs

    def new_utterance(self, utt_id: str, speaker: str, gender: str | None, audio) -> Utterance:
        from .stage import Utterance

        return Utterance.create(utt_id, speaker, gender, audio, self.sample_rate, self.run_seed, self.name)


def _installed_file(kind: str, name: str) -> Path:
    from ...models.checkpoints.registry import MANIFEST, asset_dir, models_dir

    if kind == "checkpoint":
        return models_dir() / name / MANIFEST
    return asset_dir(f"{kind}s", name) / {"pool": "pool.json", "flow": "flow.json"}[kind]


INSTALL_HINTS = {
    "pool": "voxanon pool build --data DIR --out {name} (speaker-level ECAPA means of a corpus), "
            "or voxanon pool import SSL_SAS_POOL_DIR --out {name}",
    "flow": "voxanon train sex-flow --data DIR --out {name}, voxanon models fetch zllr-vc --import, or "
            "voxanon zllr import --pickle FLOW.pt --out $VOXANON_HOME/flows/{name}",
}


def missing_needs(system: System) -> list[str]:
    """One message per unmet need of ``system``, naming the missing file and the command that installs it."""
    from ...models.checkpoints.catalogue import install_hint

    messages = []
    for need in system.needs:
        kind, _, name = need.partition(":")
        if kind == "spk2gender":
            continue  # checked against the data directory by the runner
        if kind not in ("checkpoint", "pool", "flow") or not name:
            raise VoxanonError(f"system {system.name!r}: unknown need {need!r} (kinds: checkpoint:NAME, "
                               "pool:NAME, flow:NAME, spk2gender)")
        path = _installed_file(kind, name)
        if not path.is_file():
            how = (install_hint(name) if kind == "checkpoint"
                   else INSTALL_HINTS[kind].format(name=name))
            messages.append(f"{kind} {name!r} is not installed ({path} missing); install it with: {how}")
    return messages


def check_needs(system: System) -> None:
    messages = missing_needs(system)
    if messages:
        raise VoxanonError(f"system {system.name!r} cannot run:\n  " + "\n  ".join(messages))


def build_system(config: dict) -> System:
    stages: list[Stage] = []
    for stage_name in config.get("stages", []):
        try:
            stage_type = stage_class(stage_name, config)
        except PluginError:
            raise  # it names the system and the stage
        except VoxanonError as error:
            raise VoxanonError(f"system {config['name']!r}: {error}") from None
        options = config.get(stage_name) or {}
        if not isinstance(options, dict):
            raise VoxanonError(f"system {config['name']!r}: {stage_name} is a section of settings, got {options!r}")
        accepted = set(inspect.signature(stage_type.__init__).parameters) - {"self"}
        if set(options) - accepted:
            raise VoxanonError(f"system {config['name']!r}: stage {stage_name!r} has no setting(s) "
                               f"{sorted(set(options) - accepted)}; it takes {sorted(accepted)}")
        try:
            stage = stage_type(**options)
            stage.check_sample_rate(int(config.get("sample_rate", 16000)))
            stages.append(stage)
        except (TypeError, ValueError) as error:  # the stage's own check of a value, which may not name it
            settings = ", ".join(f"{stage_name}.{key}={value!r}" for key, value in options.items())
            raise VoxanonError(f"system {config['name']!r}, stage {stage_name!r} ({settings or 'defaults'}): "
                               f"{error}") from None
    return System(config["name"], config, stages)
