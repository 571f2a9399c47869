"""Unweighted average recall (UAR), the VoicePrivacy 2024 SER utility metric.

UAR is the mean over classes of each class's recall (hits / true occurrences), so every
emotion counts the same however often it occurs: scikit-learn's
``recall_score(y_true, y_pred, average="macro")``, which the challenge multiplies by 100.
As there, the classes are those occurring in either labelling, and a class that is
predicted but never true has recall 0. The per-class accuracy the challenge reports
beside it is the recall of each true class.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..data_prep.errors import VoxanonError


class UarError(VoxanonError):
    """Labellings that cannot be scored together."""


@dataclass(frozen=True)
class UarResult:
    """``uar`` and ``recall`` are fractions in [0, 1]; ``support`` counts true occurrences per class."""

    uar: float
    recall: dict[str, float]
    support: dict[str, int]


def _labels(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise UarError(f"{name}: expected a 1-D sequence of labels, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iuUSO":
        raise UarError(f"{name}: expected integer or string labels, got {array.dtype}")
    return array.astype(str)


def unweighted_average_recall(y_true: Sequence, y_pred: Sequence) -> UarResult:
    """Macro recall of ``y_pred`` against ``y_true`` (one label per utterance, same order)."""
    true, pred = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    if len(true) != len(pred):
        raise UarError(f"y_true has {len(true)} labels but y_pred has {len(pred)}")
    if len(true) == 0:
        raise UarError("no labels to score")
    classes = sorted(set(true) | set(pred))
    recall, support = {}, {}
    for label in classes:
        is_true = true == label
        support[label] = int(is_true.sum())
        recall[label] = float((pred[is_true] == label).mean()) if support[label] else 0.0
    return UarResult(float(np.mean(list(recall.values()))), recall, support)
