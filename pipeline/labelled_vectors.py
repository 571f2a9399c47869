"""Speaker vectors with the speakers' sexes, read from a vectors file, utt2spk and spk2gender."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..data_prep.corpus import GENDERS, read_mapping
from ..data_prep.errors import VoxanonError
from ..data_prep.vectors import Vectors, read_vectors, speaker_means


def read_enrolment(path: Path, enroll_utt2spk: Path | None) -> Vectors:
    """Speaker-level enrolment vectors: as stored, or the speaker means of utterance vectors."""
    vectors = read_vectors(path)
    if enroll_utt2spk is None:
        return vectors
    return speaker_means(vectors, read_mapping(enroll_utt2spk, value_kind="speaker"))


def read_spk2gender(path: Path) -> dict[str, str]:
    spk2gender = {spk: label.strip().lower() for spk, label in read_mapping(path).items()}
    bad = sorted(spk for spk, label in spk2gender.items() if label not in GENDERS)
    if bad:
        raise VoxanonError(f"{path}: speaker(s) {', '.join(bad[:10])} have labels other than f or m")
    return spk2gender


def sex_labels(vectors: Vectors, spk2gender: Mapping[str, str], utt2spk: Mapping[str, str] | None,
               what: str) -> tuple[np.ndarray, list[str]]:
    """``(is_female, speaker of each vector)``; keys are utterances when ``utt2spk`` is given, else speakers."""
    if utt2spk is not None:
        missing = [key for key in vectors.ids if key not in utt2spk]
        if missing:
            raise VoxanonError(f"{what}: no speaker in utt2spk for {len(missing)} vector(s): {', '.join(missing[:10])}")
        speakers = [utt2spk[key] for key in vectors.ids]
    else:
        speakers = list(vectors.ids)
    unknown = sorted({spk for spk in speakers if spk not in spk2gender})
    if unknown:
        hint = "" if utt2spk is not None else " (for utterance-level vectors, give the utt2spk option)"
        raise VoxanonError(f"{what}: no sex in spk2gender for speaker(s) {', '.join(unknown[:10])}{hint}")
    return np.array([spk2gender[spk] == "f" for spk in speakers]), speakers


def read_labelled_vectors(vectors_path: Path, utt2spk_path: Path,
                          spk2gender_path: Path) -> tuple[Vectors, np.ndarray, list[str]]:
    """Utterance vectors, whether each is a female speaker's, and each one's speaker."""
    vectors = read_vectors(vectors_path)
    is_female, speakers = sex_labels(vectors, read_spk2gender(spk2gender_path),
                                     read_mapping(utt2spk_path, value_kind="speaker"), f"vectors {vectors_path}")
    return vectors, is_female, speakers
