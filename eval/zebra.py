"""ZEBRA (Zero Evidence Biometric Recognition Assessment): expected and worst-case privacy disclosure.

Nautsch et al. 2020 and Noé et al. 2022 (reference code: ``Voice-Privacy-Challenge/zebra``).

* **D_ECE** (population level, bits): ``integral_0^1 [H(pi) - ECE_min(pi)] dpi`` with pi
  uniform; the attacker's expected loss of uncertainty, averaged over priors. Oracle
  LLRs without Laplace, ties ``[tar, non]`` (the reference code's ROCCH routine).
  0 is perfect privacy, ``1 / (2 ln 2) = 0.7213`` bits complete disclosure.
* **l_w** (individual level, **log10**): ``max |LLR| / ln 10`` over the Laplace-smoothed
  oracle LLRs (ties ``[non, tar]``), and its categorical **tag** 0, A ... F.
* **C_ECE** (adversary calibration, bits): the same integral for a realistic attacker's
  LLRs, calibrated on one run of a stochastic system and applied to another (Noé et al. 2022, §5.3).
* Relative versions against the unprotected (OO) setting (Noé et al. 2022, §7.1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import MONOTONICITY_EPSILON, fit_isotonic_calibration, fit_linear_calibration, sorted_trials
from .cllr import cllr
from .scores import ScoreError, as_score_array, check_score_sets

LN2 = np.log(2.0)
LN10 = np.log(10.0)
MAX_DECE_BITS = 1.0 / (2.0 * LN2)
# Upper end of tag "0" in the reference code: float64 machine epsilon.
ZERO_TAG_LIMIT = 2.22e-16
# Lower bounds (log10 LR) of the tags A ... F, Table 1 of Noé et al. 2022 and Nautsch et al. 2020.
TAG_BOUNDS = ((0.0, "A"), (1.0, "B"), (2.0, "C"), (4.0, "D"), (5.0, "E"), (6.0, "F"))
TAG_CONVENTIONS = ("paper", "zebra")

# Below this |l| the closed form cancels badly; its Taylor series to l^5 is exact to
# ~1e-17 there (a two-term series below 1e-4 is good to ~1e-12).
_SERIES_LIMIT = 1e-2
_SERIES = (1 / 3, -1 / 12, 1 / 180, 1 / 720, -1 / 5040)
_OVERFLOW_LIMIT = 30.0


def z_function(llr) -> np.ndarray:
    """``Z(l) = 1/2 + (l - (e^l - 1)) / (e^l - 1)^2``: a trial's share of the ECE integral.

    Z(-inf) = -inf, Z(0) = 0, Z(+inf) = 1/2. Numerically safe branches: the
    series ``l/3 - l^2/12 + l^3/180 + l^4/720 - l^5/5040`` for |l| < 1e-2, an ``e^-l``
    form above 30, ``expm1`` elsewhere; accurate to ~1e-14 absolute everywhere.
    """
    llr = np.asarray(llr, dtype=np.float64)
    if np.isnan(llr).any():
        raise ScoreError("Z(l): NaN LLR")
    z = np.empty_like(llr)
    small = np.abs(llr) < _SERIES_LIMIT
    large = llr > _OVERFLOW_LIMIT
    middle = ~small & ~large
    z[small] = llr[small] * np.polynomial.polynomial.polyval(llr[small], _SERIES)
    with np.errstate(over="ignore", invalid="ignore"):
        b = np.expm1(llr[middle])
        z[middle] = 0.5 + (llr[middle] - b) / b ** 2
        tail = np.exp(-llr[large])
        z[large] = 0.5 + (llr[large] * tail ** 2 - tail + tail ** 2) / (1.0 - tail) ** 2
    z[np.isposinf(llr)] = 0.5
    return z


def z_function_lr(lr) -> np.ndarray:
    """LR form ``Z_LR(x) = [(x-3)(x-1) + 2 ln x] / [4 (x-1)^2]`` (Nautsch et al. 2020, Eq. 6); ``Z(l) = 2 Z_LR(e^l)``.

    Evaluated as ``[(x-3)/(x-1) + 2 ln x / (x-1)^2] / 4`` so large x cannot overflow; near
    x = 1, where it cancels, through the series of ``Z(ln x) / 2``.
    """
    lr = np.asarray(lr, dtype=np.float64)
    if np.isnan(lr).any() or np.any(lr < 0):
        raise ScoreError("Z_LR(x): likelihood ratios must be non-negative numbers")
    flat = lr.reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_lr = np.log(flat)
        z = ((flat - 3.0) / (flat - 1.0) + 2.0 * log_lr / (flat - 1.0) ** 2) / 4.0
    near_one = np.abs(log_lr) < _SERIES_LIMIT
    z[near_one] = z_function(log_lr[near_one]) / 2.0
    z[np.isposinf(flat)] = 0.25
    z[flat == 0] = -np.inf
    return z.reshape(lr.shape)


def ece_integral(tar_llr, non_llr) -> float:
    """``integral_0^1 [H(pi) - ECE(pi)] dpi`` in bits for LLRs as given (no calibration).

    Closed form ``(<Z(a)>_tar + <Z(-b)>_non) / (2 ln 2)``. On oracle LLRs this is D_ECE;
    on an attacker's own calibrated LLRs it is C_ECE, which can be negative (-inf when a
    target LLR is -inf or a non-target LLR +inf).
    """
    tar_llr, non_llr = check_score_sets(tar_llr, non_llr, allow_infinite=True)
    return float((z_function(tar_llr).mean() + z_function(-non_llr).mean()) / (2.0 * LN2))


def ece_integral_lr(tar_lr, non_lr) -> float:
    """:func:`ece_integral` from likelihood ratios, ``(<Z_LR(a)> + <Z_LR(1/b)>) / ln 2``
    (Nautsch et al. 2020, Eq. 6)."""
    tar_lr, non_lr = check_score_sets(tar_lr, non_lr, allow_infinite=True)
    with np.errstate(divide="ignore"):
        inverse_non = 1.0 / non_lr
    return float((z_function_lr(tar_lr).mean() + z_function_lr(inverse_non).mean()) / LN2)


def expected_disclosure(tar, non=None, *, tie_order: str = "tar_non") -> float:
    """D_ECE in bits: :func:`ece_integral` of the oracle PAV LLRs (no Laplace, ``[tar, non]`` ties
    as the reference code), at least 0.

    The oracle's ECE never exceeds the prior entropy, so D_ECE >= 0; the monotonicity ramp added to its LLRs
    can take some 1e-7 bits off a D_ECE near 0 (scores that tell nothing apart), which would print as a
    negative disclosure: it is clipped to 0.
    """
    trials = sorted_trials(tar, non)
    is_target = trials.is_target(tie_order)
    llrs = trials.oracle_llr(tie_order)
    return max(0.0, ece_integral(llrs[is_target], llrs[~is_target]))


def worst_case_disclosure(tar, non=None, *, tie_order: str = "non_tar") -> float:
    """l_w = max |LLR| / ln 10 over the Laplace-smoothed oracle LLRs: the strongest evidence
    any single trial gives, in log10 (Nautsch et al. 2020, Eq. 7).

    The reference code orders ties ``[non, tar]``, which lets scores tied across classes
    separate them: 4 target and 4 non-target scores all equal give l_w = log10(5) instead
    of ~0. Pass ``tie_order="tar_non"`` for scores with many ties. When every score is the same, no trial
    carries any evidence, whatever the tie order: 0 (tag 0).
    """
    trials = sorted_trials(tar, non)
    if trials.all_scores_equal:
        return 0.0
    llrs = trials.block_llrs(tie_order, laplace=True)
    # The ramped LLRs increase along the sorted trials: the extremes are the first and the last.
    lowest, highest = llrs[0], llrs[-1] + (trials.size - 1) * MONOTONICITY_EPSILON / trials.size
    return float(max(abs(lowest), abs(highest)) / LN10)


def worst_case_from_lr(lrs) -> float:
    """LR form of the worst case, ``max |log10 s|`` over likelihood ratios s (Nautsch et al. 2020, Eq. 8)."""
    lrs = as_score_array(lrs, "likelihood ratios", allow_infinite=True)
    if np.any(lrs < 0):
        raise ScoreError("likelihood ratios must be non-negative")
    with np.errstate(divide="ignore"):
        return float(np.max(np.abs(np.log10(lrs))))


def privacy_tag(worst_case_log10: float, convention: str = "paper") -> str:
    """Categorical tag ``0, A, ..., F`` of a worst-case disclosure (log10).

    ``"paper"``: intervals ``[lo, hi)`` of Table 1 of the two papers, with tag 0 for
    ``l_w <= 2.22e-16`` (the default). ``"zebra"``: the reference code's
    ``(lo, hi]`` intervals, with exact 0 (where that code fails) also tagged 0.
    """
    if convention not in TAG_CONVENTIONS:
        raise ScoreError(f"tag convention must be one of {TAG_CONVENTIONS}, got {convention!r}")
    value = float(worst_case_log10)
    if np.isnan(value) or value < 0:
        raise ScoreError(f"worst-case disclosure must be a number >= 0, got {worst_case_log10}")
    if value <= ZERO_TAG_LIMIT:
        return "0"
    tag = "A"
    for lower, name in TAG_BOUNDS:
        if value >= lower if convention == "paper" else value > lower:
            tag = name
    return tag


def format_zebra_value(value: float) -> str:
    """Reference-code formatting: ``0`` for zero, ``%.e`` below 5e-4, ``%.3f`` otherwise."""
    if value == 0:
        return "0"
    return f"{value:.0e}" if abs(value) < 5e-4 else f"{value:.3f}"


@dataclass(frozen=True)
class ZebraResult:
    """The ZEBRA triple: D_ECE (bits), l_w (log10), tag."""

    dece_bits: float
    worst_case_log10: float
    tag: str

    def __str__(self) -> str:
        return f"({format_zebra_value(self.dece_bits)}, {format_zebra_value(self.worst_case_log10)}, {self.tag})"


def zebra(tar, non=None, *, tag_convention: str = "paper") -> ZebraResult:
    """D_ECE, worst case and tag of a score set (scores need not be calibrated)."""
    trials = sorted_trials(tar, non)
    worst = worst_case_disclosure(trials)
    return ZebraResult(dece_bits=expected_disclosure(trials), worst_case_log10=worst,
                       tag=privacy_tag(worst, tag_convention))


@dataclass(frozen=True)
class CalibrationDistortion:
    """C_ECE (bits) and the Cllr (bits) of the attacker-calibrated LLRs (the legend
    ``[C_ECE; Cllr]`` of Noé et al. 2022)."""

    cece_bits: float
    cllr_bits: float


def calibration_distortion(tar_fit, non_fit, tar_eval, non_eval, *, method: str = "linear",
                           prior: float = 0.5, laplace: bool = True) -> CalibrationDistortion:
    """C_ECE of Noé et al. 2022, §5.3: calibrate run f1's scores with a map learnt on run f0's scores.

    ``method="linear"`` fits logistic regression at ``prior``; ``"isotonic"`` the PAV step
    function (with ``laplace`` smoothing). The calibrated f1 LLRs go through the closed
    form with no further PAV. C_ECE <= 0 means the calibrated attacker is worse off than
    with its prior alone.
    """
    if method == "linear":
        calibration = fit_linear_calibration(tar_fit, non_fit, prior=prior)
    elif method == "isotonic":
        calibration = fit_isotonic_calibration(tar_fit, non_fit, laplace=laplace)
    else:
        raise ScoreError(f"calibration method must be 'linear' or 'isotonic', got {method!r}")
    tar_eval, non_eval = check_score_sets(tar_eval, non_eval)
    tar_llr, non_llr = calibration(tar_eval), calibration(non_eval)
    return CalibrationDistortion(cece_bits=ece_integral(tar_llr, non_llr), cllr_bits=cllr(tar_llr, non_llr))


def dece_deidentification_percent(dece_op: float, dece_oo: float) -> float:
    """``100 * (1 - D_ECE(OP) / D_ECE(OO))`` (Noé et al. 2022, Eq. 17); NaN when D_ECE(OO) = 0."""
    return float("nan") if dece_oo == 0 else 100.0 * (1.0 - dece_op / dece_oo)


def min_cllr_deidentification_percent(min_cllr_op: float, min_cllr_oo: float) -> float:
    """``100 * (Cmin(OP) - Cmin(OO)) / (1 - Cmin(OO))`` (Noé et al. 2022, Eq. 18); NaN when Cmin(OO) = 1."""
    return float("nan") if min_cllr_oo == 1 else 100.0 * (min_cllr_op - min_cllr_oo) / (1.0 - min_cllr_oo)


def dece_gain_db(dece_pp: float, dece_oo: float) -> float:
    """``10 log10(D_ECE(PP) / D_ECE(OO))`` dB (Noé et al. 2022, Eq. 19); NaN when D_ECE(OO) = 0, -inf when
    D_ECE(PP) = 0."""
    if dece_oo == 0:
        return float("nan")
    return float("-inf") if dece_pp == 0 else 10.0 * float(np.log10(dece_pp / dece_oo))


def min_cllr_gain_db(min_cllr_pp: float, min_cllr_oo: float) -> float:
    """``10 log10((1 - Cmin(PP)) / (1 - Cmin(OO)))`` dB (Noé et al. 2022, Eq. 20, with its numerator typo
    corrected); NaN when Cmin(OO) = 1, -inf when Cmin(PP) = 1."""
    if min_cllr_oo == 1:
        return float("nan")
    return float("-inf") if min_cllr_pp == 1 else 10.0 * float(np.log10((1.0 - min_cllr_pp) / (1.0 - min_cllr_oo)))
