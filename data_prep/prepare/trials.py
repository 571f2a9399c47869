"""Enrolment and trial sets for any corpus, in the VoicePrivacy layout (Voice-Privacy-Challenge-2024 data directories).

From one data directory this makes, deterministically for a given seed:

- ``<name>_enrolls``: the enrolment utterances of the enrolled speakers, listed in ``enrolls``;
- ``<name>_trials_f`` and ``<name>_trials_m``: the test utterances of each sex, with a
  ``trials`` list pairing every test utterance with every enrolled speaker of the same sex;
- optionally ``<name>_trials_mixed`` (every test utterance against every enrolled speaker,
  whatever the sexes) and ``<name>_asr`` (all test utterances with a transcript).

A speaker is enrolled only when it has more than ``enroll_per_speaker`` utterances, so
that at least one is left for target trials; its enrolment utterances are never test
utterances. Speakers not enrolled (too few utterances, or beyond
``enrolled_speakers_per_sex``) are test speakers only, giving non-target trials, as in
the VoicePrivacy sets.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..corpus import GENDERS, DataDir, Trial, write_data_dir
from ..errors import VoxanonError
from ..paths import contained_path
from .issues import PreparationIssues
from .ordering import seeded_order

log = logging.getLogger(__name__)

UNKNOWN_SEX = "unknown"
TOO_FEW_UTTERANCES = "speaker with too few utterances to enrol (test speaker only)"
NO_SEX_LEFT_OUT = "speaker without an f/m sex label (left out; --mixed would keep it)"
NO_SEX_MIXED_ONLY = "speaker without an f/m sex label (in the mixed list only)"
NO_TRANSCRIPT_FOR_ASR = "test utterance without transcript (left out of the ASR set)"
EMPTY_SEX = "sex with no speakers (its trial set is not written)"


@dataclass(frozen=True)
class TrialDesign:
    enroll_per_speaker: int
    seed: str = "0"
    enrolled_speakers_per_sex: int | None = None
    mixed: bool = False
    asr: bool = False


@dataclass
class EnrolmentSplit:
    enrolment: dict[str, list[str]]  # enrolled speaker -> enrolment utterances
    test: dict[str, list[str]]       # speaker -> test utterances
    sex: dict[str, str]              # speaker -> f, m or unknown


def split_enrolment(data: DataDir, design: TrialDesign, issues: PreparationIssues) -> EnrolmentSplit:
    """Choose the enrolled speakers and, for each, its enrolment utterances."""
    if design.enroll_per_speaker < 1:
        raise VoxanonError(f"--enroll-per-spk must be at least 1, got {design.enroll_per_speaker}")
    if design.enrolled_speakers_per_sex is not None and design.enrolled_speakers_per_sex < 1:
        raise VoxanonError("--enrolled-speakers-per-sex must be at least 1, "
                           f"got {design.enrolled_speakers_per_sex}")
    sex: dict[str, str] = {}
    for speaker in data.speakers:
        label = data.spk2gender.get(speaker)
        if label in GENDERS:
            sex[speaker] = label
        elif design.mixed:
            sex[speaker] = UNKNOWN_SEX
            issues.add(NO_SEX_MIXED_ONLY, speaker)
        else:
            issues.add(NO_SEX_LEFT_OUT, speaker)
    spk2utt = data.spk2utt
    enrolment: dict[str, list[str]] = {}
    test: dict[str, list[str]] = {}
    for group in (*GENDERS, UNKNOWN_SEX):
        speakers = [s for s in sorted(sex) if sex[s] == group]
        eligible = [s for s in speakers if len(spk2utt[s]) > design.enroll_per_speaker]
        issues.extend(TOO_FEW_UTTERANCES, [f"{s} ({len(spk2utt[s])} utterances)"
                                           for s in speakers if s not in eligible])
        chosen = seeded_order(eligible, design.seed, f"enrolled speakers {group}")
        if design.enrolled_speakers_per_sex is not None:
            chosen = chosen[:design.enrolled_speakers_per_sex]
        for speaker in speakers:
            if speaker in chosen:
                ordered = seeded_order(spk2utt[speaker], design.seed, speaker)
                enrolment[speaker] = sorted(ordered[:design.enroll_per_speaker])
                test[speaker] = sorted(ordered[design.enroll_per_speaker:])
            else:
                test[speaker] = list(spk2utt[speaker])
    return EnrolmentSplit(enrolment=enrolment, test=test, sex=sex)


def build_trial_sets(data: DataDir, design: TrialDesign, issues: PreparationIssues) -> dict[str, DataDir]:
    """The sets by suffix (``enrolls``, ``trials_f``, ``trials_m``, ``trials_mixed``, ``asr``)."""
    base = DataDir(name=data.name, wav=data.absolute_wav(), utt2spk=data.utt2spk, spk2gender=data.spk2gender,
                   text=data.text, utt2dur=data.utt2dur, passthrough=data.passthrough, path=data.path)
    split = split_enrolment(base, design, issues)
    if not split.enrolment:
        raise VoxanonError(f"{data.path or data.name}: no speaker has more than "
                           f"{design.enroll_per_speaker} utterances; nobody can be enrolled")
    enrol_utts = sorted(u for utts in split.enrolment.values() for u in utts)
    sets = {"enrolls": base.subset(enrol_utts)}
    sets["enrolls"].enrolls = enrol_utts
    groups = [(sex, [sex]) for sex in GENDERS]
    if design.mixed:
        groups.append(("mixed", [*GENDERS, UNKNOWN_SEX]))
    for label, sexes in groups:
        enrolled = sorted(s for s in split.enrolment if split.sex[s] in sexes)
        test_utts = sorted(u for s, utts in split.test.items() if split.sex[s] in sexes for u in utts)
        if not enrolled or not test_utts:
            issues.add(EMPTY_SEX, f"trials_{label} ({len(enrolled)} enrolled speakers, "
                                  f"{len(test_utts)} test utterances)")
            continue
        trial_set = base.subset(test_utts)
        trial_set.trials = [Trial(speaker, utt, base.utt2spk[utt] == speaker)
                            for speaker in enrolled for utt in test_utts]
        sets[f"trials_{label}"] = trial_set
    if design.asr:
        tested = sorted({t.test_utt for name, s in sets.items() if name.startswith("trials_")
                         for t in s.trials or []})
        issues.extend(NO_TRANSCRIPT_FOR_ASR, [u for u in tested if u not in base.text])
        with_text = [u for u in tested if u in base.text]
        if not with_text:
            raise VoxanonError(f"{data.path or data.name}: no test utterance has a transcript; "
                               "an ASR set needs a text file")
        sets["asr"] = base.subset(with_text)
    for suffix, trial_data in sets.items():
        trial_data.name = suffix
    return sets


def write_trial_sets(sets: dict[str, DataDir], out_dir: str | os.PathLike, name: str) -> list[Path]:
    written = []
    for suffix, data in sets.items():
        target = contained_path(out_dir, f"{name}_{suffix}")
        data.name = target.name
        data.path = target
        write_data_dir(data, target)
        written.append(target)
        log.info("%s: %d utterances of %d speakers%s", target.name, len(data.wav), len(data.speakers),
                 "" if data.trials is None else
                 f", {len(data.trials)} trials ({sum(t.target for t in data.trials)} target)")
    return written
