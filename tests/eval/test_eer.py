"""EER variants and minDCF, with parity against llreval and transcriptions of the reference tools."""
import numpy as np
import pytest
from llreval.quick_eval import tarnon_2_eer_cllr_mincllr
from scipy.stats import norm
from sklearn.metrics import roc_curve

from voxanon.eval.cllr import cllr, min_cllr
from voxanon.eval.eer import (EER_VARIANTS, eer, kaldi_eer, min_dcf, roc_convex_hull, roc_points, rocch_eer,
                              speechbrain_eer, sweep_eer)
from voxanon.eval.scores import ScoreError


def random_sets(seed, n_tar, n_non, separation=1.5):
    rng = np.random.default_rng(seed)
    return rng.normal(separation, 1.0, n_tar), rng.normal(0.0, 1.3, n_non)


def kaldi_reference(tar, non):
    """compute-eer.cc's loop, transcribed (float32 scores, size_t/ssize_t arithmetic)."""
    tar = sorted(np.asarray(tar, dtype=np.float32))
    non = sorted(np.asarray(non, dtype=np.float32))
    position = 0
    while position + 1 < len(tar):
        non_n = int(len(non) * position * 1.0 / len(tar))
        non_position = max(len(non) - 1 - non_n, 0)
        if non[non_position] < tar[position]:
            break
        position += 1
    return position / len(tar)


def speechbrain_reference(tar, non):
    """speechbrain.utils.metric_stats.EER's loop in float64 NumPy (thresholds: scores and midpoints)."""
    thresholds = np.unique(np.concatenate([tar, non]))
    thresholds = np.sort(np.concatenate([thresholds, (thresholds[:-1] + thresholds[1:]) / 2]))
    best_far = best_frr = 0.0
    for index, threshold in enumerate(thresholds):
        frr = np.mean(tar <= threshold)
        far = np.mean(non > threshold)
        if abs(far - frr) < abs(best_far - best_frr) or index == 0:
            best_far, best_frr = far, frr
    return (best_far + best_frr) / 2


@pytest.mark.parametrize("seed, n_tar, n_non", [(0, 5, 20), (1, 13, 40), (2, 100, 900), (3, 548, 11196),
                                                (4, 2000, 20000), (5, 1, 3), (6, 40, 7)])
def test_parity_with_llreval(seed, n_tar, n_non):
    tar, non = random_sets(seed, n_tar, n_non)
    expected_eer, expected_cllr, expected_min_cllr = tarnon_2_eer_cllr_mincllr(tar, non)
    assert rocch_eer(tar, non) == pytest.approx(expected_eer, abs=1e-9)
    assert cllr(tar, non) == pytest.approx(expected_cllr, abs=1e-9)
    # llreval reports the pure PAV optimum; the default adds the reference code's 1e-6/N ramp.
    assert min_cllr(tar, non, monotonicity_epsilon=0.0) == pytest.approx(expected_min_cllr, abs=1e-9)
    assert min_cllr(tar, non) == pytest.approx(expected_min_cllr, abs=1e-7)


@pytest.mark.parametrize("seed", range(5))
def test_rocch_eer_is_the_largest_min_bayes_error(seed):
    tar, non = random_sets(seed, 50 + 30 * seed, 400)
    pmiss, pfa = roc_convex_hull(tar, non)
    priors = np.linspace(0, 1, 2001)
    min_bayes_error = np.min(np.outer(priors, pmiss) + np.outer(1 - priors, pfa), axis=1)
    assert rocch_eer(tar, non) == pytest.approx(min_bayes_error.max(), abs=1e-4)


def test_roc_convex_hull_vertices():
    pmiss, pfa = roc_convex_hull([2.0, 3.0, 0.5], [0.0, 1.0, 1.5, 2.5])
    assert (pmiss[0], pfa[0]) == (0.0, 1.0) and (pmiss[-1], pfa[-1]) == (1.0, 0.0)
    assert np.all(np.diff(pmiss) >= 0) and np.all(np.diff(pfa) <= 0)


@pytest.mark.parametrize("seed", range(6))
def test_kaldi_matches_compute_eer(seed):
    rng = np.random.default_rng(seed)
    sizes = [(1, 5), (3, 3), (17, 230), (120, 1000), (500, 60), (64, 64)][seed]
    # Integer scores make many ties; continuous ones none.
    for tar, non in ((rng.integers(0, 8, sizes[0]).astype(float), rng.integers(-3, 5, sizes[1]).astype(float)),
                     random_sets(seed, *sizes)):
        assert kaldi_eer(tar, non) == kaldi_reference(tar, non)


@pytest.mark.parametrize("seed", range(6))
def test_speechbrain_matches_its_threshold_loop(seed):
    rng = np.random.default_rng(seed)
    tar, non = random_sets(seed, 30 + 7 * seed, 200)
    assert speechbrain_eer(tar, non) == pytest.approx(speechbrain_reference(tar, non), abs=1e-12)
    tar, non = rng.integers(0, 6, 25).astype(float), rng.integers(-2, 4, 80).astype(float)
    assert speechbrain_eer(tar, non) == pytest.approx(speechbrain_reference(tar, non), abs=1e-12)


@pytest.mark.slow
def test_speechbrain_parity_with_speechbrain_itself():
    import torch
    from speechbrain.utils.metric_stats import EER

    for seed in range(5):
        tar, non = random_sets(seed, 50 + 20 * seed, 500)
        expected, _ = EER(torch.tensor(tar), torch.tensor(non))
        # SpeechBrain divides in float32.
        assert speechbrain_eer(tar, non) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_sweep_matches_sklearn_roc_curve_without_dropping(seed):
    tar, non = random_sets(seed, 40 + 11 * seed, 300)
    labels = np.concatenate([np.ones(tar.size), np.zeros(non.size)])
    fpr, tpr, _ = roc_curve(labels, np.concatenate([tar, non]), drop_intermediate=False)
    fnr = 1 - tpr
    k = np.argmin(np.abs(fnr - fpr))
    assert sweep_eer(tar, non) == pytest.approx((fpr[k] + fnr[k]) / 2, abs=1e-12)


def test_inverted_scorer_per_variant():
    tar, non = np.array([0.0]), np.array([1.0])
    assert rocch_eer(tar, non) == 0.5
    assert sweep_eer(tar, non) == 1.0
    assert sweep_eer(tar, non, fold=True) == 0.0
    assert speechbrain_eer(tar, non) == 1.0
    # Kaldi's loop never runs with a single target.
    assert kaldi_eer(tar, non) == 0.0


def test_perfect_separation_gives_zero_for_every_variant():
    tar, non = np.array([3.0, 4.0, 5.0]), np.array([-1.0, 0.0, 1.0, 2.0])
    assert all(eer(tar, non, variant) == 0.0 for variant in EER_VARIANTS)


@pytest.mark.parametrize("seed", range(4))
def test_rocch_never_exceeds_the_unfolded_sweep_or_one_half(seed):
    tar, non = random_sets(seed, 60, 500, separation=[1.5, 0.0, -0.5, 3.0][seed])
    assert rocch_eer(tar, non) <= 0.5
    assert rocch_eer(tar, non) <= sweep_eer(tar, non) + 1e-12
    assert all(0.0 <= eer(tar, non, variant) <= 1.0 for variant in EER_VARIANTS)


def test_proposition_1_calibrated_gaussian_llrs():
    mu = 3.0
    rng = np.random.default_rng(0)
    tar, non = rng.normal(mu, np.sqrt(2 * mu), 100000), rng.normal(-mu, np.sqrt(2 * mu), 100000)
    expected = norm.cdf(-np.sqrt(mu / 2))
    for variant in EER_VARIANTS:
        assert eer(tar, non, variant) == pytest.approx(expected, abs=0.005)
    assert cllr(tar, non) == pytest.approx(min_cllr(tar, non), abs=0.005)
    assert tar.mean() == pytest.approx(mu, abs=0.05)


def brute_force_min_dcf(tar, non, p_target, c_miss, c_fa):
    thresholds = np.concatenate([[-np.inf], np.unique(np.concatenate([tar, non]))])
    costs = [c_miss * p_target * np.mean(tar <= t) + c_fa * (1 - p_target) * np.mean(non > t) for t in thresholds]
    return min(costs) / min(c_miss * p_target, c_fa * (1 - p_target))


@pytest.mark.parametrize("p_target, c_miss, c_fa", [(0.01, 1, 1), (0.001, 1, 1), (0.5, 1, 1), (0.05, 10, 1)])
def test_min_dcf_matches_brute_force(p_target, c_miss, c_fa):
    rng = np.random.default_rng(4)
    tar, non = random_sets(4, 80, 2000)
    tar = np.concatenate([tar, np.round(rng.normal(1, 1, 20), 1)])
    assert min_dcf(tar, non, p_target, c_miss=c_miss, c_fa=c_fa) == pytest.approx(
        brute_force_min_dcf(tar, non, p_target, c_miss, c_fa), abs=1e-12)
    assert min_dcf(tar, non, p_target, c_miss=c_miss, c_fa=c_fa, normalize=False) <= min(
        c_miss * p_target, c_fa * (1 - p_target))


def test_roc_points_start_by_accepting_everything():
    pmiss, pfa, thresholds = roc_points([1.0, 2.0], [0.0, 1.0])
    np.testing.assert_array_equal(pmiss, [0.0, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(pfa, [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(thresholds, [-np.inf, 0.0, 1.0, 2.0])


@pytest.mark.parametrize("tar, non, message", [
    ([], [0.0], "empty"), ([1.0], [np.nan], "NaN"), ([np.inf], [0.0], "infinite")])
@pytest.mark.parametrize("variant", EER_VARIANTS)
def test_bad_inputs_raise_clear_errors(tar, non, message, variant):
    with pytest.raises(ScoreError, match=message):
        eer(tar, non, variant)


def test_unknown_variant_and_bad_costs():
    with pytest.raises(ScoreError, match="unknown EER variant"):
        eer([1.0], [0.0], "bosaris")
    with pytest.raises(ScoreError, match="p_target"):
        min_dcf([1.0], [0.0], 1.5)
