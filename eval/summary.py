"""The verification and privacy summary of one score set: every number of ``voxanon metrics --json``.

The scores are sorted, merged and pooled (PAV) once, in a
:class:`~voxanon.eval.calibration.SortedTrials` that every sorted-order metric shares.
"""
from __future__ import annotations

import numpy as np
from tqdm import tqdm

from .calibration import SortedTrials
from .cllr import cllr, min_cllr
from .eer import kaldi_eer, rocch_eer, speechbrain_eer, sweep_eer
from .linkability import linkability
from .zebra import zebra

JSON_KEYS = ("n_target", "n_nontarget", "eer_rocch", "eer_kaldi", "eer_speechbrain", "eer_sweep",
             "cllr", "min_cllr", "linkability", "zebra_dece", "zebra_worst_case", "zebra_tag")
# Each JSON quantity and how it is computed from (tar, non, their SortedTrials); "zebra" yields
# the three zebra_* keys.
METRIC_STEPS = (
    ("eer_rocch", lambda tar, non, trials: 100.0 * rocch_eer(trials)),
    ("eer_kaldi", lambda tar, non, trials: 100.0 * kaldi_eer(trials)),
    ("eer_speechbrain", lambda tar, non, trials: 100.0 * speechbrain_eer(trials)),
    ("eer_sweep", lambda tar, non, trials: 100.0 * sweep_eer(trials)),
    ("cllr", lambda tar, non, trials: cllr(tar, non)),
    ("min_cllr", lambda tar, non, trials: min_cllr(trials)),
    ("linkability", lambda tar, non, trials: linkability(tar, non)),
    ("zebra", lambda tar, non, trials: zebra(trials)),
)


def compute_metrics(tar: np.ndarray, non: np.ndarray, *, progress: bool = False) -> dict[str, object]:
    """Every metric of the JSON output: EERs in %, Cllr and D_ECE in bits, worst case in log10."""
    trials = SortedTrials(tar, non)
    metrics: dict[str, object] = {"n_target": int(np.size(tar)), "n_nontarget": int(np.size(non))}
    steps = tqdm(METRIC_STEPS, desc="metrics", unit="metric", disable=None if progress else True, leave=False)
    for name, function in steps:
        metrics[name] = function(tar, non, trials)
    result = metrics.pop("zebra")
    metrics.update(zebra_dece=result.dece_bits, zebra_worst_case=result.worst_case_log10, zebra_tag=result.tag)
    return {key: metrics[key] for key in JSON_KEYS}


# Below this many target trials, linkability's histogram has one bin (n_target // 10 bins, at least 1), and D_sys,
# the integral over the bin centres, is 0 whatever the scores.
LINKABILITY_MIN_TARGETS = 20
FLOAT32 = np.finfo(np.float32)


def degenerate_notes(tar: np.ndarray, non: np.ndarray) -> dict[str, str]:
    """What a figure of :func:`compute_metrics` means where the scores make it degenerate, by its JSON key:
    every score equal (min Cllr is 1 bit and the worst case 0 whatever the tie order, where the reference's
    order would give 0 and a B; Kaldi's EER puts its threshold on the tie), scores that Kaldi's float32
    comparisons cannot hold, or too few target trials for linkability's histogram."""
    notes = {}
    scores = np.concatenate([np.ravel(tar), np.ravel(non)])
    if scores.size and np.all(scores == scores[0]):
        same = "every score is the same, so the scores tell nothing apart"
        notes["min_cllr"] = (f"{same}: min Cllr 1 bit (no discrimination), whatever the order of the tied scores; "
                             "the reference code's order (targets after non-targets) would give 0")
        notes["eer_kaldi"] = f"{same}: Kaldi's EER puts its threshold on the tie; the other EERs (50 %) apply"
        notes["linkability"] = f"{same}: D_sys 0 is right (nothing is linkable)"
        return notes
    magnitudes = np.abs(scores)
    outside = int(np.count_nonzero((magnitudes > FLOAT32.max) | ((magnitudes <= float(FLOAT32.smallest_subnormal) / 2)
                                                                 & (magnitudes > 0))))
    if outside:
        notes["eer_kaldi"] = (f"{outside} score(s) lie outside float32's range (beyond ±3.4e38, or nonzero and below "
                              "1e-45 in magnitude): Kaldi's float32 comparisons make them ±inf or 0, ties the other "
                              "EERs do not have")
    if np.size(tar) < LINKABILITY_MIN_TARGETS:
        notes["linkability"] = (f"only {np.size(tar)} target trial(s), fewer than {LINKABILITY_MIN_TARGETS}: the "
                                "histogram has one bin, so D_sys is 0 whatever the scores (not a measurement)")
    return notes


def eer_cllr_min_cllr(tar, non, *, tie_order: str = "tar_non",
                      monotonicity_epsilon: float = 0.0) -> tuple[float, float, float]:
    """ROCCH-EER (fraction), Cllr and min Cllr (bits) from one sort and one PAV, as llreval's
    ``tarnon_2_eer_cllr_mincllr`` reports them: the pure PAV optimum (no monotonicity ramp) with
    tied scores pooled, the ROCCH's own order, so both share one PAV even when scores tie."""
    trials = SortedTrials(tar, non)
    return (rocch_eer(trials), cllr(tar, non),
            min_cllr(trials, tie_order=tie_order, monotonicity_epsilon=monotonicity_epsilon))
