"""``voxanon train asv``: an ECAPA-TDNN speaker model trained on (anonymised) Kaldi data directories.

This is the VoicePrivacy 2024 semi-informed attacker ``ASV_eval^anon``: speechbrain's ECAPA-TDNN
speaker classifier (:class:`voxanon.models.nets.asv_model.SpeakerClassifier`) trained with the
challenge's settings, which are the defaults in ``recipes/training/asv_ecapa.yaml`` (every one
overridable). How the data are used, following the challenge's ``libri_prepare.py`` and
``asv_dataset.py``:

* selection: ``num_spk`` speakers (ALL or N drawn at random) and ``num_utt`` utterances per
  speaker (ALL, or N: ``spk-random`` at random, ``spk-sess`` N per session, ``spk-diverse-sess``
  N spread evenly over the speaker's sessions). The session of a LibriSpeech-style id
  ``spk-chapter-utt`` is ``spk-chapter``; ids with fewer than three ``-`` fields make one
  session per speaker. Every draw is seeded by (seed, speaker), so adding a set does not
  change what was drawn for the others;
* validation: ``round(valid_ratio * total)`` whole utterances are held out, as the challenge's
  90/10 split of its shuffled list, but shared over the speakers in proportion to their
  utterances (largest remainders, ties in a seeded order) and never a speaker's last one, so that
  every held-out utterance is one of a trained speaker (:func:`~.data.validation_counts`); each epoch
  reports their classification loss and accuracy. With few utterances per speaker this still
  holds some out (rounding each speaker's share would hold out none); where it cannot give what
  ``valid_ratio`` asks (speakers of a single utterance), a warning says so and ``training.json``'s
  ``validation`` records how many were held out, and why fewer ("status": "partial" or "off");
* chunks: each epoch visits every training utterance once, in a seeded order, as one random
  ``sentence_len`` chunk (the order and chunk starts depend only on the seed and the epoch);
  validation chunks are drawn once per utterance. Utterances shorter than a chunk are not
  used (the challenge's code fails on them); they are listed in ``skipped.txt``. A speaker
  left with no usable utterance is an error, unless ``drop_short_speakers`` (then it is left
  out, with one warning line naming each, and recorded in ``training.json``'s
  ``dropped_speakers``); fewer than two speakers is an error;
* bad audio: a missing or unreadable file is an error listing every one; ``allow_missing``
  (``--allow-missing``) trains without them instead, listed in a warning, ``skipped.txt`` and
  ``training.json``'s ``unreadable_utterances`` (a speaker left with none is dropped);
* optimisation: Adam with speechbrain's triangular ``CyclicLRScheduler`` stepped before each
  optimiser step (batch k is taken with ``lr(k)``), batches of ``batch_size`` (the last one of
  an epoch may be smaller, as speechbrain's loader keeps it; a last batch of one utterance joins
  the one before, since ECAPA's batch norm after pooling cannot train on a single item). A run whose
  schedule will hardly start (its learning rate under a tenth of what the challenge's configuration
  reaches on train-clean-360, :func:`~.trainer.schedule_reach`) is warned about before training, with the remedies;
  ``training.json``'s ``schedule`` records how far it got;
* memory: on the CPU a batch whose estimated peak (:func:`~.loader.training_memory_estimate`) will not fit in the
  memory left is refused before training, with the batch size that fits (docs/training.md).

Loading keeps up with a GPU step (``benchmarks/train_asv.py``): each audio header is read once, at
the scan; a chunk of a mono 16-bit WAV file is read as its bytes, other files through libsndfile
from the chunk's offset; batches of 16-bit PCM travel as int16 (half the bytes; the device makes
them float, exactly libsndfile's values) and are assembled in shared memory by loader processes
that persist across epochs; the Fbank and normalisation run on the device; the loss and accuracy
sums stay there, so no step waits for the one before.

Output folder (speechbrain's ``EncoderClassifier`` layout; voxanon loads it as ``ecapa:DIR``):
``hyperparams.yaml``, ``embedding_model.ckpt``, ``classifier.ckpt``, ``label_encoder.txt``
(and ``label_encoder.ckpt``, the same file under the name speechbrain's ``Pretrainer`` looks
for), ``training.json`` (settings, the training data's identity including each set's
anonymisation system and ``config_hash`` from its ``run.json``, selection counts, per-epoch
metrics; ``"status": "complete"`` once the model files are final), ``train_log.txt``,
``skipped.txt`` and ``checkpoints/``. A folder that already holds the finished model for the same
settings and data is left as it is (:func:`~.export.finished_attacker`), before any audio is read.

Checkpoints (one file, written atomically, the previous one removed afterwards) hold the
network, optimiser, gradient scaler, step and epoch counters, the position in the epoch, the
running epoch statistics, the metric history and the RNG state; they are written at the end
of every epoch and every ``checkpoint_interval_minutes`` within one. A rerun resumes from the
latest, exactly (bit for bit on the CPU), and refuses if the settings or data differ;
``number_of_epochs`` may be raised to train further.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ....data_prep.atomic import atomic_write_text
from ....data_prep.corpus import DataDir
from ....data_prep.errors import VoxanonError
from ...model_service import torch_device
from .data import TrainingData, data_identity, prepare_training_data, read_training_sets
from .export import attacker_identity, export_model, finished_attacker
from .loader import check_cpu_memory
from .settings import SKIPPED_FILE, TRAINING_FILE, resolve_hparams
from .trainer import CHECKPOINT_FORMAT, AsvTrainer, batches_per_epoch, schedule_advice, schedule_reach

log = logging.getLogger(__name__)

TRAIN_LOG = "train_log.txt"


@dataclass(frozen=True)
class AsvTrainingRun:
    model_dir: Path
    trained: bool      # False: the folder already held the finished model for these settings and data


@dataclass(frozen=True)
class TrainingPlan:
    """What training the attacker on some data will do, every check on its inputs done before anything is written:
    its settings, the sets and their identities (:func:`~.data.data_identity`), the folder it trains in, whether
    that folder holds the finished model already, and (unless it does, or the plan was made without ``prepare``)
    the selected, measured and split data, whose batches fit in memory on the CPU."""

    hparams: dict
    sets: list[DataDir]
    identities: list[dict]
    out_dir: Path | None
    done: bool
    data: TrainingData | None
    device: str
    option: str
    allow_pipes: bool
    allow_missing: bool

    @property
    def identity(self) -> str:
        """A name part for its model folder (:func:`~.export.attacker_identity`)."""
        return attacker_identity(self.hparams, self.identities)

    def prepared(self, progress: bool = True, warn: bool = True) -> "TrainingPlan":
        """This plan with its data selected, measured and split (:func:`~.data.prepare_training_data`) and, on the
        CPU, the batches' memory checked (:func:`~.loader.check_cpu_memory`); as it is when done or prepared.
        ``warn``: log the warnings on the data (a check ahead of the training, which warns itself, passes False)."""
        if self.done or self.data is not None:
            return self
        data = prepare_training_data(self.sets, self.hparams, self.allow_pipes, progress,
                                     allow_missing=self.allow_missing, identities=self.identities, option=self.option,
                                     warn=warn)
        if torch_device(self.device).type == "cpu":
            check_cpu_memory(self.hparams, len(data.train), self.option)
        return replace(self, data=data)


def plan_training(data_dirs: list[Path | DataDir], out_dir: Path | Callable[[str], Path] | None = None, *,
                  hparams: dict | None = None, set_options: list[str] = (), device: str = "auto",
                  progress: bool = True, allow_pipes: bool = False, allow_missing: bool = False,
                  option: str = "--set", prepare: bool = True, warn: bool = True) -> TrainingPlan:
    """The plan of training the ASV model on ``data_dirs`` in ``out_dir`` (a folder; a function of the training's
    :attr:`TrainingPlan.identity` that names it, as the challenge names its attacker's; or None: no folder, for
    the checks alone).

    ``hparams`` overrides the recipe's settings by key, ``set_options`` by ``key=value`` texts given with the
    command's ``option`` (named in messages: ``--set`` in train asv, ``--train-set`` in challenge).
    ``allow_missing`` trains without listed utterances whose audio is missing or unreadable. A folder that holds
    the finished model for these settings and data (:func:`~.export.finished_attacker`) makes the plan ``done``,
    before any audio is read; otherwise, with ``prepare``, the data are read and checked
    (:meth:`TrainingPlan.prepared`).
    """
    h = resolve_hparams(hparams, set_options, option)
    sets = read_training_sets(data_dirs, allow_pipes, allow_missing)
    identities = [data_identity(d) for d in sets]
    if callable(out_dir):
        out_dir = out_dir(attacker_identity(h, identities))
    out_dir = Path(out_dir) if out_dir is not None else None
    done = out_dir is not None and finished_attacker(out_dir, h, identities, allow_missing)
    plan = TrainingPlan(h, sets, identities, out_dir, done, None, device, option, allow_pipes, allow_missing)
    return plan.prepared(progress, warn) if prepare else plan


def train_planned(plan: TrainingPlan, *, precision: str = "auto", workers: int | None = None,
                  progress: bool = True) -> AsvTrainingRun:
    """Train (or resume) the ASV model as ``plan`` (:func:`plan_training`) says, or leave a finished one as it is.
    A schedule that will hardly start (:func:`~.trainer.schedule_reach`) is warned about before training."""
    if plan.out_dir is None:
        raise ValueError("a training plan made without a folder only checks its inputs")
    if plan.done:
        log.info("train asv: %s is complete for these settings and data; not retrained", plan.out_dir)
        return AsvTrainingRun(plan.out_dir, trained=False)
    plan = plan.prepared(progress)
    h, data = plan.hparams, plan.data
    trainer = AsvTrainer(h, data, plan.out_dir, plan.device, precision, workers, plan.allow_pipes, progress)
    try:
        reach = schedule_reach(h, h["number_of_epochs"] * batches_per_epoch(len(data.train), h["batch_size"]))
        if reach["undertrained"]:
            log.warning("%s", schedule_advice(reach, h, plan.option))
        _train(trainer, plan.out_dir)
    finally:
        trainer.close()
    return AsvTrainingRun(plan.out_dir, trained=True)


def train_asv(data_dirs: list[Path | DataDir], out_dir: Path, hparams: dict | None = None, device: str = "auto",
              progress: bool = True, *, set_options: list[str] = (), precision: str = "auto",
              workers: int | None = None, allow_pipes: bool = False, allow_missing: bool = False,
              option: str = "--set") -> AsvTrainingRun:
    """Train (or resume, or find finished) the ASV model in ``out_dir``: :func:`plan_training`, then
    :func:`train_planned`. Every check on the settings, data and memory runs before anything is written."""
    plan = plan_training(data_dirs, out_dir, hparams=hparams, set_options=set_options, device=device,
                         progress=progress, allow_pipes=allow_pipes, allow_missing=allow_missing, option=option)
    return train_planned(plan, precision=precision, workers=workers, progress=progress)


def _train(trainer: AsvTrainer, out_dir: Path) -> None:
    h, data = trainer.h, trainer.data
    resumed = trainer.resume()
    if trainer.epoch > h["number_of_epochs"]:
        raise VoxanonError(f"{out_dir}: the checkpoint has {trainer.epoch} epochs, more than number_of_epochs="
                           f"{h['number_of_epochs']}; raise it or use a new --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / SKIPPED_FILE, "".join(f"{k} {v}\n" for k, v in
                                                      sorted((data.skipped | data.unreadable).items())))
    if not resumed:
        trainer.save_checkpoint()
    log.info("train asv: %d speakers, %d training and %d validation utterances, %d skipped; %s, %s, %d loader "
             "process(es)", len(data.speakers), len(data.train), len(data.valid),
             len(data.skipped) + len(data.unreadable), trainer.device, trainer.precision, trainer.workers)
    while trainer.epoch < h["number_of_epochs"]:
        atomic_write_text(out_dir / TRAINING_FILE, json.dumps(_summary(trainer, "training"), indent=2) + "\n")
        trainer.train_epoch()
        stats = trainer.finish_epoch()
        atomic_write_text(out_dir / TRAIN_LOG, _train_log(trainer.history))
        valid = ("" if stats["valid_loss"] is None else
                 f"; valid loss {stats['valid_loss']:.3f}, accuracy {stats['valid_accuracy']:.3f}")
        log.info("epoch %d: train loss %.3f, accuracy %.3f%s; %.1f utt/s", stats["epoch"], stats["train_loss"],
                 stats["train_accuracy"], valid, stats["utterances_per_s"] or 0.0)
    export_model(trainer.model, h, data.speakers, out_dir)
    atomic_write_text(out_dir / TRAIN_LOG, _train_log(trainer.history))
    atomic_write_text(out_dir / TRAINING_FILE, json.dumps(_summary(trainer, "complete"), indent=2) + "\n")


def _summary(trainer: AsvTrainer, status: str) -> dict:
    data = trainer.data
    return {"format": CHECKPOINT_FORMAT, "status": status, "model": "speechbrain ECAPA_TDNN + Classifier, AAM softmax",
            "hparams": trainer.h, "precision": trainer.precision, "device": str(trainer.device),
            "data": data.sets, "data_digest": data.digest,
            "selection": {"speakers": len(data.speakers), "train_utterances": len(data.train),
                          "valid_utterances": len(data.valid), "skipped_short_utterances": len(data.skipped),
                          "skipped_unreadable_utterances": len(data.unreadable),
                          "dropped_speakers": len(data.dropped)},
            "validation": data.validation, "dropped_speakers": data.dropped,
            "unreadable_utterances": data.unreadable,
            "epochs_done": trainer.epoch, "steps": trainer.step, "epochs": trainer.history,
            "schedule": schedule_reach(trainer.h, trainer.step)}


def _train_log(history: list[dict]) -> str:
    def number(value):
        return "n/a" if value is None else f"{value:.4g}"
    return "".join(f"epoch: {e['epoch']}, lr: {e['lr']:.3g} - train loss: {number(e['train_loss'])}, train accuracy: "
                   f"{number(e['train_accuracy'])} - valid loss: {number(e['valid_loss'])}, valid accuracy: "
                   f"{number(e['valid_accuracy'])} - {number(e['utterances_per_s'])} utt/s\n" for e in history)
