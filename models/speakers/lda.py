"""Gaussian discriminant analyses of a binary attribute and the linear / global protection baselines.

Class 1 is the class favoured by positive LLRs (female for sex, as in Noé 2023 thesis Eq. 78).
LLRs are natural logs.

* :class:`LinearDiscriminant` (LDA, shared covariance, Noé 2023 thesis Eq. 69): the LLR, the KL
  divergence that initialises the flow's μ (thesis §5.3) and the "whitening" protection of
  Eq. 78, which removes the component of x along ``v = Σ⁻¹(μ1 − μ2)`` and sets the LDA LLR
  to exactly 0.
* :class:`QuadraticDiscriminant` (QDA, one covariance per class, Eq. 70).
* :func:`balanced_global_average`: the single sex-neutral embedding of the *global*
  baseline (thesis §5.4), averaged utterance → speaker → sex → mean of the two sexes.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...data_prep.errors import VoxanonError

# Relative ridge added to covariance matrices so that rank-deficient training sets
# (fewer vectors than dimensions) still give a usable inverse.
COVARIANCE_RIDGE = 1e-6


class DiscriminantError(VoxanonError):
    """Training data a discriminant analysis cannot use."""


def _split(x, is_class1) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    is_class1 = np.asarray(is_class1, dtype=bool)
    if x.ndim != 2 or len(x) != len(is_class1):
        raise DiscriminantError(f"{len(is_class1)} labels for data of shape {x.shape}")
    first, second = x[is_class1], x[~is_class1]
    if len(first) < 2 or len(second) < 2:
        raise DiscriminantError(f"discriminant analysis needs at least 2 samples of each class, "
                                f"got {len(first)} and {len(second)}")
    return first, second


def _inverse(covariance: np.ndarray) -> np.ndarray:
    ridge = COVARIANCE_RIDGE * np.trace(covariance) / len(covariance)
    return np.linalg.inv(covariance + ridge * np.eye(len(covariance)))


@dataclass(frozen=True)
class LinearDiscriminant:
    """Class means and the inverse of the pooled within-class (ML) covariance."""

    mean_1: np.ndarray
    mean_2: np.ndarray
    precision: np.ndarray

    @classmethod
    def fit(cls, x, is_class1) -> "LinearDiscriminant":
        first, second = _split(x, is_class1)
        centred = np.concatenate((first - first.mean(axis=0), second - second.mean(axis=0)))
        return cls(first.mean(axis=0), second.mean(axis=0), _inverse(centred.T @ centred / len(centred)))

    @property
    def direction(self) -> np.ndarray:
        """``v = Σ⁻¹(μ1 − μ2)``."""
        return self.precision @ (self.mean_1 - self.mean_2)

    @property
    def offset(self) -> float:
        """``½(μ2ᵀΣ⁻¹μ2 − μ1ᵀΣ⁻¹μ1)``, so that ``llr = vᵀx + offset``."""
        return 0.5 * float(self.mean_2 @ self.precision @ self.mean_2 - self.mean_1 @ self.precision @ self.mean_1)

    @property
    def kl_divergence(self) -> float:
        """``½(μ1 − μ2)ᵀΣ⁻¹(μ1 − μ2)`` (nats): the KL between the two class Gaussians."""
        difference = self.mean_1 - self.mean_2
        return 0.5 * float(difference @ self.precision @ difference)

    def llr(self, x) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) @ self.direction + self.offset

    def protect(self, x) -> np.ndarray:
        """Eq. 78: drop the component along v, then move to the hyperplane where the LLR is 0."""
        x = np.asarray(x, dtype=np.float64)
        v = self.direction
        norm2 = float(v @ v)
        return x - np.outer(x @ v, v) / norm2 - (self.offset / norm2) * v

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"mean_1": self.mean_1, "mean_2": self.mean_2, "precision": self.precision}

    @classmethod
    def from_arrays(cls, arrays) -> "LinearDiscriminant":
        return cls(*(np.asarray(arrays[name], dtype=np.float64) for name in ("mean_1", "mean_2", "precision")))


@dataclass(frozen=True)
class QuadraticDiscriminant:
    """One Gaussian per class."""

    mean_1: np.ndarray
    mean_2: np.ndarray
    covariance_1: np.ndarray
    covariance_2: np.ndarray

    @classmethod
    def fit(cls, x, is_class1) -> "QuadraticDiscriminant":
        first, second = _split(x, is_class1)
        return cls(first.mean(axis=0), second.mean(axis=0),
                   np.atleast_2d(np.cov(first, rowvar=False, bias=True)),
                   np.atleast_2d(np.cov(second, rowvar=False, bias=True)))

    def llr(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return _gaussian_log_density(x, self.mean_1, self.covariance_1) - \
            _gaussian_log_density(x, self.mean_2, self.covariance_2)


def _gaussian_log_density(x: np.ndarray, mean: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    ridge = COVARIANCE_RIDGE * np.trace(covariance) / len(covariance)
    chol = np.linalg.cholesky(covariance + ridge * np.eye(len(covariance)))
    solved = np.linalg.solve(chol, (x - mean).T)
    return -0.5 * np.sum(solved ** 2, axis=0) - np.sum(np.log(np.diag(chol))) - 0.5 * len(mean) * np.log(2 * np.pi)


def balanced_global_average(vectors, speakers: Sequence[str], sexes: Sequence[str]) -> np.ndarray:
    """Mean of the two sex means of speaker means of ``vectors`` (rows), unaffected by
    how many utterances each speaker or how many speakers each sex has."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if len(vectors) != len(speakers) or len(vectors) != len(sexes):
        raise DiscriminantError(f"{len(vectors)} vectors, {len(speakers)} speaker ids, {len(sexes)} sex labels")
    rows: dict[str, list[int]] = defaultdict(list)
    sex_of: dict[str, str] = {}
    for row, (speaker, sex) in enumerate(zip(speakers, sexes)):
        if sex_of.setdefault(speaker, sex) != sex:
            raise DiscriminantError(f"speaker {speaker!r} has two sex labels")
        rows[speaker].append(row)
    by_sex: dict[str, list[np.ndarray]] = defaultdict(list)
    for speaker, speaker_rows in rows.items():
        by_sex[sex_of[speaker]].append(vectors[speaker_rows].mean(axis=0))
    if len(by_sex) != 2:
        raise DiscriminantError(f"balanced averaging needs speakers of two sexes, got {sorted(by_sex)}")
    return np.mean([np.mean(means, axis=0) for means in by_sex.values()], axis=0)
