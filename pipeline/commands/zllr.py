"""``voxanon zllr``: zero-LLR sex neutralisation of speaker embeddings (Noé 2023 thesis, ch. 5).

* ``zllr train``: fit the normalizing-flow discriminant analysis on labelled vectors, plus
  the two baselines (LDA whitening, balanced global average), into a model folder;
* ``zllr apply``: protect vectors with the flow (or a baseline);
* ``zllr eval``: sex EER / D_ECE of ignorant and informed attackers and ASV EER / min Cllr,
  for the original vectors and every protection, in one table;
* ``zllr import``: convert the pickled flow of the ICASSP 2023 release into a model folder;
* ``zllr toy``: LDA, QDA and the flow on 2-D Gaussians, Moons and Circles (Noé 2023 thesis, Table 1).

Model folder: ``flow.json`` + ``flow.safetensors`` (the flow), ``baselines.safetensors``
(LDA means and precision, global average; absent for imported flows) and
``training.json`` (options and per-epoch history).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from ...data_prep.corpus import read_mapping, read_trials
from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import Vectors, read_vectors, speaker_means, write_vectors
from ...models.nets.flow_config import FlowConfig, MU_STRATEGIES, TrainingConfig
from ...models.speakers.lda import LinearDiscriminant, QuadraticDiscriminant
from .options import add_flow_training_arguments
from ..training.zllr_flow import METHODS, Protections


log = logging.getLogger(__name__)

DEFAULT_TRAINING = TrainingConfig()


def add_parser(subparsers) -> None:
    from ..training.zllr_flow import run_train

    parser = subparsers.add_parser(
        "zllr", help="zero-LLR sex neutralisation of embeddings",
        description="Zero-LLR sex neutralisation: train a normalizing-flow discriminant analysis whose first "
                    "base coordinate is the sex LLR, protect vectors by zeroing it, evaluate sex and ASV "
                    "metrics before and after, import the ICASSP 2023 flow, or run the 2-D toy check.")
    commands = parser.add_subparsers(dest="zllr_command", metavar="COMMAND", required=True)

    train = commands.add_parser("train", help="train the flow and the baselines")
    train.add_argument("--vectors", required=True, type=Path, metavar="V", help="training vectors (utterance-level)")
    train.add_argument("--utt2spk", required=True, type=Path, metavar="U")
    train.add_argument("--spk2gender", required=True, type=Path, metavar="G")
    train.add_argument("--out", required=True, type=Path, metavar="MODEL", help="model folder to write")
    train.add_argument("--l2-normalise", action="store_true",
                       help="L2-normalise vectors before the flow (as the ICASSP 2023 ECAPA set-up)")
    add_flow_training_arguments(train)
    train.set_defaults(run=run_train)

    apply = commands.add_parser("apply", help="protect vectors")
    apply.add_argument("--model", required=True, type=Path, metavar="MODEL")
    apply.add_argument("--vectors", required=True, type=Path, metavar="V")
    apply.add_argument("--out", required=True, type=Path, metavar="W",
                       help="protected vectors (.ark, .scp or .npy, as the suffix says)")
    apply.add_argument("--method", choices=METHODS, default="zllr")
    apply.add_argument("--text", action="store_true", help="write a text (not binary) Kaldi archive")
    apply.set_defaults(run=run_apply)

    evaluate = commands.add_parser(
        "eval", help="sex and ASV metrics before and after protection",
        description="The speakers of V are split in two halves (per sex): attackers train sex classifiers on "
                    "one half (ignorant: original vectors; informed: vectors of the system) and are tested on "
                    "the other half's vectors of the system. ASV: cosine scores of enrolment against test "
                    "vectors over the trials, both sides protected.")
    evaluate.add_argument("--model", required=True, type=Path, metavar="MODEL")
    evaluate.add_argument("--vectors", required=True, type=Path, metavar="V", help="utterance-level test vectors")
    evaluate.add_argument("--utt2spk", required=True, type=Path, metavar="U")
    evaluate.add_argument("--spk2gender", required=True, type=Path, metavar="G")
    evaluate.add_argument("--trials", required=True, type=Path, metavar="T")
    evaluate.add_argument("--enroll", required=True, type=Path, metavar="E",
                          help="enrolment vectors: speaker-level, or utterance-level with --enroll-utt2spk "
                               "(then each utterance is protected before averaging)")
    evaluate.add_argument("--enroll-utt2spk", type=Path, metavar="FILE")
    evaluate.add_argument("--classifier", choices=("logistic", "mlp"), default="mlp",
                          help="the attackers' sex classifier (default mlp, the thesis's perceptron)")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(run=run_eval)

    convert = commands.add_parser("import", help="convert a published pickled flow (ICASSP 2023 zLLR-VC model.pt, "
                                                 "or the ICASSP 2022 bridge-features-evidence model_<epoch>.pt)")
    convert.add_argument("--pickle", required=True, type=Path, metavar="FILE")
    convert.add_argument("--mu", type=float, metavar="MU",
                         help="the prior's mu, for the bridge-features-evidence flow, whose pickle does not hold it "
                              "(its training wrote it to mu.txt); the zLLR-VC flow holds its own")
    convert.add_argument("--out", required=True, type=Path, metavar="MODEL")
    convert.add_argument("--no-l2-normalise", action="store_true",
                         help="do not L2-normalise inputs (the release's ECAPA vectors are normalised)")
    convert.set_defaults(run=run_import)

    toy = commands.add_parser("toy", help="Cllr of LDA, QDA and the flow on 2-D toy data (Noé 2023 thesis, Table 1)")
    toy.add_argument("--hidden", type=int, default=64, help="coupling width (default 64)")
    toy.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    toy.add_argument("--epochs", type=int, default=100, help="maximum epochs (default 100)")
    toy.add_argument("--mu-strategy", choices=MU_STRATEGIES, default="mle")
    toy.add_argument("--mu0", type=float, default=TOY_INITIAL_MU,
                     help=f"initial μ (default {TOY_INITIAL_MU:g}; see --kl-init)")
    toy.add_argument("--kl-init", action="store_true",
                     help="start μ from the shared-covariance KL instead (≈ 0 for Circles, whose class means "
                          "coincide; the flow then needs far more epochs)")
    toy.add_argument("--seed", type=int, default=0)
    toy.add_argument("--quiet", action="store_true", help="no progress bars")
    toy.add_argument("--json", action="store_true")
    toy.set_defaults(run=run_toy)


def run_apply(args: argparse.Namespace) -> int:
    protections = Protections(args.model)
    vectors = read_vectors(args.vectors)
    write_vectors(args.out, vectors.with_matrix(protections.protect(args.method, vectors.matrix)), text=args.text)
    print(f"{args.method}: protected {len(vectors)} vectors -> {args.out}")
    return 0


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
    from ...eval.attacks.sex import sex_attack
    from ...eval.cllr import min_cllr
    from ...eval.eer import eer
    from ..evaluation.scoring import cosine_trial_scores

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


def run_eval(args: argparse.Namespace) -> int:
    from ..labelled_vectors import _labelled

    protections = Protections(args.model)
    vectors, is_female, speakers = _labelled(args.vectors, args.utt2spk, args.spk2gender)
    enrolment = read_vectors(args.enroll)
    enroll_utt2spk = read_mapping(args.enroll_utt2spk, value_kind="speaker") if args.enroll_utt2spk else None
    table = evaluation_table(protections, vectors, is_female, speakers, enrolment, enroll_utt2spk,
                             read_trials(args.trials), args.classifier, args.seed)
    print(json.dumps(table, indent=2) if args.json else format_evaluation(table, args.classifier))
    return 0


def run_import(args: argparse.Namespace) -> int:
    from ...models.nets.flow import save_flow
    from ...models.checkpoints.zllr_flow import import_reference_flow

    model = import_reference_flow(args.pickle, l2_normalise_input=not args.no_l2_normalise, mu=args.mu)
    save_flow(model, args.out)
    print(f"imported flow: dimension {model.config.dim}, width {model.config.hidden}, "
          f"{model.config.n_layers} layers, μ = {model.mu:.3f} -> {args.out}")
    return 0


TOY_TRAIN, TOY_TEST = 10_000, 2_000
TOY_INITIAL_MU = 3.0
"""ASSUMPTION: a fixed initial μ for the toy sets (Noé 2023 thesis initialised μ by hand, to 10, for x-vectors).
The shared-covariance KL is about 0 for Circles, and from there μ grows too slowly."""
TOY_GAUSSIANS = ((np.array([1.0, 1.0]), np.array([[1.0, 0.6], [0.6, 1.0]])),
                 (np.array([-1.0, -0.5]), np.array([[1.5, -0.3], [-0.3, 0.5]])))
"""(mean, covariance) of class 1 and class 2 of the Gaussians toy set (ASSUMPTION; Noé 2023 thesis gives none)."""


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
              initial_mu: float | None = TOY_INITIAL_MU, seed: int = 0, datasets=("Gaussians", "Moons", "Circles"),
              progress: bool = True) -> dict[str, dict[str, float]]:
    """Test-set Cllr and min Cllr of LDA, QDA and the flow per toy data set."""
    from ...eval.cllr import cllr, min_cllr
    from ...models.nets.flow import train_zero_llr_flow

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


def run_toy(args: argparse.Namespace) -> int:
    import torch

    # Tiny 2-D networks run several times faster without intra-op threads.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        table = toy_table(hidden=args.hidden, learning_rate=args.lr, epochs=args.epochs,
                          mu_strategy=args.mu_strategy, initial_mu=None if args.kl_init else args.mu0,
                          seed=args.seed, progress=not args.quiet)
    finally:
        torch.set_num_threads(threads)
    print(json.dumps(table, indent=2) if args.json else format_toy(table))
    return 0
