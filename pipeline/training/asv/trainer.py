"""The training loop of ``voxanon train asv`` (:mod:`voxanon.pipeline.training.asv`): the network, optimiser and loader
of a run, its checkpoints, epochs and validation, and how far its learning rate schedule gets."""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from ....data_prep.errors import VoxanonError
from ...model_service import torch_device
from .data import TrainingData, validation_counts
from .loader import BatchKeys, ChunkBatches, default_workers, epoch_batches, float_waves
from .settings import FREE_SETTINGS, chunk_samples, default_hparams, ecapa_config, seeded_rng
from ..checkpointing import autocast_dtype, resolve_precision, restore_rng_state, rng_state

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "voxanon-asv-training-2"  # 2: the validation split shared over the set
CHECKPOINT_DIR = "checkpoints"
POSTFIX_SECONDS = 2.0   # how often the progress bar's loss and accuracy are read from the device


class AsvTrainer:
    def __init__(self, h: dict, data: TrainingData, out_dir: Path, device: str = "auto", precision: str = "auto",
                 workers: int | None = None, allow_pipes: bool = False, progress: bool = True):
        import torch

        from ....models.nets.asv_model import SpeakerClassifier, aam_softmax_loss

        self.h, self.data, self.out_dir = h, data, Path(out_dir)
        self.device = torch_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.autocast_dtype = autocast_dtype(self.precision)
        self.workers = default_workers(self.device) if workers is None else workers
        self.allow_pipes, self.progress = allow_pipes, progress
        self.chunk = chunk_samples(h)
        torch.manual_seed(h["seed"])
        self.model = SpeakerClassifier(ecapa_config(h), len(data.speakers)).to(self.device)
        self.loss_fn = aam_softmax_loss(h["margin"], h["scale"])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=h["lr"], weight_decay=h["weight_decay"])
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.step, self.epoch, self.position = 0, 0, 0
        self.running = {"loss_sum": 0.0, "correct": 0, "count": 0, "seconds": 0.0}
        self.history: list[dict] = []
        self.choices = np.array([i.samples - self.chunk + 1 for i in data.train], dtype=np.float64)
        # One loader for the run: its processes persist across epochs and validation passes (starting them
        # per pass cost more than a short epoch's reading); the sampler says which batches come next.
        items = {"train": data.train, "valid": data.valid}
        labels = {kind: np.array([data.label(i) for i in members], dtype=np.int64) for kind, members in items.items()}
        self.keys = BatchKeys()
        self.loader = torch.utils.data.DataLoader(
            ChunkBatches(items, labels, self.chunk, h["sample_rate"], allow_pipes), batch_size=None,
            sampler=self.keys, num_workers=self.workers, pin_memory=self.device.type == "cuda",
            persistent_workers=self.workers > 0, generator=torch.Generator().manual_seed(h["seed"]))

    def close(self) -> None:
        """End the loader's processes (they would otherwise live as long as the trainer)."""
        self.loader = None

    # State -------------------------------------------------------------------------------------

    def settings(self) -> dict:
        return {"hparams": {k: v for k, v in self.h.items() if k not in FREE_SETTINGS},
                "precision": self.precision, "data_digest": self.data.digest, "speakers": len(self.data.speakers)}

    def checkpoint_paths(self) -> list[Path]:
        folder = self.out_dir / CHECKPOINT_DIR
        return sorted(folder.glob("ckpt_*.pt")) if folder.is_dir() else []

    def save_checkpoint(self) -> Path:
        from ....models.checkpoints.safe import atomic_torch_save

        state = {"format": CHECKPOINT_FORMAT, "settings": json.dumps(self.settings(), sort_keys=True),
                 "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict(), "step": self.step, "epoch": self.epoch,
                 "position": self.position, "running": dict(self.running), "history": json.dumps(self.history),
                 "rng": rng_state()}
        target = self.out_dir / CHECKPOINT_DIR / f"ckpt_{self.step:010d}_{self.epoch:04d}_{self.position:07d}.pt"
        atomic_torch_save(state, target)
        for older in self.checkpoint_paths():
            if older != target:
                older.unlink(missing_ok=True)
        return target

    def resume(self) -> bool:
        from ....models.checkpoints.safe import safe_load

        paths = self.checkpoint_paths()
        if not paths:
            return False
        state = safe_load(paths[-1])
        if state.get("format") == "voxanon-asv-training-1":
            raise VoxanonError(f"{paths[-1]}: written by an older voxanon, which split validation utterances per "
                               "speaker: resuming would train on other utterances; train into a new --out folder")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise VoxanonError(f"{paths[-1]}: not a voxanon train asv checkpoint")
        saved, current = json.loads(state["settings"]), json.loads(json.dumps(self.settings(), sort_keys=True))
        if saved != current:
            differing = sorted({k for k in set(saved["hparams"]) | set(current["hparams"])
                                if saved["hparams"].get(k) != current["hparams"].get(k)}
                               | {k for k in ("precision", "data_digest", "speakers") if saved[k] != current[k]})
            raise VoxanonError(f"{paths[-1]}: cannot resume, the run's {', '.join(differing)} differ(s) from the "
                               "checkpoint's; use the same settings and data, or a new --out folder")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.position = int(state["step"]), int(state["epoch"]), int(state["position"])
        self.running = dict(state["running"])
        self.history = json.loads(state["history"])
        restore_rng_state(state["rng"])
        log.info("resuming from %s: epoch %d, batch %d of it, step %d", paths[-1].name, self.epoch + 1,
                 self.position, self.step)
        return True

    # Work --------------------------------------------------------------------------------------

    def learning_rate(self, step: int) -> float:
        from ....models.nets.asv_model import cyclic_learning_rate

        return cyclic_learning_rate(step, self.h["base_lr"], self.h["lr"], self.h["step_size"])

    def train_epoch(self) -> None:
        """The rest of the current epoch. The loss and accuracy sums stay on the device, so that a GPU step never
        waits for the one before: they are read (a synchronisation) for the progress bar at most every
        ``POSTFIX_SECONDS``, before a checkpoint and at the end, adding the same numbers in the same order."""
        import torch
        from tqdm import tqdm

        batches = epoch_batches(len(self.data.train), self.choices, self.h["batch_size"], self.h["seed"], self.epoch)
        self.keys.kind, self.keys.batches = "train", batches[self.position:]
        interval = 60.0 * self.h["checkpoint_interval_minutes"]
        loss_sum = torch.tensor(self.running["loss_sum"], dtype=torch.float64, device=self.device)
        correct = torch.tensor(self.running["correct"], dtype=torch.int64, device=self.device)
        self.model.train()
        bar = tqdm(total=len(batches), initial=self.position, unit="batch", disable=not self.progress,
                   desc=f"epoch {self.epoch + 1}/{self.h['number_of_epochs']}", dynamic_ncols=True)
        started = last_save = last_shown = time.monotonic()
        for waves, labels in self.loader:
            waves = float_waves(waves.to(self.device, non_blocking=True))
            labels = labels.to(self.device, non_blocking=True)
            self.step += 1
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate(self.step)
            cosines = self.model(waves, self.autocast_dtype)
            loss = self.loss_fn(cosines, labels[:, None])
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.position += 1
            count = len(labels)
            loss_sum += loss.detach().double() * count
            correct += (cosines[:, 0].argmax(dim=1) == labels).sum()
            self.running["count"] += count
            now = time.monotonic()
            save = self.position < len(batches) and now - last_save >= interval
            show = self.progress and now - last_shown >= POSTFIX_SECONDS
            if save or show:
                self.running["loss_sum"], self.running["correct"] = float(loss_sum), int(correct)
                now = last_shown = time.monotonic()
            # The time is counted before the postfix shows it (it said 0.0 utt/s after the first batch).
            self.running["seconds"] += now - started
            started = now
            if show:
                bar.set_postfix_str(self._postfix(), refresh=False)
            bar.update(1)
            if save:
                self.save_checkpoint()
                started = last_save = time.monotonic()
        self.running["loss_sum"], self.running["correct"] = float(loss_sum), int(correct)
        self.running["seconds"] += time.monotonic() - started
        if self.progress:
            bar.set_postfix_str(self._postfix(), refresh=False)
        bar.close()

    def _postfix(self) -> str:
        r = self.running
        rate = r["count"] / r["seconds"] if r["seconds"] else 0.0
        return (f"loss {r['loss_sum'] / max(r['count'], 1):.3f}, acc {r['correct'] / max(r['count'], 1):.3f}, "
                f"{rate:.1f} utt/s, lr {self.learning_rate(self.step):.3g}")

    def validation_chunks(self) -> list[tuple[int, int]]:
        return [(index, int(seeded_rng(self.h["seed"], "valid-chunk", item.utt).integers(
            item.samples - self.chunk + 1))) for index, item in enumerate(self.data.valid)]

    def validate(self) -> dict:
        import torch

        if not self.data.valid:
            return {"valid_loss": None, "valid_accuracy": None}
        picks = self.validation_chunks()
        size = self.h["batch_size"]
        self.keys.kind, self.keys.batches = "valid", [picks[k:k + size] for k in range(0, len(picks), size)]
        self.model.eval()
        with torch.inference_mode():
            loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
            correct = torch.zeros((), dtype=torch.int64, device=self.device)
            for waves, labels in self.loader:
                waves = float_waves(waves.to(self.device, non_blocking=True))
                labels = labels.to(self.device, non_blocking=True)
                cosines = self.model(waves, self.autocast_dtype)
                loss_sum += self.loss_fn(cosines, labels[:, None]).double() * len(labels)
                correct += (cosines[:, 0].argmax(dim=1) == labels).sum()
            loss, right = float(loss_sum), int(correct)
        self.model.train()
        return {"valid_loss": loss / len(picks), "valid_accuracy": right / len(picks)}

    def finish_epoch(self) -> dict:
        r = self.running
        stats = {"epoch": self.epoch + 1, "steps": self.step, "lr": self.learning_rate(self.step),
                 "train_loss": r["loss_sum"] / max(r["count"], 1), "train_accuracy": r["correct"] / max(r["count"], 1),
                 **self.validate(),
                 "utterances_per_s": r["count"] / r["seconds"] if r["seconds"] else None,
                 "seconds": r["seconds"]}
        self.history.append(stats)
        self.epoch += 1
        self.position = 0
        self.running = {"loss_sum": 0.0, "correct": 0, "count": 0, "seconds": 0.0}
        self.save_checkpoint()
        return stats


# How far the learning rate schedule gets ---------------------------------------------------------------------

# The yardstick of the schedule warning: the challenge's own configuration (the recipe's defaults) on LibriSpeech
# train-clean-360, 104,014 utterances of 921 speakers. One chunk per utterance and epoch, 10 % held out:
# 93,613 training chunks, 366 batches of 256 per epoch, 3,660 steps in 10 epochs, where the cyclic schedule
# (step size 65,000) reaches lr 5.63e-4, 5.6 % of its maximum 0.01.
TRAIN_CLEAN_360_UTTERANCES = 104_014
UNDERTRAINED_SHARE = 0.1   # a run whose highest learning rate is under this share of the yardstick's is warned


def batches_per_epoch(n_train: int, batch_size: int) -> int:
    """Batches of an epoch of ``n_train`` chunks, as :func:`epoch_batches` deals them (a last one of one joins)."""
    batches = math.ceil(n_train / batch_size)
    return batches - 1 if batches > 1 and n_train % batch_size == 1 else batches


def _peak_learning_rate(h: dict, steps: int) -> float:
    from ....models.nets.asv_model import cyclic_learning_rate

    # The triangular schedule rises for step_size steps, to lr, then falls.
    return h["lr"] if steps >= h["step_size"] else cyclic_learning_rate(steps, h["base_lr"], h["lr"], h["step_size"])


def reference_schedule() -> dict:
    """Steps and learning rate the challenge's configuration reaches on train-clean-360 (see above)."""
    from ....models.nets.asv_model import cyclic_learning_rate

    h = default_hparams()
    held_out = sum(validation_counts({"all": TRAIN_CLEAN_360_UTTERANCES}, h["valid_ratio"], h["seed"]).values())
    steps = h["number_of_epochs"] * batches_per_epoch(TRAIN_CLEAN_360_UTTERANCES - held_out, h["batch_size"])
    return {"set": "LibriSpeech train-clean-360", "utterances": TRAIN_CLEAN_360_UTTERANCES, "steps": steps,
            "lr": cyclic_learning_rate(steps, h["base_lr"], h["lr"], h["step_size"])}


def schedule_reach(h: dict, steps: int) -> dict:
    """How far ``steps`` optimiser steps take the cyclic schedule of settings ``h``, against the challenge's
    configuration on train-clean-360 (:func:`reference_schedule`): ``undertrained`` when the highest learning
    rate reached is under :data:`UNDERTRAINED_SHARE` of the one it reaches."""
    from ....models.nets.asv_model import cyclic_learning_rate

    reference = reference_schedule()
    peak = _peak_learning_rate(h, steps)
    return {"steps": steps, "step_size": h["step_size"],
            "final_lr": cyclic_learning_rate(steps, h["base_lr"], h["lr"], h["step_size"]), "peak_lr": peak,
            "max_lr": h["lr"], "share_of_max": peak / h["lr"] if h["lr"] else 0.0, "reference": reference,
            "undertrained": peak < UNDERTRAINED_SHARE * reference["lr"]}


def schedule_advice(reach: dict, h: dict, option: str) -> str:
    """Why a run with this :func:`schedule_reach` hardly trains, and the settings that make it train."""
    reference = reach["reference"]
    # The step size at which this run's steps reach the reference's learning rate.
    fitting = max(1, math.floor(reach["steps"] * (h["lr"] - h["base_lr"])
                                / max(reference["lr"] - h["base_lr"], 1e-30)))
    return (f"the attacker's learning rate schedule hardly starts: {reach['steps']} step(s) against step_size "
            f"{h['step_size']:g} reach lr {reach['peak_lr']:.3g}, {100 * reach['share_of_max']:.2g} % of the maximum "
            f"{h['lr']:g} (the challenge's configuration reaches {reference['lr']:.3g} in {reference['steps']} steps "
            f"on {reference['set']}), so the model stays close to its random start; train longer "
            f"({option} number_of_epochs=...) or shorten the schedule ({option} step_size={fitting} reaches "
            f"{reference['lr']:.3g} in this run)")
