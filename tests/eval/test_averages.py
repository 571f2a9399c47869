"""VoicePrivacy 2022 weighted averages."""
from __future__ import annotations

import pytest

from voxanon.eval.averages import SET_WEIGHTS, weighted_averages
from voxanon.eval.results import Result


def _sets(split):
    return [pattern.format(split) for pattern in SET_WEIGHTS]


def test_weights_sum_to_one_and_average_is_weighted():
    assert sum(SET_WEIGHTS.values()) == pytest.approx(1.0)
    results = [Result(name, "b2", "o-a", "eer", "kaldi", float(i), "%") for i, name in enumerate(_sets("dev"))]
    results += [Result(name, "b2", "a-a", "gvd", "", -1.0, "dB") for name in _sets("dev")]
    results += [Result(name, "b2", "o-a", "zebra_tag", "", "B", "") for name in _sets("dev")]
    averages = {(r.metric, r.condition): r for r in weighted_averages(results)}
    expected = sum(w * i for i, w in enumerate(SET_WEIGHTS.values()))
    assert averages[("eer", "o-a")].value == pytest.approx(expected)
    assert averages[("eer", "o-a")].set == "dev weighted average" and averages[("eer", "o-a")].variant == "kaldi"
    assert averages[("gvd", "a-a")].value == pytest.approx(-1.0)
    assert ("zebra_tag", "o-a") not in averages


def test_incomplete_split_is_not_averaged():
    results = [Result(name, "b2", "o-a", "eer", "kaldi", 1.0, "%") for name in _sets("test")[:-1]]
    assert weighted_averages(results) == []


def _wer_counts(name, system, substitutions, deletions, insertions, words, variant="whisper"):
    return [Result(name, system, "asr", "wer_substitutions", variant, float(substitutions), ""),
            Result(name, system, "asr", "wer_deletions", variant, float(deletions), ""),
            Result(name, system, "asr", "wer_insertions", variant, float(insertions), ""),
            Result(name, system, "asr", "wer_reference_words", variant, float(words), "")]


def test_pooled_asr_sets_pool_words_and_wer_averages_half_libri_half_vctk():
    from voxanon.eval.averages import POOLED_ASR_SETS, pooled_asr_results

    results = []
    for system, extra in (("original", 0), ("b2", 10)):
        # libri: f 10 errors / 100 words, m 30 / 300 (+extra): pooled (40 + 2 extra) / 400.
        results += _wer_counts("libri_dev_trials_f", system, 5, 3, 2 + extra, 100)
        results += _wer_counts("libri_dev_trials_m", system, 20, 5, 5 + extra, 300)
        for k, pattern in enumerate(POOLED_ASR_SETS["vctk_{}_asr"]):
            results += _wer_counts(pattern.format("dev"), system, 1, 0, k + extra, 50)
    pooled = {(r.set, r.system, r.metric): r.value for r in pooled_asr_results(results)}
    assert pooled[("libri_dev_asr", "original", "wer")] == pytest.approx(100 * 40 / 400)
    assert pooled[("libri_dev_asr", "b2", "wer")] == pytest.approx(100 * 60 / 400)   # not the mean of 20% and 15%
    assert pooled[("libri_dev_asr", "b2", "wer_increase")] == pytest.approx(5.0)
    assert pooled[("vctk_dev_asr", "original", "wer")] == pytest.approx(100 * (4 + 6) / 200)
    assert pooled[("libri_dev_asr", "b2", "wer_reference_words")] == 400
    assert not any(name.startswith("libri_test") for name, _, _ in pooled)
    averages = {(r.set, r.system): r.value for r in weighted_averages(results + pooled_asr_results(results))
                if r.metric == "wer"}
    assert averages[("dev weighted average", "original")] == pytest.approx(0.5 * 10.0 + 0.5 * 5.0)
    assert ("test weighted average", "original") not in averages


def test_pooled_asr_set_needs_every_member_set():
    from voxanon.eval.averages import pooled_asr_results

    results = _wer_counts("libri_dev_trials_f", "b2", 1, 1, 1, 10)
    assert pooled_asr_results(results) == []
    assert weighted_averages([Result("libri_dev_asr", "b2", "asr", "wer", "w", 3.0, "%")]) == []
