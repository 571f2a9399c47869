"""Cllr, min Cllr and the ECE profile."""
import numpy as np
import pytest

from voxanon.eval.calibration import fit_linear_calibration
from voxanon.eval.cllr import PRIOR_LOG_ODDS_GRID, cllr, ece, ece_from_lr, min_cllr, min_ece, prior_entropy
from voxanon.eval.scores import ScoreError


def random_llrs(seed, n_tar=300, n_non=1200):
    rng = np.random.default_rng(seed)
    return rng.normal(1.0, 2.0, n_tar), rng.normal(-1.5, 2.5, n_non)


def test_cllr_reference_values():
    assert cllr(np.zeros(4), np.zeros(7)) == pytest.approx(1.0, abs=1e-15)
    assert cllr([np.inf], [-np.inf]) == 0.0
    assert cllr([-np.inf, 2.0], [0.0]) == np.inf
    assert cllr([1.0], [np.inf]) == np.inf
    # One target at ln 3: -log2(3/4) / 2; one non-target at 0: 1 / 2.
    assert cllr([np.log(3.0)], [0.0]) == pytest.approx((np.log2(4 / 3) + 1.0) / 2, abs=1e-15)


def test_cllr_refuses_nan_and_empty_sets():
    with pytest.raises(ScoreError, match="NaN"):
        cllr([np.nan], [0.0])
    with pytest.raises(ScoreError, match="empty"):
        cllr([1.0], [])


@pytest.mark.parametrize("seed", range(4))
def test_ece_at_even_prior_is_cllr(seed):
    tar, non = random_llrs(seed)
    assert ece(tar, non, 0.0)[0] == pytest.approx(cllr(tar, non), abs=1e-14)
    assert min_ece(tar, non, 0.0)[0] == pytest.approx(min_cllr(tar, non), abs=1e-14)


@pytest.mark.parametrize("seed", range(4))
def test_min_ece_never_exceeds_the_prior_entropy(seed):
    tar, non = random_llrs(seed)
    assert np.all(min_ece(tar, non, monotonicity_epsilon=0.0) <= prior_entropy() + 1e-12)
    assert np.all(min_ece(tar, non) <= prior_entropy() + 1e-6)
    assert np.all(min_ece(tar, non) <= ece(tar, non) + 1e-6)


def test_prior_entropy():
    plo = np.array([-3.0, 0.0, 3.0])
    prior = 1 / (1 + np.exp(-plo))
    expected = -prior * np.log2(prior) - (1 - prior) * np.log2(1 - prior)
    np.testing.assert_allclose(prior_entropy(plo), expected, atol=1e-14)
    grid = prior_entropy()
    assert grid.shape == (201,) and PRIOR_LOG_ODDS_GRID[0] == -10 and PRIOR_LOG_ODDS_GRID[-1] == 10
    np.testing.assert_allclose(grid, grid[::-1], atol=1e-15)
    np.testing.assert_allclose(ece(np.zeros(5), np.zeros(3)), grid, atol=1e-14)


@pytest.mark.parametrize("seed", range(3))
def test_ece_lr_form_equals_llr_form(seed):
    tar, non = random_llrs(seed, 50, 80)
    np.testing.assert_allclose(ece_from_lr(np.exp(tar), np.exp(non)), ece(tar, non), rtol=1e-10, atol=1e-13)
    with pytest.raises(ScoreError, match="non-negative"):
        ece_from_lr([-1.0], [1.0])


@pytest.mark.parametrize("seed", range(4))
def test_min_cllr_lies_in_unit_range_and_below_any_affine_calibration(seed):
    rng = np.random.default_rng(seed)
    tar, non = rng.normal(2.0, 1.0, 200), rng.normal(0.0, 1.5, 700)
    value = min_cllr(tar, non)
    assert 0.0 <= value <= 1.0
    calibration = fit_linear_calibration(tar, non)
    assert value <= cllr(calibration(tar), calibration(non))
    for slope, offset in ((1.0, 0.0), (0.5, -1.0), (3.0, 2.0)):
        assert value <= cllr(slope * tar + offset, slope * non + offset)


def test_min_cllr_is_invariant_to_monotone_transforms():
    tar, non = random_llrs(8, 100, 400)
    assert min_cllr(np.exp(tar), np.exp(non)) == pytest.approx(min_cllr(tar, non), abs=1e-15)


def test_min_cllr_extremes():
    assert min_cllr([2.0, 3.0], [0.0, 1.0]) == 0.0
    # Pooled ties: a constant scorer is uninformative. The reference [non, tar] order
    # instead separates the tied classes.
    assert min_cllr(np.zeros(5), np.zeros(9), tie_order="tar_non") == pytest.approx(1.0, abs=1e-6)
    assert min_cllr(np.zeros(5), np.zeros(9)) == 0.0
