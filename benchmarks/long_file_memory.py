"""Memory of B2 (McAdams) on one long file: peak resident bytes per input sample of ``anonymise``, side by side.

One synthetic 16 kHz 16-bit WAV file (10 minutes by default) through the whole chain (decoding, the McAdams stage,
the 16-bit output, its digest and journal line), as ``voxanon anonymise --system b2 --set max_seconds=...`` runs
it, each way in a fresh process, so that its peak RSS (``ru_maxrss``) is its own; the figure is that peak less the
RSS before the run (interpreter, imports), per input sample:

* ``one block``: every frame of the file through the stage at once, what every utterance took before the stage
  went in blocks (``block_frames`` as large as the file);
* ``blocks``: the stage as it runs (:data:`voxanon.models.dsp.mcadams.BLOCK_FRAMES` frames at a time).

Both write the same bytes (the run checks it). Measured on the 2-core development machine (load average about 6
from other jobs, so the times are noisy), 10 minutes (9.6 M samples):

    one block: 1041 MB peak, 103.3 B/sample, 42.9 s
    blocks:     290 MB peak,  25.1 B/sample, 38.1 s

The code before blocks (commit c0648c3) took 103.4 B/sample the same way, and wrote the same bytes (sha256
bba002e9...). What blocks leave is the stage's float64 output and the squares its level match sums (16 B/sample),
the decoded input (4) and the 16-bit output on its way to disk. A 1-hour file (57.6 M samples) in blocks alone:
1329 MB peak, 20.9 B/sample, 169 s (load average 9.5); issue 37 saw 5.6 GB before.

    .venv/bin/python -m benchmarks.long_file_memory [--minutes 10]
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLE_RATE = 16000
MODES = ("one block", "blocks")


def _write_long_corpus(root: Path, minutes: float) -> Path:
    """A Kaldi set of one utterance: ``minutes`` of synthetic vowels, a new one every second."""
    import numpy as np
    import soundfile

    from tests.helpers.corpora import synthetic_vowel

    vowels = [synthetic_vowel(100.0 + 15 * k, [(500 + 40 * k, 80), (1500 - 50 * k, 120), (2500, 160)], 1.0, seed=k)
              for k in range(10)]
    seconds = int(round(minutes * 60))
    audio = root / "long.wav"
    with soundfile.SoundFile(audio, "w", SAMPLE_RATE, 1, subtype="PCM_16") as out:
        for second in range(seconds):
            out.write(np.asarray(vowels[second % len(vowels)], dtype=np.float32))
    data = root / "long"
    data.mkdir()
    (data / "wav.scp").write_text(f"long-0001 {audio}\n")
    (data / "utt2spk").write_text("long-0001 long\n")
    return data


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(mode: str, data_path: Path, out: Path) -> dict:
    """``anonymise`` of the set at ``data_path`` with B2 in this process, the stage taking ``mode``'s blocks."""
    import time

    import soundfile

    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.models.dsp import mcadams as mcadams_module
    from voxanon.pipeline.runner import anonymise_set
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    data = read_data_dir(data_path)
    samples = soundfile.info(data.audio_path(data.utterances[0])).frames
    config = load_system_config("b2", [f"max_seconds={samples / SAMPLE_RATE + 1}"])
    if mode == "one block":
        # The stage's own module, wherever it lives, calls McAdams with every frame in one block.
        stage_module = sys.modules[type(build_system(config).stages[0]).__module__]
        if getattr(stage_module, "mcadams", None) is not mcadams_module.mcadams:
            raise SystemExit(f"{stage_module.__name__} no longer calls McAdams by the name 'mcadams': update "
                             "this benchmark")
        whole = 64 * (samples // 64 + 64)
        stage_module.mcadams = functools.partial(mcadams_module.mcadams, block_frames=whole)
    before = _resident_bytes()
    started = time.perf_counter()
    result = anonymise_set(data, config, out, progress=False)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if not result.ok:
        raise SystemExit(f"{mode}: the run failed: {result.failures[0].error}")
    output = hashlib.sha256(next((out / "wav").glob("*.wav")).read_bytes()).hexdigest()
    return {"mode": mode, "samples": samples, "peak_mb": peak / 1e6, "bytes_per_sample": (peak - before) / samples,
            "seconds": seconds, "output_sha256": output}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the file (default 10)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, data_path, out = args.child
        print(json.dumps(measure(mode, Path(data_path), Path(out))))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="voxanon-long-") as tmp:
        data = _write_long_corpus(Path(tmp), args.minutes)
        for number, mode in enumerate(MODES):
            run = subprocess.run([sys.executable, "-m", __spec__.name, "--child", mode, str(data),
                                  str(Path(tmp) / f"out{number}")], capture_output=True, text=True)
            if run.returncode != 0:
                print(run.stderr, file=sys.stderr)
                return 1
            rows.append(json.loads(run.stdout.splitlines()[-1]))
    print(f"B2 anonymise, one file of {args.minutes:g} minutes ({rows[0]['samples'] / 1e6:.1f} M samples), load "
          f"average {os.getloadavg()[0]:.1f}:")
    for row in rows:
        print(f"  {row['mode'] + ':':<11} {row['peak_mb']:5.0f} MB peak, {row['bytes_per_sample']:5.1f} B/sample, "
              f"{row['seconds']:.1f} s")
    same = len({row["output_sha256"] for row in rows}) == 1
    print("  outputs: " + ("the same bytes" if same else "DIFFER"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
