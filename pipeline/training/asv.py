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
  every held-out utterance is one of a trained speaker (:func:`validation_counts`); each epoch
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
  reaches on train-clean-360, :func:`schedule_reach`) is warned about before training, with the remedies;
  ``training.json``'s ``schedule`` records how far it got;
* memory: on the CPU a batch whose estimated peak (:func:`training_memory_estimate`) will not fit in the
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
settings and data is left as it is (:func:`finished_attacker`), before any audio is read.

Checkpoints (one file, written atomically, the previous one removed afterwards) hold the
network, optimiser, gradient scaler, step and epoch counters, the position in the epoch, the
running epoch statistics, the metric history and the RNG state; they are written at the end
of every epoch and every ``checkpoint_interval_minutes`` within one. A rerun resumes from the
latest, exactly (bit for bit on the CPU), and refuses if the settings or data differ;
``number_of_epochs`` may be raised to train further.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...data_prep.atomic import atomic_path, atomic_write_text
from ...data_prep.corpus import DataDir, DataDirError, read_data_dir
from ...data_prep.errors import VoxanonError
from ..model_service import torch_device
from .checkpointing import (autocast_dtype, resolve_precision, restore_rng_state,
                                                    rng_state)

log = logging.getLogger(__name__)

RECIPE = "asv_ecapa"
CHECKPOINT_FORMAT = "voxanon-asv-training-2"  # 2: the validation split shared over the set
TRAINING_FILE = "training.json"
TRAIN_LOG = "train_log.txt"
SKIPPED_FILE = "skipped.txt"
CHECKPOINT_DIR = "checkpoints"
POSTFIX_SECONDS = 2.0   # how often the progress bar's loss and accuracy are read from the device
HYPERPARAMS_FILE = "hyperparams.yaml"
CLASSIFIER_FILE = "classifier.ckpt"
LABEL_ENCODER_FILE = "label_encoder.txt"
PRETRAINER_LABEL_ENCODER_FILE = "label_encoder.ckpt"
# Every file export_model writes ("embedding_model.ckpt" is models.checkpoints.ecapa.EMBEDDING_FILE, which imports torch).
MODEL_FILES = (HYPERPARAMS_FILE, "embedding_model.ckpt", CLASSIFIER_FILE, LABEL_ENCODER_FILE,
               PRETRAINER_LABEL_ENCODER_FILE)
UTT_SELECTIONS = ("spk-diverse-sess", "spk-random", "spk-sess")
# Settings that do not change the trained weights: a resumed run may differ in them. drop_short_speakers is
# one: a speaker it drops has no usable utterance, so the model either trains on the same data or not at all.
FREE_SETTINGS = ("description", "name", "number_of_epochs", "checkpoint_interval_minutes", "drop_short_speakers")
# The largest exact float32 scale of 16-bit PCM (libsndfile's): int16 / 32768 is every float32 read of such a file.
PCM16_SCALE = 1.0 / 32768


# Settings ------------------------------------------------------------------------------------------


def default_hparams() -> dict:
    from ..systems import read_recipe

    return read_recipe("training", RECIPE)


def resolve_hparams(overrides: dict | None = None, set_options: list[str] = (), option: str = "--set") -> dict:
    """The recipe's settings, then ``overrides`` (key -> value), then ``key=value`` texts given with the command's
    ``option`` (``--set`` in train asv, ``--train-set`` in challenge); checked."""
    from ..systems import apply_overrides

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


def _seeded_rng(*parts) -> np.random.Generator:
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


# Data ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingUtterance:
    utt: str
    speaker: str
    set_name: str
    source: str        # a file path or a ``command |`` entry
    is_pipe: bool
    samples: int       # length at 16 kHz
    # What the chunk reader needs from the header, read once at the scan: the file's rate and channels (0 for a
    # ``command |`` entry, decoded whole), whether it is 16-bit PCM (read as int16, exactly) and, for a mono
    # 16-bit WAV file, where its samples start (their bytes are read as they are; -1 otherwise).
    file_rate: int = 0
    channels: int = 0
    pcm16: bool = False
    data_offset: int = -1

    @property
    def seekable(self) -> bool:
        """A file at the training rate: a chunk is read from its header's offset, nothing else decoded."""
        return not self.is_pipe and self.file_rate > 0


def read_training_sets(data_dirs: list[Path | DataDir], allow_pipes: bool = False,
                       allow_missing: bool = False) -> list[DataDir]:
    """Kaldi data directories (a path, or a set already read), checked: files present (unless ``allow_missing``,
    where :func:`scan_utterances` lists the missing ones), ids unique across sets."""
    sets, seen = [], {}
    for entry in data_dirs:
        data = entry if isinstance(entry, DataDir) else read_data_dir(Path(entry), allow_pipes=allow_pipes)
        where = str(data.path or data.name)
        problems = data.validate(check_files=not allow_missing)
        if problems:
            raise DataDirError(where, problems)
        repeated = sorted(set(data.wav) & set(seen))
        if repeated:
            raise VoxanonError(f"{where}: utterance id(s) {', '.join(repeated[:5])} also in {seen[repeated[0]]}; "
                               "each utterance must be given once")
        seen.update({utt: where for utt in data.wav})
        sets.append(data)
    if not sets:
        raise VoxanonError("train asv: no data directories given")
    return sets


def _training_utterance(data: DataDir, utt: str, sample_rate: int, allow_pipes: bool) -> TrainingUtterance:
    """The utterance with its length at ``sample_rate`` and its header's facts; an AudioError when unreadable."""
    import soundfile

    from ...data_prep.audio import AudioError, load_audio, pcm16_data_offset

    speaker = data.utt2spk[utt]
    if data.is_pipe(utt):
        samples = len(load_audio(data.wav[utt], sample_rate, allow_pipe=allow_pipes).samples)
        return TrainingUtterance(utt, speaker, data.name, data.wav[utt], True, samples)
    missing = data.missing_file(utt)
    if missing is not None:
        raise AudioError(data.wav[utt], missing)
    path = data.audio_path(utt)
    try:
        info = soundfile.info(str(path))
    except Exception as error:  # soundfile raises several types for corrupt input
        raise AudioError(str(path), f"unreadable audio ({type(error).__name__}: {error})") from None
    if info.samplerate != sample_rate:  # decoded whole and resampled at each chunk
        return TrainingUtterance(utt, speaker, data.name, str(path), False,
                                 int(info.frames * sample_rate / info.samplerate))
    # int16 batches hold mono 16-bit files as read; a multi-channel file is down-mixed in float32.
    pcm16 = info.subtype == "PCM_16" and info.channels == 1
    raw = pcm16 and sys.byteorder == "little" and info.format in ("WAV", "WAVEX")
    offset = pcm16_data_offset(path) if raw else None
    return TrainingUtterance(utt, speaker, data.name, str(path), False, info.frames, info.samplerate, info.channels,
                             pcm16, -1 if offset is None else offset)


def scan_utterances(sets: list[DataDir], sample_rate: int, allow_pipes: bool, progress: bool,
                    allow_missing: bool = False) -> tuple[list[TrainingUtterance], dict[str, str]]:
    """Every readable utterance with its length (read from the audio headers, not ``utt2dur``), and the missing or
    unreadable ones ("set/utt" -> why): an error listing them unless ``allow_missing``."""
    from tqdm import tqdm

    from ...data_prep.audio import AudioError

    items, unreadable = [], {}
    total = sum(len(d.wav) for d in sets)
    with tqdm(total=total, desc="reading audio headers", unit="utt", disable=not progress, dynamic_ncols=True) as bar:
        for data in sets:
            for utt in data.utterances:
                try:
                    items.append(_training_utterance(data, utt, sample_rate, allow_pipes))
                except AudioError as error:
                    unreadable[f"{data.name}/{utt}"] = str(error)
                bar.update(1)
    if unreadable and not allow_missing:
        raise DataDirError("train asv: audio", [f"{key}: {why}" for key, why in sorted(unreadable.items())]
                           + ["fix or remove them, or pass --allow-missing to train without them"])
    return items, unreadable


def session_of(utt: str) -> str:
    """``spk-chapter`` of a LibriSpeech-style ``spk-chapter-utt`` id; the whole id's speaker part otherwise."""
    fields = utt.split("-")
    return "-".join(fields[:-1]) if len(fields) >= 3 else ""


def select_utterances(utt2spk: dict[str, str], h: dict) -> list[str]:
    """The utterances the settings choose (see the module doc), sorted."""
    by_speaker: dict[str, list[str]] = {}
    for utt in sorted(utt2spk):
        by_speaker.setdefault(utt2spk[utt], []).append(utt)
    speakers = sorted(by_speaker)
    if h["num_spk"] != "ALL":
        if h["num_spk"] > len(speakers):
            raise VoxanonError(f"train asv: num_spk={h['num_spk']} but the data have only {len(speakers)} speakers")
        speakers = sorted(_seeded_rng(h["seed"], "speakers").permutation(speakers)[:h["num_spk"]].tolist())
    chosen = []
    for speaker in speakers:
        utts = by_speaker[speaker]
        if h["num_utt"] == "ALL":
            chosen += utts
            continue
        n, rng = h["num_utt"], _seeded_rng(h["seed"], "utterances", speaker)
        sessions: dict[str, list[str]] = {}
        for utt in utts:
            sessions.setdefault(session_of(utt), []).append(utt)
        shuffled = {s: rng.permutation(members).tolist() for s, members in sorted(sessions.items())}
        if h["utt_selection"] == "spk-random":
            chosen += rng.permutation(utts)[:n].tolist()
        elif h["utt_selection"] == "spk-sess":
            chosen += [utt for members in shuffled.values() for utt in members[:n]]
        else:  # spk-diverse-sess: one from each session in turn until n are chosen
            order = rng.permutation(sorted(shuffled)).tolist()
            picked, depth = [], 0
            while len(picked) < min(n, len(utts)):
                picked += [shuffled[s][depth] for s in order if depth < len(shuffled[s])][:n - len(picked)]
                depth += 1
            chosen += picked
    return sorted(chosen)


@dataclass
class TrainingData:
    speakers: list[str]
    train: list[TrainingUtterance]
    valid: list[TrainingUtterance]
    skipped: dict[str, str]           # "set/utt" -> reason: shorter than a chunk
    sets: list[dict]                  # identity of each data set
    digest: str
    unreadable: dict[str, str] = field(default_factory=dict)  # "set/utt" -> reason: skipped under --allow-missing
    dropped: dict[str, str] = field(default_factory=dict)     # speaker -> why it is not trained on
    validation: dict = field(default_factory=dict)            # what the split held out (see validation_counts)

    def label(self, item: TrainingUtterance) -> int:
        return self._index[item.speaker]

    def __post_init__(self):
        self._index = {s: i for i, s in enumerate(self.speakers)}


def data_identity(data: DataDir) -> dict:
    """Name, place and size of a set, a digest of its listing (each utterance's audio entry and speaker: edited
    data of the same size differ, without reading any audio), and the anonymisation that made it (from the
    runner's ``run.json``)."""
    from ..runner import read_run_identity

    anonymisation = read_run_identity(data.path) if data.path else None
    if anonymisation is not None and anonymisation["status"] != "complete":
        log.warning("%s: the anonymisation run's status is %r, not 'complete'", data.path, anonymisation["status"])
    listing = "\n".join(f"{utt} {data.wav[utt]} {data.utt2spk.get(utt, '')}" for utt in sorted(data.wav))
    return {"name": data.name, "path": str(data.path.resolve()) if data.path else None,
            "utterances": len(data.wav), "speakers": len(data.speakers),
            "listing": hashlib.sha256(listing.encode()).hexdigest()[:16], "anonymisation": anonymisation}


def prepare_training_data(sets: list[DataDir], h: dict, allow_pipes: bool = False, progress: bool = True, *,
                          allow_missing: bool = False, identities: list[dict] | None = None, option: str = "--set",
                          warn: bool = True) -> TrainingData:
    """Select, measure and split the utterances; every check on the data happens here, before anything is written.

    ``identities`` are the sets' :func:`data_identity` where the caller has them already. ``option`` is the
    command's option for training settings, named in messages (``--set`` in train asv, ``--train-set`` in
    challenge). ``warn``: log the warnings on the data (dropped speakers, skipped utterances, a partial
    validation split); a check run ahead of the training, which warns itself, passes False.
    """
    warnings: list[str] = []
    utt2spk = {utt: spk for data in sets for utt, spk in data.utt2spk.items()}
    all_speakers = sorted(set(utt2spk.values()))
    if len(all_speakers) < 2:
        raise VoxanonError(f"train asv: {', '.join(str(d.path or d.name) for d in sets)}: "
                           f"{len(all_speakers)} speaker(s) ({', '.join(all_speakers) or 'none'}); "
                           "a speaker classifier needs at least 2")
    chosen = set(select_utterances(utt2spk, h))
    subsets = [data.subset([u for u in data.wav if u in chosen]) for data in sets]
    items, unreadable = scan_utterances([d for d in subsets if d.wav], h["sample_rate"], allow_pipes, progress,
                                        allow_missing)
    chunk = chunk_samples(h)
    usable = [item for item in items if item.samples >= chunk]
    skipped = {f"{i.set_name}/{i.utt}": f"{i.samples / h['sample_rate']:.2f} s, shorter than one "
               f"{h['sentence_len']:g} s chunk" for i in items if i.samples < chunk}
    dropped = _speakers_without_usable_utterances(sorted({utt2spk[u] for u in chosen}), items, usable, h, option,
                                                  warnings)
    speakers = sorted({i.speaker for i in usable})
    if len(speakers) < 2:
        raise VoxanonError(f"train asv: the selection keeps {len(speakers)} speaker(s); at least 2 are needed")
    if skipped:
        warnings.append(f"{len(skipped)} utterance(s) shorter than one {h['sentence_len']:g} s chunk are not used "
                        f"(listed in {SKIPPED_FILE})")
    if unreadable:
        warnings.append(f"--allow-missing: {len(unreadable)} utterance(s) with missing or unreadable audio are not "
                        f"used (listed in {SKIPPED_FILE}): " + ", ".join(sorted(unreadable)[:10])
                        + (", ..." if len(unreadable) > 10 else ""))
    by_speaker: dict[str, list[TrainingUtterance]] = {}
    for item in usable:
        by_speaker.setdefault(item.speaker, []).append(item)
    counts = validation_counts({s: len(m) for s, m in by_speaker.items()}, h["valid_ratio"], h["seed"])
    train, valid = [], []
    for speaker, members in sorted(by_speaker.items()):
        held = set(_seeded_rng(h["seed"], "valid", speaker).permutation(len(members))[:counts[speaker]].tolist())
        for index, item in enumerate(members):
            (valid if index in held else train).append(item)
    digest = hashlib.sha256(json.dumps([[i.set_name, i.utt, i.speaker, i.samples] for i in usable])
                            .encode()).hexdigest()[:16]
    validation = _validation_record(counts, {s: len(m) for s, m in by_speaker.items()}, h, warnings)
    for warning in warnings if warn else ():
        log.warning("%s", warning)
    return TrainingData(speakers=speakers, train=train, valid=valid, skipped=skipped,
                        sets=identities if identities is not None else [data_identity(d) for d in sets],
                        digest=digest, unreadable=unreadable, dropped=dropped,
                        validation=validation)


def _speakers_without_usable_utterances(selected: list[str], items: list[TrainingUtterance],
                                        usable: list[TrainingUtterance], h: dict, option: str,
                                        warnings: list[str]) -> dict[str, str]:
    """The selected speakers left with no usable utterance (speaker -> why), with a warning line listing them
    (added to ``warnings``); an error for those with a readable but short one unless ``drop_short_speakers``,
    whose remedies name ``option``. A speaker whose every utterance was skipped under --allow-missing is
    dropped: the user chose to train without those files."""
    left = {i.speaker for i in usable}
    readable = {i.speaker for i in items}
    short = [s for s in selected if s not in left and s in readable]
    if short and not h["drop_short_speakers"]:
        where = {s: sorted({i.set_name for i in items if i.speaker == s}) for s in short}
        raise VoxanonError(
            f"train asv: {len(short)} speaker(s) have no utterance of at least one {h['sentence_len']:g} s "
            f"chunk: " + ", ".join(f"{s} (in {', '.join(where[s])})" for s in short[:20])
            + (", ..." if len(short) > 20 else "")
            + f"; remove them, lower sentence_len ({option} sentence_len=...), or train without them "
              f"({option} drop_short_speakers=true)")
    dropped = {s: f"no utterance of at least one {h['sentence_len']:g} s chunk" for s in short}
    dropped |= {s: "no readable utterance (--allow-missing)" for s in selected if s not in readable}
    if dropped:
        warnings.append(f"{len(dropped)} speaker(s) are not trained on (recorded in {TRAINING_FILE}): "
                        + ", ".join(f"{s} ({why})" for s, why in sorted(dropped.items())))
    return dict(sorted(dropped.items()))


def validation_counts(sizes: dict[str, int], ratio: float, seed: int) -> dict[str, int]:
    """How many of each speaker's usable utterances (``sizes``) are held out for validation.

    ``round(ratio * total)`` whole utterances in all, as the challenge's overall 90/10 split, shared out over the
    speakers in proportion to their sizes (largest remainders, ties in an order seeded by ``seed``), and never a
    speaker's last one: a held-out utterance must be of a trained speaker. With fewer than ``1 / ratio``
    utterances per speaker this still holds out one utterance of some speakers, where rounding each speaker's
    share would hold out none; speakers of one utterance cannot give any.
    """
    target = int(round(ratio * sum(sizes.values())))
    quotas = {s: ratio * n for s, n in sizes.items()}
    counts = {s: min(n - 1, math.floor(quotas[s])) for s, n in sizes.items()}
    rank = {s: k for k, s in enumerate(_seeded_rng(seed, "valid-order").permutation(sorted(sizes)).tolist())}
    left = target - sum(counts.values())
    for speaker in sorted(sizes, key=lambda s: (math.floor(quotas[s]) - quotas[s], rank[s])):
        if left <= 0:
            break
        if counts[speaker] < sizes[speaker] - 1:
            counts[speaker] += 1
            left -= 1
    return counts


def _validation_record(counts: dict[str, int], sizes: dict[str, int], h: dict, warnings: list[str]) -> dict:
    """What the split held out, for training.json, with a warning (added to ``warnings``) where it is less than
    valid_ratio asks for."""
    asked, held = int(round(h["valid_ratio"] * sum(sizes.values()))), sum(counts.values())
    record = {"valid_ratio": h["valid_ratio"], "asked": asked, "held_out": held,
              "speakers": sum(1 for n in counts.values() if n), "status": "on"}
    if h["valid_ratio"] == 0:
        return record | {"status": "off", "reason": "valid_ratio is 0"}
    if held == asked:
        return record
    if asked == 0:
        reason = (f"valid_ratio={h['valid_ratio']:g} of {sum(sizes.values())} usable utterance(s) rounds to none")
    else:
        singles = sum(1 for n in sizes.values() if n == 1)
        reason = (f"{held} of the {asked} utterance(s) valid_ratio={h['valid_ratio']:g} asks for could be held out: "
                  f"{singles} of the {len(sizes)} speakers have a single usable utterance, which must train")
    record |= {"status": "off" if held == 0 else "partial", "reason": reason}
    warnings.append(f"validation is {'off' if held == 0 else 'partial'}: {reason}; {TRAINING_FILE} records it")
    return record


def chunk_samples(h: dict) -> int:
    return int(round(h["sentence_len"] * h["sample_rate"]))


def read_chunk_into(row: np.ndarray, item: TrainingUtterance, start: int, sample_rate: int,
                    allow_pipes: bool) -> None:
    """``len(row)`` samples of the utterance from ``start`` into ``row`` (16 kHz mono; int16 for a
    :attr:`TrainingUtterance.pcm16` item into an int16 row, float32 otherwise). Only that span is read when the
    file is at the rate: a mono 16-bit WAV file's bytes as they are (libsndfile's values, without its opening,
    seeking and converting, which cost three times the read), others through libsndfile. Samples past the end
    (a resampled length can fall a sample short of the header's estimate) are zero."""
    import soundfile

    from ...data_prep.audio import load_audio

    if item.data_offset >= 0 and row.dtype == np.int16:
        with open(item.source, "rb", buffering=0) as stream:
            stream.seek(item.data_offset + 2 * start)
            read = stream.readinto(row.view(np.uint8)) // 2
        row[read:] = 0
        return
    if item.seekable:
        with soundfile.SoundFile(item.source) as audio:
            audio.seek(start)
            if item.channels == 1:
                audio.read(len(row), dtype=row.dtype.name, fill_value=0, out=row)
                return
            wave = audio.read(len(row), dtype="float32", always_2d=True).mean(axis=1)
    else:
        wave = load_audio(item.source, sample_rate, allow_pipe=allow_pipes).samples[start:start + len(row)]
    row[:len(wave)] = wave
    row[len(wave):] = 0


def epoch_batches(n_items: int, choices: np.ndarray, batch_size: int, seed: int, epoch: int
                  ) -> list[list[tuple[int, int]]]:
    """(item, chunk start) batches of one epoch: a permutation and starts drawn from (seed, epoch) alone."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n_items)
    starts = (rng.random(n_items) * choices).astype(np.int64)
    pairs = [(int(i), int(starts[i])) for i in order]
    batches = [pairs[k:k + batch_size] for k in range(0, n_items, batch_size)]
    if len(batches) > 1 and len(batches[-1]) == 1:
        # ECAPA's batch norm after pooling cannot train on one item: it joins the batch before.
        last = batches.pop()
        batches[-1] = batches[-1] + last
    return batches


class ChunkBatches:
    """The training loader's map-style dataset. A key is ``(kind, picks)``: ``"train"`` or ``"valid"`` and one
    batch's (item, chunk start) pairs; its value is ``(waves (B, chunk), labels (B,))``.

    ``waves`` is int16 when every item of the batch is 16-bit PCM at the rate (the samples as stored:
    :func:`float_waves` turns them into exactly the float32 values libsndfile reads, on the device, at half the
    bytes through the loader), float32 otherwise. In a loader process the batch is assembled in shared memory,
    so that handing it to the training process copies nothing.
    """

    def __init__(self, items: dict[str, list[TrainingUtterance]], labels: dict[str, np.ndarray], chunk: int,
                 sample_rate: int, allow_pipes: bool):
        self.items, self.labels = items, labels
        self.chunk, self.sample_rate, self.allow_pipes = chunk, sample_rate, allow_pipes

    def __getitem__(self, key: tuple[str, list[tuple[int, int]]]):
        import torch

        kind, picks = key
        items = self.items[kind]
        dtype = torch.int16 if all(items[i].pcm16 for i, _ in picks) else torch.float32
        waves = _batch_tensor((len(picks), self.chunk), dtype)
        for row, (i, start) in zip(waves.numpy(), picks):
            read_chunk_into(row, items[i], start, self.sample_rate, self.allow_pipes)
        return waves, torch.from_numpy(self.labels[kind][[i for i, _ in picks]])


def _batch_tensor(shape: tuple[int, int], dtype):
    """An uninitialised tensor, in shared memory inside a loader process (what torch's default collate does)."""
    import torch

    if torch.utils.data.get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(shape[0] * shape[1] * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


class BatchKeys:
    """The loader's sampler: the keys of the batches the trainer asks for next (set before each pass)."""

    def __init__(self):
        self.kind, self.batches = "train", []

    def __iter__(self):
        return ((self.kind, picks) for picks in self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def float_waves(waves):
    """A loader batch as float32 samples: int16 PCM scaled by 2^-15 (exact), float32 as it is."""
    return waves if waves.is_floating_point() else waves.float().mul_(PCM16_SCALE)


# The CPU training process's peak RSS: a fixed part and a part per chunk of the largest batch, for the recipe's
# network on 3 s chunks (other widths and chunk lengths scale the latter by their channels x frames). A line
# above every peak measured with glibc (benchmarks/train_asv_memory.py, docs/training.md): 3.78 GB at batch 32,
# 5.12 GB at 64, 9.17 GB at 128, and issue 30's 14.3 GB for a batch of 243 (estimates 4.1, 5.8, 9.2, 15.3 GB).
CPU_BASE_BYTES = 2.4e9
CPU_BYTES_PER_CHUNK = 53e6
_RECIPE_CHANNELS, _RECIPE_SENTENCE_LEN = 3584, 3.0


def training_memory_estimate(h: dict, batch_items: int) -> int:
    """Bytes the CPU training process needs at its peak for batches of ``batch_items`` chunks."""
    scale = sum(h["channels"]) / _RECIPE_CHANNELS * h["sentence_len"] / _RECIPE_SENTENCE_LEN
    return int(CPU_BASE_BYTES + CPU_BYTES_PER_CHUNK * scale * batch_items)


def largest_batch(n_train: int, batch_size: int) -> int:
    """The most chunks a batch of :func:`epoch_batches` holds: a last batch of one joins the one before."""
    if n_train <= batch_size:
        return n_train
    return batch_size + 1 if n_train % batch_size == 1 else batch_size


def available_memory() -> int | None:
    """Bytes this process may still take: the system's available memory, or what its cgroup's limit leaves if
    less; None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            found += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_cpu_memory(h: dict, n_train: int, option: str = "--set") -> None:
    """Refuse, before training, a CPU run whose largest batch will not fit in the memory left
    (:func:`training_memory_estimate` against :func:`available_memory` and what the process holds already),
    naming what it needs and the largest ``batch_size`` that fits."""
    available = available_memory()
    if available is None:
        return
    items = largest_batch(n_train, h["batch_size"])
    needed = training_memory_estimate(h, items)
    room = available + _resident_bytes()
    if needed <= room:
        return
    per_chunk = training_memory_estimate(h, 1) - training_memory_estimate(h, 0)
    fitting = int((room - training_memory_estimate(h, 0)) // per_chunk)
    remedy = (f"{option} batch_size={fitting} fits (about {training_memory_estimate(h, fitting) / 1e9:.1f} GB; "
              "a smaller batch than the challenge's 256 changes the training), or train on a GPU (--device cuda)"
              if fitting >= 2 else "no batch size fits; train on a GPU (--device cuda) or free memory")
    raise VoxanonError(f"train asv: batches of {items} chunks of {h['sentence_len']:g} s need about "
                       f"{needed / 1e9:.1f} GB on the CPU, and {room / 1e9:.1f} GB is available; {remedy}")


def default_workers(device) -> int:
    """Loader processes: none on the CPU (they would take cores from the step); on a GPU up to 8, leaving one
    core to the training process."""
    if device.type == "cpu":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(8, max(1, cores - 1))


# Training ------------------------------------------------------------------------------------------


class AsvTrainer:
    def __init__(self, h: dict, data: TrainingData, out_dir: Path, device: str = "auto", precision: str = "auto",
                 workers: int | None = None, allow_pipes: bool = False, progress: bool = True):
        import torch

        from ...models.nets.asv_model import SpeakerClassifier, aam_softmax_loss

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
        from ...models.checkpoints.safe import atomic_torch_save

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
        from ...models.checkpoints.safe import safe_load

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
        from ...models.nets.asv_model import cyclic_learning_rate

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
        return [(index, int(_seeded_rng(self.h["seed"], "valid-chunk", item.utt).integers(
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


# Output --------------------------------------------------------------------------------------------


def _yaml_list(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def inference_hyperparams(h: dict, n_speakers: int) -> str:
    """speechbrain ``EncoderClassifier`` hyperparameters for the saved model (the spkrec-ecapa layout)."""
    return f"""# Written by voxanon train asv. speechbrain EncoderClassifier layout:
#   EncoderClassifier.from_hparams(source=THIS_FOLDER) -> encode_batch(wavs) gives the 192-d (lin_neurons) vectors;
#   voxanon evaluate ... --set asv.encoder=ecapa:THIS_FOLDER gives the same vectors.

n_mels: {h['n_mels']}
out_n_neurons: {n_speakers}

compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: !ref <n_mels>

mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: False

embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN
    input_size: !ref <n_mels>
    channels: {_yaml_list(h['channels'])}
    kernel_sizes: {_yaml_list(h['kernel_sizes'])}
    dilations: {_yaml_list(h['dilations'])}
    attention_channels: {h['attention_channels']}
    res2net_scale: {h['res2net_scale']}
    se_channels: {h['se_channels']}
    lin_neurons: {h['lin_neurons']}

classifier: !new:speechbrain.lobes.models.ECAPA_TDNN.Classifier
    input_size: {h['lin_neurons']}
    out_neurons: !ref <out_n_neurons>

modules:
    compute_features: !ref <compute_features>
    mean_var_norm: !ref <mean_var_norm>
    embedding_model: !ref <embedding_model>
    classifier: !ref <classifier>

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

# Files are looked up as <source>/<name>.ckpt (label_encoder.ckpt is label_encoder.txt).
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
        classifier: !ref <classifier>
        label_encoder: !ref <label_encoder>
"""


def export_model(model, h: dict, speakers: list[str], out_dir: Path) -> None:
    """The speechbrain model files, each written atomically."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    from ...models.checkpoints.safe import atomic_torch_save
    from ...models.checkpoints.ecapa import EMBEDDING_FILE

    for name, module in ((EMBEDDING_FILE, model.embedding_model), (CLASSIFIER_FILE, model.classifier)):
        atomic_torch_save({k: v.detach().cpu() for k, v in module.state_dict().items()}, out_dir / name)
    encoder = CategoricalEncoder()
    encoder.update_from_iterable(speakers)
    for name in (LABEL_ENCODER_FILE, PRETRAINER_LABEL_ENCODER_FILE):
        with atomic_path(out_dir / name) as tmp:
            encoder.save(tmp)
    atomic_write_text(out_dir / HYPERPARAMS_FILE, inference_hyperparams(h, len(speakers)))


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
    from ...models.nets.asv_model import cyclic_learning_rate

    # The triangular schedule rises for step_size steps, to lr, then falls.
    return h["lr"] if steps >= h["step_size"] else cyclic_learning_rate(steps, h["base_lr"], h["lr"], h["step_size"])


def reference_schedule() -> dict:
    """Steps and learning rate the challenge's configuration reaches on train-clean-360 (see above)."""
    from ...models.nets.asv_model import cyclic_learning_rate

    h = default_hparams()
    held_out = sum(validation_counts({"all": TRAIN_CLEAN_360_UTTERANCES}, h["valid_ratio"], h["seed"]).values())
    steps = h["number_of_epochs"] * batches_per_epoch(TRAIN_CLEAN_360_UTTERANCES - held_out, h["batch_size"])
    return {"set": "LibriSpeech train-clean-360", "utterances": TRAIN_CLEAN_360_UTTERANCES, "steps": steps,
            "lr": cyclic_learning_rate(steps, h["base_lr"], h["lr"], h["step_size"])}


def schedule_reach(h: dict, steps: int) -> dict:
    """How far ``steps`` optimiser steps take the cyclic schedule of settings ``h``, against the challenge's
    configuration on train-clean-360 (:func:`reference_schedule`): ``undertrained`` when the highest learning
    rate reached is under :data:`UNDERTRAINED_SHARE` of the one it reaches."""
    from ...models.nets.asv_model import cyclic_learning_rate

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


# A finished model ------------------------------------------------------------------------------------


def attacker_identity(hparams: dict, train_sets: list[dict]) -> str:
    """A name part for a model folder: a hash of the settings that shape the weights and of the training data's
    :func:`data_identity` (the number of epochs is left out, so raising it trains the same model further)."""
    shaping = {k: v for k, v in hparams.items() if k not in FREE_SETTINGS}
    data = [_comparable(entry) for entry in train_sets]
    return hashlib.sha256(json.dumps([shaping, data], sort_keys=True).encode()).hexdigest()[:12]


def finished_attacker(model_dir: Path, hparams: dict, train_sets: list[dict], allow_missing: bool = False) -> bool:
    """Whether ``model_dir`` holds a complete model trained with these settings on these data (each set's
    :func:`data_identity`, its place aside); one trained without unreadable files counts only under
    ``allow_missing``."""
    path = Path(model_dir) / TRAINING_FILE
    if not path.is_file() or not all((Path(model_dir) / name).is_file() for name in MODEL_FILES):
        return False
    try:
        training = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    if training.get("status") != "complete" or training.get("hparams") != hparams:
        return False
    if training.get("unreadable_utterances") and not allow_missing:
        return False
    return [_comparable(e) for e in training.get("data") or []] == [_comparable(e) for e in train_sets]


def _comparable(entry: dict) -> dict:
    """A training set's identity without its place (a moved output folder keeps its model) or run status."""
    anonymisation = entry.get("anonymisation")
    return ({k: v for k, v in entry.items() if k not in ("anonymisation", "path")}
            | {"anonymisation": None if not anonymisation else {"system": anonymisation["system"],
                                                                 "config_hash": anonymisation["config_hash"]}})


@dataclass(frozen=True)
class AsvTrainingRun:
    model_dir: Path
    trained: bool      # False: the folder already held the finished model for these settings and data


def train_asv(data_dirs: list[Path | DataDir], out_dir: Path, hparams: dict | None = None, device: str = "auto",
              progress: bool = True, *, set_options: list[str] = (), precision: str = "auto",
              workers: int | None = None, allow_pipes: bool = False, allow_missing: bool = False,
              option: str = "--set") -> AsvTrainingRun:
    """Train (or resume, or find finished) the ASV model in ``out_dir``.

    ``hparams`` overrides the recipe's settings by key, ``set_options`` by ``key=value`` texts given with the
    command's ``option`` (named in messages: ``--set`` in train asv, ``--train-set`` in challenge). A folder that
    holds the finished model for these settings and data (:func:`finished_attacker`) is left as it is, before
    any audio is read. ``allow_missing`` trains without listed utterances whose audio is missing or unreadable.
    Every check on the settings, data and memory runs before anything is written; a schedule that will hardly
    start (:func:`schedule_reach`) is warned about before training.
    """
    out_dir = Path(out_dir)
    h = resolve_hparams(hparams, set_options, option)
    sets = read_training_sets(data_dirs, allow_pipes, allow_missing)
    identities = [data_identity(d) for d in sets]
    if finished_attacker(out_dir, h, identities, allow_missing):
        log.info("train asv: %s is complete for these settings and data; not retrained", out_dir)
        return AsvTrainingRun(out_dir, trained=False)
    data = prepare_training_data(sets, h, allow_pipes, progress, allow_missing=allow_missing, identities=identities,
                                 option=option)
    if torch_device(device).type == "cpu":
        check_cpu_memory(h, len(data.train), option)
    trainer = AsvTrainer(h, data, out_dir, device, precision, workers, allow_pipes, progress)
    try:
        reach = schedule_reach(h, h["number_of_epochs"] * batches_per_epoch(len(data.train), h["batch_size"]))
        if reach["undertrained"]:
            log.warning("%s", schedule_advice(reach, h, option))
        _train(trainer, out_dir)
    finally:
        trainer.close()
    return AsvTrainingRun(out_dir, trained=True)


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
