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
