"""Score calibration: PAV oracle LLRs, and maps learnt on one score set and applied to another.

Brümmer and du Preez 2006; Noé et al. 2022, §5.3. All LLRs are natural-log likelihood ratios,
``ln P(s|target) / P(s|non)``.

Oracle LLRs follow the BOSARIS / ZEBRA reference code (Voice-Privacy-Challenge/zebra):

* scores of both classes are sorted with a *stable* sort of a concatenation; the
  concatenation order decides how tied scores of different classes are ordered
  (``tie_order``): ``"non_tar"`` (``[non, tar]``, the default, used for min Cllr and
  the worst-case disclosure) puts a tied target after the non-target, which favours
  the attacker; ``"tar_non"`` (``[tar, non]``, used by the ROCCH and D_ECE) pools ties;
* PAV runs on the sorted 0/1 labels, optionally with Laplace's rule of succession (one
  pseudo-target and one pseudo-non-target at each end);
* ``llr = logit(posterior) - ln(Nt / Nn)`` with the real counts, plus the monotonicity
  ramp ``k * eps / N`` on the k-th sorted score (``eps = 1e-6``), which keeps the map
  strictly increasing while moving no LLR by more than ``eps``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import isotonic_regression, minimize
from scipy.special import expit, logit

from .scores import ScoreError, as_score_array, check_score_sets

TIE_ORDERS = ("non_tar", "tar_non")
MONOTONICITY_EPSILON = 1e-6
# Linear calibration's prior on the slope of standardised scores: N(0, 10^2). Good ASV systems' calibrated
# slopes are a few to about 15 nats per pooled standard deviation of score, so the prior is weak: it is added
# to the N trials' summed cross-entropy, and moves a fit on a few hundred overlapping trials by well under
# 1 %, but keeps the fit finite when a fold's classes are separable (the unregularised optimum is then at
# infinity, and a steep map applied to other speakers' shifted scores gave LLRs of hundreds of nats).
SLOPE_PRIOR_SD = 10.0
# A cross-validation fit with fewer trials of either class than this is reported as fitted on few trials.
MIN_FIT_TRIALS = 10


def pav(y, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Pool-adjacent-violators: the nondecreasing ``ghat`` minimising ``sum(w * (y - ghat)**2)``.

    Returns ``(ghat, widths)``: ``ghat`` has the length of ``y``; ``widths`` are the
    numbers of elements in the successive blocks. Equal neighbouring blocks are pooled,
    so block values are strictly increasing. O(n).
    """
    y = as_score_array(y, "PAV input")
    if weights is not None:
        weights = as_score_array(weights, "PAV weights")
        if weights.shape != y.shape or np.any(weights <= 0):
            raise ScoreError("PAV weights: need one positive weight per value")
    result = isotonic_regression(y, weights=weights, increasing=True)
    return np.asarray(result.x, dtype=np.float64), np.diff(result.blocks)


def _check_tie_order(tie_order: str) -> None:
    if tie_order not in TIE_ORDERS:
        raise ScoreError(f"tie_order must be one of {TIE_ORDERS}, got {tie_order!r}")


class SortedScores(NamedTuple):
    """Both classes merged in ascending score order: the scores, and True where a target."""

    scores: np.ndarray
    is_target: np.ndarray


class PavBlocks(NamedTuple):
    """PAV of sorted 0/1 target labels, block by block: its trial count and its target count."""

    widths: np.ndarray
    targets: np.ndarray


class SortedTrials:
    """Target and non-target scores sorted once, shared by every metric that needs their merged order.

    The merged label sequence of each tie order, its PAV blocks and the oracle LLRs are
    computed on first use and kept; when no score is tied across the classes both tie orders
    give the same sequence, which is then sorted, pooled and calibrated once. The metric
    functions of :mod:`~voxanon.eval.eer`, :mod:`~voxanon.eval.cllr` and
    :mod:`~voxanon.eval.zebra` accept one of these in place of ``(tar, non)``.
    """

    def __init__(self, tar, non):
        tar, non = check_score_sets(tar, non)
        self.tar = np.sort(tar)
        self.non = np.sort(non)
        self.n_tar, self.n_non = tar.size, non.size
        # "non_tar": a target goes after every non-target <= it; "tar_non": after every one < it.
        non_at_or_below = np.searchsorted(self.non, self.tar, side="right")
        self.tied_across = bool(np.any(self.non[np.maximum(non_at_or_below - 1, 0)] == self.tar))
        non_below = np.searchsorted(self.non, self.tar, side="left") if self.tied_across else non_at_or_below
        self._target_positions = {"non_tar": non_at_or_below, "tar_non": non_below}
        self._cache: dict[tuple, object] = {}

    @property
    def size(self) -> int:
        return self.n_tar + self.n_non

    @property
    def all_scores_equal(self) -> bool:
        """Every trial has the same score: the scores tell nothing apart, whatever order ties are put in."""
        return bool(self.tar[0] == self.tar[-1] == self.non[0] == self.non[-1])

    def cached(self, key: tuple, compute):
        """``compute()``, kept under ``key`` for the next metric that asks (keys name the quantity)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def _order(self, tie_order: str) -> str:
        _check_tie_order(tie_order)
        return tie_order if self.tied_across else "non_tar"

    def is_target(self, tie_order: str = "non_tar") -> np.ndarray:
        """True where the merged ascending sequence holds a target, ties ordered by ``tie_order``."""
        order = self._order(tie_order)

        def compute():
            is_target = np.zeros(self.size, dtype=bool)
            is_target[np.arange(self.n_tar) + self._target_positions[order]] = True
            return is_target
        return self.cached(("is_target", order), compute)

    @property
    def scores(self) -> np.ndarray:
        """Both classes merged in ascending order (the same array for either tie order)."""
        def compute():
            is_target = self.is_target()
            scores = np.empty(self.size, dtype=np.float64)
            scores[is_target] = self.tar
            scores[~is_target] = self.non
            return scores
        return self.cached(("scores",), compute)

    def pav_blocks(self, tie_order: str = "non_tar") -> PavBlocks:
        """The PAV blocks of the label sequence (no Laplace).

        PAV never splits a run of equal labels (the last value of a block is at most its mean,
        the first of the next at least that block's larger mean), so it runs on the runs of
        targets and non-targets, weighted by their lengths: about 2 Nt points instead of Nt + Nn,
        read off the targets' merge positions without building the label sequence.
        """
        order = self._order(tie_order)

        def compute():
            non_before = self._target_positions[order]
            # Targets with the same count of non-targets before them form one run.
            starts = np.flatnonzero(np.diff(non_before, prepend=-1))
            tar_runs = np.diff(np.append(starts, self.n_tar))
            non_runs = np.diff(np.concatenate(([0], non_before[starts], [self.n_non])))
            lengths = np.empty(2 * starts.size + 1, dtype=np.int64)
            lengths[0::2], lengths[1::2] = non_runs, tar_runs
            labels = np.zeros(lengths.size)
            labels[1::2] = 1.0
            if lengths[0] == 0:
                lengths, labels = lengths[1:], labels[1:]
            if lengths[-1] == 0:
                lengths, labels = lengths[:-1], labels[:-1]
            result = isotonic_regression(labels, weights=lengths.astype(np.float64), increasing=True)
            block_starts = np.asarray(result.blocks[:-1])
            widths = np.add.reduceat(lengths, block_starts)
            targets = np.add.reduceat(lengths * labels.astype(np.int64), block_starts)
            return PavBlocks(widths, targets)
        return self.cached(("pav", order), compute)

    def block_llrs(self, tie_order: str = "non_tar", *, laplace: bool = False) -> np.ndarray:
        """Oracle LLR of each PAV block (before the monotonicity ramp), natural log.

        With ``laplace`` the pseudo-counts are pooled with the blocks (weighted PAV over the
        blocks, which gives the PAV of the whole smoothed sequence), so no block has an
        infinite LLR.
        """
        order = self._order(tie_order)

        def compute():
            widths, targets = self.pav_blocks(order)
            posterior = targets / widths
            if laplace:
                ends = np.array([1.0, 0.0])
                values = np.concatenate((ends, posterior, ends))
                weights = np.concatenate((np.ones(2), widths.astype(np.float64), np.ones(2)))
                posterior = np.asarray(isotonic_regression(values, weights=weights).x)[2:-2]
            return _llrs_from_posteriors(posterior, self.n_tar, self.n_non)
        return self.cached(("block_llrs", order, laplace), compute)

    def oracle_llr(self, tie_order: str = "non_tar", *, laplace: bool = False,
                   monotonicity_epsilon: float = MONOTONICITY_EPSILON) -> np.ndarray:
        """Oracle LLRs in merged order, equal to ``sorted_optimal_llr(self.is_target(tie_order), ...)``."""
        llrs = np.repeat(self.block_llrs(tie_order, laplace=laplace), self.pav_blocks(tie_order).widths)
        if monotonicity_epsilon:
            llrs += np.arange(self.size) * monotonicity_epsilon / self.size
        return llrs


def sorted_trials(tar, non=None) -> SortedTrials:
    """``tar`` itself when it is a :class:`SortedTrials` (and ``non`` is None), else both sets sorted."""
    if isinstance(tar, SortedTrials):
        if non is not None:
            raise ScoreError("give either a SortedTrials or the target and non-target scores, not both")
        return tar
    if non is None:
        raise ScoreError("non-target scores missing")
    return SortedTrials(tar, non)


def sort_scores(tar, non=None, tie_order: str = "non_tar") -> SortedScores:
    """Merge validated ``tar`` and ``non`` in ascending order, ties ordered by ``tie_order``.

    Equivalent to a stable argsort of the concatenation named by ``tie_order``, but
    sorting each class separately and merging is several times faster, and metrics
    that only need the label sequence never need the permutation.
    """
    trials = sorted_trials(tar, non)
    return SortedScores(trials.scores, trials.is_target(tie_order))


def _posteriors(is_target_sorted: np.ndarray, laplace: bool) -> np.ndarray:
    labels = is_target_sorted.astype(np.float64)
    if laplace:
        labels = np.concatenate(([1.0, 0.0], labels, [1.0, 0.0]))
    posterior, _ = pav(labels)
    return posterior[2:-2] if laplace else posterior


def _llrs_from_posteriors(posterior: np.ndarray, n_tar: int, n_non: int) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return logit(posterior) - np.log(n_tar / n_non)


def sorted_optimal_llr(is_target_sorted: np.ndarray, *, laplace: bool = False,
                       monotonicity_epsilon: float = MONOTONICITY_EPSILON) -> np.ndarray:
    """Oracle LLRs of scores already in ascending order, given only their labels.

    For metrics that do not need the trial order (min Cllr, D_ECE, worst case): pass
    ``sort_scores(tar, non, tie_order).is_target``.
    """
    is_target_sorted = np.asarray(is_target_sorted, dtype=bool)
    n_tar = int(np.count_nonzero(is_target_sorted))
    n = is_target_sorted.size
    if n_tar == 0 or n_tar == n:
        raise ScoreError(f"oracle calibration needs both classes; got {n_tar} target and "
                         f"{n - n_tar} non-target scores")
    llrs = _llrs_from_posteriors(_posteriors(is_target_sorted, laplace), n_tar, n - n_tar)
    return llrs + np.arange(n) * monotonicity_epsilon / n


def optimal_llr(tar, non, laplace: bool = False, *, tie_order: str = "non_tar",
                monotonicity_epsilon: float = MONOTONICITY_EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """Oracle (PAV) LLRs of every trial: ``(tar_llr, non_llr)`` in the input order.

    Without ``laplace`` a lowest block of non-targets only gets -inf (only non-targets
    can) and a highest block of targets only gets +inf; with ``laplace`` every LLR is
    finite. The values are the best monotone score-to-LLR map *for this very set*, i.e.
    an attacker that calibrates on the evaluation data.
    """
    tar, non = check_score_sets(tar, non)
    _check_tie_order(tie_order)
    first, second = (non, tar) if tie_order == "non_tar" else (tar, non)
    order = np.argsort(np.concatenate((first, second)), kind="stable")
    labels = np.concatenate((np.zeros(first.size, dtype=bool), np.ones(second.size, dtype=bool)))
    if tie_order == "tar_non":
        labels = ~labels
    llr_sorted = sorted_optimal_llr(labels[order], laplace=laplace, monotonicity_epsilon=monotonicity_epsilon)
    llrs = np.empty_like(llr_sorted)
    llrs[order] = llr_sorted
    if tie_order == "non_tar":
        return llrs[non.size:], llrs[:non.size]
    return llrs[:tar.size], llrs[tar.size:]


@dataclass(frozen=True)
class LinearCalibration:
    """The affine score-to-LLR map ``llr = slope * score + offset`` (natural log)."""

    slope: float
    offset: float

    def __call__(self, scores) -> np.ndarray:
        return self.slope * as_score_array(scores, "scores to calibrate") + self.offset


def fit_linear_calibration(tar, non, *, prior: float = 0.5, slope_prior_sd: float | None = SLOPE_PRIOR_SD,
                           max_iterations: int = 200) -> LinearCalibration:
    """Logistic-regression calibration: the affine map minimising the cross-entropy at ``prior``.

    The objective is the prior-weighted cross-entropy (C_llr when ``prior`` is 0.5, the
    an assumption: Noé et al. 2022 names only C_llr), so each class weighs ``prior`` / ``1 - prior`` whatever its
    count, plus a Gaussian prior N(0, ``slope_prior_sd``²) on the slope of the standardised
    scores (:data:`SLOPE_PRIOR_SD`), which weighs as one trial among the ``N`` fitted: the
    MAP estimate of ``N`` times the average cross-entropy plus ``slope² / (2 sd²)`` (ridge
    logistic regression). It keeps the map finite when the classes are separable, where
    the unregularised optimum (``slope_prior_sd=None``) is at infinity and the fit stops
    after ``max_iterations`` with a very steep map. Scores are standardised for conditioning.
    """
    tar, non = check_score_sets(tar, non)
    if not 0.0 < prior < 1.0:
        raise ScoreError(f"prior must lie in (0, 1), got {prior}")
    if slope_prior_sd is not None and not slope_prior_sd > 0.0:
        raise ScoreError(f"slope_prior_sd must be positive (or None for no prior), got {slope_prior_sd}")
    pooled = np.concatenate((tar, non))
    centre, scale = pooled.mean(), pooled.std()
    if scale == 0.0:
        raise ScoreError("linear calibration: every score is the same; nothing to fit")
    tar_z, non_z = (tar - centre) / scale, (non - centre) / scale
    prior_log_odds = logit(prior)
    weight_tar, weight_non = prior / tar.size, (1.0 - prior) / non.size
    # The prior's weight against the cross-entropy, which is an average over the trials.
    ridge = 0.0 if slope_prior_sd is None else 1.0 / (slope_prior_sd ** 2 * (tar.size + non.size))

    def objective(params):
        slope, offset = params
        tar_logit = slope * tar_z + offset + prior_log_odds
        non_logit = slope * non_z + offset + prior_log_odds
        value = (weight_tar * np.logaddexp(0.0, -tar_logit).sum() + weight_non * np.logaddexp(0.0, non_logit).sum()
                 + 0.5 * ridge * slope ** 2)
        tar_residual = -weight_tar * expit(-tar_logit)
        non_residual = weight_non * expit(non_logit)
        gradient = np.array([tar_residual @ tar_z + non_residual @ non_z + ridge * slope,
                             tar_residual.sum() + non_residual.sum()])
        return value, gradient

    def hessian(params):
        slope, offset = params
        tar_curv = weight_tar * _logistic_curvature(slope * tar_z + offset + prior_log_odds)
        non_curv = weight_non * _logistic_curvature(slope * non_z + offset + prior_log_odds)
        return np.array([
            [tar_curv @ tar_z ** 2 + non_curv @ non_z ** 2 + ridge, tar_curv @ tar_z + non_curv @ non_z],
            [tar_curv @ tar_z + non_curv @ non_z, tar_curv.sum() + non_curv.sum()]])

    result = minimize(objective, np.array([1.0, 0.0]), jac=True, hess=hessian, method="trust-exact",
                      options={"maxiter": max_iterations, "gtol": 1e-10})
    slope_z, offset_z = result.x
    return LinearCalibration(slope=float(slope_z / scale), offset=float(offset_z - slope_z * centre / scale))


def _logistic_curvature(x: np.ndarray) -> np.ndarray:
    return expit(x) * expit(-x)


@dataclass(frozen=True)
class IsotonicCalibration:
    """A PAV step function from score to LLR (natural log).

    Block ``k`` covers scores from ``lower_scores[k]`` up to (excluding) the next block's
    lowest score; scores below the first block take the first block's LLR.
    """

    lower_scores: np.ndarray
    llrs: np.ndarray

    def __call__(self, scores) -> np.ndarray:
        scores = as_score_array(scores, "scores to calibrate")
        block = np.searchsorted(self.lower_scores, scores, side="right") - 1
        return self.llrs[np.maximum(block, 0)]


def fit_isotonic_calibration(tar, non, *, laplace: bool = True) -> IsotonicCalibration:
    """Learn the PAV score-to-LLR step function on one score set (Noé et al. 2022, §5.3, isotonic).

    Ties are ordered ``[tar, non]``, which pools tied scores into one block, so the map
    is a function of the score. Laplace smoothing (the default, an assumption: the paper does not say)
    keeps every LLR finite. A score in the gap between two blocks takes the lower
    block's LLR, a score above the fitted range the last block's (spec: the nearest
    block at the ends; ASSUMPTION for the gaps, the conservative choice).
    """
    scores, is_target = sort_scores(tar, non, "tar_non")
    n_tar = int(np.count_nonzero(is_target))
    llr_sorted = _llrs_from_posteriors(_posteriors(is_target, laplace), n_tar, is_target.size - n_tar)
    starts = np.concatenate(([0], np.flatnonzero(llr_sorted[1:] != llr_sorted[:-1]) + 1))
    return IsotonicCalibration(lower_scores=scores[starts], llrs=llr_sorted[starts])


class EmpiricalCalibration(NamedTuple):
    """Per posterior bin: its centre, the fraction of targets among its trials, and its trial count."""

    bin_centres: np.ndarray
    target_fraction: np.ndarray
    counts: np.ndarray


def empirical_calibration(tar_llr, non_llr, *, n_bins: int = 20) -> EmpiricalCalibration:
    """Data of the empirical calibration plot (Noé et al. 2022, §3.5).

    Each LLR becomes the posterior ``sigmoid(llr + logit(Nt / N))`` at the empirical
    prior; posteriors are binned on ``n_bins`` equal bins of [0, 1]. For calibrated LLRs
    the target fraction of every bin is close to its centre. Empty bins give NaN.
    """
    tar_llr, non_llr = check_score_sets(tar_llr, non_llr, allow_infinite=True)
    if n_bins < 1:
        raise ScoreError(f"n_bins must be at least 1, got {n_bins}")
    posterior = expit(np.concatenate((tar_llr, non_llr)) + np.log(tar_llr.size / non_llr.size))
    bins = np.minimum((posterior * n_bins).astype(np.int64), n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins)
    targets = np.bincount(bins[:tar_llr.size], minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(counts > 0, targets / counts, np.nan)
    return EmpiricalCalibration((np.arange(n_bins) + 0.5) / n_bins, fraction, counts)


def speaker_disjoint_splits(groups, n_folds: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cross-validation splits in which no trial is scored by a map fitted on trials of its own speakers.

    ``groups`` gives each trial's speakers: shape ``(n,)`` (one id per trial) or ``(n, k)``
    (e.g. enrolment and test speaker). Speakers are dealt into ``n_folds`` folds (fewer when
    there are fewer speakers), in sha256 order of their ids so that the split does not depend
    on the trial order. A trial's fold set is the set of folds of its speakers; each distinct
    fold set F gives one split: ``(scored, fitted)`` index arrays, ``scored`` the trials whose
    fold set is F, ``fitted`` the trials with no speaker in any fold of F.
    """
    import hashlib

    groups = np.asarray(groups, dtype=object)
    if groups.ndim == 1:
        groups = groups[:, None]
    if groups.ndim != 2 or groups.shape[0] == 0 or groups.shape[1] == 0:
        raise ScoreError(f"speaker groups: expected shape (n,) or (n, k) with n > 0, got {groups.shape}")
    if n_folds < 2:
        raise ScoreError(f"cross-validation needs at least 2 folds, got {n_folds}")
    speakers = sorted({str(g) for g in groups.ravel()}, key=lambda s: (hashlib.sha256(s.encode()).hexdigest(), s))
    folds = min(n_folds, len(speakers))
    fold_of = {speaker: index % folds for index, speaker in enumerate(speakers)}
    # One bit per fold: a trial's fold set as an integer mask.
    masks = np.zeros(groups.shape[0], dtype=np.int64)
    for column in groups.T:
        masks |= np.array([1 << fold_of[str(g)] for g in column], dtype=np.int64)
    return [(np.flatnonzero(masks == mask), np.flatnonzero((masks & mask) == 0)) for mask in np.unique(masks)]


class CrossValidatedCalibration(NamedTuple):
    """Speaker-disjoint linear calibration: every trial's LLR (natural log), and how the maps were fitted."""

    llrs: np.ndarray
    splits: int         # maps fitted, one per split of :func:`speaker_disjoint_splits`
    separable: int      # of them, fitted on trials whose classes were separable (no score overlap)
    few_trials: int     # of them, fitted on fewer than MIN_FIT_TRIALS target or non-target trials

    def caveats(self) -> str:
        """What makes the calibrated figure less certain, in words; "" when nothing does."""
        parts = []
        if self.separable:
            parts.append(f"{self.separable} of {self.splits} calibration fits on separable trials "
                         f"(kept finite by the slope prior, sd {SLOPE_PRIOR_SD:g} per standardised score)")
        if self.few_trials:
            parts.append(f"{self.few_trials} of {self.splits} fitted on fewer than {MIN_FIT_TRIALS} target or "
                         "non-target trials")
        return "; ".join(parts)


def cross_validated_linear_calibration(scores, is_target, groups, *, n_folds: int = 5,
                                       prior: float = 0.5) -> CrossValidatedCalibration:
    """LLRs of every trial from linear calibration fitted on other speakers' trials, with the fits' caveats.

    Each split of :func:`speaker_disjoint_splits` fits :func:`fit_linear_calibration` on its
    ``fitted`` trials and applies it to its ``scored`` trials, so no trial is calibrated by a
    map that saw it or any trial of its speakers. Raises :class:`ScoreError` when a split has
    no target or no non-target trial to fit on (too few speakers): no honest figure exists then.
    """
    scores = as_score_array(scores, "scores to calibrate")
    is_target = np.asarray(is_target, dtype=bool)
    if is_target.shape != scores.shape:
        raise ScoreError(f"labels: expected one per score ({scores.size}), got shape {is_target.shape}")
    if len(groups) != scores.size:
        raise ScoreError(f"speaker groups: expected one row per score ({scores.size}), got {len(groups)}")
    llrs = np.empty_like(scores)
    splits = speaker_disjoint_splits(groups, n_folds)
    separable = few_trials = 0
    for scored, fitted in splits:
        tar, non = scores[fitted][is_target[fitted]], scores[fitted][~is_target[fitted]]
        if tar.size == 0 or non.size == 0:
            raise ScoreError(f"speaker-disjoint calibration: {scored.size} trial(s) have no other speakers' "
                             f"{'target' if tar.size == 0 else 'non-target'} trials to fit a map on "
                             "(too few speakers)")
        separable += bool(non.max() < tar.min())
        few_trials += min(tar.size, non.size) < MIN_FIT_TRIALS
        llrs[scored] = np.clip(fit_linear_calibration(tar, non, prior=prior)(scores[scored]),
                               -np.log(tar.size + 1.0), np.log(non.size + 1.0))
    return CrossValidatedCalibration(llrs, len(splits), separable, few_trials)


def cross_validated_linear_llr(scores, is_target, groups, *, n_folds: int = 5, prior: float = 0.5) -> np.ndarray:
    """The LLRs of :func:`cross_validated_linear_calibration`."""
    return cross_validated_linear_calibration(scores, is_target, groups, n_folds=n_folds, prior=prior).llrs
