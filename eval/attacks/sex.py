"""Sex-attribute attacks on embeddings (Noé 2023 thesis §5.3–5.4): classifiers with calibrated LLRs.

Two classifiers, both on standardised inputs: logistic regression and a small MLP (one
hidden layer, the "two-layer perceptron" of the thesis). Their raw log-odds become LLRs through
a linear (logistic-regression) calibration fitted on out-of-fold training scores, folds
split by speaker when speakers are known, so that the map is not fitted on scores of
vectors the classifier has seen. Positive LLRs support **female** (thesis Eq. 78).

The attacker model is the caller's choice of training data: *ignorant* trains on
original vectors, *informed* on protected ones; both are tested on protected vectors.

Reported per test set: ROCCH-EER (%), ZEBRA D_ECE and worst case, Cllr of the calibrated
LLRs and min Cllr (bits). EER 50 %, D_ECE 0 and min Cllr 1 mean nothing is disclosed.
min Cllr pools LLRs tied across the sexes (``tar_non``), so that a constant output
scores 1 (no information) rather than the 0 the optimistic tie order gives it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ...data_prep.errors import VoxanonError
from .settings import CLASSIFIERS

# scikit-learn and SciPy (and the metrics, which use it) load when a classifier is trained or assessed.
if TYPE_CHECKING:
    from sklearn.pipeline import Pipeline

    from ..calibration import LinearCalibration

MLP_HIDDEN_UNITS = 64
CALIBRATION_FOLDS = 5
# Raw probabilities are clipped before the logit so that a saturated MLP gives finite scores.
PROBABILITY_FLOOR = 1e-12


class SexAttackError(VoxanonError):
    """Sex-attack inputs that cannot be used."""


@dataclass(frozen=True)
class SexClassifier:
    """A trained classifier and the calibration of its log-odds; :meth:`llr` gives natural-log LLRs."""

    kind: str
    model: Pipeline
    calibration: LinearCalibration

    def raw_scores(self, vectors: np.ndarray) -> np.ndarray:
        return _log_odds(self.model, vectors)

    def llr(self, vectors: np.ndarray) -> np.ndarray:
        """ln p(x|female) / p(x|male)."""
        return self.calibration(self.raw_scores(vectors))


@dataclass(frozen=True)
class SexAssessment:
    """Metrics of female-vs-male LLRs: EER in %, D_ECE / Cllr / min Cllr in bits, worst case in log10."""

    eer: float
    dece: float
    worst_case_log10: float
    tag: str
    cllr: float
    min_cllr: float
    n_female: int
    n_male: int

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _model(kind: str, seed: int) -> Pipeline:
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "logistic":
        classifier = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000)
    elif kind == "mlp":
        classifier = MLPClassifier(hidden_layer_sizes=(MLP_HIDDEN_UNITS,), alpha=1e-3, max_iter=500,
                                   early_stopping=True, n_iter_no_change=20, random_state=seed)
    else:
        raise SexAttackError(f"unknown sex classifier {kind!r}; choose one of {', '.join(CLASSIFIERS)}")
    return make_pipeline(StandardScaler(), classifier)


def _log_odds(model: Pipeline, vectors: np.ndarray) -> np.ndarray:
    from scipy.special import logit

    female = list(model.classes_).index(True)
    probability = np.clip(model.predict_proba(np.asarray(vectors, dtype=np.float64))[:, female],
                          PROBABILITY_FLOOR, 1.0 - PROBABILITY_FLOOR)
    return logit(probability)


def _check_training_set(vectors: np.ndarray, is_female: np.ndarray, groups) -> None:
    if vectors.ndim != 2 or len(vectors) != len(is_female):
        raise SexAttackError(f"{len(is_female)} labels for vectors of shape {vectors.shape}")
    if groups is not None and len(groups) != len(is_female):
        raise SexAttackError(f"{len(groups)} speaker ids for {len(is_female)} vectors")
    for sex, present in (("female", is_female), ("male", ~is_female)):
        count = int(present.sum()) if groups is None else len(set(np.asarray(groups)[present]))
        if count < 2:
            unit = "vectors" if groups is None else "speakers"
            raise SexAttackError(f"sex classifier training needs at least 2 {sex} {unit}, got {count}")


def train_sex_classifier(vectors: np.ndarray, is_female: Sequence[bool], kind: str = "logistic", *,
                         groups: Sequence[str] | None = None, seed: int = 0) -> SexClassifier:
    """Fit ``kind`` on all vectors, and its LLR calibration on out-of-fold scores.

    ``groups`` (speaker ids) keeps each speaker's vectors in one fold.
    """
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold, StratifiedKFold

    from ..calibration import LinearCalibration, fit_linear_calibration

    vectors = np.asarray(vectors, dtype=np.float64)
    is_female = np.asarray(is_female, dtype=bool)
    _check_training_set(vectors, is_female, groups)
    model = _model(kind, seed)
    if groups is None:
        folds = min(CALIBRATION_FOLDS, int(is_female.sum()), int((~is_female).sum()))
        splits = StratifiedKFold(folds, shuffle=True, random_state=seed).split(vectors, is_female)
    else:
        folds = min(CALIBRATION_FOLDS, len(set(groups)))
        splits = GroupKFold(folds).split(vectors, is_female, groups)
    out_of_fold = np.empty(len(vectors))
    for train_rows, held_out in splits:
        if len(set(is_female[train_rows])) < 2:
            raise SexAttackError("a calibration fold holds speakers of one sex only; "
                                 "give more speakers of each sex")
        fold_model = clone(model).fit(vectors[train_rows], is_female[train_rows])
        out_of_fold[held_out] = _log_odds(fold_model, vectors[held_out])
    if np.ptp(out_of_fold) == 0.0:
        # Identical scores for every vector (e.g. every vector replaced by one global
        # embedding): the cross-entropy optimum at prior 0.5 is the zero-evidence map.
        calibration = LinearCalibration(slope=0.0, offset=0.0)
    else:
        calibration = fit_linear_calibration(out_of_fold[is_female], out_of_fold[~is_female])
    return SexClassifier(kind, model.fit(vectors, is_female), calibration)


def assess_sex_llrs(llrs: Sequence[float], is_female: Sequence[bool]) -> SexAssessment:
    """EER, ZEBRA and Cllr figures of LLRs where positive values support female."""
    from ..cllr import cllr, min_cllr
    from ..eer import eer
    from ..zebra import zebra

    llrs = np.asarray(llrs, dtype=np.float64)
    is_female = np.asarray(is_female, dtype=bool)
    if len(llrs) != len(is_female):
        raise SexAttackError(f"{len(llrs)} LLRs for {len(is_female)} labels")
    female, male = llrs[is_female], llrs[~is_female]
    if female.size == 0 or male.size == 0:
        raise SexAttackError("sex assessment needs test vectors of both sexes")
    disclosure = zebra(female, male)
    return SexAssessment(eer=100.0 * eer(female, male, "rocch"), dece=disclosure.dece_bits,
                         worst_case_log10=disclosure.worst_case_log10, tag=disclosure.tag,
                         cllr=cllr(female, male), min_cllr=min_cllr(female, male, tie_order="tar_non"),
                         n_female=int(female.size), n_male=int(male.size))


def sex_attack(train_vectors: np.ndarray, train_is_female: Sequence[bool], test_vectors: np.ndarray,
               test_is_female: Sequence[bool], kind: str = "logistic", *,
               train_groups: Sequence[str] | None = None, seed: int = 0) -> SexAssessment:
    """Train on one set, assess the calibrated LLRs on another."""
    classifier = train_sex_classifier(train_vectors, train_is_female, kind, groups=train_groups, seed=seed)
    test_vectors = np.asarray(test_vectors, dtype=np.float64)
    if test_vectors.ndim != 2 or test_vectors.shape[1] != classifier.model.n_features_in_:
        raise SexAttackError(f"test vectors of shape {test_vectors.shape} do not fit a classifier trained "
                             f"on {classifier.model.n_features_in_}-dimensional vectors")
    return assess_sex_llrs(classifier.llr(test_vectors), test_is_female)
