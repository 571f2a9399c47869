"""What zero-LLR protection hides and keeps: sex attackers and ASV on vectors before and after each
protection (``voxanon zllr eval``), and the 2-D toy check of the flow against LDA and QDA (``voxanon zllr
toy``; Noé, *Representing evidence for attribute privacy*, PhD thesis, Avignon 2023, Table 1)."""
from __future__ import annotations

import numpy as np

from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import Vectors, speaker_means
from ...eval.attacks.sex import sex_attack
from ...eval.cllr import cllr, min_cllr
from ...eval.eer import eer
from ...models.nets.flow_config import FlowConfig, TrainingConfig
from ...models.speakers.lda import LinearDiscriminant, QuadraticDiscriminant
from ..training.zllr_flow import Protections
from .scoring import cosine_trial_scores


def _speaker_halves(speakers: list[str], is_female: np.ndarray, seed: int) -> np.ndarray:
    """Rows of an attacker-training half of the speakers, drawn per sex."""
    rng = np.random.default_rng(seed)
    sex_of = dict(zip(speakers, is_female))
    chosen: set[str] = set()
    for sex in (True, False):
        group = sorted(spk for spk, female in sex_of.items() if female == sex)
        if len(group) < 4:
            raise VoxanonError(f"zllr eval: {len(group)} {'female' if sex else 'male'} speaker(s); the attackers "
                               "need at least 4 of each sex (2 to train, 2 to test)")
        chosen.update(rng.permutation(group)[:len(group) // 2].tolist())
    return np.array([spk in chosen for spk in speakers])


def evaluation_table(protections: Protections, vectors: Vectors, is_female: np.ndarray, speakers: list[str],
                     enrolment: Vectors, enroll_utt2spk: dict[str, str] | None, trials, classifier: str,
                     seed: int) -> dict[str, dict[str, float]]:
    """Per system: sex EER (%) and D_ECE of both attackers, ASV ROCCH-EER (%) and min Cllr.

    ``enrolment`` is speaker-level, or utterance-level with ``enroll_utt2spk`` (protected
    per utterance, then averaged by speaker).
    """
    attacker_train = _speaker_halves(speakers, is_female, seed)
    groups = np.array(speakers)[attacker_train]
    original = vectors.matrix
    table: dict[str, dict[str, float]] = {}
    for system in ("original", *protections.available):
        protected = original if system == "original" else protections.protect(system, original)
        test_x, test_y = protected[~attacker_train], is_female[~attacker_train]
        ignorant = sex_attack(original[attacker_train], is_female[attacker_train], test_x, test_y, classifier,
                              train_groups=groups, seed=seed)
        informed = ignorant if system == "original" else sex_attack(
            protected[attacker_train], is_female[attacker_train], test_x, test_y, classifier,
            train_groups=groups, seed=seed)
        enrolled = enrolment if system == "original" else \
            enrolment.with_matrix(protections.protect(system, enrolment.matrix))
        if enroll_utt2spk is not None:
            enrolled = speaker_means(enrolled, enroll_utt2spk)
        tar, non, left_out = cosine_trial_scores(dict(zip(enrolled.ids, enrolled.matrix)),
                                                 dict(zip(vectors.ids, protected)), trials)
        if left_out:
            raise VoxanonError(f"trials: {left_out} trial(s) name an enrolment speaker or test utterance "
                               "with no vector")
        table[system] = {
            "sex_eer_ignorant": ignorant.eer, "sex_dece_ignorant": ignorant.dece,
            "sex_eer_informed": informed.eer, "sex_dece_informed": informed.dece,
            "asv_eer": 100.0 * eer(tar, non, "rocch"), "asv_min_cllr": min_cllr(tar, non, tie_order="tar_non")}
    return table


def format_evaluation(table: dict[str, dict[str, float]], classifier: str) -> str:
    lines = [f"sex attackers: {classifier} classifier; ASV: cosine scores, enrolment and test protected",
             f"{'system':<9} {'ignorant':>16} {'informed':>16} {'ASV':>16}",
             f"{'':<9} {'EER %':>8}{'D_ECE':>8} {'EER %':>8}{'D_ECE':>8} {'EER %':>8}{'minCllr':>8}"]
    for system, row in table.items():
        lines.append(f"{system:<9} {row['sex_eer_ignorant']:8.2f}{row['sex_dece_ignorant']:8.3f} "
                     f"{row['sex_eer_informed']:8.2f}{row['sex_dece_informed']:8.3f} "
                     f"{row['asv_eer']:8.2f}{row['asv_min_cllr']:8.3f}")
    return "\n".join(lines)



TOY_TRAIN, TOY_TEST = 10_000, 2_000
TOY_GAUSSIANS = ((np.array([1.0, 1.0]), np.array([[1.0, 0.6], [0.6, 1.0]])),
                 (np.array([-1.0, -0.5]), np.array([[1.5, -0.3], [-0.3, 0.5]])))
"""(mean, covariance) of class 1 and class 2 of the Gaussians toy set (ASSUMPTION; the thesis gives none)."""


def toy_dataset(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, is_class1)`` with balanced classes; Moons and Circles use noise 0.1 (circles factor 0.5)."""
    from sklearn.datasets import make_circles, make_moons

    if name == "Gaussians":
        rng = np.random.default_rng(seed)
        first, second = (rng.multivariate_normal(mean, cov, size=size)
                         for (mean, cov), size in zip(TOY_GAUSSIANS, (n - n // 2, n // 2)))
        return np.concatenate((first, second)), np.arange(n) < n - n // 2
    if name == "Moons":
        x, y = make_moons(n, noise=0.1, random_state=seed)
    elif name == "Circles":
        x, y = make_circles(n, noise=0.1, factor=0.5, random_state=seed)
    else:
        raise VoxanonError(f"unknown toy data set {name!r}")
    return x, y == 0


def toy_table(*, hidden: int = 64, learning_rate: float = 1e-3, epochs: int = 100, mu_strategy: str = "mle",
              initial_mu: float | None, seed: int = 0, datasets=("Gaussians", "Moons", "Circles"),
              progress: bool = True) -> dict[str, dict[str, float]]:
    """Test-set Cllr and min Cllr of LDA, QDA and the flow per toy data set."""
    from ...models.nets.flow import train_zero_llr_flow  # torch, only for this check

    table: dict[str, dict[str, float]] = {}
    for offset, name in enumerate(datasets):
        train_x, train_y = toy_dataset(name, TOY_TRAIN, seed + 2 * offset)
        test_x, test_y = toy_dataset(name, TOY_TEST, seed + 2 * offset + 1)
        flow, _ = train_zero_llr_flow(train_x, train_y, FlowConfig(dim=2, hidden=hidden),
                                      TrainingConfig(mu_strategy=mu_strategy, learning_rate=learning_rate,
                                                     max_epochs=epochs, patience=10, initial_mu=initial_mu,
                                                     seed=seed),
                                      progress=progress)
        llrs = {"LDA": LinearDiscriminant.fit(train_x, train_y).llr(test_x),
                "QDA": QuadraticDiscriminant.fit(train_x, train_y).llr(test_x),
                "flow": flow.llr_numpy(test_x)}
        row = {}
        for system, llr in llrs.items():
            row[f"{system}_min_cllr"] = min_cllr(llr[test_y], llr[~test_y])
            row[f"{system}_cllr"] = cllr(llr[test_y], llr[~test_y])
        row["flow_mu"] = flow.mu
        table[name] = row
    return table


def format_toy(table: dict[str, dict[str, float]]) -> str:
    lines = [f"{'data set':<10} {'LDA':>14} {'QDA':>14} {'flow':>14}",
             f"{'':<10} " + " ".join(f"{'minCllr':>7}{'Cllr':>7}" for _ in range(3))]
    for name, row in table.items():
        lines.append(f"{name:<10} " + " ".join(f"{row[f'{s}_min_cllr']:7.3f}{row[f'{s}_cllr']:7.3f}"
                                               for s in ("LDA", "QDA", "flow")))
    lines.append(f"test sets of {TOY_TEST} samples, trained on {TOY_TRAIN}; Cllr in bits")
    return "\n".join(lines)
