"""VoicePrivacy 2022 averages over the LibriSpeech and VCTK sets (Voice-Privacy-Challenge-2022 ``average_results.py``).

* Pooled ASR sets: the challenge scores WER on ``libri_<split>_asr`` (``trials_f`` + ``trials_m``)
  and ``vctk_<split>_asr`` (``trials_{f,m}`` + ``trials_{f,m}_common``), one WER over all their
  words, not a mean of the sets' WERs. :func:`pooled_asr_results` rebuilds those sets from the
  per-set error counts (S, D, I and reference words), assuming the member sets hold distinct
  utterances (as in the challenge layout).
* Weighted averages, per split (dev, test): EER (every variant), rho_F0 and G_VD weigh 0.25 each
  of ``libri_<split>_trials_f`` / ``_m``, 0.20 each of ``vctk_<split>_trials_f`` / ``_m`` and 0.05
  each of ``vctk_<split>_trials_f_common`` / ``_m_common``; WER weighs 0.5 each of
  ``libri_<split>_asr`` and ``vctk_<split>_asr``. A split is averaged only when every weighted set
  has the number.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from .results import Result

SET_WEIGHTS = {"libri_{}_trials_f": 0.25, "libri_{}_trials_m": 0.25, "vctk_{}_trials_f": 0.20,
               "vctk_{}_trials_m": 0.20, "vctk_{}_trials_f_common": 0.05, "vctk_{}_trials_m_common": 0.05}
WER_SET_WEIGHTS = {"libri_{}_asr": 0.5, "vctk_{}_asr": 0.5}
# (metric, variant) -> set weights; variant None: every variant.
AVERAGED = {("eer", None): SET_WEIGHTS, ("pitch_correlation", "mean"): SET_WEIGHTS, ("gvd", ""): SET_WEIGHTS,
            ("wer", None): WER_SET_WEIGHTS}
POOLED_ASR_SETS = {"libri_{}_asr": ("libri_{}_trials_f", "libri_{}_trials_m"),
                   "vctk_{}_asr": ("vctk_{}_trials_f", "vctk_{}_trials_m", "vctk_{}_trials_f_common",
                                   "vctk_{}_trials_m_common")}
WER_COUNTS = ("wer_substitutions", "wer_deletions", "wer_insertions", "wer_reference_words")


def _weights_for(result: Result) -> dict[str, float] | None:
    for (metric, variant), weights in AVERAGED.items():
        if result.metric == metric and variant in (None, result.variant):
            return weights
    return None


def weighted_averages(results: Iterable[Result], splits: tuple[str, ...] = ("dev", "test")) -> list[Result]:
    """One ``<split> weighted average`` record per averaged metric, system, condition and variant."""
    grouped: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for result in results:
        if isinstance(result.value, str) or _weights_for(result) is None:
            continue
        grouped[(result.system, result.condition, result.metric, result.variant, result.unit, result.attacker,
                 result.model)][result.set] = result
    averages = []
    for (system, condition, metric, variant, unit, attacker, model), by_set in sorted(grouped.items()):
        weights = _weights_for(next(iter(by_set.values())))
        for split in splits:
            names = {pattern.format(split): weight for pattern, weight in weights.items()}
            if all(name in by_set for name in names):
                value = sum(weight * float(by_set[name].value) for name, weight in names.items())
                averages.append(Result(f"{split} weighted average", system, condition, metric, variant, value, unit,
                                       attacker, model))
    return averages


def pooled_asr_results(results: Iterable[Result], splits: tuple[str, ...] = ("dev", "test")) -> list[Result]:
    """WER (%) and its counts on the pooled ASR sets, from the member sets' counts.

    Per system and ASR variant, a pooled set is made only when every member set has all four
    counts; ``wer_increase`` follows for each system beside an ``original`` pooled WER.
    """
    counts: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for result in results:
        if result.condition == "asr" and result.metric in WER_COUNTS and not isinstance(result.value, str):
            counts[(result.system, result.variant, result.set)][result.metric] = float(result.value)
    pooled: dict[tuple[str, str, str], float] = {}
    rows = []
    for system, variant in sorted({(system, variant) for system, variant, _ in counts}):
        for split in splits:
            for pooled_pattern, member_patterns in POOLED_ASR_SETS.items():
                members = [counts.get((system, variant, pattern.format(split))) for pattern in member_patterns]
                if any(m is None or len(m) < len(WER_COUNTS) for m in members):
                    continue
                totals = {metric: sum(m[metric] for m in members) for metric in WER_COUNTS}
                if totals["wer_reference_words"] <= 0:
                    continue
                errors = totals["wer_substitutions"] + totals["wer_deletions"] + totals["wer_insertions"]
                name = pooled_pattern.format(split)
                wer = 100.0 * errors / totals["wer_reference_words"]
                pooled[(system, variant, name)] = wer
                rows.append(Result(name, system, "asr", "wer", variant, wer, "%"))
                rows += [Result(name, system, "asr", metric, variant, value, "") for metric, value in totals.items()]
    for (system, variant, name), wer in pooled.items():
        original = pooled.get(("original", variant, name))
        if system != "original" and original is not None:
            rows.append(Result(name, system, "asr", "wer_increase", variant, wer - original, "%"))
    return rows
