"""``voxanon demo``: anonymise the bundled demo corpus with B2 and B2r and evaluate both."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ...data_prep.atomic import ensure_writable_folder
from ...data_prep.corpus import DataDir
from ...data_prep.demo_corpus import demo_corpus_dir
from ...data_prep.errors import VoxanonError
from ..model_service import machine_workers
from .options import refuse_counts_below_one


DEMO_SYSTEMS = ("b2", "b2r")
DEMO_PROTOCOL = "vpc2022"

# A tiny ECAPA-TDNN (the challenge's architecture, narrow channels, 1.5 s chunks): a few seconds per epoch
# on two CPU cores for the demo's ~100 training utterances.
DEMO_ATTACKER_SETTINGS = {"channels": [32, 32, 32, 32, 96], "lin_neurons": 32, "attention_channels": 16,
                          "se_channels": 16, "sentence_len": 1.5, "batch_size": 16, "step_size": 20,
                          "valid_ratio": 0.125, "number_of_epochs": 20}
DEMO_EVAL_SPEAKERS_PER_SEX = 3


def demo_attacker_overrides(epochs: int | None = None) -> list[str]:
    settings = dict(DEMO_ATTACKER_SETTINGS)
    if epochs is not None:
        settings["number_of_epochs"] = epochs
    return [f"{key}={json.dumps(value)}" for key, value in settings.items()]


def demo_split(demo: DataDir, root: Path) -> tuple[Path, Path, str]:
    """The demo corpus split by speaker: ``<root>/demo_attacker_train`` (every utterance of the attacker's
    speakers) and ``<root>/demo_eval`` (enrolment and trials of the other speakers, trials between them
    only). Per sex, every other speaker in name order is evaluated, at most
    ``DEMO_EVAL_SPEAKERS_PER_SEX``; the rest train the attacker. Returns the two folders and a note."""
    from ...data_prep.corpus import write_data_dir

    evaluated: set[str] = set()
    for sex in sorted(set(demo.spk2gender.values())):
        speakers = sorted(s for s in demo.speakers if demo.spk2gender.get(s) == sex)
        evaluated |= set(speakers[0::2][:DEMO_EVAL_SPEAKERS_PER_SEX])
    trained = sorted(set(demo.speakers) - evaluated)
    if len(trained) < 2 or not evaluated:
        raise VoxanonError(f"{demo.path}: too few speakers to split into attacker training and evaluation speakers")
    absolute = demo.absolute_wav()
    train = demo.subset([u for u in demo.wav if demo.utt2spk[u] in trained])
    train.name, train.enrolls, train.trials = "demo_attacker_train", None, None
    evaluation = demo.subset([u for u in demo.wav if demo.utt2spk[u] in evaluated])
    evaluation.name = "demo_eval"
    evaluation.trials = [t for t in evaluation.trials if t.enrol_speaker in evaluated]
    paths = []
    for data in (train, evaluation):
        data.wav = {u: absolute[u] for u in data.wav}
        data.path = root / data.name
        write_data_dir(data, data.path)
        paths.append(data.path)
    n_target = sum(t.target for t in evaluation.trials)
    note = (f"speaker-disjoint: the attacker trains on the anonymised speech of {len(trained)} speakers "
            f"({', '.join(trained)}, {len(train.wav)} utterances) who are not in the evaluated trials; the trials "
            f"are those of the other {len(evaluated)} speakers ({', '.join(sorted(evaluated))}): {n_target} target "
            f"and {len(evaluation.trials) - n_target} non-target")
    return paths[0], paths[1], note


def attacker_comparison(results) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(header, rows): per set and system, the EER (%) of o-o (original speech, the set's) and of the
    ignorant, lazy-informed and semi-informed attackers, then the models of the last two."""
    from ...eval.tables import format_value

    columns = (("o-o", ""), ("o-a", "ignorant"), ("a-a", "lazy-informed"), ("a-a", "semi-informed"))
    eers = {(r.set, r.system, r.condition, r.attacker): r for r in results
            if r.metric == "eer" and (r.condition, r.attacker) in columns and not r.system.startswith("published")}
    header = ("set", "system", *(f"{attacker} {condition} EER (%)" if attacker else f"{condition} EER (%)"
                                 for condition, attacker in columns), "lazy-informed model", "semi-informed model")
    rows = []
    for set_name, system in dict.fromkeys((s, system) for s, system, _, _ in eers if system != "original"):
        found = [eers.get((set_name, "original" if condition == "o-o" else system, condition, attacker))
                 for condition, attacker in columns]
        rows.append((set_name, system, *(format_value(r) if r is not None else "-" for r in found),
                     *(r.model if r is not None else "-" for r in found[2:])))
    return header, rows


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="anonymise the bundled demo corpus with B2 and B2r and evaluate them",
        description="Anonymise the bundled demo corpus (13 TTS speakers of both sexes) with B2 and B2r, "
                    f"evaluate both with the {DEMO_PROTOCOL} protocol and the embedded models (GE2E speaker "
                    "encoder, Whisper tiny.en), print the table and the path of report.html.")
    parser.add_argument("--out", type=Path, default=Path("voxanon-demo"), metavar="DIR",
                        help="output folder (default: ./voxanon-demo)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N")
    parser.add_argument("--semi-informed", action="store_true",
                        help="instead: train a tiny semi-informed attacker (ECAPA-TDNN) on B2- and B2r-anonymised "
                             "speech of some demo speakers and print its a-a EER beside the lazy-informed one on "
                             "the other speakers (voxanon challenge on the demo; no WER)")
    parser.add_argument("--attacker-epochs", type=int, default=None, metavar="N",
                        help="with --semi-informed: attacker training epochs (default 20)")
    parser.add_argument("--asr-decoding", choices=("packed", "per-utterance", "short-window"), default=None,
                        help="Whisper's decoding (default: the protocol's, per-utterance): several utterances to a 30 s "
                             "window, each its own window as before 2026-12, or each its own 10 s window where it "
                             "fits (docs/evaluation.md, ASR decoding)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.benchmark import compare
    from ..evaluation.outputs import print_table, write_outputs
    from ..evaluation.protocols import load_protocol

    ensure_writable_folder(args.out, "--out")
    refuse_counts_below_one(args, "workers")
    args.workers = machine_workers(args.workers)
    if args.semi_informed:
        return run_semi_informed(args)
    from ..execution.heap import share_one_heap

    share_one_heap()   # before any thread allocates: Whisper's replicas then keep their blocks (not for training)
    from ..evaluation.sets import discover_sets
    from ..feature_cache import ContentCache

    sets = discover_sets(demo_corpus_dir())
    data = sets[0].trials
    print(f"demo corpus: {data.path} ({len(data.wav)} utterances, {len(data.speakers)} speakers)")
    protocol = load_protocol(DEMO_PROTOCOL, [f"asr_decoding={args.asr_decoding}"] if args.asr_decoding else [])
    evaluation = compare(sets, list(DEMO_SYSTEMS), protocol, args.out, args.workers,
                         ContentCache(args.out / "cache"), allow_missing=False, progress=not args.quiet)
    for system in DEMO_SYSTEMS:
        print(f"{system}: anonymised speech in {args.out / 'anon' / f'{data.name}_{system}'}")
    report = write_outputs(args.out, evaluation, "voxanon demo: B2 and B2r on the demo corpus",
                           {"protocol": DEMO_PROTOCOL, "data": str(data.path), "systems": ", ".join(DEMO_SYSTEMS)})
    print_table(evaluation.results)
    print(f"report: {report.resolve()}")
    return 0


def run_semi_informed(args: argparse.Namespace) -> int:
    """``voxanon challenge`` for B2 and B2r on a speaker split of the demo corpus, with a tiny attacker."""
    import time

    from ...data_prep.corpus import read_data_dir
    from ...eval.tables import Table, markdown
    from ..evaluation.challenge import ChallengeInputs, run_challenge
    from ..evaluation.challenge import stage_summary
    from ..feature_cache import ContentCache

    import torch

    # The demo's attacker is tiny: one thread runs it several times faster than threads waiting on each other.
    torch.set_num_threads(1)
    started = time.monotonic()
    root = args.out / "semi-informed"
    demo = read_data_dir(demo_corpus_dir())
    train_dir, eval_dir, split_note = demo_split(demo, root / "data")
    print(f"demo corpus: {demo.path} ({len(demo.wav)} utterances, {len(demo.speakers)} speakers)")
    print(f"attacker data: {split_note}")
    results = []
    for system in DEMO_SYSTEMS:
        outcome = run_challenge(ChallengeInputs(
            system=system, train=[train_dir], data=eval_dir, out=root / system, asr="none",
            train_overrides=demo_attacker_overrides(args.attacker_epochs), device="cpu",
            workers=args.workers, cache=ContentCache(args.out / "cache"), progress=not args.quiet,
            notes={"attacker data": split_note}))
        results += outcome.evaluation.results
        print(f"{system}:\n  " + stage_summary(outcome.stages).replace("\n", "\n  ") + f"\n  report: {outcome.report}")
    header, rows = attacker_comparison(results)
    print(markdown(Table(header, tuple(rows), (False, False) + (True,) * (len(header) - 4) + (False, False))))
    print(f"semi-informed: a tiny ECAPA-TDNN trained on the system's anonymised speech of other speakers; "
          f"lazy-informed: the evaluation model (GE2E) on the same anonymised enrolment and trials. "
          f"{time.monotonic() - started:.0f} s in all.")
    return 0
