"""``voxanon validate``: check a data set's metadata and, optionally, every audio file."""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ...data_prep.corpus import load_corpus
from .options import add_corpus_arguments


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="check a data directory (metadata, and audio with --check-audio)",
        description="Report every problem of a Kaldi data directory or audio folder: malformed or duplicate "
                    "lines, utterances without speaker or audio, unknown ids in trials/enrolls, missing files; "
                    "with --check-audio also unreadable, empty, silent, NaN/Inf, too short (under 25 ms, one "
                    "analysis frame) or over-long audio, decoding each file in blocks.")
    parser.add_argument("data", type=Path, metavar="DIR")
    parser.add_argument("--need-gender", action="store_true", help="every speaker must have an f/m label")
    parser.add_argument("--check-audio", action="store_true", help="decode every file")
    parser.add_argument("--system", help="check the audio as this system takes it: its sample rate and max_seconds "
                                         "(a name or a recipe .yaml; --sample-rate and --max-seconds override)")
    parser.add_argument("--sample-rate", type=int, help="rate to check the length at (default: the system's, else "
                                                        "16000)")
    parser.add_argument("--max-seconds", type=float, help="flag audio longer than this (default: the system's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_corpus_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ...data_prep.audio import AudioError, check_audio
    from ..execution.batches import MIN_SECONDS
    from ..systems.recipes import load_system_config

    system = load_system_config(args.system) if args.system else {}
    sample_rate = args.sample_rate or system.get("sample_rate", 16000)
    max_seconds = args.max_seconds if args.max_seconds is not None else system.get("max_seconds")
    data = load_corpus(args.data, allow_pipes=args.allow_pipes, speaker_level=args.speaker_level,
                       speaker_regex=args.speaker_regex)
    problems = data.validate(need_gender=args.need_gender)
    genders = Counter(data.spk2gender.get(spk, "?") for spk in data.speakers)
    print(f"{args.data}: {len(data.wav)} utterances, {len(data.speakers)} speakers "
          f"({', '.join(f'{g}: {n}' for g, n in sorted(genders.items()))})"
          + (f", {len(data.enrolls)} enrolls" if data.enrolls is not None else "")
          + (f", {len(data.trials)} trials" if data.trials is not None else ""))
    if args.check_audio:
        for utt in tqdm(data.utterances, unit="utt", desc="decoding", disable=args.quiet):
            if data.missing_file(utt) is not None:
                continue  # reported above, with where it was looked for
            source = data.wav[utt] if data.is_pipe(utt) else data.audio_path(utt)
            try:
                check_audio(source, sample_rate, max_seconds=max_seconds, min_seconds=MIN_SECONDS,
                            allow_pipe=args.allow_pipes)
            except AudioError as error:
                problems.append(f"audio: utterance {utt!r}: {error}")
    for problem in problems:
        print(f"  {problem}")
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1
