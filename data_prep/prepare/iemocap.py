"""IEMOCAP (``IEMOCAP_full_release``) for the VoicePrivacy 2024 emotion (SER) evaluation.

Layout read:

* audio: ``Session<n>/sentences/wav/<dialog>/<utt>.wav`` (16 kHz mono); files whose name is
  not an utterance id (the release's ``._*`` resource forks) are skipped;
* labels: ``Session<n>/dialog/EmoEvaluation/<dialog>.txt``, one line per utterance
  ``[start - end]<TAB><utt><TAB><emo><TAB>[v, a, d]`` (the sub-folders hold the single
  annotators' votes and are not read);
* text: ``Session<n>/dialog/transcriptions/<dialog>.txt``, ``<utt> [start-end]: words``.

The speaker of ``Ses01F_impro01_M013`` is the session's male actor, ``Ses01M``: the
letter after the last ``_`` says who speaks (the one in the dialog name says who wore the
motion markers). Speakers are ``Ses<nn><F|M>``, their sex that letter.

Emotions: the challenge keeps four classes, neutral, angry, happy and sad, with
"excited" merged into happy (``utt2emo`` holds ``neu``/``ang``/``hap``/``sad``; 5531
utterances on the full release, the 2746 + 2785 of its IEMOCAP_dev and IEMOCAP_test).
Utterances with any other consensus label (frustrated, surprised, ..., ``xxx`` = no
agreement) are left out and counted.

Folds: leave one session out, fold ``k`` = Session k; ``spk2fold`` maps each speaker to
its session number, which names the fold's model folder ``fold_<k>``.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import VoxanonError
from ..paths import resolved
from .issues import PreparationIssues
from .listing import CorpusListing

SESSIONS = tuple(f"Session{n}" for n in range(1, 6))
KEPT_EMOTIONS = {"neu": "neu", "ang": "ang", "hap": "hap", "exc": "hap", "sad": "sad"}
UTTERANCE_ID = re.compile(r"Ses(?P<session>\d\d)[FM]_\w+_(?P<sex>[FM])\d+")
LABEL_LINE = re.compile(r"\[[^\]]*\]\t(?P<utt>\S+)\t(?P<emotion>\w+)\t")
TRANSCRIPT_LINE = re.compile(r"(?P<utt>\S+) \[[^\]]*\]: ?(?P<text>.*)")
NO_LABEL = "audio without an EmoEvaluation label (utterance left out)"
LABEL_WITHOUT_AUDIO = "labelled utterance without audio (left out)"


@dataclass
class IemocapListing:
    listing: CorpusListing
    utt2emo: dict[str, str]      # kept utterances only, challenge classes
    spk2fold: dict[str, str]     # speaker -> session number
    left_out: Counter            # other consensus labels -> count


def speaker_of(utt: str) -> str:
    match = UTTERANCE_ID.fullmatch(utt)
    if not match:
        raise VoxanonError(f"{utt!r} is not an IEMOCAP utterance id")
    return f"Ses{match['session']}{match['sex']}"


def _session_folders(root: Path) -> list[Path]:
    base = root
    if not (base / SESSIONS[0]).is_dir() and (root / "IEMOCAP_full_release" / SESSIONS[0]).is_dir():
        base = root / "IEMOCAP_full_release"
    sessions = [base / name for name in SESSIONS if (base / name).is_dir()]
    if not sessions:
        raise VoxanonError(f"{root}: no Session1..Session5 folders (is this IEMOCAP_full_release?)")
    return sessions


def _read_labels(path: Path, labels: dict[str, str]) -> None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = LABEL_LINE.match(line)
            if match:
                if match["utt"] in labels:
                    raise VoxanonError(f"{path}: utterance {match['utt']!r} labelled twice")
                labels[match["utt"]] = match["emotion"]


def scan_iemocap(root: str | os.PathLike, issues: PreparationIssues) -> IemocapListing:
    sessions = _session_folders(resolved(root, "--root"))
    audio: dict[str, str] = {}
    labels: dict[str, str] = {}
    transcripts: dict[str, str] = {}
    for session in sessions:
        wav_root = session / "sentences" / "wav"
        for dialog in sorted(p for p in wav_root.glob("*") if p.is_dir()) if wav_root.is_dir() else []:
            for path in sorted(dialog.glob("*.wav")):
                if UTTERANCE_ID.fullmatch(path.stem):
                    audio[path.stem] = str(path)
        for path in sorted((session / "dialog" / "EmoEvaluation").glob("*.txt")):
            _read_labels(path, labels)
        for path in sorted((session / "dialog" / "transcriptions").glob("*.txt")):
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    match = TRANSCRIPT_LINE.match(line.strip())
                    if match and UTTERANCE_ID.fullmatch(match["utt"]):
                        transcripts[match["utt"]] = match["text"].strip()
    if not labels:
        raise VoxanonError(f"{root}: no EmoEvaluation labels found under Session*/dialog/EmoEvaluation/*.txt")
    issues.extend(NO_LABEL, sorted(u for u in audio if u not in labels))
    kept = {u: KEPT_EMOTIONS[e] for u, e in labels.items() if e in KEPT_EMOTIONS}
    issues.extend(LABEL_WITHOUT_AUDIO, sorted(u for u in kept if u not in audio))
    kept = {u: e for u, e in kept.items() if u in audio}
    left_out = Counter(e for u, e in labels.items() if e not in KEPT_EMOTIONS)
    utt2spk = {u: speaker_of(u) for u in kept}
    speakers = sorted(set(utt2spk.values()))
    listing = CorpusListing(
        name="iemocap", audio={u: audio[u] for u in kept},
        transcripts={u: t for u, t in transcripts.items() if u in kept},
        utt2spk=utt2spk, sex_labels={s: s[-1] for s in speakers},
        speakers_file="the utterance ids")
    spk2fold = {s: str(int(s[3:5])) for s in speakers}
    return IemocapListing(listing, kept, spk2fold, left_out)
