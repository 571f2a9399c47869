"""Speaker-then-sex balanced averaging against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from voxanon.data_prep.errors import VoxanonError
from voxanon.models.speakers.balanced_average import balanced_average


def test_balanced_average_differs_from_pooled_mean_on_unbalanced_data():
    # Female a: 3 utterances at 200, female b: 1 at 240, male c: 1 at 100.
    values = [200.0, 200.0, 200.0, 240.0, 100.0]
    speakers = ["a", "a", "a", "b", "c"]
    result = balanced_average(values, speakers, {"a": "f", "b": "F", "c": "m"})
    assert result.by_speaker == {"a": 200.0, "b": 240.0, "c": 100.0}
    assert result.by_sex["f"] == pytest.approx(220.0) and result.by_sex["m"] == pytest.approx(100.0)
    assert result.neutral == pytest.approx(160.0)
    assert np.mean(values) == pytest.approx(188.0)
    assert result.speakers_per_sex == {"f": 2, "m": 1}


def test_balanced_average_of_vectors_keeps_dimension():
    values = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    result = balanced_average(values, ["a", "a", "b"], {"a": "f", "b": "m"})
    np.testing.assert_allclose(result.neutral, [1.0, 2.0])


def test_balanced_average_rejects_missing_sex_and_unknown_labels():
    with pytest.raises(VoxanonError, match="none is 'm'"):
        balanced_average([1.0, 2.0], ["a", "b"], {"a": "f", "b": "f"})
    with pytest.raises(VoxanonError, match="no sex given"):
        balanced_average([1.0, 2.0], ["a", "b"], {"a": "f"})
    with pytest.raises(VoxanonError, match=r"\['x'\]"):
        balanced_average([1.0, 2.0, 3.0], ["a", "b", "c"], {"a": "f", "b": "m", "c": "x"})
    with pytest.raises(ValueError, match="NaN"):
        balanced_average([np.nan, 2.0], ["a", "b"], {"a": "f", "b": "m"})
