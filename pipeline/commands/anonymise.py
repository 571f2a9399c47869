"""``voxanon anonymise``: run a system over one or more data sets."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ...data_prep.corpus import DataDir, load_corpus
from ...data_prep.errors import VoxanonError
from ...data_prep.paths import named_folder, resolved
from ..model_service import device_option
from .options import add_corpus_arguments
from .options import add_backend_arguments, backend_from_args
from ..model_service import usable_cpus
from ..systems.recipes import available_systems, load_system_config


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "anonymise", aliases=["anonymize"], help="anonymise data sets with a system",
        description="Anonymise Kaldi data directories (or plain audio folders) with a system. Output: "
                    "<out>/<set><suffix>/wav/<utt>.wav (16 kHz mono 16-bit) plus the set's metadata. "
                    "Reruns resume: finished utterances are verified and skipped.")
    parser.add_argument("--system", required=True, help=f"system name ({', '.join(available_systems(installed=False))}"
                                                        "; voxanon systems lists installed families' too) "
                                                        "or the path of a recipe .yaml")
    parser.add_argument("--data", required=True, action="append", type=Path, metavar="DIR",
                        help="input set: a Kaldi data directory or a folder of audio files (repeatable)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="where output sets go (default: beside each input set, as VoicePrivacy does)")
    parser.add_argument("--suffix", help="appended to each set's name (default: _<system>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe setting, e.g. --set mcadams.alpha=0.7 (repeatable)")
    parser.add_argument("--precision", choices=("float32", "tf32", "bfloat16", "float16"),
                        help="precision of the neural stages that have the setting (content, vocoder; default: "
                             "the recipe's, float32). float32 is strict FP32 on GPUs too; tf32 lets a GPU compute "
                             "float32 matrix products and convolutions in TF32 (float32 on a CPU). bfloat16 is "
                             "about 1.7x faster on CPUs with AMX, at about 36 dB SNR against float32: not the "
                             "published systems' exact output; on CPUs without bfloat16 instructions it is "
                             "slower than float32. float16 is for GPUs (--device cuda)")
    parser.add_argument("--device", type=device_option, metavar="cpu|cuda|auto|cuda:N|cpu:N",
                        help="where the neural stages run (content, speaker, vocoder, and B1's set embedding; "
                             "default: the recipe's, cpu; cpu:N runs their device code path on the CPU, in the "
                             "streaming executor). pYAAPT's F0 stays on the CPU, on every core "
                             "(--set f0.device=cuda for the GPU YAAPT). "
                             "auto: CUDA wherever the process running them sees a GPU. On a GPU, utterances of "
                             "similar length run as padded batches of up to the batch size (--batch-size); "
                             "outputs differ from CPU ones by float rounding")
    parser.add_argument("--executor", choices=("auto", "pool", "streaming"), default="auto",
                        help="how the work is spread: streaming runs the CPU stages (loading, F0) in a pool of "
                             "processes and the model stages in one device process per GPU, in device batches of "
                             "up to batch_seconds (--set batch_seconds=S, default 200) of padded audio; pool runs "
                             "whole batches in each worker. auto (default): streaming when a stage runs on a "
                             "device other than the CPU, else pool")
    parser.add_argument("--seed", type=int, help="run seed (default: the recipe's); per-utterance seeds derive from it")
    parser.add_argument("--no-resume", dest="resume", action="store_false",
                        help="redo every utterance instead of skipping verified finished ones")
    parser.add_argument("--input-digest", action="store_true",
                        help="also record each input's sha256, and on resume compare it (with the size) instead of "
                             "the modification time: a copied or touched corpus resumes, and any change of content "
                             "is redone, as is a line recorded without a digest (reads every input once more; see "
                             "docs/resume.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_corpus_arguments(parser)
    add_backend_arguments(parser, "worker processes (local; default: the number of cores) or Ray actors "
                                  "(default: as many as the cluster's CPUs/GPUs hold)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..api import anonymise
    from ..runner import FAILURES

    overrides = (list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
                 + ([f"batch_size={args.batch_size}"] if args.batch_size is not None else []))
    backend = backend_from_args(args)
    config = load_system_config(args.system, overrides, device=args.device, precision=args.precision)
    suffix = args.suffix if args.suffix is not None else f"_{config['name']}"
    sets = _output_sets(args, suffix)
    any_failed = False
    started = getattr(args, "command_started", None)  # the first set's run.json counts the command's start-up
    try:
        for data, out_dir in sets:
            result = anonymise(data, config, out_dir, workers=args.workers or usable_cpus(), resume=args.resume,
                               allow_pipes=args.allow_pipes, progress=not args.quiet, backend=backend,
                               executor=args.executor, input_digest=args.input_digest, started=started)
            started = None
            status = "ok" if result.ok else f"{len(result.failures)} FAILED (see {result.out_dir / FAILURES})"
            print(f"{data.name}: {result.total} utterances ({result.processed} processed, {result.resumed} "
                  f"resumed), {status} -> {result.out_dir}", file=sys.stderr)
            any_failed |= not result.ok
    finally:
        if backend is not None:
            backend.close()   # its Ray actors served every set of the command
    return 1 if any_failed else 0


def _output_sets(args: argparse.Namespace, suffix: str) -> list[tuple[DataDir, Path]]:
    """Each input set with its output folder, ``<out>/<set><suffix>``, checked before any set runs: the name one
    plain folder name, no output folder an input set, no two inputs writing into one folder, and no output set
    among the inputs (:func:`_refuse_outputs_among_inputs`)."""
    sets, writers = [], {}
    inputs = {resolved(data_path, "--data"): data_path for data_path in args.data}
    if not suffix and args.out is None:
        raise VoxanonError("--suffix '': each output set would be its input set, rewritten; give a suffix, or "
                           "--out for another folder")
    for data_path in args.data:
        data = load_corpus(data_path, allow_pipes=args.allow_pipes, speaker_level=args.speaker_level,
                           speaker_regex=args.speaker_regex)
        out_root = args.out if args.out is not None else resolved(data_path, "--data").parent
        out_dir = named_folder(out_root, f"{data.name}{suffix}", f"--data {data_path} with --suffix {suffix!r}")
        out_path = resolved(out_dir, "--out")
        if out_path in inputs:
            raise VoxanonError(f"--data {data_path}: its output set {out_dir} is the input set --data "
                               f"{inputs[out_path]}; give another --suffix or --out")
        if out_path in writers:
            raise VoxanonError(f"--data {writers[out_path]} and --data {data_path} would both write to {out_dir} "
                               "(sets of the same name); run them with different --out folders")
        writers[out_path] = data_path
        sets.append((data, out_dir))
    outputs = [(out_dir, data_path) for (_, out_dir), data_path in zip(sets, args.data)]
    for (data, _), data_path in zip(sets, args.data):
        _refuse_outputs_among_inputs(data, data_path, outputs, args.out)
    return sets


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _refuse_outputs_among_inputs(data: DataDir, data_path: Path, outputs: list[tuple[Path, Path]],
                                 out: Path | None) -> None:
    """No output set (of ``outputs``: each with the ``--data`` writing it) inside an audio folder given as input
    (every run scans the whole folder, so a rerun would take the outputs for inputs and never resume), nor holding
    an input file (the run would overwrite it). A Kaldi set's ``wav.scp`` lists its files, so an output set inside
    its folder is harmless otherwise. Paths are compared as given and with their links followed."""
    folder = resolved(data_path, "--data")
    if not (folder / "wav.scp").is_file():
        for out_dir, writer in outputs:
            if _inside(str(resolved(out_dir, "--out")), str(folder)):
                raise VoxanonError(f"--out {out if out is not None else out_dir.parent}: the output set {out_dir} "
                                   f"(of --data {writer}) lies inside the audio folder --data {data_path}, which "
                                   "every run scans for input files, so a rerun would take its outputs for inputs; "
                                   "choose an --out outside it")
    files = {os.path.abspath(data.audio_path(utt)): utt for utt in data.utterances if not data.is_pipe(utt)}
    for out_dir, writer in outputs:
        for out_path in {os.path.abspath(out_dir), str(resolved(out_dir, "--out"))}:
            holding = next((file for file in files if _inside(file, out_path)), None)
            if holding is not None:
                raise VoxanonError(f"--data {data_path}: its input file {holding} (utterance {files[holding]!r}) "
                                   f"lies inside the output set {out_dir} (of --data {writer}), which the run "
                                   "writes into; choose another --out or --suffix")
