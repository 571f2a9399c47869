"""Trial scoring from speaker embeddings: enrolment by the mean of a speaker's utterances, then cosine
or PLDA scores per trial, and the all-pairs cosine tables of the voice similarity matrices."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ...data_prep.scores import ScoreTable

def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def enrolment_vectors(vectors: dict[str, np.ndarray], utts: Iterable[str],
                      utt2spk: dict[str, str]) -> dict[str, list[np.ndarray]]:
    """Each speaker's enrolment embeddings (the listed utterances that have one)."""
    grouped: dict[str, list[np.ndarray]] = {}
    for utt in utts:
        if utt in vectors:
            grouped.setdefault(utt2spk[utt], []).append(vectors[utt])
    return grouped


def speaker_enrolment(vectors: dict[str, np.ndarray], utts: Iterable[str], utt2spk: dict[str, str]) -> dict[str, np.ndarray]:
    """Each speaker's mean enrolment embedding (unnormalised mean, as VoicePrivacy 2024)."""
    return {spk: np.mean(vecs, axis=0) for spk, vecs in enrolment_vectors(vectors, utts, utt2spk).items()}


def cosine_trial_scores(enrolment: dict[str, np.ndarray], tests: dict[str, np.ndarray],
                        trials) -> tuple[np.ndarray, np.ndarray, int]:
    """Target and non-target cosine scores of the trials whose both sides exist; and how many were left out."""
    speakers = sorted(enrolment)
    test_ids = sorted(tests)
    if not speakers or not test_ids:
        return np.zeros(0), np.zeros(0), len(trials)
    speaker_index = {s: i for i, s in enumerate(speakers)}
    test_index = {u: i for i, u in enumerate(test_ids)}
    similarity = _unit(np.stack([enrolment[s] for s in speakers])) @ _unit(np.stack([tests[u] for u in test_ids])).T
    tar, non, left_out = [], [], 0
    for trial in trials:
        i, j = speaker_index.get(trial.enrol_speaker), test_index.get(trial.test_utt)
        if i is None or j is None:
            left_out += 1
            continue
        (tar if trial.target else non).append(similarity[i, j])
    return np.asarray(tar), np.asarray(non), left_out


def plda_trial_scores(plda, enrol_vectors: dict[str, np.ndarray], enrol_utts: Iterable[str], utt2spk: dict[str, str],
                      tests: dict[str, np.ndarray], trials) -> tuple[np.ndarray, np.ndarray, int]:
    """Target and non-target PLDA LLRs (enrolment = mean of each speaker's projected vectors)."""
    grouped = enrolment_vectors(enrol_vectors, enrol_utts, utt2spk)
    if not grouped or not tests:
        return np.zeros(0), np.zeros(0), len(trials)
    test_ids = sorted(tests)
    test_index = {u: i for i, u in enumerate(test_ids)}
    projected = plda.project(np.stack([tests[u] for u in test_ids]))
    llrs = {spk: plda.llr(plda.project(np.stack(vecs)).mean(axis=0), len(vecs), projected)
            for spk, vecs in grouped.items()}
    tar, non, left_out = [], [], 0
    for trial in trials:
        j = test_index.get(trial.test_utt)
        if trial.enrol_speaker not in llrs or j is None:
            left_out += 1
            continue
        (tar if trial.target else non).append(llrs[trial.enrol_speaker][j])
    return np.asarray(tar), np.asarray(non), left_out


def pair_score_table(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> ScoreTable:
    """Cosine scores of every (first, second) utterance pair, for the voice similarity matrices."""
    first_ids, second_ids = sorted(first), sorted(second)
    scores = _unit(np.stack([first[u] for u in first_ids])) @ _unit(np.stack([second[u] for u in second_ids])).T
    return ScoreTable([u for u in first_ids for _ in second_ids], [v for _ in first_ids for v in second_ids],
                      scores.reshape(-1).astype(np.float64))


def scored_trial_speakers(trials, enrolled: set[str], tests: set[str], utt2spk: dict[str, str]
                          ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(enrolment speaker, test speaker) of the target and non-target trials that
    :func:`cosine_trial_scores` / :func:`plda_trial_scores` score, in the same order."""
    tar, non = [], []
    for trial in trials:
        if trial.enrol_speaker in enrolled and trial.test_utt in tests:
            (tar if trial.target else non).append((trial.enrol_speaker, utt2spk[trial.test_utt]))
    return tar, non

