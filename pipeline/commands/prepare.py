"""``voxanon prepare``: corpora to Kaldi data directories, VoicePrivacy sets, trials, subsets.

::

    voxanon prepare librispeech --root DIR --subset dev-clean --out data/dev-clean
    voxanon prepare vctk        --root DIR [--mic mic2] --out data/vctk
    voxanon prepare libritts    --root DIR --subset train-clean-100 --out data/tts100 --resample
    voxanon prepare vpc         --root VPC/data [--out data/vpc_native]
    voxanon prepare iemocap     --root IEMOCAP_full_release --out data/iemocap
    voxanon prepare trials      --data data/dev-clean --enroll-per-spk 10 --seed 1 --out data
    voxanon prepare subset      --data data/tts500 --purpose sex-flow --out data/flow_train

Problems in the input (missing audio, transcripts without audio and the reverse, speakers
without a sex label, audio not at 16 kHz) are each reported with a count and examples;
``--strict`` turns them into an error (exit code 2).
"""
from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path

from ...data_prep.corpus import (GENDERS, DataDir, DataDirError, format_mapping, read_data_dir, read_list,
                                 write_data_dir)
from ...data_prep.errors import VoxanonError
from ...data_prep.prepare.iemocap import scan_iemocap
from ...data_prep.prepare.issues import PreparationIssues
from ...data_prep.prepare.librispeech import scan_librispeech
from ...data_prep.prepare.libritts import scan_libritts
from ...data_prep.prepare.listing import CorpusListing, PrepareOptions, prepare_corpus
from ...data_prep.prepare.subsets import PURPOSES, SubsetOptions, select_training_subset
from ...data_prep.prepare.trials import TrialDesign, build_trial_sets, write_trial_sets
from ...data_prep.prepare.vctk import AUDIO_FOLDERS, DEFAULT_MICROPHONE, MICROPHONES, scan_vctk
from ...data_prep.prepare.vpc import CORPORA, INDEX_NAME, index_vpc, write_index, write_native_sets

log = logging.getLogger(__name__)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare", help="make Kaldi data directories from corpora; check VoicePrivacy sets; "
                        "make trial lists and training subsets",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sources = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)

    librispeech = sources.add_parser("librispeech", help="LibriSpeech (SPEAKERS.TXT, *.trans.txt, flac)")
    librispeech.add_argument("--subset", nargs="+", required=True, metavar="NAME",
                             help="subset folder(s), e.g. dev-clean train-clean-100")
    _corpus_arguments(librispeech)
    librispeech.set_defaults(run=_run_librispeech)

    libritts = sources.add_parser("libritts", help="LibriTTS / LibriTTS-R (speakers.tsv, *.normalized.txt)")
    libritts.add_argument("--subset", nargs="+", required=True, metavar="NAME",
                          help="subset folder(s), e.g. train-clean-100")
    _corpus_arguments(libritts)
    libritts.set_defaults(run=_run_libritts)

    vctk = sources.add_parser("vctk", help="VCTK 0.80 (wav48) or 0.92 (wav48_silence_trimmed, mic1/mic2)")
    vctk.add_argument("--subset", choices=AUDIO_FOLDERS, metavar="AUDIO_FOLDER",
                      help=f"audio folder ({' or '.join(AUDIO_FOLDERS)}; default: the one present)")
    vctk.add_argument("--mic", choices=MICROPHONES, default=DEFAULT_MICROPHONE,
                      help="microphone of the 0.92 release (default %(default)s, as VoicePrivacy)")
    _corpus_arguments(vctk)
    vctk.set_defaults(run=_run_vctk)

    iemocap = sources.add_parser("iemocap", help="IEMOCAP for the SER evaluation: neu/ang/hap/sad (exc as hap), "
                                                 "utt2emo and spk2fold (leave one session out)")
    _corpus_arguments(iemocap)
    iemocap.set_defaults(run=_run_iemocap)

    vpc = sources.add_parser("vpc", help="validate and index the VoicePrivacy-distributed data sets")
    vpc.add_argument("--root", required=True, type=Path,
                     help="folder holding libri_dev_enrolls, ... (or its parent, with a data/ folder)")
    vpc.add_argument("--corpus", nargs="+", choices=CORPORA, default=list(CORPORA),
                     help="corpora whose sets are expected (default: %(default)s)")
    vpc.add_argument("--index", type=Path, help=f"where to write the JSON index (default: <root>/{INDEX_NAME})")
    vpc.add_argument("--out", type=Path,
                     help="also write copies of the sets here with wav.scp commands replaced by files")
    vpc.add_argument("--no-headers", action="store_true", help="do not read audio headers (no 16 kHz check)")
    vpc.add_argument("--strict", action="store_true", help="fail when a set is missing or has problems")
    vpc.set_defaults(run=_run_vpc)

    trials = sources.add_parser("trials", help="enrolment and same-sex trial sets in the VoicePrivacy layout")
    trials.add_argument("--data", required=True, type=Path, help="the data directory to split")
    trials.add_argument("--out", type=Path, help="folder for the sets (default: beside --data)")
    trials.add_argument("--name", help="set name prefix (default: the name of --data)")
    trials.add_argument("--enroll-per-spk", type=int, required=True, metavar="K",
                        help="enrolment utterances per enrolled speaker")
    trials.add_argument("--seed", default="0", help="seed of every random choice (default %(default)s)")
    trials.add_argument("--enrolled-speakers-per-sex", type=int, metavar="N",
                        help="enrol at most N speakers of each sex; the others are test speakers only")
    trials.add_argument("--mixed", action="store_true",
                        help="also write <name>_trials_mixed: every test utterance against every enrolled speaker")
    trials.add_argument("--asr", action="store_true", help="also write <name>_asr: the test utterances with text")
    trials.add_argument("--strict", action="store_true", help="fail on any reported problem")
    trials.set_defaults(run=_run_trials)

    subset = sources.add_parser("subset", help="training subsets (vocoder, pool, sex-flow) with sex balance")
    subset.add_argument("--data", required=True, type=Path, help="the data directory to choose from")
    subset.add_argument("--out", required=True, type=Path, help="the subset's data directory")
    subset.add_argument("--purpose", choices=sorted(PURPOSES), required=True,
                        help="vocoder: any speaker; pool: speakers with a sex label; "
                             "sex-flow: labelled and balanced between the sexes")
    subset.add_argument("--balance-sexes", action=argparse.BooleanOptionalAction, default=None,
                        help="same number of speakers of each sex (default: as the purpose says)")
    subset.add_argument("--speakers-per-sex", type=int, metavar="N", help="at most N speakers of each sex")
    subset.add_argument("--utts-per-speaker", type=int, metavar="N", help="at most N utterances per speaker")
    subset.add_argument("--min-seconds", type=float, help="leave out shorter utterances (needs utt2dur)")
    subset.add_argument("--max-seconds", type=float, help="leave out longer utterances (needs utt2dur)")
    subset.add_argument("--seed", default="0", help="seed of every random choice (default %(default)s)")
    subset.add_argument("--strict", action="store_true", help="fail on any reported problem")
    subset.set_defaults(run=_run_subset)


def _describe(data: DataDir) -> str:
    """``N utterances, S speakers (F f, M m), H h``."""
    counts = {sex: sum(1 for s in data.speakers if data.spk2gender.get(s) == sex) for sex in GENDERS}
    hours = (f", {sum(data.utt2dur[u] for u in data.wav if u in data.utt2dur) / 3600:.2f} h"
             if data.utt2dur else "")
    return (f"{len(data.wav)} utterances, {len(data.speakers)} speakers "
            f"({counts['f']} f, {counts['m']} m){hours}")


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, type=Path, help="the corpus folder as distributed")
    parser.add_argument("--out", required=True, type=Path, help="the Kaldi data directory to write")
    parser.add_argument("--speakers", metavar="IDS|@FILE",
                        help="keep only these speakers: comma-separated ids, or @file with one id a line")
    parser.add_argument("--utterances", type=Path, metavar="FILE",
                        help="keep only the utterances listed in FILE (one id a line)")
    parser.add_argument("--resample", action="store_true",
                        help="convert audio that is not 16 kHz mono to <out>/wav/<utt>.wav")
    parser.add_argument("--no-durations", action="store_true",
                        help="do not read audio headers: no utt2dur and no sample-rate check "
                             "(for very large listings)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="processes reading audio headers (default %(default)s)")
    parser.add_argument("--strict", action="store_true", help="fail on any reported problem")


def _options(args: argparse.Namespace) -> PrepareOptions:
    speakers = None
    if args.speakers is not None:
        if args.speakers.startswith("@"):
            listed = Path(args.speakers[1:])
            if not listed.is_file():
                raise VoxanonError(f"--speakers: no file {listed}")
            speakers = set(read_list(listed))
        else:
            speakers = {s for s in args.speakers.replace(",", " ").split()}
    utterances = None
    if args.utterances is not None:
        if not args.utterances.is_file():
            raise VoxanonError(f"--utterances: no file {args.utterances}")
        utterances = set(read_list(args.utterances))
    if args.jobs < 1:
        raise VoxanonError(f"--jobs must be at least 1, got {args.jobs}")
    return PrepareOptions(speakers=speakers, utterances=utterances, read_headers=not args.no_durations,
                          resample=args.resample, jobs=args.jobs)


def _finish_corpus(listing: CorpusListing, args: argparse.Namespace, issues: PreparationIssues) -> int:
    data = prepare_corpus(listing, args.out, _options(args), issues, strict=args.strict)
    print(f"{args.out}: {_describe(data)}")
    return 0


def _run_librispeech(args: argparse.Namespace) -> int:
    issues = PreparationIssues(f"librispeech {' '.join(args.subset)}")
    return _finish_corpus(scan_librispeech(args.root, args.subset, issues), args, issues)


def _run_libritts(args: argparse.Namespace) -> int:
    issues = PreparationIssues(f"libritts {' '.join(args.subset)}")
    return _finish_corpus(scan_libritts(args.root, args.subset, issues), args, issues)


def _run_vctk(args: argparse.Namespace) -> int:
    issues = PreparationIssues("vctk")
    return _finish_corpus(scan_vctk(args.root, issues, audio_folder=args.subset, microphone=args.mic),
                          args, issues)


def _run_iemocap(args: argparse.Namespace) -> int:
    issues = PreparationIssues("iemocap")
    found = scan_iemocap(args.root, issues)
    data = prepare_corpus(found.listing, args.out, _options(args), issues, strict=args.strict)
    speakers = set(data.utt2spk.values())
    data.passthrough = {
        "utt2emo": format_mapping({u: found.utt2emo[u] for u in sorted(data.wav)}),
        "spk2fold": format_mapping({s: f for s, f in sorted(found.spk2fold.items()) if s in speakers})}
    write_data_dir(data, args.out)
    emotions = Counter(found.utt2emo[u] for u in data.wav)
    print(f"{args.out}: {_describe(data)}; " + ", ".join(f"{e} {n}" for e, n in sorted(emotions.items())))
    if found.left_out:
        print(f"left out (other consensus labels): {sum(found.left_out.values())} utterances ("
              + ", ".join(f"{e} {n}" for e, n in found.left_out.most_common()) + ")")
    return 0


def _run_vpc(args: argparse.Namespace) -> int:
    index, loaded = index_vpc(args.root, tuple(args.corpus), read_headers=not args.no_headers)
    if not index.sets:
        raise VoxanonError(f"{args.root}: no VoicePrivacy set found (expected folders such as {index.missing[0]}, "
                           "there or in its data/ folder)")
    index_path = args.index or Path(index.root) / INDEX_NAME
    write_index(index, index_path)
    for vpc_set in index.sets:
        speakers = ", ".join(f"{n} {sex}" for sex, n in sorted(vpc_set.speakers.items()))
        extra = (f", {vpc_set.enrolls} enrolls" if vpc_set.enrolls is not None else "") + (
            f", {vpc_set.targets} target / {vpc_set.nontargets} non-target trials"
            if vpc_set.targets is not None else "")
        state = "ok" if not vpc_set.problems else f"{len(vpc_set.problems)} problem(s)"
        print(f"{vpc_set.name:28s} {state:14s} {vpc_set.utterances} utterances ({speakers}){extra}")
    for name in index.missing:
        print(f"{name:28s} MISSING")
    print(f"index: {index_path}")
    problems = index.problems
    if problems and args.strict:
        raise DataDirError(f"{index.root} (--strict)", problems)
    for problem in problems:
        log.warning("%s", problem)
    if args.out is not None:
        written = write_native_sets(loaded, args.out)
        print(f"{len(written)} set(s) written to {args.out}")
    return 0


def _run_trials(args: argparse.Namespace) -> int:
    data = read_data_dir(args.data, allow_pipes=True)
    name = args.name or data.name
    issues = PreparationIssues(f"trials {name}")
    design = TrialDesign(enroll_per_speaker=args.enroll_per_spk, seed=args.seed,
                         enrolled_speakers_per_sex=args.enrolled_speakers_per_sex,
                         mixed=args.mixed, asr=args.asr)
    sets = build_trial_sets(data, design, issues)
    issues.conclude(strict=args.strict)
    out = args.out if args.out is not None else args.data.resolve().parent
    for path, trial_set in zip(write_trial_sets(sets, out, name), sets.values()):
        trials = "" if trial_set.trials is None else f", {len(trial_set.trials)} trials"
        print(f"{path}: {_describe(trial_set)}{trials}")
    return 0


def _run_subset(args: argparse.Namespace) -> int:
    data = read_data_dir(args.data, allow_pipes=True)
    rule = PURPOSES[args.purpose]
    options = SubsetOptions(
        need_sex=rule.need_sex,
        balance_sexes=rule.balance_sexes if args.balance_sexes is None else args.balance_sexes,
        speakers_per_sex=args.speakers_per_sex, utts_per_speaker=args.utts_per_speaker,
        min_seconds=args.min_seconds, max_seconds=args.max_seconds, seed=args.seed)
    issues = PreparationIssues(f"subset {args.purpose}")
    subset = select_training_subset(data, options, issues)
    issues.conclude(strict=args.strict)
    subset.name = args.out.name
    subset.path = args.out
    write_data_dir(subset, args.out)
    print(f"{args.out}: {_describe(subset)}")
    return 0
