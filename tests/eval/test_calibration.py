"""PAV, oracle LLRs and the linear / isotonic calibration maps (Brümmer and du Preez 2006; Noé et al. 2022, §5.3)."""
import numpy as np
import pytest

from voxanon.eval.calibration import (SLOPE_PRIOR_SD, empirical_calibration, fit_isotonic_calibration,
                                      fit_linear_calibration, optimal_llr, pav, sort_scores, sorted_optimal_llr)
from voxanon.eval.scores import ScoreError


def stack_pav(y, weights=None):
    """PAV written out: a stack of (value, weight, width) blocks, merging on >=."""
    weights = np.ones(len(y)) if weights is None else weights
    values, block_weights, widths = [], [], []
    for value, weight in zip(y, weights):
        values.append(value)
        block_weights.append(weight)
        widths.append(1)
        while len(values) > 1 and values[-2] >= values[-1]:
            value, weight, width = values.pop(), block_weights.pop(), widths.pop()
            values[-1] = (values[-1] * block_weights[-1] + value * weight) / (block_weights[-1] + weight)
            block_weights[-1] += weight
            widths[-1] += width
    return np.repeat(values, widths), np.array(widths)


def reference_optimal_llr(tar, non, laplace, eps=1e-6):
    """The ZEBRA reference ``optimal_llr`` (Voice-Privacy-Challenge/zebra), with the stack PAV above."""
    scores = np.concatenate([non, tar])
    ideal = np.concatenate([np.zeros(len(non)), np.ones(len(tar))])
    perturb = np.argsort(scores, kind="mergesort")
    ideal = ideal[perturb]
    if laplace:
        ideal = np.hstack([1, 0, ideal, 1, 0])
    popt, _ = stack_pav(ideal)
    if laplace:
        popt = popt[2:len(popt) - 2]
    with np.errstate(divide="ignore"):
        llrs = np.log(popt) - np.log(1 - popt) - np.log(len(tar) / len(non))
    llrs = llrs + np.arange(len(scores)) * eps / len(scores)
    reverse = np.zeros(len(scores), dtype=int)
    reverse[perturb] = np.arange(len(scores))
    return llrs[reverse][len(non):], llrs[reverse][:len(non)]


@pytest.mark.parametrize("seed", range(5))
def test_pav_matches_the_stack_algorithm(seed):
    rng = np.random.default_rng(seed)
    for y in (rng.integers(0, 2, 300).astype(float), rng.normal(size=200), np.round(rng.normal(size=100), 1)):
        ghat, widths = pav(y)
        expected, expected_widths = stack_pav(y)
        np.testing.assert_allclose(ghat, expected, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(widths, expected_widths)
        assert np.all(np.diff(ghat) >= 0)
        block_values = ghat[np.cumsum(widths) - 1]
        assert np.all(np.diff(block_values) > 0)


def test_pav_with_weights_matches_the_stack_algorithm():
    rng = np.random.default_rng(7)
    y, weights = rng.normal(size=50), rng.uniform(0.5, 3.0, 50)
    ghat, widths = pav(y, weights)
    expected, expected_widths = stack_pav(y, weights)
    np.testing.assert_allclose(ghat, expected, atol=1e-12)
    np.testing.assert_array_equal(widths, expected_widths)


@pytest.mark.parametrize("laplace", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_optimal_llr_matches_the_reference_code(laplace, seed):
    rng = np.random.default_rng(seed)
    # Rounded scores make ties within and across classes.
    tar = np.round(rng.normal(1.5, 1, 60 + seed), 1)
    non = np.round(rng.normal(0, 1, 300), 1)
    tar_llr, non_llr = optimal_llr(tar, non, laplace=laplace)
    expected_tar, expected_non = reference_optimal_llr(tar, non, laplace)
    np.testing.assert_allclose(tar_llr, expected_tar, atol=1e-12)
    np.testing.assert_allclose(non_llr, expected_non, atol=1e-12)


def test_optimal_llr_is_nondecreasing_in_the_score():
    rng = np.random.default_rng(3)
    tar, non = rng.normal(1, 1, 80), rng.normal(0, 1, 400)
    order = np.argsort(np.concatenate([tar, non]))
    for laplace in (False, True):
        llrs = np.concatenate(optimal_llr(tar, non, laplace=laplace))[order]
        finite = np.isfinite(llrs)
        assert np.all(llrs[1:] >= llrs[:-1])
        assert np.all(np.diff(llrs[finite]) > 0)
        assert finite.all() == laplace


def test_infinite_llrs_only_on_the_safe_side_without_laplace():
    tar = np.array([5.0, 6.0, 0.5, 2.0])
    non = np.array([-3.0, -2.0, 0.0, 1.0, 3.0])
    tar_llr, non_llr = optimal_llr(tar, non)
    assert np.all(tar_llr > -np.inf) and np.all(non_llr < np.inf)
    assert np.isposinf(tar_llr[:2]).all() and np.isneginf(non_llr[:2]).all()
    laplace_tar, laplace_non = optimal_llr(tar, non, laplace=True)
    assert np.all(np.isfinite(laplace_tar)) and np.all(np.isfinite(laplace_non))


def test_tie_order_decides_tied_targets_and_non_targets():
    tar, non = np.array([0.0, 1.0, 2.0]), np.array([-1.0, 1.0, 3.0])
    tar_llr, non_llr = optimal_llr(tar, non, tie_order="non_tar", monotonicity_epsilon=0)
    assert tar_llr[1] > non_llr[1]
    tar_llr, non_llr = optimal_llr(tar, non, tie_order="tar_non", monotonicity_epsilon=0)
    assert tar_llr[1] == non_llr[1]


def test_all_tied_scores_pooled():
    tar, non = np.zeros(3), np.zeros(9)
    tar_llr, non_llr = optimal_llr(tar, non, tie_order="tar_non")
    assert np.max(np.abs(np.concatenate([tar_llr, non_llr]))) < 1e-6
    tar_llr, non_llr = optimal_llr(tar, non, laplace=True, tie_order="tar_non", monotonicity_epsilon=0)
    # Labels 1 0 | 1 1 1 0 ... 0 | 1 0: the data block (3/12) pools with the leading pseudo
    # pair only, since the trailing pair (1/2) already lies above it: p = (Nt + 1) / (N + 2).
    expected = np.log(4 / 10) - np.log(3 / 9)
    np.testing.assert_allclose(np.concatenate([tar_llr, non_llr]), expected, atol=1e-12)


def test_all_tied_scores_split_by_the_non_tar_order():
    # The reference code's [non, tar] order lets a tie separate the classes perfectly.
    tar_llr, non_llr = optimal_llr(np.zeros(3), np.zeros(9))
    assert np.isposinf(tar_llr).all() and np.isneginf(non_llr).all()


@pytest.mark.parametrize("tie_order", ["non_tar", "tar_non"])
def test_sort_scores_equals_a_stable_sort_of_the_concatenation(tie_order):
    rng = np.random.default_rng(11)
    tar, non = rng.integers(0, 20, 150).astype(float), rng.integers(-5, 15, 700).astype(float)
    first, second = (non, tar) if tie_order == "non_tar" else (tar, non)
    concatenated = np.concatenate([first, second])
    labels = np.concatenate([np.zeros(first.size, bool), np.ones(second.size, bool)])
    if tie_order == "tar_non":
        labels = ~labels
    order = np.argsort(concatenated, kind="stable")
    result = sort_scores(tar, non, tie_order)
    np.testing.assert_array_equal(result.scores, concatenated[order])
    np.testing.assert_array_equal(result.is_target, labels[order])


@pytest.mark.parametrize("tar, non, message", [
    ([], [1.0], "empty"),
    ([1.0], [], "empty"),
    ([1.0, np.nan], [0.0], "NaN"),
    ([1.0], [0.0, np.inf], "infinite"),
    ([[1.0]], [0.0], "1-D"),
])
def test_bad_inputs_raise_clear_errors(tar, non, message):
    with pytest.raises(ScoreError, match=message):
        optimal_llr(tar, non)


def test_single_class_label_sequences_are_refused():
    with pytest.raises(ScoreError, match="both classes"):
        sorted_optimal_llr(np.ones(5, dtype=bool))
    with pytest.raises(ScoreError, match="tie_order"):
        optimal_llr([1.0], [0.0], tie_order="random")


def calibrated_llrs(mu, n_tar, n_non, seed):
    """Proposition 1: calibrated Gaussian LLRs, N(mu, 2 mu) for targets and N(-mu, 2 mu) otherwise."""
    rng = np.random.default_rng(seed)
    return rng.normal(mu, np.sqrt(2 * mu), n_tar), rng.normal(-mu, np.sqrt(2 * mu), n_non)


def test_linear_calibration_recovers_a_known_affine_map():
    tar_llr, non_llr = calibrated_llrs(4.0, 20000, 60000, seed=0)
    # Scores that are an affine transform of calibrated LLRs: llr = 2 * score + 1.
    calibration = fit_linear_calibration((tar_llr - 1) / 2, (non_llr - 1) / 2)
    assert calibration.slope == pytest.approx(2.0, abs=0.05)
    assert calibration.offset == pytest.approx(1.0, abs=0.05)
    np.testing.assert_allclose(calibration(np.array([0.0, 1.0])),
                               [calibration.offset, calibration.offset + calibration.slope])


def test_linear_calibration_weighs_classes_by_the_prior_not_their_counts():
    rng = np.random.default_rng(5)
    tar, non = rng.normal(1, 1, 200), rng.normal(-1, 1.5, 300)
    # The cross-entropy term weighs each class by its prior, whatever its count: unregularised, the fit does not
    # move when the targets are doubled.
    single = fit_linear_calibration(tar, non, slope_prior_sd=None)
    doubled = fit_linear_calibration(np.concatenate([tar, tar]), non, slope_prior_sd=None)
    assert doubled.slope == pytest.approx(single.slope, rel=1e-6)
    assert doubled.offset == pytest.approx(single.offset, rel=1e-6, abs=1e-9)
    # The slope prior weighs as one trial among all fitted, so doubling them moves the default fit by its share only.
    regularised = fit_linear_calibration(tar, non)
    assert regularised.slope < single.slope
    assert regularised.slope == pytest.approx(single.slope, rel=2e-3)
    assert fit_linear_calibration(np.concatenate([tar, tar]), non).slope == pytest.approx(single.slope, rel=2e-3)
    with pytest.raises(ScoreError, match="prior"):
        fit_linear_calibration(tar, non, prior=1.0)


def test_isotonic_calibration_reproduces_pav_on_its_own_scores():
    rng = np.random.default_rng(9)
    tar, non = np.round(rng.normal(1, 1, 100), 1), np.round(rng.normal(0, 1, 500), 1)
    calibration = fit_isotonic_calibration(tar, non, laplace=False)
    expected_tar, expected_non = optimal_llr(tar, non, tie_order="tar_non", monotonicity_epsilon=0)
    np.testing.assert_array_equal(calibration(tar), expected_tar)
    np.testing.assert_array_equal(calibration(non), expected_non)


def test_isotonic_calibration_outside_and_between_blocks():
    calibration = fit_isotonic_calibration([2.0, 3.0, 5.0], [0.0, 1.0, 4.0])
    assert np.all(np.isfinite(calibration.llrs))
    assert np.all(np.diff(calibration.llrs) > 0)
    lowest, highest = calibration.llrs[0], calibration.llrs[-1]
    np.testing.assert_array_equal(calibration([-100.0, 100.0]), [lowest, highest])
    # Between the block starting at 4.0 and the next one the map keeps the lower block.
    k = int(np.searchsorted(calibration.lower_scores, 4.0))
    if k + 1 < calibration.lower_scores.size:
        gap = (calibration.lower_scores[k] + calibration.lower_scores[k + 1]) / 2
        assert calibration(np.array([gap]))[0] == calibration.llrs[k]


def test_empirical_calibration_of_calibrated_llrs_follows_the_diagonal():
    tar_llr, non_llr = calibrated_llrs(2.0, 50000, 50000, seed=2)
    data = empirical_calibration(tar_llr, non_llr, n_bins=10)
    assert data.counts.sum() == 100000
    well_filled = data.counts > 2000
    np.testing.assert_allclose(data.target_fraction[well_filled], data.bin_centres[well_filled], atol=0.03)
    overconfident = empirical_calibration(3 * tar_llr, 3 * non_llr, n_bins=10)
    assert overconfident.target_fraction[-1] < overconfident.bin_centres[-1] - 0.02


def test_linear_calibration_matches_a_fit_of_llreval_cross_entropy():
    """Unregularised, the fit is the minimum of llreval's prior-weighted cross-entropy over affine maps."""
    from llreval.cllr import cross_entropy
    from scipy.optimize import minimize

    rng = np.random.default_rng(11)
    tar, non = rng.normal(0.6, 0.1, 300), rng.normal(0.2, 0.15, 900)
    for prior in (0.5, 0.2):
        def objective(params):
            value, back = cross_entropy(params[0] * tar + params[1], params[0] * non + params[1], prior, deriv=True)
            d_tar, d_non = back(1.0)
            return value, np.array([d_tar @ tar + d_non @ non, d_tar.sum() + d_non.sum()])

        reference = minimize(objective, np.array([1.0, 0.0]), jac=True, method="BFGS", options={"gtol": 1e-12}).x
        ours = fit_linear_calibration(tar, non, prior=prior, slope_prior_sd=None)
        assert [ours.slope, ours.offset] == pytest.approx(reference, rel=1e-4)
        # The default slope prior moves a fit on 1200 overlapping trials by well under a percent.
        assert fit_linear_calibration(tar, non, prior=prior).slope == pytest.approx(reference[0], rel=5e-3)


def test_linear_calibration_stays_finite_on_separable_classes():
    tar, non = np.array([0.8, 0.85, 0.9, 0.95]), np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    steep = fit_linear_calibration(tar, non, slope_prior_sd=None)
    fitted = fit_linear_calibration(tar, non)
    pooled_sd = np.concatenate((tar, non)).std()
    # Without the prior the optimum is at infinity; with it the standardised slope stays within a few sds.
    assert steep.slope > 4 * fitted.slope
    assert 0 < fitted.slope * pooled_sd < SLOPE_PRIOR_SD
    assert fitted(tar).min() > 0 > fitted(non).max()
    with pytest.raises(ScoreError, match="slope_prior_sd"):
        fit_linear_calibration(tar, non, slope_prior_sd=0.0)
