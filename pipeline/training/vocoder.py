"""HiFi-GAN vocoder training for SSL-SAS-layout model sets (``voxanon train vocoder``).

The recipe is jik876/hifi-gan's as nii-yamagishilab/SSL-SAS configures it
(``configs/libri_tts_clean_100_fbank_xv_ssl_freeze.json``): MPD + MSD, least-squares GAN losses,
feature matching ×2, mel L1 ×45; AdamW lr 2e-4, betas (0.8, 0.99), ExponentialLR 0.999 stepped once
per epoch; 8960-sample segments; seed 1234. Optionally the x-vector consistency loss of the
ICASSP 2023 zLLR-VC vocoder (nii-yamagishilab/speaker_sex_attribute_privacy).

Features are computed once, before training, by the same stages the anonymisation chain
runs (:mod:`voxanon.pipeline.systems.ssl_sas.chain`): the SSL-SAS input convention (peak 0.95, trim
to a multiple of 320), YAAPT F0 with the SSL-SAS settings (the default backend), soft content from the model
set's frozen content encoder and an ECAPA vector from its frozen speaker encoder. They are
cached per utterance on disk (``<cache>/<tag>/<sha[:2]>/<sha>.npy``, keyed by the audio
file's sha256 and, for content and speaker, by the encoder's weights; the input convention
and pYAAPT run in worker processes), and segments are read
from the cache memory-mapped, so a corpus never has to fit in memory and a rerun or resumed
run computes nothing twice.

Differences from SSL-SAS training, on purpose:

* the speaker vector is the ECAPA vector of the **whole utterance**, computed once; SSL-SAS
  extracts it on the fly from the 0.56 s training segment. At inference the vocoder is
  given utterance-level (or pseudo-speaker) vectors, which the utterance vector matches;
* content and speaker layer norms are applied per item (as the inference chain does), not
  over the whole batch tensor.

An epoch is one pass over the usable utterances in a seeded random order, one random
segment (aligned on content frames: audio samples, content ×2 and F0 frames all match)
from each, ``drop_last`` as jik876. Checkpoints keep jik876's layout: ``g_NNNNNNNN`` =
``{'generator': state}`` with ``weight_g``/``weight_v`` keys and ``do_NNNNNNNN`` = ``{'mpd',
'msd', 'optim_g', 'optim_d', 'steps', 'epoch'}``, plus the scheduler and gradient-scaler
states, the RNG states and the data-order position, so that a resumed run continues exactly
(bit for bit on CPU) where the checkpoint was taken. NNNNNNNN is the number of finished
steps. A ``do_*`` of jik876 itself (without those extras) resumes approximately, with a warning.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable

import numpy as np

from ...data_prep.atomic import atomic_write_text
from ...data_prep.audio import load_audio
from ...data_prep.corpus import DataDir
from ...data_prep.digest import sha256_file
from ...data_prep.errors import VoxanonError
from ...models.f0.params import DEFAULT_BACKEND
from ..feature_cache import ContentCache
from ..systems.ssl_sas.chain import SSL_SAS_MULTIPLE, ContentStage, SpeakerStage, SslSasInputStage
from ..systems.f0 import F0Stage
from ..systems.ssl_sas.loader import load_model
from ..systems.stage import Utterance
from ..model_service import torch_device
from .checkpointing import PRECISIONS, autocast_dtype, resolve_precision, restore_rng_state, rng_state

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
FEATURE_KINDS = ("audio", "f0", "content", "speaker")
CHECKPOINT_FORMAT = "voxanon-vocoder-training-1"
TRAIN_LOG = "train.log"
SKIPPED_FILE = "skipped.txt"
OPTIONS_FILE = "training.json"
JIK876_CONFIG = "config.json"
_CHECKPOINT_NAME = re.compile(r"^(g|do)_(\d{8})$")
# Settings a resumed run must share with the checkpoint for the continuation to be exact.
RESUME_KEYS = ("models", "batch_size", "segment", "seed", "lambda_xv", "layout", "learning_rate", "adam_betas",
               "lr_decay", "init", "discriminator_width_divisor", "data_digest")


@dataclass(frozen=True)
class VocoderTrainingOptions:
    out: Path
    models: str = "ssl-sas"
    steps: int = 100_000
    batch_size: int = 32
    segment: int = 8960
    checkpoint_interval: int = 10_000
    log_interval: int = 100
    lambda_xv: float = 0.0
    learning_rate: float = 2e-4
    adam_betas: tuple[float, float] = (0.8, 0.99)
    lr_decay: float = 0.999
    seed: int = 1234
    device: str = "auto"
    precision: str = "auto"
    feature_cache: Path | None = None
    layout: dict = field(default_factory=dict)
    init: str = "random"
    keep_last: int = 0
    validation_items: int = 4
    discriminator_width_divisor: int = 1
    workers: int = 1
    progress: bool = True

    def __post_init__(self):
        problems = []
        if self.steps < 0:
            problems.append(f"--steps must be at least 0, got {self.steps}")
        if self.batch_size < 1:
            problems.append(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.segment < 2 * SSL_SAS_MULTIPLE or self.segment % SSL_SAS_MULTIPLE:
            problems.append(f"--segment must be a multiple of {SSL_SAS_MULTIPLE} samples (one content frame) and at "
                            f"least {2 * SSL_SAS_MULTIPLE}, got {self.segment}")
        if self.checkpoint_interval < 1 or self.log_interval < 1:
            problems.append("--checkpoint-interval and --log-interval must be at least 1")
        if self.lambda_xv < 0:
            problems.append(f"--lambda-xv must be non-negative, got {self.lambda_xv}")
        if self.precision not in PRECISIONS:
            problems.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.init not in ("random", "base"):
            problems.append(f"--init must be 'random' or 'base', got {self.init!r}")
        if self.discriminator_width_divisor not in (1, 2, 4, 8):
            problems.append(f"--discriminator-divisor must be 1, 2, 4 or 8, got {self.discriminator_width_divisor}")
        if self.workers < 1:
            problems.append(f"--workers must be at least 1, got {self.workers}")
        if self.keep_last < 0:
            problems.append(f"--keep-last must be at least 0, got {self.keep_last}")
        if problems:
            raise VoxanonError("vocoder training options: " + "; ".join(problems))

    @property
    def cache_root(self) -> Path:
        return self.feature_cache if self.feature_cache is not None else self.out / "feature_cache"


# Features --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UtteranceFeatures:
    """One usable utterance: where its cached features are and how many content frames it has."""

    key: str
    paths: dict[str, Path]
    content_frames: int


@dataclass
class FeatureSet:
    utterances: list[UtteranceFeatures]
    skipped: dict[str, str]
    computed: int  # utterances for which something was computed rather than found in the cache

    @property
    def digest(self) -> str:
        """Identity of the training data: keys and feature files, in order (a resumed run must match it)."""
        text = "\n".join(f"{u.key} {u.paths['audio'].stem}" for u in self.utterances)
        return hashlib.sha256(text.encode()).hexdigest()


def _component_tag(model_set, component: str) -> str:
    if f"{component}.safetensors" not in model_set.manifest["files"]:
        raise VoxanonError(f"model set {model_set.name!r} has no {component} model; vocoder training needs a set "
                           "with content, speaker and generator (e.g. ssl-sas)")
    digest = hashlib.sha256(model_set.manifest["files"][f"{component}.safetensors"].encode())
    digest.update(json.dumps(model_set.config[component], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def feature_tags(models: str) -> dict[str, str]:
    """Cache tags per feature kind: audio and F0 depend on the file only, content and speaker on the encoders too."""
    from ...models.checkpoints.registry import load_model_set

    model_set = load_model_set(models, verify=False)
    return {"audio": "vocoder-input-sslsas", "f0": f"f0-yaapt-sslsas-{DEFAULT_BACKEND}",
            "content": f"content-{_component_tag(model_set, 'content')}",
            "speaker": f"speaker-{_component_tag(model_set, 'speaker')}"}


@dataclass(frozen=True)
class _FeatureJob:
    key: str
    source: str
    is_pipe: bool
    digest: str
    paths: dict[str, Path]

    def has(self, *kinds: str) -> bool:
        return all(self.paths[kind].is_file() for kind in kinds)


def prepare_features(data_dirs: Iterable[DataDir], models: str, cache_root: Path, segment: int,
                     progress: bool = True, workers: int = 1) -> FeatureSet:
    """Compute (or find cached) training features for every utterance; unusable ones are listed, not dropped silently.

    Two passes, the cache handing over between them: the input convention and pYAAPT (CPU-bound,
    per utterance) in ``workers`` processes, then the content and speaker encoders in this process.
    """
    from tqdm import tqdm

    cache = ContentCache(cache_root)
    tags = feature_tags(models)
    skipped: dict[str, str] = {}
    jobs = []
    for data in data_dirs:
        for utt in data.utterances:
            key = f"{data.name}/{utt}"
            source = data.wav[utt] if data.is_pipe(utt) else data.audio_path(utt)
            try:
                digest = (hashlib.sha256(str(source).encode()).hexdigest() if data.is_pipe(utt)
                          else sha256_file(source))
            except OSError as error:
                skipped[key] = f"{source}: {error.strerror or error}"
                continue
            paths = {kind: cache.path(tags[kind], digest, "vector") for kind in FEATURE_KINDS}
            jobs.append(_FeatureJob(key, str(source), data.is_pipe(utt), digest, paths))

    signal_jobs = [job for job in jobs if not job.has("audio", "f0")]
    arguments = [(job.source, job.is_pipe, cache_root, tags["audio"], tags["f0"], job.digest) for job in signal_jobs]
    with tqdm(total=len(signal_jobs), desc="vocoder features: input + F0", unit="utt",
              disable=not progress or not signal_jobs, dynamic_ncols=True) as bar:
        if workers > 1 and len(signal_jobs) > 1:
            with ProcessPoolExecutor(min(workers, len(signal_jobs)), mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(_input_and_f0, *args): job.key for job, args in zip(signal_jobs, arguments)}
                for future in as_completed(futures):
                    if future.result():
                        skipped[futures[future]] = future.result()
                    bar.update(1)
        else:
            for job, args in zip(signal_jobs, arguments):
                error = _input_and_f0(*args)
                if error:
                    skipped[job.key] = error
                bar.update(1)

    ready = [job for job in jobs if job.key not in skipped]
    encoder_jobs = [job for job in ready if not job.has("content", "speaker")]
    content_stage, speaker_stage = ContentStage(models), SpeakerStage(models)
    for job in tqdm(encoder_jobs, desc="vocoder features: content + speaker", unit="utt",
                    disable=not progress or not encoder_jobs, dynamic_ncols=True):
        utterance = Utterance(job.key, "", None, np.load(job.paths["audio"]), SAMPLE_RATE, seeds={})
        content_stage.process_batch([utterance])
        speaker_stage.process_batch([utterance])
        content = utterance.features["content"]
        if content.shape[0] * SSL_SAS_MULTIPLE != len(utterance.audio):
            skipped[job.key] = (f"{job.source}: {content.shape[0]} content frames for {len(utterance.audio)} "
                                f"samples (expected one per {SSL_SAS_MULTIPLE})")
            continue
        cache.put(tags["speaker"], job.digest, "vector", np.asarray(utterance.features["speaker"], dtype=np.float32))
        cache.put(tags["content"], job.digest, "vector", np.asarray(content, dtype=np.float32))

    usable = []
    for job in ready:
        if job.key in skipped:
            continue
        content_frames = int(np.load(job.paths["content"], mmap_mode="r").shape[0])
        if content_frames * SSL_SAS_MULTIPLE < segment:
            skipped[job.key] = (f"{job.source}: {content_frames * SSL_SAS_MULTIPLE} samples after trimming, "
                                f"shorter than one {segment}-sample training segment")
            continue
        usable.append(UtteranceFeatures(job.key, job.paths, content_frames))
    return FeatureSet(usable, skipped, len({job.key for job in signal_jobs + encoder_jobs}))


def _input_and_f0(source: str, allow_pipe: bool, cache_root: Path, audio_tag: str, f0_tag: str,
                  digest: str) -> str | None:
    """Load, apply the SSL-SAS input convention, run pYAAPT and cache audio and F0; an error message, or None."""
    try:
        samples = load_audio(source, SAMPLE_RATE, allow_pipe=allow_pipe).samples
        utterance = Utterance(source, "", None, samples, SAMPLE_RATE, seeds={})
        SslSasInputStage().process(utterance)
    except VoxanonError as error:
        return str(error)
    try:
        F0Stage().process(utterance)
    except (ValueError, RuntimeError, IndexError, FloatingPointError) as error:
        return f"{source}: pYAAPT failed ({type(error).__name__}: {error})"
    f0 = utterance.features["f0"]
    if f0.shape[0] * SSL_SAS_MULTIPLE != 2 * len(utterance.audio):
        return f"{source}: {f0.shape[0]} F0 frames for {len(utterance.audio)} samples (expected one per 160)"
    cache = ContentCache(cache_root)
    cache.put(audio_tag, digest, "vector", utterance.audio)
    cache.put(f0_tag, digest, "vector", f0)
    return None


# Data order ------------------------------------------------------------------------------------


class SegmentSampler:
    """Seeded epochs of utterance indices and segment starts; its state makes a resumed run draw the same."""

    def __init__(self, n_items: int, batch_size: int, seed: int):
        import torch

        if n_items < batch_size:
            raise VoxanonError(f"only {n_items} usable utterance(s) for a batch size of {batch_size}; "
                               "add data or lower --batch-size")
        self.n_items, self.batch_size = n_items, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch, self.position = 0, 0
        self.order = torch.randperm(n_items, generator=self.generator)

    @property
    def steps_per_epoch(self) -> int:
        return self.n_items // self.batch_size

    @property
    def epoch_finished(self) -> bool:
        return self.position >= self.steps_per_epoch

    def start_next_epoch(self) -> None:
        import torch

        self.epoch += 1
        self.position = 0
        self.order = torch.randperm(self.n_items, generator=self.generator)

    def next_batch(self, n_choices: list[int]) -> list[tuple[int, int]]:
        """(item, start) pairs for the next batch; ``n_choices[item]`` is the number of possible starts."""
        import torch

        items = self.order[self.position * self.batch_size:(self.position + 1) * self.batch_size].tolist()
        self.position += 1
        return [(item, int(torch.randint(n_choices[item], (1,), generator=self.generator))) for item in items]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "order": self.order.clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.order = state["order"].clone()
        self.generator.set_state(state["generator"])


# Training --------------------------------------------------------------------------------------


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

    def __init__(self, options: VocoderTrainingOptions, features: FeatureSet):
        import torch

        from ...models.nets.hifigan import HifiganGenerator
        from ...models.nets.hifigan_training import (LossMelSpectrogram, MultiPeriodDiscriminator,
                                                     MultiScaleDiscriminator)

        self.options = options
        self.features = features
        self.device = torch_device(options.device)
        self.precision = resolve_precision(options.precision, self.device)
        self.base, self.layout, self.generator_config = resolve_training_models(options)
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

        from ...models.nets.hifigan_training import (MEL_LOSS_WEIGHT, discriminator_loss, feature_loss, generator_loss,
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
        from ...models.checkpoints.safe import atomic_torch_save
        from ...models.nets.hifigan_training import to_jik876_generator_state

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
        from ...models.checkpoints.ssl_sas import SSL_SAS_SUBMODELS
        from ...models.checkpoints.safe import safe_load

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


# The command's work ----------------------------------------------------------------------------


def _jik876_config(trainer: VocoderTrainer) -> dict:
    """The checkpoint folder's ``config.json`` in SSL-SAS/jik876 key names, beside our own."""
    from ...models.nets.hifigan_training import MelConfig

    options, generator, mel = trainer.options, trainer.generator_config, MelConfig()
    return {"resblock": generator.resblock, "num_gpus": 0, "batch_size": options.batch_size,
            "learning_rate": options.learning_rate, "adam_b1": options.adam_betas[0], "adam_b2": options.adam_betas[1],
            "lr_decay": options.lr_decay, "seed": options.seed, "model_in_dim": generator.in_channels,
            "upsample_rates": list(generator.upsample_rates),
            "upsample_kernel_sizes": list(generator.upsample_kernel_sizes),
            "upsample_initial_channel": generator.upsample_initial_channel,
            "resblock_kernel_sizes": list(generator.resblock_kernel_sizes),
            "resblock_dilation_sizes": [list(d) for d in generator.resblock_dilation_sizes],
            "segment_size": options.segment, "num_mels": mel.n_mels, "n_fft": mel.n_fft, "hop_size": mel.hop_length,
            "win_size": mel.win_length, "sampling_rate": mel.sample_rate, "fmin": mel.f_min, "fmax": mel.f_max,
            "fmax_for_loss": None, "lambda_xv": options.lambda_xv,
            "discriminator_width_divisor": options.discriminator_width_divisor, "layout": trainer.layout.to_dict(),
            "generator": generator.to_dict()}


def _log_lines_up_to(path: Path, steps: int) -> None:
    """Drop log lines beyond the resumed checkpoint, and a line torn by a kill, so the log has each step once."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("step", 0) <= steps:
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def _produced_width(config: dict, component: str) -> int | None:
    """The dimension of the vectors a model set's content or speaker model produces, when its config says."""
    values = config.get(component) or {}
    return values.get("lin_neurons") if component == "speaker" else values.get("units_dim", values.get("n_centroids"))


def resolve_training_models(options: VocoderTrainingOptions, verify: bool = True):
    """The base model set, the conditioning layout (with ``--layout`` overrides) and the generator config,
    checked against each other: cheap, so a bad option fails before the feature pass."""
    from ...models.nets.hifigan import ConditioningLayout, GeneratorConfig
    from ...models.checkpoints.registry import load_model_set

    base = load_model_set(options.models, verify=verify)
    if "generator" not in base.config or "layout" not in base.config:
        raise VoxanonError(f"model set {options.models!r} has no vocoder to take the generator shape and "
                           "conditioning layout from (e.g. use ssl-sas)")
    try:
        layout = replace(ConditioningLayout.from_dict(base.config["layout"]), **options.layout)
    except (TypeError, ValueError) as error:
        raise VoxanonError(f"--layout: {error} (fields: {sorted(ConditioningLayout.__dataclass_fields__)})") from None
    generator_config = GeneratorConfig.from_dict({**base.config["generator"], "in_channels": layout.channels})
    if options.init == "base" and generator_config.in_channels != GeneratorConfig.from_dict(
            base.config["generator"]).in_channels:
        raise VoxanonError(f"--init base: the base generator takes {base.config['generator'].get('in_channels')} "
                           f"input channels, the layout gives {layout.channels}; use --init random")
    if generator_config.hop_length * layout.content_repeat != SSL_SAS_MULTIPLE:
        raise VoxanonError(f"model set {options.models!r}: generator hop {generator_config.hop_length} × "
                           f"content repeat {layout.content_repeat} is not the {SSL_SAS_MULTIPLE}-sample "
                           "content hop of the SSL-SAS layout")
    for component, width in (("content", layout.content_dim), ("speaker", layout.speaker_dim)):
        produced = _produced_width(base.config, component)
        if produced is not None and produced != width:
            raise VoxanonError(f"--layout: {component}_dim {width} differs from the {produced}-d {component} "
                               f"model of set {options.models!r}")
    return base, layout, generator_config


def train_vocoder(options: VocoderTrainingOptions, data_dirs: list[DataDir]) -> dict:
    """Prepare features, resume from the latest checkpoint if any, train to ``options.steps``; a summary."""
    import torch
    from tqdm import tqdm

    resolve_training_models(options, verify=False)
    resolve_precision(options.precision, torch_device(options.device))
    options.out.mkdir(parents=True, exist_ok=True)
    features = prepare_features(data_dirs, options.models, options.cache_root, options.segment, options.progress,
                                options.workers)
    total = len(features.utterances) + len(features.skipped)
    if features.skipped:
        for key, reason in list(features.skipped.items())[:20]:
            log.warning("skipped %s: %s", key, reason)
        log.warning("skipped %d of %d utterances (all listed in %s)", len(features.skipped), total,
                    options.out / SKIPPED_FILE)
    atomic_write_text(options.out / SKIPPED_FILE,
                      "".join(f"{key} {reason}\n" for key, reason in sorted(features.skipped.items())))
    if not features.utterances:
        raise VoxanonError(f"no usable training utterance among {total} (see {options.out / SKIPPED_FILE})")

    trainer = VocoderTrainer(options, features)
    resumed = trainer.resume()
    log_path = options.out / TRAIN_LOG
    if resumed is None:
        log_path.unlink(missing_ok=True)
    else:
        _log_lines_up_to(log_path, resumed)
        log.info("resumed from step %d (epoch %d) in %s", resumed, trainer.sampler.epoch, options.out)
    atomic_write_text(options.out / OPTIONS_FILE, json.dumps(
        {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
         "device_used": str(trainer.device), "precision_used": trainer.precision,
         "utterances": len(features.utterances), "skipped": len(features.skipped)}, indent=2) + "\n")
    atomic_write_text(options.out / JIK876_CONFIG, json.dumps(_jik876_config(trainer), indent=2) + "\n")
    log.info("training on %d utterances (%d steps per epoch, batch %d) on %s in %s", len(features.utterances),
             trainer.sampler.steps_per_epoch, options.batch_size, trainer.device, trainer.precision)

    start_steps = trainer.steps
    started = time.perf_counter()
    interval_start, interval_steps = started, 0
    with open(log_path, "a", encoding="utf-8") as log_file, \
            tqdm(total=options.steps, initial=min(start_steps, options.steps), desc="train vocoder", unit="step",
                 disable=not options.progress, dynamic_ncols=True) as bar:
        if resumed is None:
            # The untrained generator's error: the baseline the logged validation errors compare with.
            log_file.write(json.dumps({"step": 0, "epoch": 0, "validation_mel_error": trainer.validation_mel_error()})
                           + "\n")
        while trainer.steps < options.steps:
            losses = trainer.train_step()
            interval_steps += 1
            bar.update(1)
            bar.set_postfix(mel=f"{losses['mel_error']:.3f}", g=f"{losses['loss_gen_all']:.2f}",
                            d=f"{losses['loss_disc']:.2f}", refresh=False)
            checkpoint = trainer.steps % options.checkpoint_interval == 0 or trainer.steps == options.steps
            if trainer.steps % options.log_interval == 0 or checkpoint:
                now = time.perf_counter()
                entry = {"step": trainer.steps, "epoch": trainer.sampler.epoch,
                         "lr": trainer.optim_g.param_groups[0]["lr"], **losses,
                         "steps_per_s": interval_steps / max(now - interval_start, 1e-9)}
                if checkpoint:
                    entry["validation_mel_error"] = trainer.validation_mel_error()
                    trainer.save_checkpoint()
                log_file.write(json.dumps(entry) + "\n")
                log_file.flush()
                interval_start, interval_steps = now, 0
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    done = trainer.steps - start_steps
    return {"trainer": trainer, "features": features, "steps_run": done, "seconds": elapsed,
            "steps_per_s": done / elapsed if done and elapsed > 0 else None, "resumed_from": resumed}


def install_trained_generator(trainer: VocoderTrainer, name: str) -> Path:
    """Install the trained generator (weight norm folded) with the base set's encoders as model set ``name``."""
    from ...models.checkpoints.ssl_sas import split_ssl_sas_generator
    from ...models.nets.hifigan import HifiganGenerator, Vocoder
    from ...models.nets.hifigan_training import to_jik876_generator_state
    from ...models.checkpoints.registry import write_model_set

    folded = split_ssl_sas_generator({"generator": to_jik876_generator_state(trainer.generator.state_dict())},
                                     "trained generator")["generator"]
    folded = {key: value.detach().float().cpu() for key, value in folded.items()}
    Vocoder(HifiganGenerator(trainer.generator_config), trainer.layout).generator.load_state_dict(folded)
    config = {**trainer.base.config, "layout": trainer.layout.to_dict(),
              "vocoder_training": {"base": trainer.options.models, "steps": trainer.steps,
                                   "checkpoints": str(trainer.options.out.resolve()),
                                   "lambda_xv": trainer.options.lambda_xv, "segment": trainer.options.segment,
                                   "batch_size": trainer.options.batch_size, "data_digest": trainer.features.digest}}
    components = {"generator": folded, "content": trainer.base.tensors("content"),
                  "speaker": trainer.base.tensors("speaker")}
    source = (f"voxanon train vocoder: {trainer.steps} steps from base set {trainer.options.models!r} "
              f"(checkpoints in {trainer.options.out.resolve()})")
    return write_model_set(name, components, config, source=source, random=trainer.base.random)
