"""``voxanon zllr``: zero-LLR sex neutralisation of speaker embeddings (P.-G. Noé, *Representing evidence
for attribute privacy*, PhD thesis, Avignon 2023, ch. 5).

* ``zllr train``: fit the normalizing-flow discriminant analysis on labelled vectors, plus
  the two baselines (LDA whitening, balanced global average), into a model folder;
* ``zllr apply``: protect vectors with the flow (or a baseline);
* ``zllr eval``: sex EER / D_ECE of ignorant and informed attackers and ASV EER / min Cllr,
  for the original vectors and every protection, in one table;
* ``zllr import``: convert the pickled flow of the ICASSP 2023 release into a model folder;
* ``zllr toy``: LDA, QDA and the flow on 2-D Gaussians, Moons and Circles (Noé's thesis, Table 1).

Model folder: ``flow.json`` + ``flow.safetensors`` (the flow), ``baselines.safetensors``
(LDA means and precision, global average; absent for imported flows) and
``training.json`` (options and per-epoch history).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...data_prep.corpus import read_mapping, read_trials
from ...models.nets.flow_config import MU_STRATEGIES, PROTECTION_METHODS
from .options import add_flow_training_arguments


TOY_INITIAL_MU = 3.0
"""ASSUMPTION: a fixed initial μ for the toy sets (the thesis initialised μ by hand, to 10, for x-vectors).
The shared-covariance KL is about 0 for Circles, and from there μ grows too slowly."""


def add_parser(subparsers) -> None:
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
    apply.add_argument("--method", choices=PROTECTION_METHODS, default="zllr")
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

    toy = commands.add_parser("toy",
                              help="Cllr of LDA, QDA and the flow on 2-D toy data (Noé 2023 thesis, Table 1)")
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


def run_train(args: argparse.Namespace) -> int:
    from ..training.zllr_flow import run_train as train_flow_folder

    return train_flow_folder(args)


def run_apply(args: argparse.Namespace) -> int:
    from ...data_prep.vectors import read_vectors, write_vectors
    from ..training.zllr_flow import Protections

    protections = Protections(args.model)
    vectors = read_vectors(args.vectors)
    write_vectors(args.out, vectors.with_matrix(protections.protect(args.method, vectors.matrix)), text=args.text)
    print(f"{args.method}: protected {len(vectors)} vectors -> {args.out}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from ...data_prep.vectors import read_vectors
    from ..evaluation.zllr import evaluation_table, format_evaluation
    from ..labelled_vectors import read_labelled_vectors
    from ..training.zllr_flow import Protections

    protections = Protections(args.model)
    vectors, is_female, speakers = read_labelled_vectors(args.vectors, args.utt2spk, args.spk2gender)
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


def run_toy(args: argparse.Namespace) -> int:
    import torch

    from ..evaluation.zllr import format_toy, toy_table

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
