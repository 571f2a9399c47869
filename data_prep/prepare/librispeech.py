"""LibriSpeech in its distributed layout.

``<root>/<subset>/<spk>/<chapter>/<spk>-<chapter>-<nnnn>.flac``, transcripts one line per
utterance in ``<spk>-<chapter>.trans.txt`` beside them, and speakers in
``<root>/SPEAKERS.TXT`` (``ID | SEX | SUBSET | MINUTES | NAME``, ``;`` comments).
``root`` may also be the folder that holds ``LibriSpeech/``.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import VoxanonError
from .issues import PreparationIssues
from .layout import corpus_base, subfolders
from .listing import SPEAKERS_FILE_MISSING, CorpusListing

SPEAKERS_FILE = "SPEAKERS.TXT"
AUDIO_SUFFIXES = (".flac", ".wav")
TRANSCRIPT_SUFFIX = ".trans.txt"
NO_TRANSCRIPT_FILE = "chapter folder without a .trans.txt file"


def read_pipe_separated_speakers(path: Path) -> dict[str, str]:
    """Speaker id -> sex label from a LibriSpeech-style ``SPEAKERS.TXT``."""
    labels: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith(";"):
                continue
            fields = line.split("|", 4)
            if len(fields) >= 2:
                labels[fields[0].strip()] = fields[1].strip()
    return labels


def scan_librispeech(root: str | os.PathLike, subsets: list[str],
                     issues: PreparationIssues) -> CorpusListing:
    base = corpus_base(root, subsets, "LibriSpeech")
    speakers_file = base / SPEAKERS_FILE
    if speakers_file.is_file():
        sex_labels = read_pipe_separated_speakers(speakers_file)
    else:
        issues.add(SPEAKERS_FILE_MISSING, str(speakers_file))
        sex_labels = {}
    audio: dict[str, str] = {}
    transcripts: dict[str, str] = {}
    utt2spk: dict[str, str] = {}
    for subset in subsets:
        for speaker, speaker_path in subfolders(base / subset):
            for _, chapter_path in subfolders(speaker_path):
                _scan_chapter(chapter_path, speaker, audio, transcripts, utt2spk, issues)
    return CorpusListing(name="+".join(subsets), audio=audio, transcripts=transcripts,
                         utt2spk=utt2spk, sex_labels=sex_labels, speakers_file=str(speakers_file))


def _scan_chapter(chapter_path: str, speaker: str, audio: dict[str, str],
                  transcripts: dict[str, str], utt2spk: dict[str, str],
                  issues: PreparationIssues) -> None:
    transcript_files = []
    with os.scandir(chapter_path) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(TRANSCRIPT_SUFFIX):
                transcript_files.append(entry.path)
            elif name.endswith(AUDIO_SUFFIXES):
                utt = name.rsplit(".", 1)[0]
                if utt in audio:
                    raise VoxanonError(f"{entry.path}: utterance {utt!r} already has audio {audio[utt]}")
                audio[utt] = entry.path
                utt2spk[utt] = speaker
    if not transcript_files:
        issues.add(NO_TRANSCRIPT_FILE, chapter_path)
    for path in transcript_files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(maxsplit=1)
                if not parts:
                    continue
                utt = parts[0]
                if utt in transcripts:
                    raise VoxanonError(f"{path}: utterance {utt!r} has a second transcript")
                transcripts[utt] = parts[1].strip() if len(parts) > 1 else ""
                utt2spk.setdefault(utt, speaker)

