"""Score sets in memory: validation of target / non-target arrays, and pairing scores with trials.

Every metric in ``voxanon.eval`` takes two 1-D arrays, ``tar`` (scores of target,
same-speaker, mated trials) and ``non`` (non-target trials), and validates them here so
that empty, single-class, NaN or infinite inputs fail with one clear message.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..data_prep.corpus import Trial
from ..data_prep.errors import VoxanonError
from ..data_prep.scores import ScoreTable, repeated_pairs

MAX_EXAMPLES = 5


class ScoreError(VoxanonError, ValueError):
    """Scores that cannot be evaluated: empty, single-class, NaN / infinite, or not matching the trials."""


def as_score_array(values, name: str, *, allow_infinite: bool = False) -> np.ndarray:
    """``values`` as a non-empty 1-D float64 array without NaN (and without ±inf unless allowed)."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ScoreError(f"{name}: not an array of numbers") from None
    if array.ndim != 1:
        raise ScoreError(f"{name}: expected a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise ScoreError(f"{name}: empty; both classes need at least one score")
    if np.isnan(array).any():
        bad = np.flatnonzero(np.isnan(array))
        raise ScoreError(f"{name}: {bad.size} NaN value(s), first at index {bad[0]}")
    if not allow_infinite and np.isinf(array).any():
        bad = np.flatnonzero(np.isinf(array))
        raise ScoreError(f"{name}: {bad.size} infinite value(s), first at index {bad[0]} "
                         f"({array[bad[0]]}); scores must be finite")
    return array


def check_score_sets(tar, non, *, allow_infinite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(tar, non)``; ``allow_infinite`` is for LLRs, where ±inf are legitimate values."""
    return (as_score_array(tar, "target scores", allow_infinite=allow_infinite),
            as_score_array(non, "non-target scores", allow_infinite=allow_infinite))


@dataclass(frozen=True)
class TrialScores:
    """Scores split by trial class, plus what did not match (empty unless ``allow_missing``)."""

    tar: np.ndarray
    non: np.ndarray
    trials_without_score: list[tuple[str, str]]
    scores_without_trial: list[tuple[str, str]]


def pair_trials_with_scores(trials: Sequence[Trial], table: ScoreTable, *,
                            allow_missing: bool = False) -> TrialScores:
    """Look up the score of every trial by its (enrolment speaker, test utterance) pair.

    Trials with no score, or scores with no trial, raise :class:`ScoreError` counting
    them and showing a few examples; with ``allow_missing`` both are dropped and reported
    in the result. A trial listed twice is always an error.
    """
    enrol = [trial.enrol_speaker for trial in trials]
    utts = [trial.test_utt for trial in trials]
    is_target = np.fromiter((trial.target for trial in trials), dtype=bool, count=len(trials))
    repeated = repeated_pairs(enrol, utts)
    if repeated:
        raise ScoreError(f"trials: {len(repeated)} pair(s) listed more than once, "
                         f"e.g. {_examples([(enrol[k], utts[k]) for k in repeated])}")
    missing: list[tuple[str, str]] = []
    unused: list[tuple[str, str]] = []
    if enrol == table.first and utts == table.second:
        # Score files are usually written in trial order: no lookup needed.
        scores = table.scores
        found = np.ones(len(trials), dtype=bool)
    else:
        index = {key: row for row, key in enumerate(zip(table.first, table.second))}
        rows = np.fromiter(map(index.get, zip(enrol, utts), itertools.repeat(-1)), dtype=np.int64, count=len(enrol))
        found = rows >= 0
        missing = [(enrol[k], utts[k]) for k in np.flatnonzero(~found).tolist()]
        used = np.zeros(len(table), dtype=bool)
        used[rows[found]] = True
        unused = [(table.first[k], table.second[k]) for k in np.flatnonzero(~used).tolist()]
        scores = np.zeros(len(trials))   # a trial without a score is dropped below, or refused
        scores[found] = table.scores[rows[found]]
    if (missing or unused) and not allow_missing:
        problems = []
        if missing:
            problems.append(f"{len(missing)} trial(s) have no score, e.g. {_examples(missing)}")
        if unused:
            problems.append(f"{len(unused)} score(s) match no trial, e.g. {_examples(unused)}")
        raise ScoreError("; ".join(problems) + " (use --allow-missing to drop them)")
    tar = scores[found & is_target]
    non = scores[found & ~is_target]
    if tar.size == 0 or non.size == 0:
        raise ScoreError(f"scored trials: {tar.size} target and {non.size} non-target; "
                         "both classes are needed")
    return TrialScores(tar=tar, non=non, trials_without_score=missing, scores_without_trial=unused)


def _examples(keys: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"'{a} {b}'" for a, b in keys[:MAX_EXAMPLES])
    return shown + (", ..." if len(keys) > MAX_EXAMPLES else "")
