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

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from ....data_prep.atomic import atomic_write_text
from ....data_prep.corpus import DataDir
from ....data_prep.errors import VoxanonError
from ...model_service import torch_device
from ..checkpointing import resolve_precision
from .export import jik876_config
from .features import prepare_features
from .settings import JIK876_CONFIG, OPTIONS_FILE, SKIPPED_FILE, TRAIN_LOG, VocoderTrainingOptions, resolve_training_models
from .trainer import VocoderTrainer

log = logging.getLogger(__name__)


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


def train_vocoder(options: VocoderTrainingOptions, data_dirs: list[DataDir]) -> dict:
    """Prepare features, resume from the latest checkpoint if any, train to ``options.steps``; a summary."""
    import torch
    from tqdm import tqdm

    # The base set (verified once, here), the layout and the device: cheap, so a bad option fails before the
    # feature pass; the trainer takes them as they are.
    models = resolve_training_models(options)
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

    trainer = VocoderTrainer(options, features, models)
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
    atomic_write_text(options.out / JIK876_CONFIG, json.dumps(jik876_config(trainer), indent=2) + "\n")
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
