"""One vocoder training run's networks, optimisers, data order and checkpoints (jik876's ``g_*`` / ``do_*``)."""
from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path

import numpy as np

from ....data_prep.errors import VoxanonError
from ...model_service import torch_device
from ...systems.ssl_sas.chain import SSL_SAS_MULTIPLE
from ...systems.ssl_sas.loader import load_model
from ..checkpointing import autocast_dtype, resolve_precision, restore_rng_state, rng_state
from .features import FeatureSet
from .sampler import SegmentSampler
from .settings import CHECKPOINT_FORMAT, RESUME_KEYS, VocoderTrainingOptions, resolve_training_models

log = logging.getLogger(__name__)

_CHECKPOINT_NAME = re.compile(r"^(g|do)_(\d{8})$")


def checkpoint_pairs(folder: Path) -> list[int]:
    """Step counts for which both ``g_*`` and ``do_*`` exist, ascending."""
    found: dict[int, set[str]] = {}
    for path in folder.glob("*_*") if folder.is_dir() else []:
        match = _CHECKPOINT_NAME.match(path.name)
        if match:
            found.setdefault(int(match[2]), set()).add(match[1])
    return sorted(step for step, kinds in found.items() if kinds == {"g", "do"})


class VocoderTrainer:
    """Generator, discriminators, optimisers and data order of one training run."""

    def __init__(self, options: VocoderTrainingOptions, features: FeatureSet, models: tuple | None = None):
        """``models``: the base set, layout and generator config as :func:`resolve_training_models` gave them to the
        run (default: resolved here)."""
        import torch

        from ....models.nets.hifigan import HifiganGenerator
        from ....models.nets.hifigan_training import (LossMelSpectrogram, MultiPeriodDiscriminator,
                                                     MultiScaleDiscriminator)

        self.options = options
        self.features = features
        self.device = torch_device(options.device)
        self.precision = resolve_precision(options.precision, self.device)
        self.base, self.layout, self.generator_config = models or resolve_training_models(options)
        self.segment_frames = options.segment // SSL_SAS_MULTIPLE
        self.n_choices = [u.content_frames - self.segment_frames + 1 for u in features.utterances]

        if self.device.type == "cuda":
            # As jik876: fixed segment shapes, so cuDNN's autotuned kernels pay off (GPU runs are not bit-exact).
            torch.backends.cudnn.benchmark = True
        torch.manual_seed(options.seed)
        self.generator = HifiganGenerator(self.generator_config)
        if options.init == "base":
            self.generator.load_state_dict(self.base.tensors("generator"))
        self.generator.apply_weight_norm()
        divisor = options.discriminator_width_divisor
        self.mpd = MultiPeriodDiscriminator(width_divisor=divisor)
        self.msd = MultiScaleDiscriminator(width_divisor=divisor)
        for module in (self.generator, self.mpd, self.msd):
            module.to(self.device).train()
        self.mel = LossMelSpectrogram().to(self.device)
        self.speaker_encoder = None
        if options.lambda_xv > 0:
            # A private copy: the per-process cached encoder stays on the CPU for feature extraction.
            self.speaker_encoder = copy.deepcopy(load_model(options.models, "speaker")).to(self.device).eval()
            self.speaker_encoder.requires_grad_(False)

        betas = tuple(options.adam_betas)
        self.optim_g = torch.optim.AdamW(self.generator.parameters(), options.learning_rate, betas=betas)
        self.optim_d = torch.optim.AdamW(list(self.msd.parameters()) + list(self.mpd.parameters()),
                                         options.learning_rate, betas=betas)
        self.scheduler_g = torch.optim.lr_scheduler.ExponentialLR(self.optim_g, gamma=options.lr_decay)
        self.scheduler_d = torch.optim.lr_scheduler.ExponentialLR(self.optim_d, gamma=options.lr_decay)
        scaled = self.precision == "fp16"
        self.scaler_g = torch.amp.GradScaler(self.device.type, enabled=scaled)
        self.scaler_d = torch.amp.GradScaler(self.device.type, enabled=scaled)
        self.sampler = SegmentSampler(len(features.utterances), options.batch_size, options.seed)
        self.steps = 0

    # -- data

    def _autocast(self):
        import torch

        dtype = autocast_dtype(self.precision)
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)

    def load_batch(self, picks: list[tuple[int, int]]):
        """(frames (B, channels, 2·n), audio (B, 1, segment), speaker vectors (B, dim)) on the device."""
        import torch

        n = self.segment_frames
        items, waves, vectors = [], [], []
        for item, start in picks:
            paths = self.features.utterances[item].paths
            content = np.array(np.load(paths["content"], mmap_mode="r")[start:start + n])
            f0 = np.array(np.load(paths["f0"], mmap_mode="r")[2 * start:2 * (start + n)])
            audio = np.load(paths["audio"], mmap_mode="r")
            audio = np.array(audio[start * SSL_SAS_MULTIPLE:(start + n) * SSL_SAS_MULTIPLE])
            speaker = torch.from_numpy(np.load(paths["speaker"]))
            items.append((torch.from_numpy(content), torch.from_numpy(f0), speaker))
            waves.append(torch.from_numpy(audio))
            vectors.append(speaker)
        frames, _ = self.layout.batch(items)
        return (frames.to(self.device), torch.stack(waves)[:, None].to(self.device),
                torch.stack(vectors).to(self.device))

    def validation_picks(self) -> list[tuple[int, int]]:
        """A fixed batch: the middle segment of the first utterances, for a mel error comparable across steps."""
        count = min(self.options.validation_items, len(self.features.utterances))
        return [(i, (self.n_choices[i] - 1) // 2) for i in range(count)]

    def validation_mel_error(self) -> float:
        """Mean |log-mel(real) − log-mel(generated)| on :meth:`validation_picks` (jik876's "mel error")."""
        import torch

        frames, audio, _ = self.load_batch(self.validation_picks())
        with torch.no_grad(), self._autocast():
            generated = self.generator(frames)
        with torch.no_grad():
            return float(torch.nn.functional.l1_loss(self.mel(generated[:, 0].float()), self.mel(audio[:, 0])))

    # -- one step

    def speaker_vectors(self, audio):
        """ECAPA vectors of (B, 1, samples) generated segments; gradients flow back through the frozen encoder.

        The segments all have the same length, so they are embedded as one unpadded batch, which
        gives each one's single-utterance vector.
        """
        import torch.nn.functional as F

        vectors = self.speaker_encoder(audio[:, 0].float())
        return F.normalize(vectors, dim=1) if self.layout.l2_normalise_speaker else vectors

    def _discriminators_trainable(self, trainable: bool) -> None:
        for discriminator in (self.mpd, self.msd):
            discriminator.requires_grad_(trainable)

    def train_step(self) -> dict[str, float]:
        import torch.nn.functional as F

        from ....models.nets.hifigan_training import (MEL_LOSS_WEIGHT, discriminator_loss, feature_loss, generator_loss,
                                                     xvector_consistency_loss)

        frames, audio, target_vectors = self.load_batch(self.sampler.next_batch(self.n_choices))
        with self._autocast():
            generated = self.generator(frames)
        mel_real = self.mel(audio[:, 0])
        mel_generated = self.mel(generated[:, 0].float())

        self.optim_d.zero_grad(set_to_none=True)
        with self._autocast():
            mpd_real, mpd_fake, _, _ = self.mpd(audio, generated.detach())
            msd_real, msd_fake, _, _ = self.msd(audio, generated.detach())
        loss_disc = discriminator_loss(mpd_real, mpd_fake) + discriminator_loss(msd_real, msd_fake)
        self.scaler_d.scale(loss_disc).backward()
        self.scaler_d.step(self.optim_d)
        self.scaler_d.update()

        self.optim_g.zero_grad(set_to_none=True)
        # jik876 also accumulates discriminator weight gradients here and discards them at the next
        # discriminator step; not computing them gives the same updates for less work.
        self._discriminators_trainable(False)
        with self._autocast():
            _, mpd_fake, mpd_real_maps, mpd_fake_maps = self.mpd(audio, generated)
            _, msd_fake, msd_real_maps, msd_fake_maps = self.msd(audio, generated)
        mel_error = F.l1_loss(mel_real, mel_generated)
        loss_fm = feature_loss(mpd_real_maps, mpd_fake_maps) + feature_loss(msd_real_maps, msd_fake_maps)
        loss_adv = generator_loss(mpd_fake) + generator_loss(msd_fake)
        loss_gen_all = loss_adv + loss_fm + mel_error * MEL_LOSS_WEIGHT
        losses = {}
        if self.speaker_encoder is not None:
            if self.layout.l2_normalise_speaker:
                target_vectors = F.normalize(target_vectors, dim=1)
            loss_xv = xvector_consistency_loss(self.speaker_vectors(generated), target_vectors)
            loss_gen_all = loss_gen_all + self.options.lambda_xv * loss_xv
            losses["loss_xv"] = loss_xv
        self.scaler_g.scale(loss_gen_all).backward()
        self._discriminators_trainable(True)
        self.scaler_g.step(self.optim_g)
        self.scaler_g.update()

        self.steps += 1
        if self.sampler.epoch_finished:
            self.scheduler_g.step()
            self.scheduler_d.step()
            self.sampler.start_next_epoch()
        losses.update(loss_gen_all=loss_gen_all, mel_error=mel_error, loss_disc=loss_disc, loss_fm=loss_fm,
                      loss_adv=loss_adv)
        return {name: float(value.detach()) for name, value in losses.items()}

    # -- checkpoints

    def run_settings(self) -> dict:
        options = self.options
        return {"models": options.models, "batch_size": options.batch_size, "segment": options.segment,
                "seed": options.seed, "lambda_xv": options.lambda_xv, "layout": self.layout.to_dict(),
                "learning_rate": options.learning_rate, "adam_betas": list(options.adam_betas),
                "lr_decay": options.lr_decay, "init": options.init,
                "discriminator_width_divisor": options.discriminator_width_divisor,
                "data_digest": self.features.digest}

    def save_checkpoint(self) -> Path:
        from ....models.checkpoints.safe import atomic_torch_save
        from ....models.nets.hifigan_training import to_jik876_generator_state

        out = self.options.out
        name = f"{self.steps:08d}"
        state = {"mpd": self.mpd.state_dict(), "msd": self.msd.state_dict(),
                 "optim_g": self.optim_g.state_dict(), "optim_d": self.optim_d.state_dict(),
                 "steps": self.steps, "epoch": self.sampler.epoch,
                 "scheduler_g": self.scheduler_g.state_dict(), "scheduler_d": self.scheduler_d.state_dict(),
                 "scaler_g": self.scaler_g.state_dict(), "scaler_d": self.scaler_d.state_dict(),
                 "rng": rng_state(), "data_order": self.sampler.state_dict(),
                 "format": CHECKPOINT_FORMAT, "settings": json.dumps(self.run_settings(), sort_keys=True)}
        atomic_torch_save(state, out / f"do_{name}")
        generator_path = out / f"g_{name}"
        atomic_torch_save({"generator": to_jik876_generator_state(self.generator.state_dict())}, generator_path)
        if self.options.keep_last:
            for step in checkpoint_pairs(out)[:-self.options.keep_last]:
                for prefix in ("do", "g"):
                    (out / f"{prefix}_{step:08d}").unlink(missing_ok=True)
        return generator_path

    def resume(self) -> int | None:
        """Load the latest checkpoint pair in the output folder; the step count resumed from, or None."""
        from ....models.checkpoints.ssl_sas import SSL_SAS_SUBMODELS
        from ....models.checkpoints.safe import safe_load

        pairs = checkpoint_pairs(self.options.out)
        if not pairs:
            return None
        name = f"{pairs[-1]:08d}"
        g_path, do_path = self.options.out / f"g_{name}", self.options.out / f"do_{name}"
        generator_state = safe_load(g_path)
        do = safe_load(do_path)
        exact = do.get("format") == CHECKPOINT_FORMAT
        if exact:
            saved = json.loads(do["settings"])
            current = json.loads(json.dumps(self.run_settings()))  # tuples become lists, as in the saved copy
            differing = [key for key in RESUME_KEYS if saved.get(key) != current.get(key)]
            if differing:
                raise VoxanonError(f"{do_path}: cannot resume exactly, the run's {', '.join(differing)} differ(s) from "
                                   f"the checkpoint's ({', '.join(f'{k}={saved.get(k)!r}' for k in differing)}); "
                                   "use the same options and data, or a new --out folder")
        try:
            state = {k: v for k, v in generator_state["generator"].items() if not k.startswith(SSL_SAS_SUBMODELS)}
            self.generator.load_state_dict(state)
            self.mpd.load_state_dict(do["mpd"])
            self.msd.load_state_dict(do["msd"])
            self.optim_g.load_state_dict(do["optim_g"])
            self.optim_d.load_state_dict(do["optim_d"])
        except (KeyError, RuntimeError, ValueError) as error:
            raise VoxanonError(f"{g_path} / {do_path}: not a checkpoint pair of this architecture "
                               f"({type(error).__name__}: {str(error).splitlines()[0]})") from None
        if exact:
            self.scheduler_g.load_state_dict(do["scheduler_g"])
            self.scheduler_d.load_state_dict(do["scheduler_d"])
            self.scaler_g.load_state_dict(do["scaler_g"])
            self.scaler_d.load_state_dict(do["scaler_d"])
            self.sampler.load_state_dict(do["data_order"])
            restore_rng_state(do["rng"])
            self.steps = int(do["steps"])
        else:
            # jik876 saves the index of the last finished step and restarts the saved epoch from its start.
            self.steps = int(do["steps"]) + 1
            for scheduler in (self.scheduler_g, self.scheduler_d):
                scheduler.last_epoch = int(do["epoch"])
            for optimizer in (self.optim_g, self.optim_d):
                for group in optimizer.param_groups:
                    group["lr"] = group.setdefault("initial_lr", self.options.learning_rate) \
                        * self.options.lr_decay ** int(do["epoch"])
            while self.sampler.epoch < int(do["epoch"]):
                self.sampler.start_next_epoch()
            log.warning("%s is a jik876 checkpoint without data order or scheduler state: resuming at step %d, "
                        "epoch %d, approximately (not bit-exact)", do_path, self.steps, int(do["epoch"]))
        return self.steps
