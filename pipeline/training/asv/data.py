"""The training data of ``voxanon train asv`` (:mod:`voxanon.pipeline.training.asv`): the data directories read and
checked, the utterances selected, their audio headers scanned, and the split into training and validation."""
from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ....data_prep.corpus import DataDir, DataDirError, read_data_dir
from ....data_prep.errors import VoxanonError
from .settings import SKIPPED_FILE, TRAINING_FILE, chunk_samples, seeded_rng

log = logging.getLogger(__name__)


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

    from ....data_prep.audio import AudioError, load_audio, pcm16_data_offset

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

    from ....data_prep.audio import AudioError

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
    """The utterances the settings choose (see :mod:`voxanon.pipeline.training.asv`), sorted."""
    by_speaker: dict[str, list[str]] = {}
    for utt in sorted(utt2spk):
        by_speaker.setdefault(utt2spk[utt], []).append(utt)
    speakers = sorted(by_speaker)
    if h["num_spk"] != "ALL":
        if h["num_spk"] > len(speakers):
            raise VoxanonError(f"train asv: num_spk={h['num_spk']} but the data have only {len(speakers)} speakers")
        speakers = sorted(seeded_rng(h["seed"], "speakers").permutation(speakers)[:h["num_spk"]].tolist())
    chosen = []
    for speaker in speakers:
        utts = by_speaker[speaker]
        if h["num_utt"] == "ALL":
            chosen += utts
            continue
        n, rng = h["num_utt"], seeded_rng(h["seed"], "utterances", speaker)
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
    from ...runner import read_run_identity

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
        held = set(seeded_rng(h["seed"], "valid", speaker).permutation(len(members))[:counts[speaker]].tolist())
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
    rank = {s: k for k, s in enumerate(seeded_rng(seed, "valid-order").permutation(sorted(sizes)).tolist())}
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
