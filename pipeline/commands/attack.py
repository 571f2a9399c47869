"""``voxanon attack``: embedding-level attacks on anonymised or protected vectors.

* ``attack procrustes`` / ``attack wasserstein-procrustes``: invert an anonymiser by
  aligning clear and anonymised training vectors (Champion et al. 2021), then measure top-1
  re-identification and cosine-ASV linkability of the de-anonymised test vectors;
* ``attack sex``: train sex classifiers with calibrated LLR outputs on one vector set and
  measure what they reveal about another (ignorant: train on original vectors; informed:
  train on protected ones).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...data_prep.corpus import read_mapping, read_trials
from ...data_prep.errors import VoxanonError
from ...eval.attacks.settings import CLASSIFIERS, WassersteinProcrustesConfig


DEFAULT_WP = WassersteinProcrustesConfig()


def _add_inversion_parser(subparsers, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(name, help=help_text, description=help_text + (
        " Vector files: Kaldi .ark / .scp (binary or text) or .npy with a .ids list beside it."))
    parser.add_argument("--train-orig", required=True, type=Path, metavar="A",
                        help="clear training utterance vectors")
    parser.add_argument("--train-anon", required=True, type=Path, metavar="B",
                        help="anonymised training utterance vectors" +
                             (" (same ids as A)" if name == "procrustes" else " (no pairing with A needed)"))
    parser.add_argument("--test-orig", required=True, type=Path, metavar="C", help="clear test utterance vectors")
    parser.add_argument("--test-anon", required=True, type=Path, metavar="D", help="anonymised test utterance vectors")
    parser.add_argument("--enroll", required=True, type=Path, metavar="E",
                        help="clear enrolment vectors: speaker-level, or utterance-level with --enroll-utt2spk")
    parser.add_argument("--enroll-utt2spk", type=Path, metavar="FILE",
                        help="average utterance-level enrolment vectors by speaker with this utt2spk")
    parser.add_argument("--trials", required=True, type=Path, metavar="T",
                        help="VoicePrivacy trials file: <enrol-spk> <test-utt> target|nontarget")
    parser.add_argument("--utt2spk", required=True, type=Path, metavar="U",
                        help="speaker of every training and test utterance")
    parser.add_argument("--pca", type=int, metavar="K", help="reduce each domain to K dimensions by PCA (e.g. 70)")
    parser.add_argument("--by-sex", action="store_true", help="one front-end and rotation per sex (needs --spk2gender)")
    parser.add_argument("--spk2gender", type=Path, metavar="G", help="speaker sex labels (f/m)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    if name == "wasserstein-procrustes":
        parser.add_argument("--lr", type=float, default=DEFAULT_WP.learning_rate,
                            help=f"learning rate (default {DEFAULT_WP.learning_rate:g})")
        parser.add_argument("--batch-size", type=int, default=DEFAULT_WP.batch_size,
                            help=f"initial batch size (default {DEFAULT_WP.batch_size})")
        parser.add_argument("--iterations", type=int, default=DEFAULT_WP.iterations,
                            help=f"iterations of the first epoch (default {DEFAULT_WP.iterations})")
        parser.add_argument("--epochs", type=int, default=DEFAULT_WP.max_epochs,
                            help=f"maximum number of epochs (default {DEFAULT_WP.max_epochs})")
        parser.add_argument("--sinkhorn-reg", type=float, default=DEFAULT_WP.sinkhorn_reg,
                            help=f"Sinkhorn regularisation (default {DEFAULT_WP.sinkhorn_reg:g})")
        parser.add_argument("--seed", type=int, default=DEFAULT_WP.seed, help=f"seed (default {DEFAULT_WP.seed})")
    parser.set_defaults(run=run_inversion, method=name)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "attack", help="embedding-level attacks (inversion, sex attribute)",
        description="Embedding-level attacks. procrustes / wasserstein-procrustes invert an anonymiser by "
                    "aligning clear and anonymised training vectors, then measure top-1 re-identification and "
                    "cosine-ASV linkability of the de-anonymised test vectors. sex trains sex classifiers with "
                    "calibrated LLR outputs and measures what they reveal.")
    attacks = parser.add_subparsers(dest="attack", metavar="ATTACK", required=True)
    _add_inversion_parser(attacks, "procrustes",
                          "Invert an anonymiser with an orthogonal map fitted on paired utterances.")
    _add_inversion_parser(attacks, "wasserstein-procrustes",
                          "Invert an anonymiser with an orthogonal map fitted without pairing.")
    sex = attacks.add_parser("sex", help="sex-attribute attack with calibrated classifiers",
                             description="Train sex classifiers (calibrated LLRs, positive = female) on X and "
                                         "report EER (%), D_ECE, Cllr and min Cllr of their LLRs on Y. "
                                         "Ignorant attacker: X original; informed: X protected.")
    sex.add_argument("--train", required=True, type=Path, metavar="X", help="training vectors")
    sex.add_argument("--train-spk2gender", required=True, type=Path, metavar="G")
    sex.add_argument("--train-utt2spk", type=Path, metavar="FILE",
                     help="when X is utterance-level: its utt2spk (calibration folds then keep speakers apart)")
    sex.add_argument("--test", required=True, type=Path, metavar="Y", help="test vectors")
    sex.add_argument("--test-spk2gender", required=True, type=Path, metavar="H")
    sex.add_argument("--test-utt2spk", type=Path, metavar="FILE", help="when Y is utterance-level: its utt2spk")
    sex.add_argument("--classifier", choices=(*CLASSIFIERS, "both"), default="both")
    sex.add_argument("--seed", type=int, default=0)
    sex.add_argument("--json", action="store_true", help="print the results as JSON")
    sex.set_defaults(run=run_sex)


def run_inversion(args: argparse.Namespace) -> int:
    from ...data_prep.vectors import read_vectors
    from ...eval.attacks.inversion import InversionInputs, inversion_attack
    from ..labelled_vectors import read_enrolment, read_spk2gender

    if args.by_sex and args.spk2gender is None:
        raise VoxanonError("--by-sex needs --spk2gender")
    wasserstein = None
    if args.method == "wasserstein-procrustes":
        wasserstein = WassersteinProcrustesConfig(learning_rate=args.lr, batch_size=args.batch_size,
                                                  iterations=args.iterations, max_epochs=args.epochs,
                                                  sinkhorn_reg=args.sinkhorn_reg, seed=args.seed)
    inputs = InversionInputs(
        train_orig=read_vectors(args.train_orig), train_anon=read_vectors(args.train_anon),
        test_orig=read_vectors(args.test_orig), test_anon=read_vectors(args.test_anon),
        enroll=read_enrolment(args.enroll, args.enroll_utt2spk), trials=read_trials(args.trials),
        utt2spk=read_mapping(args.utt2spk, value_kind="speaker"))
    result = inversion_attack(inputs, args.method, pca_dim=args.pca,
                              spk2gender=read_spk2gender(args.spk2gender) if args.by_sex else None,
                              wasserstein=wasserstein)
    values = result.as_dict()
    if args.json:
        print(json.dumps(values, indent=2))
        return 0
    print(f"{args.method} attack{' (by sex)' if args.by_sex else ''}{f', PCA {args.pca}' if args.pca else ''}")
    print(f"train top-1 speaker / segment: {values['train_top1_speaker']:.2f}% / {values['train_top1_segment']:.2f}%")
    print(f"test top-1 speaker / segment: {values['test_top1_speaker']:.2f}% / {values['test_top1_segment']:.2f}%")
    print(f"trials: {values['n_target']} target, {values['n_nontarget']} nontarget (cosine scores)")
    print(f"ROCCH-EER: {values['eer_rocch']:.2f}%   EER (sweep): {values['eer_sweep']:.2f}%")
    print(f"Cllr (min/act): {values['min_cllr']:.3f}/{values['cllr']:.3f}")
    print(f"linkability: {values['linkability']:.3f}")
    for name, variance in values["pca_explained_variance"].items():
        print(f"PCA explained variance ({name}): {variance:.1f}%")
    return 0


def run_sex(args: argparse.Namespace) -> int:
    from ...data_prep.vectors import read_vectors
    from ...eval.attacks.sex import sex_attack
    from ..labelled_vectors import read_spk2gender, sex_labels

    train, test = read_vectors(args.train), read_vectors(args.test)
    train_female, train_speakers = sex_labels(
        train, read_spk2gender(args.train_spk2gender),
        read_mapping(args.train_utt2spk, value_kind="speaker") if args.train_utt2spk else None,
        f"train vectors {args.train}")
    test_female, _ = sex_labels(
        test, read_spk2gender(args.test_spk2gender),
        read_mapping(args.test_utt2spk, value_kind="speaker") if args.test_utt2spk else None,
        f"test vectors {args.test}")
    kinds = CLASSIFIERS if args.classifier == "both" else (args.classifier,)
    results = {kind: sex_attack(train.matrix, train_female, test.matrix, test_female, kind,
                                train_groups=train_speakers, seed=args.seed).as_dict() for kind in kinds}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"sex attack: trained on {args.train} ({len(train)} vectors), tested on {args.test} ({len(test)} vectors)")
    print(f"{'classifier':<10} {'EER %':>7} {'D_ECE':>7} {'l_w':>7} {'tag':>3} {'Cllr':>7} {'minCllr':>7}")
    for kind, values in results.items():
        print(f"{kind:<10} {values['eer']:7.2f} {values['dece']:7.3f} {values['worst_case_log10']:7.3f} "
              f"{values['tag']:>3} {values['cllr']:7.3f} {values['min_cllr']:7.3f}")
    return 0
