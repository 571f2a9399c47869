"""LibriTTS (and LibriTTS-R, same layout) as distributed.

``<root>/<subset>/<spk>/<chapter>/<spk>_<chapter>_<par>_<sent>.wav`` (24 kHz) with the
transcript ``<same>.normalized.txt`` beside each file; speakers in ``<root>/speakers.tsv``
(``READER GENDER SUBSET NAME``, tab-separated, one header line) or, failing that, a
LibriSpeech-style ``SPEAKERS.txt``. ``root`` may also be the folder holding ``LibriTTS/``.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import VoxanonError
from .issues import PreparationIssues
from .layout import corpus_base, subfolders
from .librispeech import read_pipe_separated_speakers
from .listing import SPEAKERS_FILE_MISSING, CorpusListing

SPEAKERS_FILES = ("speakers.tsv", "SPEAKERS.txt")
TRANSCRIPT_SUFFIX = ".normalized.txt"
AUDIO_SUFFIXES = (".wav", ".flac")


def read_tab_separated_speakers(path: Path) -> dict[str, str]:
    """Speaker id -> sex label from ``speakers.tsv``."""
    labels: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 2 or fields[0] == "READER":
                continue
            labels[fields[0].strip()] = fields[1].strip()
    return labels


def scan_libritts(root: str | os.PathLike, subsets: list[str],
                  issues: PreparationIssues) -> CorpusListing:
    base = corpus_base(root, subsets, "LibriTTS")
    speakers_file = next((base / n for n in SPEAKERS_FILES if (base / n).is_file()), None)
    if speakers_file is None:
        speakers_file = base / SPEAKERS_FILES[0]
        issues.add(SPEAKERS_FILE_MISSING, f"{speakers_file} (or {SPEAKERS_FILES[1]})")
        sex_labels = {}
    elif speakers_file.suffix == ".tsv":
        sex_labels = read_tab_separated_speakers(speakers_file)
    else:
        sex_labels = read_pipe_separated_speakers(speakers_file)
    audio: dict[str, str] = {}
    transcripts: dict[str, str] = {}
    utt2spk: dict[str, str] = {}
    for subset in subsets:
        for speaker, speaker_path in subfolders(base / subset):
            for _, chapter_path in subfolders(speaker_path):
                with os.scandir(chapter_path) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.endswith(TRANSCRIPT_SUFFIX):
                            utt = name[:-len(TRANSCRIPT_SUFFIX)]
                            with open(entry.path, encoding="utf-8", errors="replace") as handle:
                                transcripts[utt] = " ".join(handle.read().split())
                            utt2spk.setdefault(utt, speaker)
                        elif name.endswith(AUDIO_SUFFIXES):
                            utt = name.rsplit(".", 1)[0]
                            if utt in audio:
                                raise VoxanonError(f"{entry.path}: utterance {utt!r} already has "
                                                   f"audio {audio[utt]}")
                            audio[utt] = entry.path
                            utt2spk[utt] = speaker
    return CorpusListing(name="+".join(subsets), audio=audio, transcripts=transcripts,
                         utt2spk=utt2spk, sex_labels=sex_labels, speakers_file=str(speakers_file))

