"""Two-covariance PLDA: closed-form LLR against direct Gaussian densities, and calibration on model data."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from voxanon.eval.cllr import cllr, min_cllr
from voxanon.eval.eer import eer
from voxanon.eval.plda import Plda, fit_plda


def test_closed_form_llr_equals_the_gaussian_likelihood_ratio():
    rng = np.random.default_rng(0)
    psi = np.array([3.0, 1.0, 0.2])
    model = Plda(np.zeros(3), np.eye(3), psi)
    enrol, tests, n = rng.normal(size=3), rng.normal(size=(5, 3)), 4
    expected = []
    for t in tests:
        same = np.block([[np.diag(psi + 1 / n), np.diag(psi)], [np.diag(psi), np.diag(psi + 1)]])
        diff = np.block([[np.diag(psi + 1 / n), np.zeros((3, 3))], [np.zeros((3, 3)), np.diag(psi + 1)]])
        z = np.concatenate([enrol, t])
        expected.append(multivariate_normal(cov=same).logpdf(z) - multivariate_normal(cov=diff).logpdf(z))
    assert np.allclose(model.llr(enrol, n, tests), expected, atol=1e-10)


def test_fitted_plda_separates_and_is_nearly_calibrated():
    rng = np.random.default_rng(1)
    dim, speakers, per_speaker = 20, 200, 8
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    centres = rng.normal(size=(speakers, dim)) * np.linspace(2.0, 0.2, dim) @ basis
    data = centres[:, None, :] + rng.normal(size=(speakers, per_speaker, dim)) @ basis
    model = fit_plda(data.reshape(-1, dim), [str(s) for s in np.repeat(np.arange(speakers), per_speaker)], dim=dim)
    test_centres = rng.normal(size=(40, dim)) * np.linspace(2.0, 0.2, dim) @ basis
    enrol = test_centres[:, None, :] + rng.normal(size=(40, 3, dim)) @ basis
    probes = test_centres + rng.normal(size=(40, dim)) @ basis
    enrol_means = np.stack([model.project(e).mean(axis=0) for e in enrol])
    projected = model.project(probes)
    scores = np.stack([model.llr(enrol_means[i], 3, projected) for i in range(40)])
    tar, non = np.diag(scores), scores[~np.eye(40, dtype=bool)]
    assert eer(tar, non) < 0.05
    assert cllr(tar, non) - min_cllr(tar, non) < 0.25


def test_too_little_training_data_is_an_error():
    with pytest.raises(ValueError, match="two speakers"):
        fit_plda(np.ones((3, 4)), ["a", "b", "c"])
