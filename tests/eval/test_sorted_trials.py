"""One sort and one PAV shared by the metrics (SortedTrials) give the values of the one-set calls."""
import numpy as np
import pytest
from llreval.quick_eval import tarnon_2_eer_cllr_mincllr

from voxanon.eval.calibration import SortedTrials, pav, sorted_optimal_llr
from voxanon.eval.cllr import min_cllr, min_ece
from voxanon.eval.eer import kaldi_eer, roc_convex_hull, rocch_eer, speechbrain_eer, sweep_eer
from voxanon.eval.scores import ScoreError
from voxanon.eval.summary import compute_metrics, eer_cllr_min_cllr
from voxanon.eval.zebra import expected_disclosure, worst_case_disclosure


def score_sets(seed, decimals=None):
    rng = np.random.default_rng(seed)
    tar, non = rng.normal(1.5, 1.0, 60), rng.normal(0.0, 1.3, 400)
    return (np.round(tar, decimals), np.round(non, decimals)) if decimals is not None else (tar, non)


@pytest.mark.parametrize("seed, decimals", [(0, None), (1, 1), (2, 0)])
def test_pav_on_label_runs_equals_pav_of_the_whole_sequence(seed, decimals):
    trials = SortedTrials(*score_sets(seed, decimals))
    for order in ("non_tar", "tar_non"):
        labels = trials.is_target(order)
        _, widths = pav(labels.astype(np.float64))
        blocks = trials.pav_blocks(order)
        assert np.array_equal(blocks.widths, widths)
        assert np.array_equal(blocks.targets, np.add.reduceat(labels.astype(np.int64), np.cumsum(widths) - widths))
        for laplace in (False, True):
            assert np.allclose(trials.oracle_llr(order, laplace=laplace), sorted_optimal_llr(labels, laplace=laplace),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed, decimals", [(3, None), (4, 1)])
def test_shared_sort_gives_the_values_of_separate_calls(seed, decimals):
    tar, non = score_sets(seed, decimals)
    trials = SortedTrials(tar, non)
    assert trials.tied_across == (decimals is not None)
    assert (trials.is_target("non_tar") is trials.is_target("tar_non")) == (not trials.tied_across)
    for function in (rocch_eer, kaldi_eer, speechbrain_eer, sweep_eer, expected_disclosure, worst_case_disclosure):
        assert function(trials) == function(tar.copy(), non.copy())
    assert min_cllr(trials) == min_cllr(tar, non)
    assert np.array_equal(min_ece(trials), min_ece(tar, non))
    assert all(np.array_equal(a, b) for a, b in zip(roc_convex_hull(trials), roc_convex_hull(tar, non)))


@pytest.mark.parametrize("seed", range(4))
def test_one_call_path_matches_llreval(seed):
    tar, non = score_sets(seed, 2 if seed % 2 else None)
    expected = tarnon_2_eer_cllr_mincllr(tar, non)
    assert eer_cllr_min_cllr(tar, non) == pytest.approx(expected, abs=1e-9)
    metrics = compute_metrics(tar, non)
    assert metrics["eer_rocch"] == pytest.approx(100 * expected[0], abs=1e-7)
    if not SortedTrials(tar, non).tied_across:   # the JSON's min Cllr orders ties [non, tar], llreval pools them
        assert metrics["min_cllr"] == pytest.approx(expected[2], abs=1e-7)


def test_sorted_trials_arguments():
    trials = SortedTrials([1.0, 2.0], [0.0])
    with pytest.raises(ScoreError, match="not both"):
        rocch_eer(trials, [0.0])
    with pytest.raises(ScoreError, match="non-target scores missing"):
        rocch_eer([1.0, 2.0])
