"""UAR against scikit-learn's macro recall."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import recall_score

from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.uar import unweighted_average_recall

EMOTIONS = np.array(["neu", "ang", "hap", "sad"])


@pytest.mark.parametrize("seed", range(6))
def test_uar_equals_sklearn_macro_recall(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    # Unbalanced classes, and with some seeds a class that is only predicted or only true.
    true = EMOTIONS[rng.choice(4 if seed % 2 else 3, n, p=None)]
    pred = np.where(rng.random(n) < 0.6, true, EMOTIONS[rng.integers(0, 4, n)])
    result = unweighted_average_recall(true, pred)
    assert result.uar == pytest.approx(recall_score(true, pred, average="macro", zero_division=0), abs=1e-12)
    per_class = recall_score(true, pred, average=None, labels=sorted(result.recall), zero_division=0)
    assert [result.recall[c] for c in sorted(result.recall)] == pytest.approx(per_class.tolist())
    assert sum(result.support.values()) == n


def test_uar_weights_classes_equally_not_utterances():
    true = ["neu"] * 90 + ["sad"] * 10
    pred = ["neu"] * 100
    result = unweighted_average_recall(true, pred)
    assert result.uar == pytest.approx(0.5)  # accuracy would be 0.9
    assert result.recall == {"neu": 1.0, "sad": 0.0}
    assert result.support == {"neu": 90, "sad": 10}
    assert unweighted_average_recall([0, 1, 2], [0, 1, 2]).uar == 1.0


def test_uar_bad_input():
    with pytest.raises(VoxanonError, match="3 labels but y_pred has 2"):
        unweighted_average_recall(["a", "b", "c"], ["a", "b"])
    with pytest.raises(VoxanonError, match="no labels"):
        unweighted_average_recall([], [])
    with pytest.raises(VoxanonError, match="1-D"):
        unweighted_average_recall([["a"]], [["a"]])
    with pytest.raises(VoxanonError, match="integer or string"):
        unweighted_average_recall([0.5], [0.5])
