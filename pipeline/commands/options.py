"""Options several commands share (devices, evaluation inputs, the content cache), defined once.

Imported by the commands at start-up: nothing heavy is imported here."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...data_prep.errors import VoxanonError
from ...models.checkpoints.registry import default_cache_dir
from ...models.nets.flow_config import MU_STRATEGIES, TrainingConfig
from ..model_service import device_option, machine_workers
from ..systems.recipes import available_recipes


if TYPE_CHECKING:
    from ..feature_cache import ContentCache


def add_device_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--device", type=device_option, default="auto", metavar="cpu|cuda|auto",
                        help=f"where {what} (default auto: CUDA wherever the process running a model sees a GPU). "
                             "Off the CPU utterances of similar length run as padded batches, each item computed as "
                             "it is alone; numbers differ from the CPU's by float rounding. cuda[:N] picks a GPU")


COMPUTATION_WORKERS_HELP = ("Ray actors computing embeddings and transcripts (default: as many as the cluster's "
                            "CPUs/GPUs hold); the local backend computes in this process")


def add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", default="vpc2022",
                        help=f"evaluation protocol ({', '.join(available_recipes('protocols'))}) or a .yaml path")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a protocol setting, e.g. --set asr=null (repeatable)")
    add_evaluation_input_arguments(parser)


def add_evaluation_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The cache and the input and model-trust options of every command that evaluates."""
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help=f"embedding/transcript cache (default {default_cache_dir()}; 'none' disables)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="evaluate without utterances that have no usable (or no anonymised) audio, listed, "
                             "instead of failing")
    parser.add_argument("--allow-pipes", action="store_true", help="run 'command |' wav.scp entries")
    parser.add_argument("--trust-model-code", action="store_true",
                        help="let speechbrain build model directories whose hyperparams.yaml names code outside "
                             "voxanon's allow-list (only for model directories you trust)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def cache_from(args: argparse.Namespace) -> ContentCache:
    from ..feature_cache import ContentCache

    return ContentCache.from_option(args.cache)


DEFAULT_TRAINING = TrainingConfig()


def add_flow_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The flow options shared by ``voxanon zllr train`` and ``voxanon train sex-flow``."""
    parser.add_argument("--hidden", type=int, help="coupling-network width (default: next power of two ≥ dim)")
    parser.add_argument("--layers", type=int, default=6, help="coupling layers (default 6)")
    parser.add_argument("--mu-strategy", choices=MU_STRATEGIES, default=DEFAULT_TRAINING.mu_strategy,
                        help="mle: smoothed closed-form μ update (thesis); learned: gradient on log μ (ICASSP 2023)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_TRAINING.alpha, help="μ smoothing (default 0.99)")
    parser.add_argument("--mu0", type=float, help="initial μ (default: shared-covariance Gaussian KL of the data)")
    parser.add_argument("--lr", type=float, default=DEFAULT_TRAINING.learning_rate, help="Adam learning rate (1e-4)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_TRAINING.batch_size)
    parser.add_argument("--epochs", type=int, default=DEFAULT_TRAINING.max_epochs, help="maximum epochs")
    parser.add_argument("--patience", type=int, default=DEFAULT_TRAINING.patience,
                        help="stop after this many epochs without a better validation NLL")
    parser.add_argument("--no-zero-init", action="store_true", help="random (not identity) initial couplings")
    parser.add_argument("--seed", type=int, default=0, help="seeds the training (and sex-flow's held-out split)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """Options for reading input sets, shared by every command that takes ``--data``."""
    parser.add_argument("--allow-pipes", action="store_true",
                        help="run 'command |' entries of wav.scp through the shell (they execute text "
                             "from the data files: only for data you trust)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--speaker-level", type=int, default=1, metavar="N",
                       help="plain audio folders: the speaker is the folder N levels above each file (default 1)")
    group.add_argument("--speaker-regex", metavar="REGEX",
                       help="plain audio folders: take the speaker from the group 'spk' (or the first group) "
                            "of REGEX matched against each file's relative path")


def add_backend_arguments(parser: argparse.ArgumentParser, workers_help: str) -> None:
    """The execution options: ``--backend``, ``--ray-address``, ``--workers``, ``--cpus-per-worker``,
    ``--gpus-per-worker`` and ``--batch-size``."""
    group = parser.add_argument_group("execution backend")
    group.add_argument("--backend", choices=("local", "ray"), default="local",
                       help="where the per-utterance work runs: this machine (default) or a Ray cluster")
    group.add_argument("--ray-address", metavar="HOST:PORT",
                       help="Ray cluster to join (default: $RAY_ADDRESS if set, else a Ray instance started on "
                            "this machine); inputs and outputs must be on a path every node sees")
    group.add_argument("--workers", type=int, metavar="N", help=workers_help)
    group.add_argument("--cpus-per-worker", type=float, default=1.0, metavar="C",
                       help="CPUs reserved by each Ray worker (default 1); each computes on one thread, so more "
                            "than 1 only leaves room (memory, other jobs)")
    group.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                       help="GPUs reserved by each Ray worker; a fraction (e.g. 0.25) fits several on one GPU "
                            "(default 0)")
    group.add_argument("--batch-size", type=int, metavar="N",
                       help="utterances per batch, i.e. per worker task (default: the recipe's or protocol's)")


def refuse_counts_below_one(args: argparse.Namespace, *names: str) -> None:
    """One :class:`VoxanonError` for the first of the count options ``names`` (given) that is under 1."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise VoxanonError(f"--{name.replace('_', '-')} must be at least 1, not {value}")


def backend_from_args(args: argparse.Namespace):
    """The backend the options name: ``None`` for local, else a :class:`RayBackend` (not yet connected)."""
    refuse_counts_below_one(args, "workers", "batch_size")
    if args.backend == "local":
        if getattr(args, "workers", None) is not None:
            args.workers = machine_workers(args.workers)
        return None
    if args.cpus_per_worker < 0 or args.gpus_per_worker < 0:
        raise VoxanonError("--cpus-per-worker and --gpus-per-worker cannot be negative")
    from ..execution.ray import RayBackend, RayOptions

    return RayBackend(RayOptions(address=args.ray_address or os.environ.get("RAY_ADDRESS") or None,
                                 workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                                 gpus_per_worker=args.gpus_per_worker))


def add_embedding_arguments(parser, out_help: str, allow_failures_help: str) -> None:
    """The options of every command that embeds labelled data directories (pool build, train sex-flow)."""
    parser.add_argument("--data", required=True, action="append", type=Path, metavar="DIR",
                        help="Kaldi data directory with spk2gender (repeatable)")
    parser.add_argument("--out", required=True, metavar="NAME_OR_PATH", help=out_help)
    parser.add_argument("--models", default="ssl-sas", help="model set whose speaker encoder embeds (default ssl-sas)")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="embedding cache (default $VOXANON_HOME/cache; 'none' disables)")
    parser.add_argument("--allow-failures", action="store_true", help=allow_failures_help)
