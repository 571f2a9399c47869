"""ZEBRA: D_ECE, worst case, tags, LR forms, C_ECE and the relative versions (Nautsch et al. 2020; Noé et al. 2022)."""
import math

import mpmath
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import logit

from voxanon.eval.calibration import optimal_llr
from voxanon.eval.cllr import ece, min_ece, prior_entropy
from voxanon.eval.scores import ScoreError
from voxanon.eval.zebra import (MAX_DECE_BITS, ZebraResult, calibration_distortion, dece_deidentification_percent,
                                dece_gain_db, ece_integral, ece_integral_lr, expected_disclosure, format_zebra_value,
                                min_cllr_deidentification_percent, min_cllr_gain_db, privacy_tag, worst_case_disclosure,
                                worst_case_from_lr, z_function, z_function_lr, zebra)


def quadrature(ece_at):
    """integral_0^1 [H(pi) - ECE(pi)] dpi by adaptive quadrature, ECE given as a function of logit(pi)."""
    value, _ = quad(lambda p: (prior_entropy(logit(p)) - ece_at(logit(p)))[0], 0, 1,
                    epsabs=1e-13, epsrel=1e-12, limit=500)
    return value


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_matches_quadrature_for_any_llrs(seed):
    rng = np.random.default_rng(seed)
    tar, non = rng.normal(1.0, 2.0, 150), rng.normal(-0.5, 1.5, 400)
    assert ece_integral(tar, non) == pytest.approx(quadrature(lambda x: ece(tar, non, x)), abs=1e-8)


@pytest.mark.parametrize("seed", range(3))
def test_dece_matches_quadrature_of_the_minimum_ece(seed):
    rng = np.random.default_rng(10 + seed)
    tar, non = rng.normal(1.5, 1.0, 120), rng.normal(0.0, 1.0, 500)
    tar_llr, non_llr = optimal_llr(tar, non, tie_order="tar_non")
    expected = quadrature(lambda x: ece(tar_llr, non_llr, x))
    assert expected_disclosure(tar, non) == pytest.approx(expected, abs=1e-8)
    assert expected_disclosure(tar, non) == pytest.approx(
        quadrature(lambda x: min_ece(tar, non, x, tie_order="tar_non")), abs=1e-8)


def test_dece_limits():
    assert ece_integral(np.zeros(5), np.zeros(8)) == 0.0
    assert ece_integral([np.inf, np.inf], [-np.inf]) == pytest.approx(1 / (2 * math.log(2)), abs=1e-15)
    assert MAX_DECE_BITS == pytest.approx(0.72135, abs=1e-5)
    assert expected_disclosure([3.0, 4.0], [0.0, 1.0, 2.0]) == pytest.approx(MAX_DECE_BITS, abs=1e-15)
    # Identical score sets: one PAV block, LLRs within the 1e-6 ramp of zero.
    assert abs(expected_disclosure([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])) < 1e-6
    assert ece_integral([-np.inf], [0.0]) == -np.inf


def z_reference(l):
    mpmath.mp.dps = 60
    b = mpmath.expm1(mpmath.mpf(l))
    return float(mpmath.mpf("0.5") + (mpmath.mpf(l) - b) / b ** 2)


@pytest.mark.parametrize("l", [-700.0, -50.0, -1.0, -1e-3, -1.0001e-4, -0.99e-4, -1e-9, 1e-12, 5e-5, 2e-4,
                               0.3, 1.0, 10.0, 29.9, 30.1, 45.0, 400.0])
def test_z_function_accurate_on_every_branch(l):
    assert z_function(l) == pytest.approx(z_reference(l), rel=1e-11, abs=1e-14)


def test_z_function_special_values_and_lr_form():
    np.testing.assert_array_equal(z_function([0.0, np.inf, -np.inf]), [0.0, 0.5, -np.inf])
    assert z_function(0.0).shape == ()
    llrs = np.concatenate([np.linspace(-30, 30, 601), [-1e-5, 1e-5, 1e-3]])
    np.testing.assert_allclose(z_function(llrs), 2 * z_function_lr(np.exp(llrs)), rtol=1e-9, atol=1e-13)
    np.testing.assert_array_equal(z_function_lr([0.0, 1.0, np.inf]), [-np.inf, 0.0, 0.25])
    assert z_function_lr(1e200) == pytest.approx(0.25, abs=1e-12)
    with pytest.raises(ScoreError):
        z_function_lr([-1.0])


@pytest.mark.parametrize("seed", range(3))
def test_dece_lr_form_equals_llr_form(seed):
    rng = np.random.default_rng(seed)
    tar, non = rng.normal(1, 2, 60), rng.normal(-1, 2, 90)
    assert ece_integral_lr(np.exp(tar), np.exp(non)) == pytest.approx(ece_integral(tar, non), abs=1e-12)


def test_worst_case_uses_laplace_llrs_in_log10():
    rng = np.random.default_rng(4)
    tar, non = rng.normal(2, 1, 80), rng.normal(0, 1, 300)
    tar_llr, non_llr = optimal_llr(tar, non, laplace=True)
    expected = np.max(np.abs(np.concatenate([tar_llr, non_llr]))) / np.log(10)
    assert worst_case_disclosure(tar, non) == pytest.approx(expected, abs=1e-14)
    assert worst_case_from_lr(np.exp(np.concatenate([tar_llr, non_llr]))) == pytest.approx(expected, abs=1e-12)
    assert np.isfinite(worst_case_disclosure([5.0, 6.0], [0.0, 1.0]))


def test_tags_paper_convention():
    values = [0, 1e-17, 0.5, 1, 1.999, 2, 3.999, 4, 5, 6, 10]
    expected = ["0", "0", "A", "B", "B", "C", "C", "D", "E", "F", "F"]
    assert [privacy_tag(v) for v in values] == expected


def test_tags_reference_code_convention():
    values = [0, 2e-16, 1e-3, 1, 1.5, 2, 4, 5, 6, 6.1]
    expected = ["0", "0", "A", "A", "B", "B", "C", "D", "E", "F"]
    assert [privacy_tag(v, "zebra") for v in values] == expected


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_tags_refuse_negative_or_nan(bad):
    with pytest.raises(ScoreError):
        privacy_tag(bad)
    with pytest.raises(ScoreError, match="convention"):
        privacy_tag(1.0, "bosaris")


def test_zero_evidence_data():
    # Continuous but identically distributed scores: D_ECE close to 0 and tag A at most.
    rng = np.random.default_rng(0)
    result = zebra(rng.normal(size=2000), rng.normal(size=2000))
    assert result.dece_bits < 0.01 and result.tag in ("A", "B")
    # Equal class sizes, every score tied, ties pooled: only the ramp is left, tag A.
    assert abs(expected_disclosure(np.zeros(4), np.zeros(4))) < 1e-6
    pooled = worst_case_disclosure(np.zeros(4), np.zeros(4), tie_order="tar_non")
    assert 0 < pooled < 1e-6 and privacy_tag(pooled) == "A"
    # The reference [non, tar] order separates the tied classes: Laplace blocks 1/6 and 5/6.
    assert worst_case_disclosure(np.zeros(4), np.zeros(4)) == pytest.approx(np.log10(5), abs=1e-6)


def test_zebra_formatting():
    assert format_zebra_value(0.0) == "0"
    assert format_zebra_value(3e-05) == "3e-05"
    assert format_zebra_value(2e-4) == "2e-04"
    assert format_zebra_value(0.58412) == "0.584"
    assert str(ZebraResult(0.584, 3.979, "C")) == "(0.584, 3.979, C)"
    assert str(ZebraResult(3e-05, 2e-4, "A")) == "(3e-05, 2e-04, A)"


# Noé et al. 2022, Table 2: OO (first tuple) and OP D_ECE per set; Table 3: the D_ECE^(OP/OO) column in %.
TABLE_2_AND_3 = {
    "libri_test_trials_f": (0.584, {"B1": (0.004, 99.32), "B2": (0.221, 62.16), "B2r": (0.236, 59.59)}),
    "libri_test_trials_m": (0.690, {"B1": (0.001, 99.86), "B2": (0.354, 48.70), "B2r": (0.224, 67.54)}),
    "vctk_test_trials_f": (0.594, {"B1": (0.001, 99.83), "B2": (0.141, 76.26), "B2r": (0.090, 84.85)}),
    "vctk_test_trials_m": (0.667, {"B1": (3e-05, 100.00), "B2": (0.196, 70.61), "B2r": (0.162, 75.71)}),
    "vctk_test_trials_f_c": (0.653, {"B1": (0.004, 99.39), "B2": (0.132, 79.79), "B2r": (0.153, 76.57)}),
    "vctk_test_trials_m_c": (0.694, {"B1": (2e-04, 99.97), "B2": (0.199, 71.33), "B2r": (0.218, 68.59)}),
}


def test_table_3_dece_column_from_table_2():
    cells = 0
    for dece_oo, systems in TABLE_2_AND_3.values():
        for dece_op, printed in systems.values():
            assert round(dece_deidentification_percent(dece_op, dece_oo), 2) == pytest.approx(printed, abs=1e-9)
            cells += 1
    assert cells == 18


def test_thesis_dece_drops_relative_to_original_speech():
    original = 0.578
    drops = [dece_deidentification_percent(value, original) for value in (0.128, 0.198, 0.200, 0.233)]
    assert [round(d) for d in drops] == [78, 66, 65, 60]


def test_relative_versions_and_their_edge_cases():
    assert min_cllr_deidentification_percent(0.99, 0.18) == pytest.approx(100 * 0.81 / 0.82)
    assert dece_gain_db(0.0584, 0.584) == pytest.approx(-10.0)
    assert min_cllr_gain_db(0.5, 0.0) == pytest.approx(10 * math.log10(0.5))
    assert math.isnan(dece_deidentification_percent(0.1, 0.0))
    assert math.isnan(min_cllr_deidentification_percent(0.5, 1.0))
    assert math.isnan(dece_gain_db(0.1, 0.0)) and dece_gain_db(0.0, 0.5) == -math.inf
    assert math.isnan(min_cllr_gain_db(0.5, 1.0)) and min_cllr_gain_db(1.0, 0.2) == -math.inf
    # De-identification may be negative when protection makes things worse: not clipped.
    assert dece_deidentification_percent(0.7, 0.5) < 0


def test_calibration_distortion():
    rng = np.random.default_rng(1)
    tar, non = rng.normal(1.0, 1.0, 400), rng.normal(-0.5, 1.2, 1600)
    oracle = expected_disclosure(tar, non)
    same_run = calibration_distortion(tar, non, tar, non, method="isotonic", laplace=False)
    assert same_run.cece_bits == pytest.approx(oracle, abs=1e-6)
    linear = calibration_distortion(tar, non, tar, non, method="linear")
    assert linear.cece_bits <= oracle
    assert linear.cllr_bits > 0
    # A second run whose scores moved the other way: the attacker's map now misleads it.
    misled = calibration_distortion(tar, non, -tar, -non, method="linear")
    assert misled.cece_bits < 0
    with pytest.raises(ScoreError, match="method"):
        calibration_distortion(tar, non, tar, non, method="spline")
