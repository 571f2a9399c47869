"""Speed of `voxanon prepare librispeech` on a LibriSpeech-sized listing.

Builds a tree in the LibriSpeech layout with about 300 000 utterances (1 000 speakers x
6 chapters x 50 utterances; every audio file is the same valid 0.1 s FLAC, so nothing is
decoded and the tree stays small), then times the preparation twice:

- listing only (``--no-durations``): folders, transcripts, speakers, pairing, checks and
  writing the Kaldi files; the acceptance target is under 60 s;
- with audio headers read (``utt2dur`` and the 16 kHz check) in ``--jobs`` processes,
  for reference.

Run: ``.venv/bin/python -m benchmarks.prepare [--speakers 1000] [--jobs N] [--workdir DIR]``.
The files are in the page cache when timed (they were just written); a cold disk adds
the file-system's own listing and header-read time.
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

from voxanon.pipeline.cli import main

CHAPTERS_PER_SPEAKER = 6
UTTERANCES_PER_CHAPTER = 50
TARGET_SECONDS = 60.0


def build_tree(root: Path, speakers: int) -> int:
    buffer = io.BytesIO()
    soundfile.write(buffer, (0.1 * np.sin(np.arange(1600) / 7.0)).astype(np.float32), 16000, format="FLAC")
    audio = buffer.getvalue()
    corpus = root / "LibriSpeech"
    subset = corpus / "train-960"
    lines = [";ID  |SEX| SUBSET           |MINUTES| NAME\n"]
    count = 0
    for s in range(speakers):
        speaker = str(100 + s)
        lines.append(f"{speaker} | {'FM'[s % 2]} | train-960 | 25.00 | Reader {s}\n")
        for c in range(CHAPTERS_PER_SPEAKER):
            chapter = str(1000 + c)
            folder = subset / speaker / chapter
            folder.mkdir(parents=True)
            transcript = []
            for u in range(UTTERANCES_PER_CHAPTER):
                utt = f"{speaker}-{chapter}-{u:04d}"
                (folder / f"{utt}.flac").write_bytes(audio)
                transcript.append(f"{utt} THIS IS UTTERANCE NUMBER {u} OF CHAPTER {chapter}\n")
                count += 1
            (folder / f"{speaker}-{chapter}.trans.txt").write_text("".join(transcript))
    (corpus / "SPEAKERS.TXT").write_text("".join(lines))
    return count


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - start
    if code != 0:
        sys.exit(f"voxanon {' '.join(argv)} failed with exit code {code}")
    return elapsed


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speakers", type=int, default=1000, help="speakers (300 utterances each)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes reading audio headers (default: the CPU count, %(default)s)")
    parser.add_argument("--workdir", type=Path, help="where to build the tree (default: a temporary folder)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="voxanon-prepare-bench-", dir=args.workdir))
    try:
        start = time.perf_counter()
        entries = build_tree(work / "corpus", args.speakers)
        print(f"built {entries} utterances in {time.perf_counter() - start:.1f} s", flush=True)
        common = ["prepare", "librispeech", "--root", str(work / "corpus"), "--subset", "train-960", "--strict"]
        listing = timed(common + ["--out", str(work / "listing"), "--no-durations"])
        lines = sum(1 for _ in open(work / "listing" / "wav.scp"))
        print(f"listing only (--no-durations): {entries} entries in {listing:.1f} s "
              f"({entries / listing:,.0f} entries/s; target < {TARGET_SECONDS:.0f} s: "
              f"{'met' if listing < TARGET_SECONDS and lines == entries else 'NOT met'})", flush=True)
        headers = timed(common + ["--out", str(work / "headers"), "--jobs", str(args.jobs)])
        print(f"with audio headers (utt2dur, rate check), {args.jobs} process(es): {entries} entries "
              f"in {headers:.1f} s "
              f"({entries / headers:,.0f} entries/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run()
