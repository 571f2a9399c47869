"""VoicePrivacy 2022 weighted averages over the LibriSpeech and VCTK trial sets (``average_results.py``).

Per split (dev, test): 0.25 for each of ``libri_<split>_trials_f`` and ``_m``, 0.20 for each of
``vctk_<split>_trials_f`` and ``_m``, and 0.05 for each of ``vctk_<split>_trials_f_common`` and
``_m_common``. Averaged: EER (every variant), rho_F0 and G_VD, per system and condition; a
split is averaged only when all six sets have the number.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from voxanon.eval.results import Result

SET_WEIGHTS = {"libri_{}_trials_f": 0.25, "libri_{}_trials_m": 0.25, "vctk_{}_trials_f": 0.20,
               "vctk_{}_trials_m": 0.20, "vctk_{}_trials_f_common": 0.05, "vctk_{}_trials_m_common": 0.05}
AVERAGED = {("eer", None), ("pitch_correlation", "mean"), ("gvd", "")}


def weighted_averages(results: Iterable[Result], splits: tuple[str, ...] = ("dev", "test")) -> list[Result]:
    """One ``<split> weighted average`` record per averaged metric, system, condition and variant."""
    grouped: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for result in results:
        if isinstance(result.value, str) or not any(
                result.metric == metric and variant in (None, result.variant) for metric, variant in AVERAGED):
            continue
        grouped[(result.system, result.condition, result.metric, result.variant, result.unit)][result.set] = result
    averages = []
    for (system, condition, metric, variant, unit), by_set in sorted(grouped.items()):
        for split in splits:
            names = {pattern.format(split): weight for pattern, weight in SET_WEIGHTS.items()}
            if all(name in by_set for name in names):
                value = sum(weight * float(by_set[name].value) for name, weight in names.items())
                averages.append(Result(f"{split} weighted average", system, condition, metric, variant, value, unit))
    return averages
