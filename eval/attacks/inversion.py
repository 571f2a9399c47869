"""The embedding inversion attack on an anonymiser (Champion et al. 2021): align, invert, measure.

The attacker holds clear training vectors A and anonymised ones B, estimates an
orthogonal ``W`` with ``A W ≈ B`` (Procrustes with paired rows, or Wasserstein-Procrustes
without), and de-anonymises test vectors with ``D Wᵀ``. Measured:

* **top-1** (%): for each original vector, its Euclidean nearest de-anonymised vector
  (the reference code's direction; the paper's text allows either). "speaker" counts a
  neighbour of the same speaker, "segment" the very same utterance id;
* **ASV linkability**: cosine scores between the original speaker-level enrolment
  vectors and the de-anonymised test vectors over a trials list, summarised by
  ROCCH-EER and the threshold-sweep EER of the paper (%), Cllr and min Cllr (bits) and D_sys.
  Cosine scores are not LLRs, so the actual Cllr only says how far they are from
  calibrated; min Cllr and the EERs are calibration-free.

Front-end (Champion et al. 2021, §4.3): optional PCA fitted separately on the clear and on the anonymised
training vectors (clear PCA for A, C and the enrolment; anonymised PCA for B and D), then
L2 normalisation of every vector. With ``by_sex`` the whole front-end and ``W`` are
estimated per sex, and every vector is processed by its speaker's sex.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ...data_prep.corpus import GENDERS, Trial
from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import Vectors, l2_normalise
from .alignment import WassersteinProcrustesConfig, orthogonal_procrustes, wasserstein_procrustes
from ..cllr import cllr, min_cllr
from ..eer import eer
from ..linkability import linkability

if TYPE_CHECKING:  # scikit-learn takes a second to import; only the PCA front-end needs it
    from sklearn.decomposition import PCA

log = logging.getLogger(__name__)

METHODS = ("procrustes", "wasserstein-procrustes")


class AttackError(VoxanonError):
    """Attack inputs that do not fit together."""


@dataclass(frozen=True)
class InversionInputs:
    """Everything the attack reads. ``enroll`` is speaker-level (keys are speaker ids)."""

    train_orig: Vectors
    train_anon: Vectors
    test_orig: Vectors
    test_anon: Vectors
    enroll: Vectors
    trials: Sequence[Trial]
    utt2spk: Mapping[str, str]


@dataclass(frozen=True)
class InversionResult:
    """Top-1 accuracies and EERs in %, Cllr and min Cllr in bits, linkability D_sys in [0, 1]."""

    train_top1_speaker: float
    train_top1_segment: float
    test_top1_speaker: float
    test_top1_segment: float
    eer_rocch: float
    min_cllr: float
    cllr: float
    linkability: float
    eer_sweep: float
    n_target: int
    n_nontarget: int
    pca_explained_variance: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The issue's key order: top-1 figures, then ``eer_rocch``, ``min_cllr``, ``cllr``, ``linkability``."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def fit_pca(train: np.ndarray, pca_dim: int | None, what: str) -> PCA | None:
    """The PCA of one domain's training vectors (``None`` without PCA)."""
    if pca_dim is None:
        return None
    if not 1 <= pca_dim <= min(train.shape):
        raise AttackError(f"--pca {pca_dim}: {what} has {train.shape[0]} vectors of dimension "
                          f"{train.shape[1]}; PCA needs 1 <= k <= {min(train.shape)}")
    from sklearn.decomposition import PCA

    return PCA(n_components=pca_dim).fit(train)


def front_end(pca: PCA | None, matrix: np.ndarray) -> np.ndarray:
    """PCA (when fitted), then L2 normalisation."""
    return l2_normalise(matrix if pca is None else pca.transform(matrix))


def top1_accuracy(original: Vectors, restored: Vectors, utt2spk: Mapping[str, str]) -> tuple[int, int]:
    """Counts ``(same speaker, same utterance)`` over the original vectors' nearest restored vectors."""
    distances = (np.sum(original.matrix ** 2, axis=1)[:, None] - 2.0 * original.matrix @ restored.matrix.T
                 + np.sum(restored.matrix ** 2, axis=1)[None, :])
    nearest = np.argmin(distances, axis=1)
    speaker_hits = sum(utt2spk[utt] == utt2spk[restored.ids[k]] for utt, k in zip(original.ids, nearest))
    segment_hits = sum(utt == restored.ids[k] for utt, k in zip(original.ids, nearest))
    return int(speaker_hits), int(segment_hits)


def inversion_attack(inputs: InversionInputs, method: str = "procrustes", *, pca_dim: int | None = None,
                     spk2gender: Mapping[str, str] | None = None,
                     wasserstein: WassersteinProcrustesConfig | None = None) -> InversionResult:
    """Run the attack; ``spk2gender`` switches on sex-specific front-ends and rotations."""
    if method not in METHODS:
        raise AttackError(f"unknown attack {method!r}; choose one of {', '.join(METHODS)}")
    _check_inputs(inputs)
    groups = _groups(inputs, spk2gender)
    restored_test: dict[str, np.ndarray] = {}
    enroll_vectors: dict[str, np.ndarray] = {}
    group_of: dict[str, str] = {}
    counts = np.zeros(4, dtype=int)
    totals = np.zeros(2, dtype=int)
    explained: dict[str, float] = {}
    for group, part in groups.items():
        pca_clear = fit_pca(part.train_orig.matrix, pca_dim, f"train-orig ({group})")
        pca_anon = fit_pca(part.train_anon.matrix, pca_dim, f"train-anon ({group})")
        if pca_dim is not None:
            explained[f"{group}_clear"] = float(100 * pca_clear.explained_variance_ratio_.sum())
            explained[f"{group}_anon"] = float(100 * pca_anon.explained_variance_ratio_.sum())
        train_a = part.train_orig.with_matrix(front_end(pca_clear, part.train_orig.matrix))
        train_b = part.train_anon.with_matrix(front_end(pca_anon, part.train_anon.matrix))
        if method == "procrustes":
            paired = train_b.select(train_a.ids, what="train-anon (Procrustes pairs each train-orig utterance)")
            rotation = orthogonal_procrustes(train_a.matrix, paired.matrix)
        else:
            rotation = wasserstein_procrustes(train_a.matrix, train_b.matrix, wasserstein)
        restored_train = train_b.with_matrix(train_b.matrix @ rotation.T)
        counts[:2] += top1_accuracy(train_a, restored_train, inputs.utt2spk)
        test_c = part.test_orig.with_matrix(front_end(pca_clear, part.test_orig.matrix))
        test_d = part.test_anon.with_matrix(front_end(pca_anon, part.test_anon.matrix) @ rotation.T)
        counts[2:] += top1_accuracy(test_c, test_d, inputs.utt2spk)
        totals += (len(train_a), len(test_c))
        restored_test.update(zip(test_d.ids, test_d.matrix))
        enrolled = front_end(pca_clear, part.enroll.matrix)
        enroll_vectors.update(zip(part.enroll.ids, enrolled))
        group_of.update({key: group for key in (*part.enroll.ids, *part.test_anon.ids)})
    crossing = [t for t in inputs.trials if group_of[t.enrol_speaker] != group_of[t.test_utt]]
    if crossing:
        raise AttackError(f"trials: {len(crossing)} trial(s) pair speakers of different sex, e.g. "
                          f"{crossing[0].enrol_speaker} {crossing[0].test_utt}; sex-specific front-ends "
                          "put them in different spaces (drop --by-sex or use same-sex trials)")
    scores = np.array([enroll_vectors[t.enrol_speaker] @ restored_test[t.test_utt] for t in inputs.trials])
    is_target = np.array([t.target for t in inputs.trials], dtype=bool)
    tar, non = scores[is_target], scores[~is_target]
    if tar.size == 0 or non.size == 0:
        raise AttackError("trials: need both target and nontarget trials to measure linkability")
    return InversionResult(
        train_top1_speaker=100.0 * counts[0] / totals[0], train_top1_segment=100.0 * counts[1] / totals[0],
        test_top1_speaker=100.0 * counts[2] / totals[1], test_top1_segment=100.0 * counts[3] / totals[1],
        eer_rocch=100.0 * eer(tar, non, "rocch"), min_cllr=min_cllr(tar, non), cllr=cllr(tar, non),
        linkability=linkability(tar, non), eer_sweep=100.0 * eer(tar, non, "sweep"),
        n_target=int(tar.size), n_nontarget=int(non.size), pca_explained_variance=explained)


@dataclass(frozen=True)
class _Part:
    train_orig: Vectors
    train_anon: Vectors
    test_orig: Vectors
    test_anon: Vectors
    enroll: Vectors


def _check_inputs(inputs: InversionInputs) -> None:
    sets = {"train-orig": inputs.train_orig, "train-anon": inputs.train_anon,
            "test-orig": inputs.test_orig, "test-anon": inputs.test_anon, "enroll": inputs.enroll}
    dims = {name: vectors.dim for name, vectors in sets.items()}
    if len({dims["train-orig"], dims["test-orig"], dims["enroll"]}) != 1 or dims["train-anon"] != dims["test-anon"]:
        raise AttackError(f"vector sizes do not fit: {dims}; clear sets (train-orig, test-orig, enroll) "
                          "and anonymised sets (train-anon, test-anon) must each share one size")
    if dims["train-orig"] != dims["train-anon"]:
        raise AttackError(f"clear vectors have {dims['train-orig']} dimensions and anonymised ones "
                          f"{dims['train-anon']}: a rotation needs equal sizes (use --pca to reduce both)")
    for name in ("train-orig", "train-anon", "test-orig", "test-anon"):
        missing = [utt for utt in sets[name].ids if utt not in inputs.utt2spk]
        if missing:
            raise AttackError(f"utt2spk: no speaker for {len(missing)} {name} utterance(s): {', '.join(missing[:5])}")
    if not inputs.trials:
        raise AttackError("trials: empty")
    inputs.test_anon.select({t.test_utt: None for t in inputs.trials}, what="test-anon (trial test utterances)")
    inputs.enroll.select({t.enrol_speaker: None for t in inputs.trials}, what="enroll (trial enrolment speakers)")


def _groups(inputs: InversionInputs, spk2gender: Mapping[str, str] | None) -> dict[str, _Part]:
    whole = _Part(inputs.train_orig, inputs.train_anon, inputs.test_orig, inputs.test_anon, inputs.enroll)
    if spk2gender is None:
        return {"all": whole}

    def sex_of_speaker(spk: str, what: str) -> str:
        if spk not in spk2gender:
            raise AttackError(f"spk2gender: no sex for speaker {spk!r} (of {what})")
        if spk2gender[spk] not in GENDERS:
            raise AttackError(f"spk2gender: speaker {spk!r} has label {spk2gender[spk]!r}, expected f or m")
        return spk2gender[spk]

    def split(vectors: Vectors, what: str, speaker_level: bool = False) -> dict[str, list[str]]:
        by_sex: dict[str, list[str]] = {sex: [] for sex in GENDERS}
        for key in vectors.ids:
            by_sex[sex_of_speaker(key if speaker_level else inputs.utt2spk[key], what)].append(key)
        return by_sex

    splits = {name: split(getattr(whole, name), name.replace("_", "-"), name == "enroll")
              for name in ("train_orig", "train_anon", "test_orig", "test_anon", "enroll")}
    parts: dict[str, _Part] = {}
    for sex in GENDERS:
        if not any(splits[name][sex] for name in ("test_anon", "enroll")):
            continue
        empty = [name.replace("_", "-") for name in ("train_orig", "train_anon") if not splits[name][sex]]
        if empty:
            raise AttackError(f"--by-sex: no {sex} vectors in {', '.join(empty)} to train the {sex} rotation")
        parts[sex] = _Part(*(getattr(whole, name).select(splits[name][sex])
                             for name in ("train_orig", "train_anon", "test_orig", "test_anon", "enroll")))
    return parts
