"""The semi-informed attacker's ASV model (``ASV_eval^anon``): what its folder must hold, and whether it
was trained on the evaluated system's output."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...data_prep.corpus import DataDir
from ...data_prep.errors import VoxanonError
from .sets import EvaluationSet
from ..training.asv.export import HYPERPARAMS_FILE
from ..training.asv.settings import TRAINING_FILE
from ..training.asv.trainer import schedule_reach


@dataclass
class SemiInformed:
    """The semi-informed attacker's ASV model: its embedder (a CachedComputation), its label in the tables and
    how far it trained (:func:`attacker_training_summary`; None when its folder does not say)."""

    embedder: object
    model: str
    training: dict | None = None


def attacker_training_summary(training: dict | Path | None) -> dict | None:
    """How far the attacker trained, from its ``training.json`` (a record, or the model folder): optimiser steps,
    the learning rate reached (:func:`~voxanon.pipeline.training.asv.trainer.schedule_reach`, also for records written
    before it was stored), the last epoch's accuracies, and a line saying so. None without a usable record."""
    import json

    if isinstance(training, Path):
        path = training / TRAINING_FILE
        try:
            training = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
    try:
        reach = schedule_reach(training["hparams"], int(training["steps"]))
        last = (training.get("epochs") or [{}])[-1]
    except (KeyError, TypeError, ValueError):
        return None
    accuracy = {key: last.get(key) for key in ("train_accuracy", "valid_accuracy")}
    shown = ", ".join(f"{key.split('_')[0]} accuracy {value:.3f}" for key, value in accuracy.items()
                      if value is not None)
    line = (f"{reach['steps']} step(s) against step_size {reach['step_size']:g}: lr reached {reach['peak_lr']:.3g} "
            f"({100 * reach['share_of_max']:.2g} % of the maximum {reach['max_lr']:g}; final lr "
            f"{reach['final_lr']:.3g})" + (f"; last epoch {shown}" if shown else ""))
    return {**{key: reach[key] for key in ("steps", "final_lr", "peak_lr", "share_of_max", "undertrained")},
            **accuracy, "line": line}


def undertrained_warning(model_dir: Path, summary: dict) -> str:
    from ..training.asv.trainer import reference_schedule

    reference = reference_schedule()
    return (f"{model_dir} hardly trained ({summary['line']}; the challenge's configuration reaches lr "
            f"{reference['lr']:.3g} in {reference['steps']} steps on {reference['set']}): its semi-informed a-a "
            "figures come from a model close to its random start")


# What a semi-informed attacker's model directory must hold (speechbrain's EncoderClassifier layout).
ATTACKER_MODEL_FILES = (HYPERPARAMS_FILE, "embedding_model.ckpt")  # models.checkpoints.ecapa.EMBEDDING_FILE, which imports torch


def check_attacker_model(model_dir: Path) -> dict | None:
    """The model directory's ``training.json`` (None when it has none, e.g. the challenge's released models);
    a VoxanonError naming the file when a model file is missing or training is unfinished or unreadable."""
    import json

    from ...models.checkpoints.speechbrain_dirs import require_files

    model_dir = Path(model_dir)
    require_files(model_dir, ATTACKER_MODEL_FILES, "semi-informed attacker's ASV model")
    path = model_dir / TRAINING_FILE
    if not path.is_file():
        return None
    try:
        training = json.loads(path.read_text(encoding="utf-8"))
        status, data = training["status"], list(training["data"])
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise VoxanonError(f"{path}: not a voxanon train asv record ({type(error).__name__}: {error})") from None
    if status != "complete":
        raise VoxanonError(f"{path}: training status is {status!r}, not 'complete'; finish it with voxanon train asv "
                           "(it resumes) before evaluating with the model")
    return {**training, "data": data}


def _run_identity(data: DataDir | None) -> tuple[str, str] | None:
    """(system, config hash) of an anonymised set, from its run.json; None without one."""
    from ..runner import read_run_identity

    found = read_run_identity(data.path) if data is not None and data.path is not None else None
    return None if found is None else (str(found["system"]), str(found["config_hash"]))


def attacker_training_warnings(model_dir: Path, training: dict | None, sets: list[EvaluationSet],
                               system: str) -> list[str]:
    """Why the model may not be the semi-informed attacker of ``system`` on these sets: trained on
    another system's output (or another configuration of it), on original speech, or on unknown data."""
    if training is None:
        return [f"{model_dir}: no {TRAINING_FILE}, so the data it was trained on are unknown; the a-a "
                f"semi-informed figures assume it was trained on {system} output"]
    summary = attacker_training_summary(training)
    warnings = [undertrained_warning(model_dir, summary)] if summary is not None and summary["undertrained"] else []
    evaluated: dict[tuple[str, str] | None, list[str]] = {}
    for evaluation in sets:
        for data in (evaluation.anon_enroll, evaluation.anon_trials):
            if data is not None:
                evaluated.setdefault(_run_identity(data), []).append(data.name)
    trained: dict[tuple[str, str], list[str]] = {}
    for entry in training["data"]:
        anonymisation = entry.get("anonymisation") if isinstance(entry, dict) else None
        name = entry.get("name", "?") if isinstance(entry, dict) else "?"
        if not anonymisation:
            warnings.append(f"{model_dir} was trained on {name}, which has no anonymisation record (run.json): "
                            "original speech makes it a lazy-informed-style model, not the semi-informed attacker")
            continue
        trained.setdefault((str(anonymisation.get("system")), str(anonymisation.get("config_hash"))),
                           []).append(name)
    trained_systems = {key[0] for key in trained}
    for identity, names in sorted(evaluated.items(), key=lambda item: str(item[0])):
        if not trained:
            break
        shown = ", ".join(sorted(set(names)))
        if identity is None:
            if system not in trained_systems:
                warnings.append(f"{model_dir} was trained on output of {', '.join(sorted(trained_systems))}, but the "
                                f"evaluated system is {system} ({shown} have no run.json to say more)")
            continue
        evaluated_system, evaluated_hash = identity
        if identity in trained:
            continue
        if evaluated_system in trained_systems:
            hashes = sorted(h for s, h in trained if s == evaluated_system)
            warnings.append(f"{model_dir} was trained on {evaluated_system} output of another configuration "
                            f"(config hash {', '.join(hashes)}) than the evaluated {shown} ({evaluated_hash})")
        else:
            sources = "; ".join(f"{s} ({', '.join(n)})" for (s, _), n in sorted(trained.items()))
            warnings.append(f"{model_dir} was trained on output of another system than the one evaluated: trained "
                            f"on {sources}, evaluating {evaluated_system} output ({shown})")
    return warnings

