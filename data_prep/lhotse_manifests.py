"""lhotse ``RecordingSet`` / ``SupervisionSet`` manifests as voxanon data sets, and back (lhotse is optional:
``pip install 'voxanon[lhotse]'``).

What maps, as lhotse's own ``load_kaldi_data_dir`` maps a data directory without ``segments``:

- an utterance is a supervision covering its whole recording (``start`` 0, the recording's duration, channel 0);
  its id is the supervision's id, and its ``wav.scp`` entry the recording's one source: a ``file`` source's path,
  a ``command`` source's command (``command |``);
- ``utt2spk`` is the supervision's ``speaker``, ``spk2gender`` its ``gender``, ``text`` its ``text``, ``utt2lang``
  its ``language``, ``utt2dur`` the recording's ``duration``.

What does not map is refused, naming the recording or supervision, never dropped: a supervision that covers part of
a recording, or one of several on it (voxanon refuses Kaldi ``segments`` alike: cut the segments into files
first), a recording without a supervision, a recording of more than one channel or source, a source of another
type (``url``, ``memory``, ``shar``), a recording with ``transforms`` (speed perturbation, resampling), a
supervision without a speaker, a speaker whose gender differs between supervisions, and a supervision's
``custom`` fields or ``alignment``. Going the other way, a set's ``enrolls`` and ``trials`` have no place in
lhotse's manifests and are refused; so are ``wav.scp`` commands (lhotse needs the sampling rate and length,
which only running a command tells).
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

from .atomic import atomic_write_bytes
from .corpus import DataDir, DataDirError, format_mapping
from .errors import VoxanonError

# The duration a supervision may differ from its recording's by and still cover it (lhotse rounds durations to
# whole samples, and writes them with 6 decimals): half a sample at 8 kHz.
COVER_TOLERANCE_SECONDS = 1 / 16000


def _lhotse():
    try:
        import lhotse
    except ImportError:
        raise VoxanonError("lhotse manifests need lhotse, which is not installed: pip install 'voxanon[lhotse]'") \
            from None
    return lhotse


def read_manifest(path: str | os.PathLike, kind: str):
    """The ``RecordingSet`` (``kind`` "recordings") or ``SupervisionSet`` (``supervisions``) of a manifest file
    (``.jsonl``, ``.jsonl.gz``, ``.json``, ``.yaml``, as lhotse reads them); an unreadable one is one error
    naming the file."""
    lhotse = _lhotse()
    manifest_class = {"recordings": lhotse.RecordingSet, "supervisions": lhotse.SupervisionSet}[kind]
    if not Path(path).is_file():
        raise VoxanonError(f"{path}: no such {kind} manifest")
    try:
        return manifest_class.from_file(path)
    except Exception as error:  # lhotse raises what its parsers do: JSON, YAML, KeyError of a missing field
        raise VoxanonError(f"{path}: not a lhotse {manifest_class.__name__} ({type(error).__name__}: "
                           f"{' '.join(str(error).split())})") from None


def data_dir_from_lhotse(recordings, supervisions, name: str) -> DataDir:
    """A data set of lhotse manifests (``RecordingSet`` and ``SupervisionSet`` objects), mapped as the module doc
    says; everything that does not map is one :class:`DataDirError` listing each recording or supervision."""
    problems: list[str] = []
    by_recording: dict[str, list] = {}
    for supervision in supervisions:
        by_recording.setdefault(supervision.recording_id, []).append(supervision)
    wav: dict[str, str] = {}
    utt2spk: dict[str, str] = {}
    spk2gender: dict[str, str] = {}
    text: dict[str, str] = {}
    utt2lang: dict[str, str] = {}
    utt2dur: dict[str, float] = {}
    recording_ids = set()
    for recording in recordings:
        recording_ids.add(recording.id)
        where = f"recording {recording.id!r}"
        on_it = by_recording.get(recording.id, [])
        entry = _wav_entry(recording, where, problems)
        if not on_it:
            problems.append(f"{where}: no supervision; each recording needs one, which names its speaker")
            continue
        if len(on_it) > 1:
            problems.append(f"{where}: {len(on_it)} supervisions ({', '.join(repr(s.id) for s in on_it[:3])}); "
                            "voxanon takes one utterance per recording: cut the segments into files first")
            continue
        supervision = on_it[0]
        where = f"supervision {supervision.id!r}"
        if (supervision.start != 0 or abs(supervision.duration - recording.duration) > COVER_TOLERANCE_SECONDS
                or supervision.channel not in (0, [0])):
            problems.append(f"{where}: covers {supervision.start:g}-{supervision.end:g} s (channel "
                            f"{supervision.channel}) of recording {recording.id!r} ({recording.duration:g} s); "
                            "voxanon takes whole recordings: cut the segments into files first")
            continue
        if supervision.speaker is None:
            problems.append(f"{where}: no speaker")
            continue
        for field in ("custom", "alignment"):
            if getattr(supervision, field):
                problems.append(f"{where}: has {field} {sorted(getattr(supervision, field))}, which a voxanon data "
                                "set has no place for")
        if entry is None or supervision.id in wav:
            if supervision.id in wav:
                problems.append(f"{where}: duplicate supervision id")
            continue
        utt = supervision.id
        wav[utt], utt2spk[utt], utt2dur[utt] = entry, supervision.speaker, float(recording.duration)
        if supervision.gender is not None:
            gender = supervision.gender.lower()
            if spk2gender.setdefault(supervision.speaker, gender) != gender:
                problems.append(f"{where}: speaker {supervision.speaker!r} is {gender!r} here but "
                                f"{spk2gender[supervision.speaker]!r} in an earlier supervision")
        if supervision.text is not None:
            text[utt] = supervision.text
        if supervision.language is not None:
            utt2lang[utt] = supervision.language
    for recording_id in sorted(set(by_recording) - recording_ids):
        problems.append(f"supervision {by_recording[recording_id][0].id!r}: recording {recording_id!r} is not in "
                        "the recordings manifest")
    if problems:
        raise DataDirError(f"lhotse manifests {name!r}", problems)
    passthrough = {"utt2lang": format_mapping(utt2lang)} if utt2lang else {}
    return DataDir(name=name, wav=wav, utt2spk=utt2spk, spk2gender=spk2gender, text=text, utt2dur=utt2dur,
                   passthrough=passthrough)


def _wav_entry(recording, where: str, problems: list[str]) -> str | None:
    """The ``wav.scp`` entry of a lhotse recording, or None with the reason appended to ``problems``."""
    if recording.transforms:
        problems.append(f"{where}: has transforms ({', '.join(_transform_names(recording.transforms))}); voxanon "
                        "reads recordings as they are: apply them and write the audio first")
        return None
    if len(recording.sources) != 1 or recording.num_channels != 1:
        problems.append(f"{where}: {len(recording.sources)} source(s) of {recording.num_channels} channel(s); "
                        "voxanon takes one single-channel source per recording")
        return None
    source = recording.sources[0]
    if source.type == "file":
        return str(source.source)
    if source.type == "command":
        return f"{source.source} |"
    problems.append(f"{where}: a {source.type!r} source; voxanon reads 'file' and 'command' sources")
    return None


def _transform_names(transforms: list[Any]) -> list[str]:
    return [transform["name"] if isinstance(transform, dict) else type(transform).__name__
            for transform in transforms]


def data_dir_to_lhotse(data: DataDir) -> tuple[Any, Any]:
    """``(RecordingSet, SupervisionSet)`` of a data set, as the module doc maps them; each file's sampling rate and
    length come from its header. A set with trials or enrolls, or a ``wav.scp`` command, is refused."""
    import soundfile

    lhotse = _lhotse()
    problems = []
    if data.trials is not None or data.enrolls is not None:
        problems.append("has trials or enrolls, which lhotse manifests have no place for (write it as a Kaldi "
                        "data directory to keep them)")
    problems += [f"wav.scp: utterance {utt!r} is a command; lhotse needs the audio's sampling rate and length, "
                 "which only running it tells" for utt in data.utterances if data.is_pipe(utt)]
    utt2lang = _table(data.passthrough.get("utt2lang", ""))
    recordings, supervisions = [], []
    for utt in data.utterances:
        if data.is_pipe(utt):
            continue
        path = data.audio_path(utt)
        try:
            info = soundfile.info(str(path))
        except (OSError, RuntimeError, soundfile.LibsndfileError) as error:
            problems.append(f"wav.scp: utterance {utt!r}: cannot read {path} ({' '.join(str(error).split())})")
            continue
        if info.channels != 1:
            problems.append(f"wav.scp: utterance {utt!r}: {path} has {info.channels} channels; lhotse's recording "
                            "would give the supervision one of them, voxanon reads their mean")
            continue
        duration = info.frames / info.samplerate
        recordings.append(lhotse.Recording(
            id=utt, sources=[lhotse.AudioSource(type="file", channels=[0], source=str(path))],
            sampling_rate=info.samplerate, num_samples=info.frames, duration=duration))
        speaker = data.utt2spk[utt]
        supervisions.append(lhotse.SupervisionSegment(
            id=utt, recording_id=utt, start=0.0, duration=duration, channel=0, text=data.text.get(utt),
            language=utt2lang.get(utt), speaker=speaker, gender=data.spk2gender.get(speaker)))
    if problems:
        raise DataDirError(str(data.path or data.name), problems)
    return lhotse.RecordingSet.from_recordings(recordings), lhotse.SupervisionSet.from_segments(supervisions)


def _table(text: str) -> dict[str, str]:
    """A two-column Kaldi table given as its text (a passthrough file's content, which only the writer checks)."""
    return dict(line.split(None, 1) for line in text.splitlines() if len(line.split(None, 1)) == 2)


def write_manifest(manifest, path: str | os.PathLike) -> None:
    """``manifest`` as lhotse's JSON lines (gzipped when ``path`` ends with ``.gz``), written atomically."""
    path = Path(path)
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise VoxanonError(f"{path}: a lhotse manifest is written as .jsonl or .jsonl.gz")
    data = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in manifest.to_dicts()).encode("utf-8")
    atomic_write_bytes(path, gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
