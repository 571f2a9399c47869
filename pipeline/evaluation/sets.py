"""Evaluation sets: an enrolment list and a trials list, original and anonymised, found on disk.

Two input forms are understood:

- one data directory holding both ``enrolls`` and ``trials`` (the demo corpus, or any
  set made with ``voxanon prepare trials``), and its anonymised twin;
- a folder of VoicePrivacy-layout sets: every ``<prefix>_trials_<x>`` directory is
  evaluated with the enrolment list of ``<prefix>_enrolls``, and the anonymised sets are
  ``<name><suffix>`` in the anonymised folder.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ...data_prep.corpus import DataDir, read_data_dir
from ...data_prep.errors import VoxanonError
from ...data_prep.paths import named_folder

log = logging.getLogger(__name__)

@dataclass
class EvaluationSet:
    name: str
    enroll: DataDir
    trials: DataDir
    anon_enroll: DataDir | None = None
    anon_trials: DataDir | None = None
    # A second anonymisation of the trials with another seed: the adversary-calibration extension (C_ECE).
    anon_trials_run2: DataDir | None = None

    @property
    def enroll_utts(self) -> list[str]:
        return list(self.enroll.enrolls or [])

    @property
    def test_utts(self) -> list[str]:
        return sorted({t.test_utt for t in self.trials.trials or []})


def _read(path: Path, allow_pipes: bool) -> DataDir:
    return read_data_dir(path, allow_pipes=allow_pipes)


def discover_sets(orig: Path, anon: Path | None = None, suffix: str | None = None, *,
                  allow_pipes: bool = False) -> list[EvaluationSet]:
    """The evaluation sets under ``orig`` and their anonymised twins (see the module doc)."""
    orig = Path(orig)
    if (orig / "wav.scp").is_file():
        trials = _read(orig, allow_pipes)
        if trials.trials is None or trials.enrolls is None:
            raise VoxanonError(f"{orig}: an evaluation set needs both 'enrolls' and 'trials' files")
        pairs = [(orig.name, orig, orig)]
    else:
        pairs = []
        for trials_dir in sorted(p for p in orig.glob("*_trials_*") if (p / "trials").is_file()):
            prefix = trials_dir.name.split("_trials_")[0]
            enroll_dir = orig / f"{prefix}_enrolls"
            if suffix and trials_dir.name.endswith(suffix):
                continue
            if not (enroll_dir / "enrolls").is_file():
                raise VoxanonError(f"{trials_dir}: no enrolment list {enroll_dir / 'enrolls'}")
            pairs.append((trials_dir.name, enroll_dir, trials_dir))
        if not pairs:
            raise VoxanonError(f"{orig}: neither a data directory with enrolls and trials nor a folder of "
                               "VoicePrivacy-layout sets (<prefix>_enrolls, <prefix>_trials_<x>)")
    sets = []
    for name, enroll_dir, trials_dir in pairs:
        enroll = _read(enroll_dir, allow_pipes) if enroll_dir != trials_dir else None
        trials = _read(trials_dir, allow_pipes)
        enroll = enroll or trials
        _check_enrolment_speakers(enroll, trials)
        evaluation = EvaluationSet(name, enroll, trials)
        if anon is not None:
            evaluation.anon_enroll, evaluation.anon_trials = _anonymised_twins(
                Path(anon), enroll_dir, trials_dir, suffix, allow_pipes)
        sets.append(evaluation)
    return sets


def _check_enrolment_speakers(enroll: DataDir, trials: DataDir) -> None:
    """Every trial's enrolment speaker has an utterance in the enrolment list; else one error naming the speakers
    and both files (their trials would only have been left out, as if an embedding had failed)."""
    enrolled = {enroll.utt2spk[utt] for utt in enroll.enrolls or () if utt in enroll.utt2spk}
    unknown = sorted({trial.enrol_speaker for trial in trials.trials or ()} - enrolled)
    if unknown:
        shown = ", ".join(map(repr, unknown[:10])) + (f" ... ({len(unknown) - 10} more)" if len(unknown) > 10 else "")
        raise VoxanonError(f"{trials.path / 'trials'}: {len(unknown)} enrolment speaker(s) have no utterance in "
                           f"{enroll.path / 'enrolls'}: {shown}")


def _anonymised_twins(anon: Path, enroll_dir: Path, trials_dir: Path, suffix: str | None,
                      allow_pipes: bool) -> tuple[DataDir, DataDir]:
    if (anon / "wav.scp").is_file():
        twin = _read(anon, allow_pipes)
        return twin, twin
    if not anon.is_dir():
        raise VoxanonError(f"anonymised data {anon}: no such folder")
    if suffix is None:
        raise VoxanonError(f"{anon} is a folder of sets: give --suffix to find the anonymised twin of "
                           f"{trials_dir.name}")
    dirs = [named_folder(anon, f"{d.name}{suffix}", f"--suffix {suffix!r}") for d in (enroll_dir, trials_dir)]
    for directory in dirs:
        if not (directory / "wav.scp").is_file():
            raise VoxanonError(f"anonymised set {directory} not found")
    twins = [_read(d, allow_pipes) for d in dirs]
    return twins[0], twins[1]


def check_anonymised(evaluation: EvaluationSet, allow_missing: bool) -> list[str]:
    """Utterances of the set that have no anonymised audio; an error unless ``allow_missing``."""
    missing = []
    for original, twin in ((evaluation.enroll_utts, evaluation.anon_enroll),
                           (evaluation.test_utts, evaluation.anon_trials)):
        if twin is None:
            continue
        missing += [u for u in original if u not in twin.wav or
                    (not twin.is_pipe(u) and not twin.audio_path(u).is_file())]
    missing = sorted(set(missing))
    if missing and not allow_missing:
        shown = ", ".join(missing[:10]) + (f" ... ({len(missing) - 10} more)" if len(missing) > 10 else "")
        raise VoxanonError(f"{evaluation.name}: {len(missing)} utterance(s) have no anonymised audio: {shown}. "
                           "Anonymise them, or pass --allow-missing to evaluate without them")
    if missing:
        log.warning("%s: evaluating without %d utterance(s) that have no anonymised audio, e.g. %s",
                    evaluation.name, len(missing), missing[0])
    return missing



def audio_files(data: DataDir, utts: Iterable[str]) -> dict[str, Path]:
    """The audio path of each of ``utts`` that ``data`` lists."""
    return {utt: data.audio_path(utt) for utt in utts if utt in data.wav}
