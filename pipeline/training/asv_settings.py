"""The settings of ``voxanon train asv`` (:mod:`voxanon.pipeline.training.asv`): the recipe's hyper-parameters with
the user's overrides, checked; the names of the files a run writes; the seeded draws every part shares."""
from __future__ import annotations

import hashlib
import json

import numpy as np

from ...data_prep.errors import VoxanonError

RECIPE = "asv_ecapa"
TRAINING_FILE = "training.json"
SKIPPED_FILE = "skipped.txt"
UTT_SELECTIONS = ("spk-diverse-sess", "spk-random", "spk-sess")
# Settings that do not change the trained weights: a resumed run may differ in them. drop_short_speakers is
# one: a speaker it drops has no usable utterance, so the model either trains on the same data or not at all.
FREE_SETTINGS = ("description", "name", "number_of_epochs", "checkpoint_interval_minutes", "drop_short_speakers")


def default_hparams() -> dict:
    from ..systems.recipes import read_recipe

    return read_recipe("training", RECIPE)


def resolve_hparams(overrides: dict | None = None, set_options: list[str] = (), option: str = "--set") -> dict:
    """The recipe's settings, then ``overrides`` (key -> value), then ``key=value`` texts given with the command's
    ``option`` (``--set`` in train asv, ``--train-set`` in challenge); checked."""
    from ..systems.recipes import apply_overrides

    defaults = default_hparams()
    hparams = apply_overrides({**defaults, **(overrides or {})}, list(set_options), option)
    unknown = sorted(set(hparams) - set(defaults))
    if unknown:
        raise VoxanonError(f"train asv: unknown setting(s) {', '.join(unknown)} ({option}); settings are "
                           f"{', '.join(sorted(defaults))}")
    check_hparams(hparams)
    return hparams


def _is_count(value, allow_zero: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= (0 if allow_zero else 1)


def check_hparams(h: dict) -> None:
    problems = []
    if not _is_count(h["batch_size"]) or h["batch_size"] < 2:
        problems.append(f"batch_size must be an integer >= 2 (ECAPA's batch norm cannot train on one item), "
                        f"got {h['batch_size']!r}")
    for key in ("n_mels", "lin_neurons", "attention_channels", "res2net_scale", "se_channels"):
        if not _is_count(h[key]):
            problems.append(f"{key} must be a positive integer, got {h[key]!r}")
    if not _is_count(h["number_of_epochs"], allow_zero=True):
        problems.append(f"number_of_epochs must be an integer >= 0, got {h['number_of_epochs']!r}")
    for key in ("channels", "kernel_sizes", "dilations"):
        if not (isinstance(h[key], list) and len(h[key]) == 5 and all(_is_count(v) for v in h[key])):
            problems.append(f"{key} must be a list of 5 positive integers, got {h[key]!r}")
    if not problems and any(c % h["res2net_scale"] for c in h["channels"][1:4]):
        problems.append(f"channels[1:4] {h['channels'][1:4]} must be multiples of res2net_scale {h['res2net_scale']}")
    for key in ("num_spk", "num_utt"):
        if h[key] != "ALL" and not _is_count(h[key]):
            problems.append(f"{key} must be ALL or a positive integer, got {h[key]!r}")
    if h["utt_selection"] not in UTT_SELECTIONS:
        problems.append(f"utt_selection must be one of {', '.join(UTT_SELECTIONS)}, got {h['utt_selection']!r}")
    if not isinstance(h["valid_ratio"], (int, float)) or not 0 <= h["valid_ratio"] < 1:
        problems.append(f"valid_ratio must lie in [0, 1), got {h['valid_ratio']!r}")
    if h["sample_rate"] != 16000:
        problems.append(f"sample_rate must be 16000 (speechbrain's Fbank and ECAPA front end), got {h['sample_rate']!r}")
    for key, low in (("sentence_len", 0.1), ("step_size", 1), ("scale", 1e-9)):
        if not isinstance(h[key], (int, float)) or isinstance(h[key], bool) or h[key] < low:
            problems.append(f"{key} must be a number >= {low}, got {h[key]!r}")
    for key in ("lr", "base_lr", "weight_decay", "margin", "checkpoint_interval_minutes"):
        if not isinstance(h[key], (int, float)) or isinstance(h[key], bool) or h[key] < 0:
            problems.append(f"{key} must be a number >= 0, got {h[key]!r}")
    if not isinstance(h["seed"], int):
        problems.append(f"seed must be an integer, got {h['seed']!r}")
    if not isinstance(h["drop_short_speakers"], bool):
        problems.append(f"drop_short_speakers must be true or false, got {h['drop_short_speakers']!r}")
    if problems:
        raise VoxanonError("train asv: " + "; ".join(problems))


def ecapa_config(h: dict):
    from ...models.nets.speaker import EcapaConfig

    return EcapaConfig(channels=tuple(h["channels"]), lin_neurons=h["lin_neurons"], n_mels=h["n_mels"],
                       kernel_sizes=tuple(h["kernel_sizes"]), dilations=tuple(h["dilations"]),
                       attention_channels=h["attention_channels"], res2net_scale=h["res2net_scale"],
                       se_channels=h["se_channels"])


def seeded_rng(*parts) -> np.random.Generator:
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def chunk_samples(h: dict) -> int:
    return int(round(h["sentence_len"] * h["sample_rate"]))
