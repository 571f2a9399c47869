"""Privacy metrics on arrays: the functions ``voxanon evaluate`` and ``voxanon metrics`` compute with.

Each name here is the function of :mod:`voxanon.eval` itself, not a copy: the same code, the same figures. Scores
are any array-like of real numbers, "higher means more target" (they need not be LLRs, except where a name says
so); every function checks its inputs and refuses an empty, non-1-D or NaN array, or one of a single class, with
:class:`ScoreError` (a ``ValueError``) naming what is wrong.

>>> from voxanon import metrics
>>> metrics.eer([2.0, 1.5, 0.3], [0.1, -1.0, 0.4])      # ROCCH-EER, a fraction
>>> metrics.zebra([2.0, 1.5, 0.3], [0.1, -1.0, 0.4])    # (D_ECE bits, worst case log10, tag)

Similarity matrices score utterance pairs: :func:`pair_scores` makes the table each setting (OO, OP, PP) is
given as, from three equal-length sequences.
"""
from __future__ import annotations

from typing import Sequence

from .data_prep.scores import ScoreTable
from .eval.cllr import cllr, min_cllr
from .eval.eer import EER_VARIANTS, eer, min_dcf
from .eval.linkability import linkability, linkability_profile
from .eval.scores import ScoreError, as_score_array
from .eval.similarity import (SimilarityMatrices, SpeakerSimilarity, deidentification, diagonal_dominance,
                              similarity_matrices, speaker_similarity, voice_distinctiveness_gain_db)
from .eval.zebra import ZebraResult, zebra

__all__ = [
    "EER_VARIANTS", "ScoreError", "ScoreTable", "SimilarityMatrices", "SpeakerSimilarity", "ZebraResult", "cllr",
    "deidentification", "diagonal_dominance", "eer", "linkability", "linkability_profile", "min_cllr", "min_dcf",
    "pair_scores", "similarity_matrices", "speaker_similarity", "voice_distinctiveness_gain_db", "zebra",
]


def pair_scores(first: Sequence[str], second: Sequence[str], scores) -> ScoreTable:
    """Utterance-pair scores (``first[k]`` against ``second[k]`` scored ``scores[k]``) as the table
    :func:`similarity_matrices` and :func:`speaker_similarity` take, checked: ids are strings, the three columns
    of one length, the scores finite numbers."""
    values = as_score_array(scores, "pair scores")
    first, second = list(first), list(second)
    if not len(first) == len(second) == len(values):
        raise ScoreError(f"pair scores: columns of {len(first)}, {len(second)} and {len(values)} entries; each "
                         "pair needs both ids and its score")
    for column, ids in (("first", first), ("second", second)):
        wrong = next((value for value in ids if not isinstance(value, str)), None)
        if wrong is not None:
            raise ScoreError(f"pair scores: {column} ids must be strings, got {wrong!r}")
    return ScoreTable(first, second, values)
