"""Two-covariance PLDA back-end for speaker embeddings (Ioffe 2006; Kaldi's ivector-plda-scoring).

Model: ``x = m + y + e`` with speaker variable ``y ~ N(0, B)`` and residual ``e ~ N(0, W)``.
Fitting centres and length-normalises the training vectors, reduces them by PCA (so that
the within-speaker covariance is estimable from few utterances), then diagonalises W and B
jointly (LDA): in that space W = I and B = diag(psi), keeping the ``dim`` directions with the
largest psi. Scoring an enrolment mean over ``n`` utterances against one test vector gives
the natural-log likelihood ratio of same against different speakers, in closed form per
dimension (Kaldi's ``--num-utts`` behaviour).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg


@dataclass(frozen=True)
class Plda:
    mean: np.ndarray        # (d,) training mean, subtracted before length normalisation
    transform: np.ndarray   # (d, k) projection into the space where W = I and B = diag(psi)
    psi: np.ndarray         # (k,) between-speaker variances in that space

    def project(self, vectors: np.ndarray) -> np.ndarray:
        centred = np.atleast_2d(np.asarray(vectors, dtype=np.float64)) - self.mean
        normalised = centred / np.linalg.norm(centred, axis=1, keepdims=True)
        return normalised @ self.transform

    def llr(self, enrol_mean: np.ndarray, n_enrol: int, tests: np.ndarray) -> np.ndarray:
        """LLRs of one enrolment (the mean of ``n_enrol`` projected vectors) against projected tests."""
        psi, a, b = self.psi, np.asarray(enrol_mean, dtype=np.float64), np.atleast_2d(tests)
        inv_n = 1.0 / n_enrol
        det_same = psi * (1.0 + inv_n) + inv_n
        det_diff = (psi + inv_n) * (psi + 1.0)
        quad_same = (a ** 2 * (psi + 1.0) - 2.0 * a * b * psi + b ** 2 * (psi + inv_n)) / det_same
        quad_diff = a ** 2 / (psi + inv_n) + b ** 2 / (psi + 1.0)
        return -0.5 * (np.log(det_same / det_diff) + quad_same - quad_diff).sum(axis=1)


def fit_plda(vectors: np.ndarray, speakers: list[str], dim: int = 100) -> Plda:
    """Fit on training vectors (rows) with their speaker labels; needs 2+ speakers with 2+ vectors."""
    vectors = np.asarray(vectors, dtype=np.float64)
    labels = np.asarray(speakers)
    names, index = np.unique(labels, return_inverse=True)
    counts = np.bincount(index)
    if len(names) < 2 or (counts >= 2).sum() < 2 or vectors.shape[0] != len(labels):
        raise ValueError("PLDA training needs at least two speakers with two or more vectors each")
    mean = vectors.mean(axis=0)
    centred = vectors - mean
    normalised = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    speaker_means = np.zeros((len(names), vectors.shape[1]))
    np.add.at(speaker_means, index, normalised)
    speaker_means /= counts[:, None]
    residual = normalised - speaker_means[index]
    # PCA to as many directions as the within-speaker scatter can estimate.
    k = int(min(vectors.shape[1], len(vectors) - len(names)))
    _, _, basis = np.linalg.svd(normalised - normalised.mean(axis=0), full_matrices=False)
    pca = basis[:k].T
    within = (residual @ pca).T @ (residual @ pca) / (len(vectors) - len(names))
    between_points = (speaker_means - normalised.mean(axis=0)) @ pca
    between = between_points.T @ between_points / len(names)
    psi, eigenvectors = scipy.linalg.eigh(between, within + 1e-10 * np.eye(k))
    order = np.argsort(psi)[::-1][:min(dim, k)]
    return Plda(mean, pca @ eigenvectors[:, order], np.maximum(psi[order], 1e-10))
