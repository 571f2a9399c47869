"""``voxanon challenge``: the whole VoicePrivacy 2024 evaluation of one system in one command."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .options import add_device_argument, add_evaluation_input_arguments
from .options import add_backend_arguments, backend_from_args
from ..systems.recipes import available_recipes


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "challenge", help="the whole VoicePrivacy 2024 evaluation of a system: anonymise, train the semi-informed "
                          "attacker, evaluate ASV (ignorant, lazy- and semi-informed), WER and SER",
        description="Anonymise the training set(s) with the system, train the semi-informed attacker "
                    "(ASV_eval^anon, an ECAPA-TDNN, as 'voxanon train asv') on them, anonymise the evaluation "
                    "sets (and IEMOCAP), then evaluate: ASV_eval on o-o, o-a (ignorant attacker) and a-a "
                    "(lazy-informed), ASV_eval^anon on a-a (semi-informed), WER, and SER UAR, per set. Every "
                    "stage is cached and resumes: a rerun with nothing new computes nothing. Writes "
                    "results.json/.csv/.md and report.html (published VPC 2024 figures beside) into --out.")
    parser.add_argument("--system", required=True, help="anonymisation system (e.g. b2) or a recipe .yaml")
    parser.add_argument("--train", required=True, action="append", type=Path, metavar="DATA_TRAIN",
                        help="training data directory for the attacker, original speech (e.g. LibriSpeech "
                             "train-clean-360); repeatable")
    parser.add_argument("--data", required=True, type=Path, metavar="DATA_EVAL",
                        help="evaluation sets: a folder of VoicePrivacy-layout sets (libri_dev_enrolls, "
                             "libri_dev_trials_f, ...) or one data directory with enrolls and trials")
    parser.add_argument("--iemocap", action="append", type=Path, default=[], metavar="DIR",
                        help="IEMOCAP set with utt2emo and spk2fold (voxanon prepare iemocap); repeatable")
    parser.add_argument("--ser-models", type=Path, metavar="DIR",
                        help="folder of fold_<k> speechbrain wav2vec2 IEMOCAP emotion models (with --iemocap)")
    parser.add_argument("--asr", metavar="SPEC", help="ASR model for WER (a name or model directory; 'none' for no "
                                                      "WER; default: the protocol's)")
    parser.add_argument("--asv-eval", metavar="SPEC",
                        help="ASV_eval, the evaluation speaker encoder (ge2e, ecapa:DIR, ecapa-voxceleb:DIR; "
                             "default: the protocol's)")
    parser.add_argument("--protocol", default="vpc2024",
                        help=f"evaluation protocol ({', '.join(available_recipes('protocols'))}) or a .yaml path "
                             "(default vpc2024)")
    parser.add_argument("--out", type=Path, default=Path("challenge"), metavar="DIR",
                        help="output folder: anonymised sets in DIR/anon, the attacker in DIR/attacker, the "
                             "report in DIR (default ./challenge)")
    parser.add_argument("--set", dest="system_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a system setting, e.g. --set mcadams.alpha=0.75 (repeatable)")
    parser.add_argument("--train-set", dest="train_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override an attacker training setting (recipes/training/asv_ecapa.yaml), e.g. "
                             "--train-set number_of_epochs=2 (repeatable)")
    parser.add_argument("--eval-set", dest="protocol_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a protocol setting, e.g. --eval-set asv.batch_size=8 (repeatable)")
    add_device_argument(parser, "every model runs: the system's neural stages, the attacker's training, the "
                                "evaluation's speaker encoders and ASR model, and SER")
    add_evaluation_input_arguments(parser)
    add_backend_arguments(parser, "worker processes (local; default: the number of cores) or Ray actors (default: "
                                  "as many as the cluster's CPUs/GPUs hold), for anonymisation and evaluation")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.challenge import stage_summary

    from ..evaluation.challenge import ChallengeInputs, run_challenge
    from .options import cache_from
    from ..evaluation.outputs import print_table

    inputs = ChallengeInputs(
        system=args.system, train=list(args.train), data=args.data, out=args.out, iemocap=list(args.iemocap),
        ser_models=args.ser_models, asr=args.asr, asv_eval=args.asv_eval, protocol=args.protocol,
        system_overrides=args.system_overrides, train_overrides=args.train_overrides,
        protocol_overrides=args.protocol_overrides, device=args.device,
        workers=args.workers or os.cpu_count() or 1, backend=backend_from_args(args), batch_size=args.batch_size,
        cache=cache_from(args), allow_pipes=args.allow_pipes, allow_missing=args.allow_missing,
        trust_model_code=args.trust_model_code, progress=not args.quiet)
    try:
        outcome = run_challenge(inputs)
    finally:
        if inputs.backend is not None:
            inputs.backend.close()   # its Ray actors served every stage
    print_table(outcome.evaluation.results)
    print(stage_summary(outcome.stages))
    print(f"report: {outcome.report}")
    return 0


