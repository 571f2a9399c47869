"""Equal error rates, in every variant the speech-privacy ecosystem uses, and minDCF.

The EER variants differ by up to a few tenths of a point on anonymised trials, so each is
named and none is "the" EER. All return a **fraction in [0, 1]** (multiply by 100 for %).
Scores are any real numbers with "higher means more target"; they need not be LLRs. Every
function takes ``(tar, non)`` or one :class:`~voxanon.eval.calibration.SortedTrials`, which
sorts and pools once for all of them.

* ``rocch``: ROCCH-EER, where the ROC convex hull crosses Pmiss = Pfa (BOSARIS, ZEBRA,
  PYLLR, llreval, the VoicePrivacy ``ROCCH-EER`` line). Never above 0.5.
* ``kaldi``: Kaldi ``compute-eer`` (VoicePrivacy 2020/2022 ``EER`` line), including its
  float32 comparisons and its integer truncation.
* ``speechbrain``: ``speechbrain.utils.metric_stats.EER`` (VoicePrivacy 2024/2026): the
  threshold (a score or a midpoint between scores) minimising |FAR - FRR|, first
  in ascending order, EER = (FAR + FRR) / 2.
* ``sweep``: the simple threshold sweep of Champion et al. 2021 (sklearn ``roc_curve`` without
  dropping points; their "EER"), optionally folded above 0.5 as their code does.

The speechbrain and sweep variants pick the operating point with exact integer
arithmetic; the reference tools compare floats, which can break an exact tie between
two thresholds the other way.
"""
from __future__ import annotations

import numpy as np

from .calibration import sorted_trials
from .scores import ScoreError

EER_VARIANTS = ("rocch", "kaldi", "speechbrain", "sweep")


def roc_convex_hull(tar, non=None) -> tuple[np.ndarray, np.ndarray]:
    """Vertices ``(pmiss, pfa)`` of the ROC convex hull, from (0, 1) to (1, 0) (BOSARIS).

    PAV of the labels sorted ``[tar, non]`` (ties pooled); vertex k follows the k-th block.
    """
    trials = sorted_trials(tar, non)
    widths, targets = trials.pav_blocks("tar_non")
    tar_below = np.cumsum(targets)
    non_below = np.cumsum(widths) - tar_below
    n_tar, n_non = trials.n_tar, trials.n_non
    pmiss = np.concatenate(([0.0], tar_below / n_tar))
    pfa = np.concatenate(([1.0], (n_non - non_below) / n_non))
    return pmiss, pfa


def rocch_eer(tar, non=None) -> float:
    """ROCCH-EER: the largest crossing of a hull segment's line with Pmiss = Pfa.

    Horizontal and vertical segments give 0, as in BOSARIS ``rocch2eer``; for the hull
    this equals ``max over priors of minDCF``.
    """
    pmiss, pfa = roc_convex_hull(tar, non)
    x0, y0, x1, y1 = pfa[:-1], pmiss[:-1], pfa[1:], pmiss[1:]
    sloped = (x0 != x1) & (y0 != y1)
    if not sloped.any():
        return 0.0
    x0, y0, x1, y1 = x0[sloped], y0[sloped], x1[sloped], y1[sloped]
    # Line through both vertices written s1*x + s2*y = 1; it meets x = y at 1 / (s1 + s2).
    return float(max(0.0, np.max((x0 * y1 - x1 * y0) / (y1 - y0 + x0 - x1))))


def kaldi_eer(tar, non=None) -> float:
    """Kaldi ``compute-eer``: walk up the sorted targets until the matching non-target is lower.

    For target position p (0-based, ascending) the non-target position is
    ``Nn - 1 - trunc(Nn * p / Nt)`` (at least 0); the first p where that non-target score
    is below the target score gives EER = p / Nt, else (Nt - 1) / Nt. Scores are compared
    in float32, as Kaldi's ``BaseFloat`` does.
    """
    trials = sorted_trials(tar, non)
    # Rounding to float32 keeps sorted scores sorted; beyond its range (|score| > 3.4e38) a score becomes ±inf, and
    # below its resolution (|score| < 1.4e-45) 0, as IEEE rounding has it: ties that the float64 scores do not have,
    # which the metrics command notes (eval/summary.py).
    with np.errstate(over="ignore"):
        tar_sorted, non_sorted = trials.tar.astype(np.float32), trials.non.astype(np.float32)
    n_tar, n_non = tar_sorted.size, non_sorted.size
    positions = np.arange(n_tar - 1, dtype=np.int64)
    non_count = (n_non * positions).astype(np.float64) / n_tar
    non_positions = np.maximum(n_non - 1 - non_count.astype(np.int64), 0)
    crossed = non_sorted[non_positions] < tar_sorted[positions]
    position = int(np.argmax(crossed)) if crossed.any() else n_tar - 1
    return position / n_tar


def _threshold_counts(tar, non=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """For every distinct score u, ascending: ``(u, #targets <= u, #non-targets > u, Nt, Nn)``."""
    trials = sorted_trials(tar, non)

    def compute():
        scores, is_target = trials.scores, trials.is_target()
        ends = np.append(np.flatnonzero(scores[1:] != scores[:-1]), scores.size - 1)
        tar_at_or_below = np.cumsum(is_target, dtype=np.int64)[ends]
        non_above = trials.n_non - (ends + 1 - tar_at_or_below)
        return scores[ends], tar_at_or_below, non_above, trials.n_tar, trials.n_non
    return trials.cached(("threshold_counts",), compute)


def roc_points(tar, non=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empirical operating points ``(pmiss, pfa, thresholds)``, thresholds ascending.

    At threshold u a trial is rejected when its score is <= u; the point for rejecting
    nothing, (0, 1), comes first with threshold -inf.
    """
    thresholds, misses, false_alarms, n_tar, n_non = _threshold_counts(tar, non)
    return (np.concatenate(([0.0], misses / n_tar)), np.concatenate(([1.0], false_alarms / n_non)),
            np.concatenate(([-np.inf], thresholds)))


def _equal_error_point(misses: np.ndarray, false_alarms: np.ndarray, n_tar: int, n_non: int) -> float:
    # |FAR - FRR| scaled by Nt * Nn stays an exact integer; argmin keeps the first minimum.
    k = int(np.argmin(np.abs(false_alarms * n_tar - misses * n_non)))
    return float((false_alarms[k] / n_non + misses[k] / n_tar) / 2.0)


def speechbrain_eer(tar, non=None) -> float:
    """SpeechBrain's EER: FRR = P(tar <= t), FAR = P(non > t) over the distinct scores t.

    SpeechBrain also tries the midpoints between neighbouring scores; they reproduce
    the error rates of the score below them, so they never change the result.
    """
    _, misses, false_alarms, n_tar, n_non = _threshold_counts(tar, non)
    return _equal_error_point(misses, false_alarms, n_tar, n_non)


def sweep_eer(tar, non=None, *, fold: bool = False) -> float:
    """The simple threshold sweep of Champion et al. 2021: accept when score >= t.

    Thresholds are +inf then the distinct scores in descending order; the first t
    minimising |FNR - FPR| gives (FPR + FNR) / 2. ``fold`` replaces a result above 0.5
    by 1 - EER, the quirk of deep-privacy/x-vector-procrustes (it makes a worse-than-chance scorer look
    informative; off by default).
    """
    _, tar_at_or_below, non_above, n_tar, n_non = _threshold_counts(tar, non)
    # Accepting scores >= u misses the targets strictly below u: those <= the previous score.
    misses = np.concatenate(([n_tar], tar_at_or_below[-2::-1], [0]))
    false_alarms = np.concatenate(([0], non_above[-2::-1], [n_non]))
    value = _equal_error_point(misses, false_alarms, n_tar, n_non)
    return 1.0 - value if fold and value > 0.5 else value


def eer(tar, non=None, variant: str = "rocch") -> float:
    """The equal error rate of the named variant, a fraction in [0, 1] (see the module doc)."""
    functions = {"rocch": rocch_eer, "kaldi": kaldi_eer, "speechbrain": speechbrain_eer, "sweep": sweep_eer}
    if variant not in functions:
        raise ScoreError(f"unknown EER variant {variant!r}; choose one of {', '.join(EER_VARIANTS)}")
    return functions[variant](tar, non)


def min_dcf(tar, non, p_target: float, *, c_miss: float = 1.0, c_fa: float = 1.0,
            normalize: bool = True) -> float:
    """Minimum detection cost ``min_t [c_miss * p_target * Pmiss(t) + c_fa * (1 - p_target) * Pfa(t)]``.

    Over every empirical operating point (tied scores share one threshold), including
    accepting everything. ``normalize`` divides by the cost of the best trivial system,
    ``min(c_miss * p_target, c_fa * (1 - p_target))``, as NIST and Kaldi report it.
    """
    if not 0.0 < p_target < 1.0:
        raise ScoreError(f"p_target must lie in (0, 1), got {p_target}")
    if c_miss <= 0 or c_fa <= 0:
        raise ScoreError(f"costs must be positive, got c_miss={c_miss}, c_fa={c_fa}")
    pmiss, pfa, _ = roc_points(tar, non)
    cost = float(np.min(c_miss * p_target * pmiss + c_fa * (1.0 - p_target) * pfa))
    return cost / min(c_miss * p_target, c_fa * (1.0 - p_target)) if normalize else cost
