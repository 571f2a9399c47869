"""VCTK in its distributed layouts.

- 0.92: ``wav48_silence_trimmed/<spk>/<spk>_<nnn>_mic1.flac`` and ``..._mic2.flac``;
  ``speaker-info.txt`` ids are ``p225``. The utterance id is the file name without
  extension, so it names the microphone (``p225_001_mic2``).
- 0.80: ``wav48/<spk>/<spk>_<nnn>.wav`` (one microphone); ``speaker-info.txt`` ids are
  ``225``, written here with the ``p`` of the folder names.

Transcripts are ``txt/<spk>/<spk>_<nnn>.txt``. ``speaker-info.txt`` columns are
``ID AGE GENDER ACCENTS REGION [COMMENTS]`` separated by spaces.
VoicePrivacy built its VCTK sets from ``mic2`` recordings, hence the default.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import VoxanonError
from ..paths import resolved
from .issues import PreparationIssues
from .layout import subfolders
from .listing import SPEAKERS_FILE_MISSING, CorpusListing

SPEAKERS_FILE = "speaker-info.txt"
TRANSCRIPT_FOLDER = "txt"
AUDIO_FOLDERS = ("wav48_silence_trimmed", "wav48")
MICROPHONES = ("mic1", "mic2")
DEFAULT_MICROPHONE = "mic2"
AUDIO_SUFFIXES = (".flac", ".wav")
_MIC_STEM = re.compile(r"(?P<base>.+)_(?P<mic>mic\d)")


def read_vctk_speakers(path: Path) -> dict[str, str]:
    """Speaker id (``p225``) -> sex label from ``speaker-info.txt``."""
    labels: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) < 3 or fields[0].upper() == "ID":
                continue
            speaker = f"p{fields[0]}" if fields[0].isdigit() else fields[0]
            labels[speaker] = fields[2]
    return labels


def scan_vctk(root: str | os.PathLike, issues: PreparationIssues, *, audio_folder: str | None = None,
              microphone: str = DEFAULT_MICROPHONE) -> CorpusListing:
    base = resolved(root, "--root")
    if microphone not in MICROPHONES:
        raise VoxanonError(f"unknown microphone {microphone!r}; choose one of {', '.join(MICROPHONES)}")
    audio_root = _audio_root(base, audio_folder)
    speakers_file = base / SPEAKERS_FILE
    if speakers_file.is_file():
        sex_labels = read_vctk_speakers(speakers_file)
    else:
        issues.add(SPEAKERS_FILE_MISSING, str(speakers_file))
        sex_labels = {}
    audio: dict[str, str] = {}
    utt2spk: dict[str, str] = {}
    has_microphones = False
    for speaker, folder in subfolders(audio_root):
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if not entry.name.endswith(AUDIO_SUFFIXES):
                    continue
                stem = entry.name.rsplit(".", 1)[0]
                match = _MIC_STEM.fullmatch(stem)
                if match:
                    has_microphones = True
                    if match["mic"] != microphone:
                        continue
                if stem in audio:
                    raise VoxanonError(f"{entry.path}: utterance {stem!r} already has audio {audio[stem]}")
                audio[stem] = entry.path
                utt2spk[stem] = speaker
    transcripts: dict[str, str] = {}
    transcript_root = base / TRANSCRIPT_FOLDER
    if not transcript_root.is_dir():
        issues.add("transcript folder missing (no utterance has text)", str(transcript_root))
    else:
        for speaker, folder in subfolders(transcript_root):
            with os.scandir(folder) as entries:
                for entry in entries:
                    if not entry.name.endswith(".txt"):
                        continue
                    stem = entry.name[:-len(".txt")]
                    utt = f"{stem}_{microphone}" if has_microphones else stem
                    with open(entry.path, encoding="utf-8", errors="replace") as handle:
                        transcripts[utt] = " ".join(handle.read().split())
                    utt2spk.setdefault(utt, speaker)
    suffix = f"_{microphone}" if has_microphones else ""
    return CorpusListing(name=f"vctk_{audio_root.name}{suffix}", audio=audio, transcripts=transcripts,
                         utt2spk=utt2spk, sex_labels=sex_labels, speakers_file=str(speakers_file))


def _audio_root(base: Path, audio_folder: str | None) -> Path:
    candidates = (audio_folder,) if audio_folder else AUDIO_FOLDERS
    for name in candidates:
        if (base / name).is_dir():
            return base / name
    raise VoxanonError(f"{base}: no VCTK audio folder ({' or '.join(candidates)}) found")

