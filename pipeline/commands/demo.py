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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
