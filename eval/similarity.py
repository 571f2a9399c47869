"""Voice similarity matrices M_OO, M_OP, M_PP; diagonal dominance, DeID, G_VD; zoo-plot coordinates.

Noé et al. 2020 and Noé et al. 2022, §4, checked against the VoicePrivacy 2022 ``local/similarity_matrices/``.

Inputs are utterance-pair score tables (``<utt-a> <utt-b> <score>``) for one setting:
OO (original vs original), OP (original of the first column vs protected of the
second) or PP (protected vs protected); protected utterances keep their original ids,
so one ``utt2spk`` serves all three. Per setting, the scores are split into same-speaker
and different-speaker pairs and oracle-calibrated with Laplace PAV (natural-log LLRs);
each setting is calibrated on its own.

The similarity of speakers i and j pools the LLRs ``L_ij`` of every admissible pair:

* ``"sigmoid_mean"`` (VoicePrivacy scripts, Noé et al. 2020, Eq. 2): ``sigmoid(mean(L_ij))``;
* ``"geometric_mean"`` (Noé et al. 2022, Eq. 6): ``exp(mean(ln sigmoid(L_ij)))``, the geometric mean of
  the flat-prior posteriors.

A pair of an utterance with itself is never admissible; in OP, where ids are shared,
``exclude_same_utt_id_in_op`` (default, as the challenge code) also drops an original
against its own protected version. OO and PP pair lists name each unordered pair
once, so their cells pool both directions; an OP cell (i, j) holds only O_i against
P_j unless ``symmetrize_op`` pools it with (j, i), as VoicePrivacy 2022 does.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy.special import expit

from ..data_prep.scores import ScoreTable
from .calibration import optimal_llr
from .scores import ScoreError

SIMILARITY_DEFINITIONS = ("sigmoid_mean", "geometric_mean")
MAX_EXAMPLES = 5


def _pair_speakers(pairs: ScoreTable, utt2spk: Mapping[str, str]) -> tuple[list[str], list[str]]:
    unknown = sorted({utt for utt in (*pairs.first, *pairs.second) if utt not in utt2spk})
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:MAX_EXAMPLES])
        raise ScoreError(f"pair scores: {len(unknown)} utterance(s) not in utt2spk, e.g. {shown}")
    return [utt2spk[u] for u in pairs.first], [utt2spk[u] for u in pairs.second]


def _admissible(pairs: ScoreTable, exclude_same_utt: bool) -> np.ndarray:
    if not exclude_same_utt:
        return np.ones(len(pairs), dtype=bool)
    return np.fromiter((a != b for a, b in zip(pairs.first, pairs.second)), dtype=bool, count=len(pairs))


def split_pair_scores(pairs: ScoreTable, utt2spk: Mapping[str, str], *,
                      exclude_same_utt: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the admissible same-speaker and different-speaker pairs, ``(tar, non)``.

    These feed D_ECE and min Cllr of a setting (Noé et al. 2022, §7.1).
    """
    first_spk, second_spk = _pair_speakers(pairs, utt2spk)
    keep = _admissible(pairs, exclude_same_utt)
    same = np.fromiter((a == b for a, b in zip(first_spk, second_spk)), dtype=bool, count=len(pairs))
    return pairs.scores[keep & same], pairs.scores[keep & ~same]


@dataclass(frozen=True)
class SpeakerSimilarity:
    """One speaker-by-speaker matrix; rows follow the first column of the pairs.

    ``matrix`` holds similarities in [0, 1] (NaN where no admissible pair exists),
    ``mean_llr`` the mean calibrated LLR of each cell and ``count`` its number of pairs.
    """

    speakers: list[str]
    matrix: np.ndarray
    mean_llr: np.ndarray
    count: np.ndarray

    def zoo(self) -> "ZooCoordinates":
        """Per speaker: mean LLR of its same-speaker pairs, and of its pairs with every other speaker."""
        off = ~np.eye(len(self.speakers), dtype=bool)
        sums = np.where(self.count > 0, self.mean_llr * self.count, 0.0)
        off_counts = np.where(off, self.count, 0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            nontarget = np.where(off, sums, 0.0).sum(axis=1) / off_counts
        return ZooCoordinates(list(self.speakers), np.diag(self.mean_llr).copy(),
                              np.where(off_counts > 0, nontarget, np.nan))


@dataclass(frozen=True)
class ZooCoordinates:
    """Zoo-plot coordinates (Noé et al. 2022, §4.3): x = mean target LLR, y = mean non-target LLR per speaker."""

    speakers: list[str]
    target_mean_llr: np.ndarray
    nontarget_mean_llr: np.ndarray


def speaker_similarity(pairs: ScoreTable, utt2spk: Mapping[str, str], *, symmetric: bool,
                       speakers: Sequence[str] | None = None, definition: str = "sigmoid_mean",
                       exclude_same_utt: bool = True) -> SpeakerSimilarity:
    """The similarity matrix of one setting from its utterance-pair scores.

    ``symmetric`` pools cells (i, j) and (j, i); ``speakers`` fixes the order (default:
    sorted ids of the speakers in the pairs).
    """
    if definition not in SIMILARITY_DEFINITIONS:
        raise ScoreError(f"similarity definition must be one of {SIMILARITY_DEFINITIONS}, got {definition!r}")
    first_spk, second_spk = _pair_speakers(pairs, utt2spk)
    order = sorted(set(first_spk) | set(second_spk)) if speakers is None else list(speakers)
    position = {spk: k for k, spk in enumerate(order)}
    missing = sorted((set(first_spk) | set(second_spk)) - set(position))
    if missing:
        raise ScoreError(f"pair scores involve speakers missing from the speaker list: {missing[:MAX_EXAMPLES]}")
    keep = _admissible(pairs, exclude_same_utt)
    rows = np.fromiter((position[s] for s in first_spk), dtype=np.int64, count=len(pairs))[keep]
    cols = np.fromiter((position[s] for s in second_spk), dtype=np.int64, count=len(pairs))[keep]
    scores = pairs.scores[keep]
    same = rows == cols
    if not same.any() or same.all():
        raise ScoreError(f"pair scores: {int(same.sum())} same-speaker and {int((~same).sum())} "
                         "different-speaker pairs; calibration needs both")
    llrs = np.empty_like(scores)
    llrs[same], llrs[~same] = optimal_llr(scores[same], scores[~same], laplace=True)
    n = len(order)
    cells = rows * n + cols
    llr_sum, log_posterior_sum, count = (np.bincount(cells, weights=w, minlength=n * n).reshape(n, n)
                                         for w in (llrs, -np.logaddexp(0.0, -llrs), np.ones_like(llrs)))
    if symmetric:
        llr_sum, log_posterior_sum, count = (m + m.T - np.diag(np.diag(m))
                                             for m in (llr_sum, log_posterior_sum, count))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_llr = np.where(count > 0, llr_sum / count, np.nan)
        mean_log_posterior = np.where(count > 0, log_posterior_sum / count, np.nan)
    matrix = expit(mean_llr) if definition == "sigmoid_mean" else np.exp(mean_log_posterior)
    return SpeakerSimilarity(order, matrix, mean_llr, count.astype(np.int64))


def diagonal_dominance(matrix) -> float:
    """``D_diag = |mean(diagonal) - mean(off-diagonal)|`` (Noé et al. 2020); 1 for I and for ones - I.

    NaN cells (speaker pairs without admissible comparisons) are left out with a warning.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise ScoreError(f"D_diag needs a square matrix of at least 2 speakers, got shape {matrix.shape}")
    on = np.eye(matrix.shape[0], dtype=bool)
    diagonal, off_diagonal = matrix[on], matrix[~on]
    if np.isnan(matrix).any():
        warnings.warn(f"D_diag: {int(np.isnan(matrix).sum())} empty cell(s) left out of the averages",
                      RuntimeWarning, stacklevel=2)
        diagonal, off_diagonal = diagonal[~np.isnan(diagonal)], off_diagonal[~np.isnan(off_diagonal)]
        if diagonal.size == 0 or off_diagonal.size == 0:
            raise ScoreError("D_diag: no similarity on the diagonal or off it")
    return float(abs(diagonal.mean() - off_diagonal.mean()))


def deidentification(matrix_oo, matrix_op) -> float:
    """DeID = ``1 - D_diag(M_OP) / D_diag(M_OO)``, a fraction (1 = fully de-identified; can be
    negative when protection makes speakers more linkable); NaN when D_diag(M_OO) = 0."""
    reference = diagonal_dominance(matrix_oo)
    return float("nan") if reference == 0 else 1.0 - diagonal_dominance(matrix_op) / reference


def voice_distinctiveness_gain_db(matrix_oo, matrix_pp) -> float:
    """G_VD = ``10 log10(D_diag(M_PP) / D_diag(M_OO))`` dB; 0 dB keeps distinctiveness.
    NaN when D_diag(M_OO) = 0, -inf when D_diag(M_PP) = 0."""
    reference = diagonal_dominance(matrix_oo)
    if reference == 0:
        return float("nan")
    protected = diagonal_dominance(matrix_pp)
    return float("-inf") if protected == 0 else 10.0 * float(np.log10(protected / reference))


@dataclass(frozen=True)
class SimilarityMatrices:
    """M_OO, M_OP and M_PP over the same speakers, with DeID and G_VD."""

    oo: SpeakerSimilarity
    op: SpeakerSimilarity
    pp: SpeakerSimilarity

    @property
    def speakers(self) -> list[str]:
        return self.oo.speakers

    @property
    def deid(self) -> float:
        return deidentification(self.oo.matrix, self.op.matrix)

    @property
    def gvd_db(self) -> float:
        return voice_distinctiveness_gain_db(self.oo.matrix, self.pp.matrix)


def similarity_matrices(oo: ScoreTable, op: ScoreTable, pp: ScoreTable, utt2spk: Mapping[str, str], *,
                        speakers: Sequence[str] | None = None, definition: str = "sigmoid_mean",
                        symmetrize_op: bool = False, exclude_same_utt_id_in_op: bool = True) -> SimilarityMatrices:
    """The three matrices of Noé et al. 2020; speakers default to the sorted union over the settings.

    An OP list that scores one direction per speaker pair (VoicePrivacy's upper-triangle
    lists) needs ``symmetrize_op=True``, or half of M_OP stays empty.
    """
    if speakers is None:
        speakers = sorted({utt2spk[u] for table in (oo, op, pp) for u in (*table.first, *table.second)
                           if u in utt2spk})
    return SimilarityMatrices(
        oo=speaker_similarity(oo, utt2spk, symmetric=True, speakers=speakers, definition=definition),
        op=speaker_similarity(op, utt2spk, symmetric=symmetrize_op, speakers=speakers, definition=definition,
                              exclude_same_utt=exclude_same_utt_id_in_op),
        pp=speaker_similarity(pp, utt2spk, symmetric=True, speakers=speakers, definition=definition))
