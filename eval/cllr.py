"""Log-likelihood-ratio cost (Cllr), its minimum, and the empirical cross-entropy (ECE) over priors.

Brümmer and du Preez 2006; Noé et al. 2022, §3. Inputs named ``*_llr`` are natural-log LLRs, used as given (±inf
allowed); inputs named ``tar`` / ``non`` are raw scores, calibrated by PAV internally.
Every result is in **bits**. Priors are passed as prior log-odds ``logit(pi)`` (natural
log), where ``pi`` is the prior of the target class (positive LLRs).

* ``cllr``: the cross-entropy at pi = 0.5, normalised so that LLRs of 0 give 1 bit.
* ``min_cllr``: Cllr of the PAV oracle LLRs (no Laplace, ``[non, tar]`` ties, as Voice-Privacy-Challenge/zebra); the
  discrimination part, in [0, 1]. ``cllr - min_cllr`` is the calibration loss.
* ``ece``: actual ECE(pi) of LLRs; ``min_ece``: ECE of the oracle LLRs (never above the
  prior entropy); ``prior_entropy``: H(pi), the ECE of zero evidence.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

from .calibration import (MONOTONICITY_EPSILON, CrossValidatedCalibration, cross_validated_linear_calibration,
                          sorted_trials)
from .scores import ScoreError, as_score_array, check_score_sets

LN2 = np.log(2.0)
# The grid of the ZEBRA reference code (Voice-Privacy-Challenge/zebra): prior log-odds -10 ... 10 in 201 steps.
PRIOR_LOG_ODDS_GRID = np.linspace(-10.0, 10.0, 201)


def softplus(x: np.ndarray) -> np.ndarray:
    """``ln(1 + e^x)``, element-wise (±inf allowed).

    The formula of NumPy's ``logaddexp(0, x)``, written with ``exp`` and ``log1p``, which NumPy
    vectorises (``logaddexp`` it does not): several times faster, equal to a few ulp.
    """
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def cllr(tar_llr, non_llr) -> float:
    """``( <-ln sigma(a)>_tar + <-ln sigma(-b)>_non ) / (2 ln 2)`` bits.

    +inf when a target LLR is -inf or a non-target LLR is +inf, or when finite LLRs near the float64 limit
    (±1e308) make it exceed the largest float64. Above 1 the LLRs do worse than no evidence at all (badly
    calibrated).
    """
    tar_llr, non_llr = check_score_sets(tar_llr, non_llr, allow_infinite=True)
    tar_cost, non_cost = _mean_cost(softplus(-tar_llr)), _mean_cost(softplus(non_llr))
    with np.errstate(over="ignore"):
        value = (tar_cost + non_cost) / (2.0 * LN2)
        if np.isinf(value) and np.isfinite(tar_cost) and np.isfinite(non_cost):
            value = tar_cost / (2.0 * LN2) + non_cost / (2.0 * LN2)
    return float(value)


def _mean_cost(costs: np.ndarray) -> float:
    """The mean of non-negative costs; where finite costs near the float64 limit overflow their sum, the sum of
    each over their number instead (which cannot: each term is at most the largest cost over n). Only then, so
    that every other result keeps its bits."""
    with np.errstate(over="ignore"):
        mean = costs.mean()
    if np.isinf(mean) and np.isfinite(costs).all():
        mean = (costs / costs.size).sum()
    return float(mean)


def min_cllr(tar, non=None, *, tie_order: str = "non_tar",
             monotonicity_epsilon: float = MONOTONICITY_EPSILON) -> float:
    """Cllr after oracle PAV calibration, in [0, 1] bits.

    The default keeps the reference code's 1e-6/N monotonicity ramp, which moves the
    value by at most ~1e-8 on small sets; ``monotonicity_epsilon=0`` gives the pure PAV
    optimum that BOSARIS / llreval report. The reference ``[non, tar]`` tie order lets
    scores tied across classes separate them (a constant scorer gets 0 instead of 1);
    ``tie_order="tar_non"`` pools ties, as llreval does, for heavily tied scores. When every score is the same,
    no order of the ties can be read as discrimination: 1 bit, whatever ``tie_order`` (the reference's order
    would give 0, which reads as perfect).
    Takes ``(tar, non)`` or one :class:`~voxanon.eval.calibration.SortedTrials`.
    """
    trials = sorted_trials(tar, non)
    if trials.all_scores_equal:
        return 1.0  # the Cllr of LLRs that are all 0: PAV's one block, pooled
    if not monotonicity_epsilon:
        # One LLR per PAV block: weigh each block's costs by its target / non-target counts.
        widths, targets = trials.pav_blocks(tie_order)
        llrs = trials.block_llrs(tie_order)
        has_tar, has_non = targets > 0, widths > targets
        tar_cost = targets[has_tar] @ softplus(-llrs[has_tar]) / trials.n_tar
        non_cost = (widths - targets)[has_non] @ softplus(llrs[has_non]) / trials.n_non
        return float((tar_cost + non_cost) / (2.0 * LN2))
    is_target = trials.is_target(tie_order)
    llrs = trials.oracle_llr(tie_order, monotonicity_epsilon=monotonicity_epsilon)
    return cllr(llrs[is_target], llrs[~is_target])


def _prior_log_odds(prior_log_odds) -> np.ndarray:
    return as_score_array(np.atleast_1d(prior_log_odds), "prior log-odds")


def prior_entropy(prior_log_odds=PRIOR_LOG_ODDS_GRID) -> np.ndarray:
    """H(pi) in bits at each prior log-odds: the ECE of LLRs that are all 0 (perfect privacy)."""
    plo = _prior_log_odds(prior_log_odds)
    prior = expit(plo)
    return (prior * np.logaddexp(0.0, -plo) + (1.0 - prior) * np.logaddexp(0.0, plo)) / LN2


def ece(tar_llr, non_llr, prior_log_odds=PRIOR_LOG_ODDS_GRID) -> np.ndarray:
    """Actual ECE in bits at each prior log-odds (Noé et al. 2022, Eq. 11-12).

    ``pi <-log2 sigma(a + logit pi)>_tar + (1 - pi) <-log2 sigma(-b - logit pi)>_non``;
    equals ``cllr`` at prior log-odds 0.
    """
    tar_llr, non_llr = check_score_sets(tar_llr, non_llr, allow_infinite=True)
    plo = _prior_log_odds(prior_log_odds)
    tar_cost = _mean_softplus(-tar_llr, -plo)
    non_cost = _mean_softplus(non_llr, plo)
    prior = expit(plo)
    return (prior * tar_cost + (1.0 - prior) * non_cost) / LN2


def _mean_softplus(values: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """``mean(ln(1 + exp(values + s)))`` for each shift s.

    Repeated values are evaluated once: oracle LLRs without the ramp take only as many
    values as PAV blocks, which makes a 201-point profile of 10^6 trials cheap.
    """
    unique, counts = np.unique(values, return_counts=True)
    return np.array([counts @ softplus(unique + shift) for shift in shifts]) / values.size


def min_ece(tar, non=None, prior_log_odds=PRIOR_LOG_ODDS_GRID, *, tie_order: str = "non_tar",
            monotonicity_epsilon: float = MONOTONICITY_EPSILON) -> np.ndarray:
    """ECE of the oracle PAV LLRs (no Laplace): the attacker's best profile, below H(pi).

    Uses the same oracle LLRs as :func:`min_cllr`, so ``min_ece`` at 0 equals ``min_cllr``.
    With ``monotonicity_epsilon=0`` the LLRs take one value per PAV block and the
    profile of a large set costs next to nothing (the ramp is far below plot resolution).
    """
    trials = sorted_trials(tar, non)
    is_target = trials.is_target(tie_order)
    llrs = trials.oracle_llr(tie_order, monotonicity_epsilon=monotonicity_epsilon)
    return ece(llrs[is_target], llrs[~is_target], prior_log_odds)


def ece_from_lr(tar_lr, non_lr, prior_log_odds=PRIOR_LOG_ODDS_GRID) -> np.ndarray:
    """ECE in bits from likelihood ratios (not logs), Nautsch et al. 2020, Eq. 4.

    ``pi/|A| sum log2(1 + (1-pi)/(a pi)) + (1-pi)/|B| sum log2(1 + b pi/(1-pi))``;
    LRs must be >= 0 (0 and +inf allowed).
    """
    tar_lr, non_lr = check_score_sets(tar_lr, non_lr, allow_infinite=True)
    if np.any(tar_lr < 0) or np.any(non_lr < 0):
        raise ScoreError("likelihood ratios must be non-negative")
    plo = _prior_log_odds(prior_log_odds)
    prior = expit(plo)
    odds = np.exp(plo)
    with np.errstate(divide="ignore"):
        tar_cost = np.array([np.log2(1.0 + 1.0 / (tar_lr * o)).mean() for o in odds])
    non_cost = np.array([np.log2(1.0 + non_lr * o).mean() for o in odds])
    return prior * tar_cost + (1.0 - prior) * non_cost


def calibrated_cllr(scores, is_target, groups, *, n_folds: int = 5) -> float:
    """Cllr in bits of scores after linear calibration cross-validated over speakers.

    For scores that are not LLRs (cosine similarities), :func:`cllr` of the raw scores says
    little (near 1 bit whatever the discrimination); this is the Cllr an attacker reaches
    with an affine map learnt on *other* speakers' trials (see
    :func:`~voxanon.eval.calibration.cross_validated_linear_calibration`; ``groups`` gives each
    trial's speakers, e.g. its enrolment and test speaker). Never below :func:`min_cllr`
    in expectation; ``calibrated_cllr - min_cllr`` is the calibration loss left.
    """
    return calibrated_cllr_with_caveats(scores, is_target, groups, n_folds=n_folds)[0]


def calibrated_cllr_with_caveats(scores, is_target, groups, *, n_folds: int = 5
                                 ) -> tuple[float, CrossValidatedCalibration]:
    """:func:`calibrated_cllr` and the calibration it came from (its ``caveats()``: separable or small fits)."""
    is_target = np.asarray(is_target, dtype=bool)
    calibration = cross_validated_linear_calibration(scores, is_target, groups, n_folds=n_folds)
    return cllr(calibration.llrs[is_target], calibration.llrs[~is_target]), calibration
