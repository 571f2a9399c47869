"""Training subsets: which speakers and utterances a training stage uses.

Three uses, each a preset of the options below (all can be overridden):

========== ======================================= ============ ==================
purpose    typical source                          sex labels   sexes balanced
========== ======================================= ============ ==================
vocoder    LibriTTS train-clean-100                not needed   no
pool       LibriTTS/LibriSpeech train-other-500    required     no
sex-flow   LibriTTS train-other-500                required     yes
========== ======================================= ============ ==================

Options: keep utterances within a duration range, at most ``utts_per_speaker``
utterances per speaker, at most ``speakers_per_sex`` speakers of each sex, and
(balanced) the same number of speakers of each sex. Every choice is deterministic for
a seed (:func:`seeded_order`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..corpus import GENDERS, DataDir
from ..errors import VoxanonError
from .issues import PreparationIssues
from .ordering import seeded_order

log = logging.getLogger(__name__)

NO_SEX_LEFT_OUT = "speaker without an f/m sex label (left out: this subset needs sexes)"


@dataclass(frozen=True)
class SubsetRule:
    need_sex: bool
    balance_sexes: bool


PURPOSES = {
    "vocoder": SubsetRule(need_sex=False, balance_sexes=False),
    "pool": SubsetRule(need_sex=True, balance_sexes=False),
    "sex-flow": SubsetRule(need_sex=True, balance_sexes=True),
}


@dataclass(frozen=True)
class SubsetOptions:
    need_sex: bool = False
    balance_sexes: bool = False
    speakers_per_sex: int | None = None
    utts_per_speaker: int | None = None
    min_seconds: float | None = None
    max_seconds: float | None = None
    seed: str = "0"


def select_training_subset(data: DataDir, options: SubsetOptions, issues: PreparationIssues) -> DataDir:
    """The subset of ``data`` the options describe, with absolute audio paths."""
    for name in ("speakers_per_sex", "utts_per_speaker"):
        value = getattr(options, name)
        if value is not None and value < 1:
            raise VoxanonError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    by_sex = options.need_sex or options.balance_sexes or options.speakers_per_sex is not None
    utterances = _within_durations(data, options)
    spk2utt: dict[str, list[str]] = {}
    for utt in sorted(utterances):
        spk2utt.setdefault(data.utt2spk[utt], []).append(utt)
    if by_sex:
        unlabelled = sorted(s for s in spk2utt if data.spk2gender.get(s) not in GENDERS)
        issues.extend(NO_SEX_LEFT_OUT, unlabelled)
        groups = {sex: [s for s in spk2utt if data.spk2gender.get(s) == sex] for sex in GENDERS}
    else:
        groups = {"all": list(spk2utt)}
    limit = options.speakers_per_sex
    if options.balance_sexes:
        smallest = min(len(speakers) for speakers in groups.values())
        if smallest == 0:
            raise VoxanonError(f"{data.path or data.name}: a sex-balanced subset needs speakers of both "
                               f"sexes; found {', '.join(f'{len(v)} {k}' for k, v in groups.items())}")
        limit = smallest if limit is None else min(limit, smallest)
    kept: list[str] = []
    for group, speakers in groups.items():
        chosen = seeded_order(speakers, options.seed, f"speakers {group}")
        if limit is not None:
            if limit > len(chosen):
                log.warning("%s: only %d speakers of %s, fewer than the %d asked for", data.name,
                            len(chosen), group, limit)
            chosen = chosen[:limit]
        for speaker in chosen:
            utts = spk2utt[speaker]
            if options.utts_per_speaker is not None:
                utts = seeded_order(utts, options.seed, speaker)[:options.utts_per_speaker]
            kept.extend(utts)
    if not kept:
        raise VoxanonError(f"{data.path or data.name}: no utterance is left for this subset")
    source = DataDir(name=data.name, wav=data.absolute_wav(), utt2spk=data.utt2spk,
                     spk2gender=data.spk2gender, text=data.text, utt2dur=data.utt2dur,
                     passthrough=data.passthrough, path=data.path)
    return source.subset(kept)


def _within_durations(data: DataDir, options: SubsetOptions) -> list[str]:
    utterances = list(data.wav)
    if options.min_seconds is None and options.max_seconds is None:
        return utterances
    unknown = [u for u in utterances if u not in data.utt2dur]
    if unknown:
        raise VoxanonError(f"{data.path or data.name}: duration limits need utt2dur, which lacks "
                           f"{len(unknown)} utterances (e.g. {', '.join(sorted(unknown)[:5])}); "
                           "prepare the set without --no-durations")
    low = options.min_seconds if options.min_seconds is not None else 0.0
    high = options.max_seconds if options.max_seconds is not None else float("inf")
    kept = [u for u in utterances if low <= data.utt2dur[u] <= high]
    log.info("%s: %d of %d utterances last %g to %g s", data.name, len(kept), len(utterances), low, high)
    return kept
