"""``voxanon demo``: anonymise the bundled demo corpus with B2 and B2r and evaluate both."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.commands.benchmark import compare
from voxanon.pipeline.commands.evaluate import load_protocol, print_table, write_outputs

DEMO_SYSTEMS = ("b2", "b2r")
DEMO_PROTOCOL = "vpc2022"


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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.semi_informed:
        return run_semi_informed(args)
    from voxanon.pipeline.evaluation import discover_sets
    from voxanon.pipeline.feature_cache import ContentCache

    sets = discover_sets(demo_corpus_dir())
    data = sets[0].trials
    print(f"demo corpus: {data.path} ({len(data.wav)} utterances, {len(data.speakers)} speakers)")
    protocol = load_protocol(DEMO_PROTOCOL)
    evaluation = compare(sets, list(DEMO_SYSTEMS), protocol, args.out, max(1, args.workers),
                         ContentCache(args.out / "cache"), allow_missing=False)
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

    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.eval.tables import Table, markdown
    from voxanon.pipeline.challenge import (ChallengeInputs, attacker_comparison, demo_attacker_overrides,
                                            demo_split, run_challenge)
    from voxanon.pipeline.commands.challenge import stage_summary
    from voxanon.pipeline.feature_cache import ContentCache

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
            workers=max(1, args.workers), cache=ContentCache(args.out / "cache"),
            notes={"attacker data": split_note}))
        results += outcome.evaluation.results
        print(f"{system}:\n  " + stage_summary(outcome.stages).replace("\n", "\n  ") + f"\n  report: {outcome.report}")
    header, rows = attacker_comparison(results)
    print(markdown(Table(header, tuple(rows), (False, False) + (True,) * (len(header) - 4) + (False, False))))
    print(f"semi-informed: a tiny ECAPA-TDNN trained on the system's anonymised speech of other speakers; "
          f"lazy-informed: the evaluation model (GE2E) on the same anonymised enrolment and trials. "
          f"{time.monotonic() - started:.0f} s in all.")
    return 0
