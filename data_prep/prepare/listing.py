"""From a raw corpus listing (what a native layout holds) to a checked Kaldi data directory.

The per-corpus modules only read their layout into a :class:`CorpusListing`; everything
they share happens here: filters, pairing audio with transcripts, sex labels, audio
headers (durations and sample rates), optional resampling, and writing the directory.

Audio headers are read with ``soundfile`` (no decoding), in ``jobs`` processes when
asked; ``read_headers=False`` skips them for very large listings, leaving out
``utt2dur`` and the sample-rate check.
"""
from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..corpus import GENDERS, DataDir, DataDirError, write_data_dir
from ..errors import VoxanonError
from ..paths import contained_path
from .issues import PreparationIssues
from .text import normalise_transcript

# soundfile (with NumPy), tqdm and the audio module load where headers are read or audio resampled:
# `voxanon prepare`'s parser reads the corpus scanners' choices, and they import this module.

log = logging.getLogger(__name__)

TARGET_RATE = 16000
HEADER_CHUNK = 2000  # files per task sent to a worker process
RESAMPLED_FOLDER = "wav"

SPEAKERS_FILE_MISSING = "speakers file missing (no speaker has a sex label)"
MISSING_AUDIO = "transcript without audio (utterance left out)"
NO_TRANSCRIPT = "audio without transcript (kept, no text line)"
EMPTY_TRANSCRIPT = "empty transcript (kept, no text line)"
UNKNOWN_SEX = "speaker without an f/m sex label (kept, left out of spk2gender)"
UNREADABLE = "audio whose header cannot be read (utterance left out)"
UNKNOWN_FILTER_SPEAKER = "speaker in the filter but not in the corpus"
UNKNOWN_FILTER_UTTERANCE = "utterance in the filter but not in the corpus"
RESAMPLING_FAILED = "audio that could not be resampled (utterance left out)"


@dataclass
class CorpusListing:
    """What a corpus layout holds. ``utt2spk`` covers every utterance of ``audio`` and ``transcripts``."""

    name: str
    audio: dict[str, str]
    transcripts: dict[str, str]
    utt2spk: dict[str, str]
    sex_labels: dict[str, str]  # speaker -> label as the speakers file writes it
    speakers_file: str


@dataclass
class PrepareOptions:
    speakers: set[str] | None = None
    utterances: set[str] | None = None
    read_headers: bool = True
    resample: bool = False
    jobs: int = 1  # processes reading audio headers


@dataclass(frozen=True)
class AudioHeader:
    frames: int
    sample_rate: int
    channels: int

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate


@dataclass
class _Selection:
    audio: dict[str, str]
    text: dict[str, str]
    utt2spk: dict[str, str]
    spk2gender: dict[str, str] = field(default_factory=dict)
    headers: dict[str, AudioHeader] = field(default_factory=dict)


def read_audio_header(path: str) -> AudioHeader:
    import soundfile

    with soundfile.SoundFile(path) as handle:
        return AudioHeader(handle.frames, handle.samplerate, handle.channels)


def header_or_error(path: str) -> AudioHeader | str:
    """The header of ``path``, or why it cannot be read (a top-level function for worker processes)."""
    import soundfile

    try:
        return read_audio_header(path)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        return str(error)


def prepare_corpus(listing: CorpusListing, out_dir: str | Path, options: PrepareOptions,
                   issues: PreparationIssues, *, strict: bool = False) -> DataDir:
    """Check ``listing``, report what is wrong (raise in ``strict`` mode), write ``out_dir``."""
    out_dir = Path(out_dir)
    if options.resample and not options.read_headers:
        raise VoxanonError("resampling needs the audio headers: drop --no-durations")
    selection = _select(listing, options, issues)
    _pair(selection, issues)
    _label_sexes(selection, listing, issues)
    if options.read_headers:
        _read_headers(selection, issues, report_rates=not options.resample, jobs=options.jobs)
    else:
        log.warning("%s: audio headers not read (--no-durations): no utt2dur, sample rates "
                    "unchecked", listing.name)
    issues.conclude(strict=strict)
    wav = dict(selection.audio)
    if options.resample:
        late = PreparationIssues(issues.where)
        wav.update(_resample(selection, out_dir, late))
        late.conclude(strict=strict)
        for utt in late.items(RESAMPLING_FAILED):
            del wav[utt]
    kept = set(wav)
    data = DataDir(
        name=out_dir.name,
        wav=wav,
        utt2spk={u: s for u, s in selection.utt2spk.items() if u in kept},
        spk2gender=selection.spk2gender,
        text={u: t for u, t in selection.text.items() if u in kept},
        utt2dur={u: selection.headers[u].seconds for u in kept if u in selection.headers},
        path=out_dir,
    )
    speakers = set(data.utt2spk.values())
    data.spk2gender = {s: g for s, g in data.spk2gender.items() if s in speakers}
    problems = data.validate(check_files=False)
    if problems:
        raise DataDirError(str(out_dir), problems)
    write_data_dir(data, out_dir)
    log.info("%s: %d utterances of %d speakers written to %s", listing.name, len(data.wav),
             len(speakers), out_dir)
    return data


def _select(listing: CorpusListing, options: PrepareOptions, issues: PreparationIssues) -> _Selection:
    utt2spk = listing.utt2spk
    if options.speakers is not None:
        known = set(utt2spk.values())
        issues.extend(UNKNOWN_FILTER_SPEAKER, sorted(options.speakers - known))
        utt2spk = {u: s for u, s in utt2spk.items() if s in options.speakers}
    if options.utterances is not None:
        issues.extend(UNKNOWN_FILTER_UTTERANCE, sorted(options.utterances - set(listing.utt2spk)))
        utt2spk = {u: s for u, s in utt2spk.items() if u in options.utterances}
    if utt2spk is listing.utt2spk:
        return _Selection(dict(listing.audio), dict(listing.transcripts), dict(utt2spk))
    return _Selection({u: p for u, p in listing.audio.items() if u in utt2spk},
                      {u: t for u, t in listing.transcripts.items() if u in utt2spk}, utt2spk)


def _pair(selection: _Selection, issues: PreparationIssues) -> None:
    audio, text = selection.audio, selection.text
    issues.extend(MISSING_AUDIO, sorted(u for u in text if u not in audio))
    issues.extend(NO_TRANSCRIPT, sorted(u for u in audio if u not in text))
    normalised = {u: normalise_transcript(t) for u, t in text.items() if u in audio}
    issues.extend(EMPTY_TRANSCRIPT, sorted(u for u, t in normalised.items() if not t))
    selection.text = {u: t for u, t in normalised.items() if t}
    selection.utt2spk = {u: s for u, s in selection.utt2spk.items() if u in audio}


def _label_sexes(selection: _Selection, listing: CorpusListing, issues: PreparationIssues) -> None:
    for speaker in sorted(set(selection.utt2spk.values())):
        label = listing.sex_labels.get(speaker)
        if label is not None and label.strip().lower() in GENDERS:
            selection.spk2gender[speaker] = label.strip().lower()
        elif label is None:
            issues.add(UNKNOWN_SEX, f"{speaker} (not in {listing.speakers_file})")
        else:
            issues.add(UNKNOWN_SEX, f"{speaker} (label {label!r})")


def _read_headers(selection: _Selection, issues: PreparationIssues, *, report_rates: bool,
                  jobs: int) -> None:
    from tqdm import tqdm

    items = sorted(selection.audio.items())
    paths = [path for _, path in items]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(tqdm(pool.map(header_or_error, paths, chunksize=HEADER_CHUNK), total=len(paths),
                                desc="audio headers", unit="file", disable=None))
    else:
        results = [header_or_error(path) for path in tqdm(paths, desc="audio headers", unit="file",
                                                           disable=None)]
    unreadable: list[str] = []
    for (utt, path), result in zip(items, results):
        if isinstance(result, AudioHeader):
            selection.headers[utt] = result
        else:
            unreadable.append(f"{path} ({result})")
            del selection.audio[utt]
            selection.text.pop(utt, None)
            del selection.utt2spk[utt]
    issues.extend(UNREADABLE, unreadable)
    if not report_rates:
        return
    by_rate: dict[int, list[str]] = {}
    by_channels: dict[int, list[str]] = {}
    for utt, header in selection.headers.items():
        if header.sample_rate != TARGET_RATE:
            by_rate.setdefault(header.sample_rate, []).append(utt)
        if header.channels != 1:
            by_channels.setdefault(header.channels, []).append(utt)
    for rate, utts in sorted(by_rate.items()):
        issues.extend(f"audio at {rate} Hz, not {TARGET_RATE} Hz (kept; --resample converts it)",
                      sorted(utts))
    for channels, utts in sorted(by_channels.items()):
        issues.extend(f"audio with {channels} channels (kept; --resample converts it to mono)",
                      sorted(utts))


def _resample(selection: _Selection, out_dir: Path, issues: PreparationIssues) -> dict[str, str]:
    """Convert what is not 16 kHz mono into ``<out>/wav/<utt>.wav``; the new ``wav.scp`` entries."""
    from tqdm import tqdm

    from ..audio import AudioError, check_wav, load_audio, write_wav

    todo = sorted(u for u, h in selection.headers.items()
                  if h.sample_rate != TARGET_RATE or h.channels != 1)
    converted: dict[str, str] = {}
    rates = Counter(selection.headers[u].sample_rate for u in todo)
    if todo:
        log.info("resampling %d files to %d Hz mono (source rates: %s)", len(todo), TARGET_RATE,
                 ", ".join(f"{r} Hz x{n}" for r, n in sorted(rates.items())))
    for utt in tqdm(todo, desc="resampling", unit="file", disable=None):
        relative = f"{RESAMPLED_FOLDER}/{utt}.wav"
        target = contained_path(out_dir, relative)
        # Outputs are written atomically, so a valid file is a finished one (resumed run).
        if not check_wav(target, TARGET_RATE):
            try:
                audio = load_audio(selection.audio[utt], TARGET_RATE)
            except AudioError as error:
                issues.add(RESAMPLING_FAILED, f"{utt} ({error.reason})")
                continue
            write_wav(target, audio.samples, TARGET_RATE)
        selection.headers[utt] = read_audio_header(str(target))
        converted[utt] = relative
    return converted
