"""Cllr after linear calibration cross-validated over speakers (issue 15 item 7)."""
import numpy as np
import pytest

from voxanon.eval.calibration import (cross_validated_linear_calibration, cross_validated_linear_llr,
                                      speaker_disjoint_splits)
from voxanon.eval.cllr import calibrated_cllr, calibrated_cllr_with_caveats, cllr, min_cllr
from voxanon.eval.scores import ScoreError


def gaussian_llr_trials(seed, n_speakers=40, tests_per_speaker=8, mu=3.0):
    """Calibrated LLRs: targets N(mu, 2 mu), non-targets N(-mu, 2 mu); every enrolled speaker
    against every test utterance, groups (enrolment speaker, test speaker)."""
    rng = np.random.default_rng(seed)
    test_speakers = np.repeat(np.arange(n_speakers), tests_per_speaker)
    enrol, test = np.meshgrid(np.arange(n_speakers), test_speakers, indexing="ij")
    enrol, test = enrol.ravel(), test.ravel()
    is_target = enrol == test
    llr = np.where(is_target, rng.normal(mu, np.sqrt(2 * mu), enrol.size), rng.normal(-mu, np.sqrt(2 * mu), enrol.size))
    groups = np.stack([[f"spk{s}" for s in enrol], [f"spk{s}" for s in test]], axis=1)
    return llr, is_target, groups


@pytest.mark.parametrize("seed", range(3))
def test_cross_validated_calibration_recovers_the_true_cllr_of_a_scaled_scorer(seed):
    llr, is_target, groups = gaussian_llr_trials(seed)
    true_cllr = cllr(llr[is_target], llr[~is_target])
    scores = 0.05 * llr + 0.6    # a cosine-like scorer: a known affine map of calibrated LLRs
    raw = cllr(scores[is_target], scores[~is_target])
    calibrated = calibrated_cllr(scores, is_target, groups)
    assert abs(raw - true_cllr) > 0.3
    assert calibrated == pytest.approx(true_cllr, abs=0.03)
    # The affine map changes no ranking: min Cllr is that of the LLRs, and nothing beats it.
    assert min_cllr(scores[is_target], scores[~is_target]) <= calibrated


def test_no_trial_is_scored_by_a_map_fitted_on_its_own_speakers():
    _, _, groups = gaussian_llr_trials(0, n_speakers=11)
    splits = speaker_disjoint_splits(groups, n_folds=4)
    scored_all = np.concatenate([scored for scored, _ in splits])
    assert np.array_equal(np.sort(scored_all), np.arange(len(groups)))    # every trial scored once
    for scored, fitted in splits:
        assert fitted.size > 0
        assert not set(groups[scored].ravel()) & set(groups[fitted].ravel())


def test_calibration_does_not_use_the_scored_trials():
    """A trial whose score alone is moved far away changes no other fold's LLRs."""
    llr, is_target, groups = gaussian_llr_trials(1, n_speakers=12)
    moved = llr.copy()
    moved[0] += 1000.0
    first = cross_validated_linear_llr(llr, is_target, groups)
    second = cross_validated_linear_llr(moved, is_target, groups)
    own_split = next(scored for scored, _ in speaker_disjoint_splits(groups) if 0 in scored)
    unchanged = np.setdiff1d(np.arange(llr.size), own_split)
    assert np.array_equal(first[own_split[own_split != 0]], second[own_split[own_split != 0]])
    assert not np.allclose(first[unchanged], second[unchanged])   # the moved trial does fit other folds' maps


def few_speakers_strong_scorer(seed=9, n_speakers=5, tests_per_speaker=7):
    """A VoicePrivacy-sized sex set (5 speakers, 35 test utterances, 175 trials) scored by a strong cosine-like
    scorer whose level shifts from speaker to speaker: most training folds of the speaker cross-validation are
    separable, and another fold's speakers sit elsewhere on the score axis."""
    rng = np.random.default_rng(seed)
    speaker_shift = rng.normal(0, 0.08, n_speakers)
    pair_shift = rng.normal(0, 0.06, (n_speakers, n_speakers))
    enrol, test = np.meshgrid(np.arange(n_speakers), np.repeat(np.arange(n_speakers), tests_per_speaker),
                              indexing="ij")
    enrol, test = enrol.ravel(), test.ravel()
    is_target = enrol == test
    scores = (0.25 + 0.35 * is_target + speaker_shift[enrol] + speaker_shift[test] + pair_shift[enrol, test]
              + rng.normal(0, 0.05, enrol.size))
    groups = np.stack([[f"spk{s}" for s in enrol], [f"spk{s}" for s in test]], axis=1)
    return scores, is_target, groups


def test_separable_folds_keep_the_calibrated_cllr_sane():
    """With few speakers and a strong scorer the unregularised fit of a separable fold was a very
    steep map, and other speakers' shifted scores got LLRs of hundreds of nats of the wrong sign: 88.8 bits here
    (98.8 on real speech). The slope prior and the LLR bound keep it near the discrimination it measures."""
    scores, is_target, groups = few_speakers_strong_scorer()
    value, calibration = calibrated_cllr_with_caveats(scores, is_target, groups)
    assert value <= 1.5
    assert min_cllr(scores[is_target], scores[~is_target]) <= value
    assert calibration.separable > 0 and "separable" in calibration.caveats()
    assert value == calibrated_cllr(scores, is_target, groups)


def test_calibrated_llrs_stay_within_what_their_fitting_trials_support():
    """Each trial's LLR lies in [-ln(Nt + 1), ln(Nn + 1)] for the Nt target and Nn non-target trials its map was
    fitted on: the extreme LLRs of PAV with Laplace's rule of succession on those trials."""
    scores, is_target, groups = few_speakers_strong_scorer()
    llrs = cross_validated_linear_llr(scores, is_target, groups)
    at_bound = 0
    for scored, fitted in speaker_disjoint_splits(groups):
        lowest, highest = -np.log(is_target[fitted].sum() + 1), np.log((~is_target[fitted]).sum() + 1)
        assert np.all(llrs[scored] >= lowest) and np.all(llrs[scored] <= highest)
        at_bound += np.count_nonzero((llrs[scored] == lowest) | (llrs[scored] == highest))
    assert at_bound > 0     # the bound is what keeps this case sane


def test_well_posed_calibration_reports_no_caveat():
    llr, is_target, groups = gaussian_llr_trials(0)
    calibration = cross_validated_linear_calibration(0.05 * llr + 0.6, is_target, groups)
    assert (calibration.separable, calibration.few_trials, calibration.caveats()) == (0, 0, "")
    assert calibration.splits == len(speaker_disjoint_splits(groups))


def test_too_few_speakers_is_a_clear_error():
    scores = np.array([0.9, 0.1, 0.2, 0.8])
    with pytest.raises(ScoreError, match="too few speakers"):
        calibrated_cllr(scores, [True, False, False, True], [("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")])
    with pytest.raises(ScoreError, match="one row per score"):
        calibrated_cllr(scores, [True, False, False, True], ["a", "b"])


def test_evaluation_labels_raw_cllr_uncalibrated_unless_the_scorer_gives_llrs():
    from voxanon.eval.tables import markdown_tables_by_condition
    from voxanon.pipeline.evaluation.evaluate import results_from_metrics

    metrics = {"eer_rocch": 10.0, "cllr": 0.99, "min_cllr": 0.4, "linkability": 0.3, "zebra_dece": 0.2,
               "zebra_worst_case": 1.0, "zebra_tag": "B", "n_target": 10, "n_nontarget": 90}
    cosine = {(r.metric, r.variant): r.value for r in
              results_from_metrics("s", "b2", "o-a", metrics, ["rocch"], scorer="cosine", calibrated_cllr=0.55)}
    assert cosine[("cllr", "uncalibrated cosine")] == 0.99 and cosine[("cllr_calibrated", "")] == 0.55
    plda = {(r.metric, r.variant) for r in results_from_metrics("s", "b2", "o-a", metrics, ["rocch"], scorer="plda")}
    assert ("cllr", "") in plda and not any(metric == "cllr_calibrated" for metric, _ in plda)
    table = markdown_tables_by_condition(
        results_from_metrics("s", "b2", "o-a", metrics, ["rocch"], scorer="cosine", calibrated_cllr=0.55))
    assert "Cllr uncalibrated cosine (bits)" in table and "Cllr speaker-CV calibrated (bits)" in table
    assert "not LLRs (uncalibrated)" in table and "cross-validated over speakers" in table
    noted = markdown_tables_by_condition(results_from_metrics(
        "libri_f", "b2", "a-a", metrics, ["rocch"], calibrated_cllr=1.2,
        calibrated_cllr_note="3 of 10 calibration fits on separable trials"))
    assert "libri_f, b2, a-a, Cllr speaker-CV calibrated: 3 of 10 calibration fits on separable trials." in noted


def test_scored_trial_speakers_follow_the_scored_trials():
    from voxanon.data_prep.corpus import Trial
    from voxanon.pipeline.evaluation.scoring import cosine_trial_scores, scored_trial_speakers

    trials = [Trial("a", "a1", True), Trial("a", "b1", False), Trial("c", "a1", False), Trial("b", "b1", True),
              Trial("b", "gone", False)]
    utt2spk = {"a1": "a", "b1": "b", "gone": "b"}
    rng = np.random.default_rng(0)
    enrolment = {s: rng.normal(size=4) for s in "ab"}
    tests = {u: rng.normal(size=4) for u in ("a1", "b1")}
    tar, non, left_out = cosine_trial_scores(enrolment, tests, trials)
    tar_groups, non_groups = scored_trial_speakers(trials, set(enrolment), set(tests), utt2spk)
    assert (len(tar), len(non), left_out) == (2, 1, 2)
    assert tar_groups == [("a", "a"), ("b", "b")] and non_groups == [("a", "b")]
