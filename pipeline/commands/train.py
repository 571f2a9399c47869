"""``voxanon train``: train the models the neural systems use.

Each action is one ``add_<action>_parser(actions)`` function listed in :data:`ACTIONS`;
adding an action is writing such a function and listing it.

* ``train vocoder``: HiFi-GAN for an SSL-SAS-layout model set (:mod:`voxanon.pipeline.training.vocoder`).
* ``train asv``: the VoicePrivacy 2024 ECAPA-TDNN attacker on (anonymised) data (:mod:`voxanon.pipeline.training.asv`).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from ...data_prep.corpus import load_corpus
from ...data_prep.errors import VoxanonError
from .options import add_corpus_arguments


log = logging.getLogger(__name__)


def _layout_override(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value must be JSON (true, false, a number)") from None


def add_vocoder_parser(actions) -> None:
    parser = actions.add_parser(
        "vocoder", help="train a HiFi-GAN vocoder on content, F0 and speaker features of a model set",
        description="Train the SSL-SAS-layout HiFi-GAN (MPD + MSD, LSGAN, feature matching, mel L1 x45; AdamW "
                    "2e-4, betas 0.8/0.99, lr decay 0.999 per epoch; 8960-sample segments; seed 1234) on the "
                    "frozen content and speaker encoders of --models. Features are computed once and cached. "
                    "Checkpoints g_NNNNNNNN / do_NNNNNNNN (jik876 layout) go to --out; a rerun resumes exactly "
                    "from the latest pair. The speaker vector is the whole utterance's ECAPA vector (SSL-SAS "
                    "takes it from the 0.56 s segment on the fly).")
    parser.add_argument("--data", required=True, action="append", type=Path, metavar="DIR",
                        help="training set: a Kaldi data directory or a folder of audio files (repeatable)")
    parser.add_argument("--out", required=True, type=Path, metavar="CKPT_DIR", help="checkpoint folder")
    parser.add_argument("--models", default="ssl-sas", metavar="SET",
                        help="model set giving the content and speaker encoders and the generator shape "
                             "(default: ssl-sas)")
    parser.add_argument("--steps", type=int, default=100_000, help="train until this many steps (default 100000)")
    parser.add_argument("--batch-size", type=int, default=32, help="segments per step (default 32, as published)")
    parser.add_argument("--segment", type=int, default=8960,
                        help="segment length in samples, a multiple of 320 (default 8960 = 28 content frames)")
    parser.add_argument("--checkpoint-interval", type=int, default=10_000, metavar="K",
                        help="write a checkpoint pair every K steps, and at the end (default 10000)")
    parser.add_argument("--log-interval", type=int, default=100, metavar="N",
                        help="append the losses to train.log every N steps (default 100)")
    parser.add_argument("--keep-last", type=int, default=0, metavar="N",
                        help="keep only the N latest checkpoint pairs (default 0: keep all, as jik876)")
    parser.add_argument("--lambda-xv", type=float, default=0.0, metavar="WEIGHT",
                        help="weight of the x-vector consistency loss (ICASSP 2023 zLLR-VC uses 1.0; default 0: off)")
    parser.add_argument("--layout", type=_layout_override, action="append", default=[], metavar="FIELD=VALUE",
                        help="conditioning layout override, e.g. standardise_content=true, l2_normalise_speaker=true, "
                             "layer_norm_speaker=false for the zLLR-VC vocoder (repeatable)")
    parser.add_argument("--init", choices=("random", "base"), default="random",
                        help="start the generator from random weights (default) or the model set's generator")
    parser.add_argument("--discriminator-divisor", type=int, default=1, choices=(1, 2, 4, 8), metavar="N",
                        help="divide the discriminators' channel widths by N (default 1: jik876's MPD and MSD; "
                             "larger values only for smoke tests on a CPU)")
    parser.add_argument("--learning-rate", type=float, default=2e-4, help="AdamW learning rate (default 2e-4)")
    parser.add_argument("--seed", type=int, default=1234, help="weights and data order seed (default 1234)")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda[:N]")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"),
                        help="auto: bf16 autocast on a GPU that has it, else fp16 with gradient scaling; fp32 on CPU")
    parser.add_argument("--feature-cache", type=Path, metavar="DIR",
                        help="feature cache folder (default: CKPT_DIR/feature_cache); shareable between runs")
    parser.add_argument("--install", metavar="NAME",
                        help="after training, install the generator (weight norm folded) with the base set's "
                             "encoders as model set NAME, usable with --set vocoder.models=NAME")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="processes for the input convention and pYAAPT F0 of uncached utterances "
                             "(default: the number of cores)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_corpus_arguments(parser)
    parser.set_defaults(run=run_vocoder)


def add_asv_parser(actions) -> None:
    parser = actions.add_parser(
        "asv", help="train an ECAPA-TDNN speaker model (the VoicePrivacy 2024 semi-informed attacker)",
        description="Train speechbrain's ECAPA-TDNN speaker classifier (AAM softmax) on Kaldi data directories, "
                    "typically anonymised LibriSpeech train-clean-360, with the VoicePrivacy 2024 ASV_eval^anon "
                    "settings as defaults (recipes/training/asv_ecapa.yaml: 80 Fbank + sentence mean norm, "
                    "random 3 s chunks, channels 512x4/1536, 192-d, margin 0.2 scale 30, Adam lr 0.01 wd 2e-6, "
                    "cyclic LR base 1e-8 step 65000, batch 256, 10 epochs, seed 1986); change any with --set. "
                    "MODEL_DIR gets speechbrain's EncoderClassifier layout (hyperparams.yaml, "
                    "embedding_model.ckpt, classifier.ckpt, label_encoder.txt) and training.json with the "
                    "training data's identity. A rerun resumes from the latest checkpoint.")
    parser.add_argument("--data", required=True, action="append", type=Path, metavar="DIR",
                        help="training set: a Kaldi data directory or a folder of audio files (repeatable; a "
                             "speaker id shared by two sets is one speaker)")
    parser.add_argument("--out", required=True, type=Path, metavar="MODEL_DIR", help="model folder")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change a training setting, value read as YAML (e.g. num_utt=20, "
                             "channels=[256,256,256,256,768], number_of_epochs=20); repeatable")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda[:N]")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"),
                        help="auto: bf16 autocast on a GPU that has it, else fp16 with gradient scaling; fp32 on CPU")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="data-loading processes (default: 0 on the CPU; on a GPU, up to 8, one core left to "
                             "the training process)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="train without the utterances whose audio is missing or unreadable (listed in "
                             "skipped.txt and training.json) instead of failing")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_corpus_arguments(parser)
    parser.set_defaults(run=run_asv)




def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train models (vocoder, sex-flow, asv)",
                                   description="Train the models that the neural anonymisation systems use.")
    actions = parser.add_subparsers(dest="train_command", metavar="ACTION", required=True)
    for add_action in ACTIONS:
        add_action(actions)


def run_vocoder(args: argparse.Namespace) -> int:
    from ..training.vocoder.export import install_trained_generator
    from ..training.vocoder.run import train_vocoder
    from ..training.vocoder.settings import VocoderTrainingOptions

    options = VocoderTrainingOptions(
        out=args.out, models=args.models, steps=args.steps, batch_size=args.batch_size, segment=args.segment,
        checkpoint_interval=args.checkpoint_interval, log_interval=args.log_interval, lambda_xv=args.lambda_xv,
        learning_rate=args.learning_rate, seed=args.seed, device=args.device, precision=args.precision,
        feature_cache=args.feature_cache, layout=dict(args.layout), init=args.init, keep_last=args.keep_last,
        discriminator_width_divisor=args.discriminator_divisor, workers=args.workers,
        progress=not args.quiet)
    if args.install:
        from ...models.checkpoints.registry import MODEL_SET_NAME, installed

        existing = installed().get(args.install)
        if args.install == args.models or not MODEL_SET_NAME.fullmatch(args.install):
            raise VoxanonError(f"--install {args.install}: give a new model set name (letters, digits, '.', '_', "
                               "'-'), not the base set")
        if existing is not None and "voxanon train vocoder" not in str(existing.get("source")):
            raise VoxanonError(f"--install {args.install}: an imported model set of that name exists "
                               f"({existing.get('source')}); choose another name")
    data_dirs = [load_corpus(path, allow_pipes=args.allow_pipes, speaker_level=args.speaker_level,
                             speaker_regex=args.speaker_regex) for path in args.data]
    summary = train_vocoder(options, data_dirs)
    trainer = summary["trainer"]
    rate = f", {summary['steps_per_s']:.3f} steps/s" if summary["steps_per_s"] else ""
    print(f"vocoder: {trainer.steps} steps ({summary['steps_run']} this run{rate}) on "
          f"{len(summary['features'].utterances)} utterances, {len(summary['features'].skipped)} skipped; "
          f"checkpoints in {options.out}")
    if args.install:
        target = install_trained_generator(trainer, args.install)
        print(f"installed model set {args.install!r} in {target}")
    return 0


KALDI_FILES = ("wav.scp", "utt2spk", "spk2utt", "text", "utt2dur", "spk2gender")


def run_asv(args: argparse.Namespace) -> int:
    from ...data_prep.corpus import read_data_dir
    from ..training.asv.run import TRAINING_FILE, train_asv

    # A folder with any Kaldi file is read as a data directory, so that a missing one is named.
    sets = [read_data_dir(path, allow_pipes=args.allow_pipes) if any((path / name).is_file() for name in KALDI_FILES)
            else load_corpus(path, speaker_level=args.speaker_level, speaker_regex=args.speaker_regex)
            for path in args.data]
    if args.workers is not None and args.workers < 0:
        raise VoxanonError(f"--workers must be at least 0, got {args.workers}")
    run = train_asv(sets, args.out, device=args.device, progress=not args.quiet, set_options=args.overrides,
                    precision=args.precision, workers=args.workers, allow_pipes=args.allow_pipes,
                    allow_missing=args.allow_missing)
    model_dir = run.model_dir
    summary = json.loads((model_dir / TRAINING_FILE).read_text(encoding="utf-8"))
    last = summary["epochs"][-1] if summary["epochs"] else None
    metrics = "" if last is None else f"; last epoch train accuracy {last['train_accuracy']:.3f}"
    if last is not None and last["valid_accuracy"] is not None:
        metrics += f", valid loss {last['valid_loss']:.3f}, accuracy {last['valid_accuracy']:.3f}"
    selection = summary["selection"]
    unreadable = selection["skipped_unreadable_utterances"]
    dropped = selection["dropped_speakers"]
    schedule = summary.get("schedule")
    if schedule is not None:
        metrics += (f"; lr reached {schedule['peak_lr']:.3g} ({100 * schedule['share_of_max']:.2g} % of the maximum)"
                    + (", too low for the model to train: raise number_of_epochs or lower step_size with --set"
                       if schedule["undertrained"] else ""))
    print(f"asv: {summary['epochs_done']} epochs ({summary['steps']} steps) on {selection['speakers']} speakers"
          f"{f' ({dropped} dropped)' if dropped else ''}, {selection['train_utterances']} training / "
          f"{selection['valid_utterances']} validation utterances, {selection['skipped_short_utterances']} too short"
          f"{f', {unreadable} unreadable' if unreadable else ''}{metrics}; model in {model_dir}"
          f"{'' if run.trained else ' (complete already: not retrained)'} (--set asv.encoder=ecapa:{model_dir})")
    return 0


def add_sex_flow_parser(actions) -> None:
    """Add the ``sex-flow`` action to ``voxanon train``'s sub-parsers."""
    from .options import add_embedding_arguments, add_flow_training_arguments

    parser = actions.add_parser(
        "sex-flow", help="train the zero-LLR sex flow (zLLR-VC) on ECAPA vectors of a labelled corpus",
        description="Embed every utterance of the data directories with the model set's ECAPA (cached), "
                    "L2-normalise, and train the zero-LLR normalizing flow whose first base coordinate is the "
                    "female-vs-male LLR (voxanon zllr train's trainer, with its baselines), into "
                    "$VOXANON_HOME/flows/NAME. Speakers held out per sex give the Cllr of the LLR coordinate.")
    add_embedding_arguments(parser, "flow name (under $VOXANON_HOME/flows, e.g. sex) or folder path",
                            "train without utterances whose audio cannot be used (listed) instead of failing")
    parser.add_argument("--held-out", type=float, default=0.1, metavar="FRACTION",
                        help="share of each sex's speakers kept out of training to measure the LLR's Cllr "
                             "(default 0.1; 0 trains on all)")
    add_flow_training_arguments(parser)
    parser.set_defaults(run=run_sex_flow)


def run_sex_flow(args: argparse.Namespace) -> int:
    from ..training.sex_flow import run_sex_flow as train_sex_flow

    return train_sex_flow(args)


ACTIONS = (add_vocoder_parser, add_sex_flow_parser, add_asv_parser)
