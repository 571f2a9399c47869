"""The verification and privacy summary of one score set: every number of ``voxanon metrics --json``."""
from __future__ import annotations

import numpy as np
from tqdm import tqdm

from voxanon.eval.cllr import cllr, min_cllr
from voxanon.eval.eer import kaldi_eer, rocch_eer, speechbrain_eer, sweep_eer
from voxanon.eval.linkability import linkability
from voxanon.eval.zebra import zebra

JSON_KEYS = ("n_target", "n_nontarget", "eer_rocch", "eer_kaldi", "eer_speechbrain", "eer_sweep",
             "cllr", "min_cllr", "linkability", "zebra_dece", "zebra_worst_case", "zebra_tag")
# Each JSON quantity and how it is computed; "zebra" yields the three zebra_* keys.
METRIC_STEPS = (
    ("eer_rocch", lambda tar, non: 100.0 * rocch_eer(tar, non)),
    ("eer_kaldi", lambda tar, non: 100.0 * kaldi_eer(tar, non)),
    ("eer_speechbrain", lambda tar, non: 100.0 * speechbrain_eer(tar, non)),
    ("eer_sweep", lambda tar, non: 100.0 * sweep_eer(tar, non)),
    ("cllr", cllr),
    ("min_cllr", min_cllr),
    ("linkability", linkability),
    ("zebra", zebra),
)


def compute_metrics(tar: np.ndarray, non: np.ndarray, *, progress: bool = False) -> dict[str, object]:
    """Every metric of the JSON output: EERs in %, Cllr and D_ECE in bits, worst case in log10."""
    metrics: dict[str, object] = {"n_target": int(np.size(tar)), "n_nontarget": int(np.size(non))}
    steps = tqdm(METRIC_STEPS, desc="metrics", unit="metric", disable=None if progress else True, leave=False)
    for name, function in steps:
        metrics[name] = function(tar, non)
    result = metrics.pop("zebra")
    metrics.update(zebra_dece=result.dece_bits, zebra_worst_case=result.worst_case_log10, zebra_tag=result.tag)
    return {key: metrics[key] for key in JSON_KEYS}
