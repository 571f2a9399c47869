"""``voxanon demo``: anonymise the bundled demo corpus with B2 and B2r."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems import load_system_config

DEMO_SYSTEMS = ("b2", "b2r")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="anonymise the bundled demo corpus with B2 and B2r",
                                   description="Anonymise the bundled demo corpus (TTS voices, both sexes) "
                                               "with B2 and B2r and print where the output went.")
    parser.add_argument("--out", type=Path, default=Path("voxanon-demo"), metavar="DIR",
                        help="output folder (default: ./voxanon-demo)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    data = read_data_dir(demo_corpus_dir())
    print(f"demo corpus: {data.path} ({len(data.wav)} utterances, {len(data.speakers)} speakers)")
    failed = False
    for system in DEMO_SYSTEMS:
        result = anonymise_set(data, load_system_config(system), args.out / f"demo_{system}",
                               workers=max(1, args.workers))
        rtf = f", real-time factor {result.wall_seconds / result.audio_seconds:.4f}" if result.audio_seconds else ""
        print(f"{system}: {result.out_dir} ({result.processed} processed, {result.resumed} resumed, "
              f"{len(result.failures)} failed{rtf})")
        failed |= not result.ok
    return 1 if failed else 0
