"""Evaluation speed: Whisper's two decodings side by side, cold and warm runs on the demo corpus, and
speaker-embedding throughput.

- ASR: Whisper tiny.en on the original demo utterances, ``per-utterance`` (each utterance its own 30 s
  window, the decoding before packing), ``packed`` (several to a window) and ``short-window`` (each its own 10 s
  window where it fits), alternating in the same run, ``--rounds`` each: the median in audio seconds per CPU second
  (per core: a CPU second is one core busy for one second) and per second of wall time per core (the cores this
  process may use), the WER of each, and how many transcripts differ from ``per-utterance`` after normalisation.
- cold: ``voxanon evaluate`` (vpc2022: GE2E ASV, similarity matrices, rho_F0, Whisper tiny.en WER) of
  B2 against the original demo corpus with an empty cache, with each decoding; warm: the same run again,
  served from the embedding/transcript cache. The B2 anonymisation is done beforehand and not timed.
  Audio seconds per CPU second and per second per core count both sides (original and B2).
- ``--heap-comparison``: Whisper's per-utterance decoding alone with glibc's default heap and with the heap
  ``voxanon evaluate`` keeps (:mod:`voxanon.pipeline.execution.heap`: one heap for all threads, freed blocks kept),
  each in a process of its own (the setting must come before any thread allocates), alternating, ``--rounds``
  each; the transcripts of both must be the same. Every other part runs with the heap of ``voxanon evaluate`` (``--heap``).
- ``--ge2e-start``: the time from a fresh process's first GE2E use to its first embedding (model load and the
  front end's first call, torch already imported), voxanon's front end against Resemblyzer's own (which calls
  librosa), alternating, ``--rounds`` each, and whether the two embeddings are equal.
- ``--blas-comparison``: GE2E's embeddings (batches of 16) and Whisper's per-utterance decoding (blocks of 8) with
  NumPy's BLAS pool as NumPy leaves it (a thread per core) and on one thread as the two now run
  (:mod:`voxanon.models.dsp.blas`), alternating in this process, ``--rounds`` each: wall and CPU seconds, and whether
  the embeddings and transcripts are the same.
- embeddings per second of GE2E and of an ECAPA of the SSL-SAS size (random weights; timing
  does not depend on weight values) at batch sizes 1 and 16.

    .venv/bin/python -m benchmarks.evaluate [--rounds 3] [--asr-utterances N] [--asr-only] [--utterances 48]
                                            [--heap-comparison] [--ge2e-start] [--blas-comparison]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.eval.wer import normalise_english, word_error_rate
from voxanon.models.recognisers.asr import WHISPER_DECODINGS, WhisperASR
from voxanon.pipeline.evaluation.protocols import load_protocol
from voxanon.pipeline.evaluation.computations import make_embedder, make_transcriber
from voxanon.pipeline.evaluation.evaluate import evaluate_sets
from voxanon.pipeline.execution.heap import reuse_freed_memory, share_one_heap
from voxanon.pipeline.evaluation.sets import discover_sets
from voxanon.pipeline.feature_cache import ContentCache
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config


CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished children, user and system."""
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage.ru_utime + usage.ru_stime for usage in used)


def timed_evaluation(sets, protocol, cache: ContentCache) -> tuple[float, float, int]:
    start, cpu_start = time.perf_counter(), cpu_seconds()
    found = evaluate_sets(sets, protocol, "b2", embedder=make_embedder(protocol["asv"]), cache=cache,
                          asr=make_transcriber(protocol.get("asr"), decoding=protocol.get("asr_decoding")))
    return time.perf_counter() - start, cpu_seconds() - cpu_start, found.computed


def compare_decodings(data, rounds: int, utterances: int | None, decodings=WHISPER_DECODINGS) -> dict:
    """The Whisper decodings on the same utterances, alternating, each model loaded once beforehand; returns
    each one's median wall and CPU seconds and transcripts."""
    utts = data.utterances[:utterances]
    waves = [load_audio(data.audio_path(u), 16000).samples for u in utts]
    audio_seconds = sum(map(len, waves)) / 16000
    models = {decoding: WhisperASR(decoding=decoding) for decoding in decodings}
    for model in models.values():
        model.transcribe(waves[0])  # CTranslate2's first call sets up its kernels
    attributed = {"packed": 0, "in doubt": 0}
    if "packed" in models:
        packed = models["packed"]

        def counted(windows):
            texts = type(packed)._decode_packed(packed, windows)
            for window in texts:
                attributed["packed"] += sum(text is not None for text in window)
                attributed["in doubt"] += sum(text is None for text in window)
            return texts

        packed._decode_packed = counted
    seconds: dict[str, list[float]] = {decoding: [] for decoding in models}
    cpu: dict[str, list[float]] = {decoding: [] for decoding in models}
    texts: dict[str, list[str]] = {}
    for round_ in range(rounds):
        for decoding in (list(models) if round_ % 2 == 0 else list(reversed(models))):
            start, cpu_start = time.perf_counter(), cpu_seconds()
            texts[decoding] = models[decoding].transcribe_many(waves)
            seconds[decoding].append(time.perf_counter() - start)
            cpu[decoding].append(cpu_seconds() - cpu_start)
    print(f"Whisper tiny.en on {len(utts)} original demo utterances ({audio_seconds:.0f} s), {rounds} alternating "
          f"rounds, {CORES} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    references = {u: data.text[u] for u in utts}
    baseline = "per-utterance" if "per-utterance" in texts else decodings[0]
    before = texts[baseline]
    for decoding in models:
        median, median_cpu = statistics.median(seconds[decoding]), statistics.median(cpu[decoding])
        wer = word_error_rate(references, dict(zip(utts, texts[decoding]))).wer
        differ = sum(normalise_english(a) != normalise_english(b) for a, b in zip(before, texts[decoding]))
        print(f"  {decoding:14s} median {median:6.1f} s  ({', '.join(f'{s:.1f}' for s in seconds[decoding])}), "
              f"CPU {median_cpu:6.1f} s: {audio_seconds / median_cpu:5.2f} audio s per CPU s, "
              f"{audio_seconds / median / CORES:5.2f} audio s/s per core; WER {wer:.2f} %, {differ} of {len(utts)} "
              f"transcripts differ from {baseline}; CPU {statistics.median(cpu[baseline]) / median_cpu:.2f}x "
              f"less than {baseline}")
    if "packed" in models:
        print(f"  packed: per round "
              f"{attributed['packed'] / rounds:.0f} utterances attributed in a packed window, "
              f"{len(utts) - attributed['packed'] / rounds:.0f} decoded alone; {attributed['in doubt'] / rounds:.0f} "
              f"times an utterance was in doubt (first or second packing)")
    return {decoding: {"seconds": statistics.median(seconds[decoding]), "cpu": statistics.median(cpu[decoding]),
                       "audio_seconds": audio_seconds, "texts": texts[decoding]} for decoding in models}


def compare_heaps(rounds: int, utterances: int | None) -> None:
    """Whisper's per-utterance decoding with glibc's default heap and with voxanon evaluate's, a fresh process each
    (alternating, ``rounds`` each)."""
    found: dict[str, list[dict]] = {"default": [], "kept": []}
    for round_ in range(rounds):
        for heap in (("default", "kept") if round_ % 2 == 0 else ("kept", "default")):
            command = [sys.executable, "-m", "benchmarks.evaluate", "--asr-only", "--rounds", "1", "--heap", heap,
                       "--decodings", "per-utterance", "--json"]
            if utterances is not None:
                command += ["--asr-utterances", str(utterances)]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            found[heap].append(json.loads(output.strip().splitlines()[-1])["per-utterance"])
    audio_seconds = found["kept"][0]["audio_seconds"]
    print(f"Whisper per-utterance, glibc's default heap against voxanon evaluate's (one heap, freed blocks kept), "
          f"{audio_seconds:.0f} s of audio, {rounds} alternating rounds, {CORES} cores")
    medians = {}
    for heap, runs in found.items():
        medians[heap] = (statistics.median(r["seconds"] for r in runs), statistics.median(r["cpu"] for r in runs))
        walls = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        cpus = ", ".join(f"{r['cpu']:.1f}" for r in runs)
        print(f"  {heap:8s} wall {walls} s, CPU {cpus} s: {audio_seconds / medians[heap][1]:.2f} audio s per "
              f"CPU s, {audio_seconds / medians[heap][0] / CORES:.2f} audio s/s per core")
    same = all(run["texts"] == found["kept"][0]["texts"] for runs in found.values() for run in runs)
    print(f"  kept heap: {medians['default'][0] / medians['kept'][0]:.2f}x faster (wall), "
          f"{medians['default'][1] / medians['kept'][1]:.2f}x less CPU; transcripts "
          f"{'the same in every run' if same else 'DIFFER between runs'}")


GE2E_START = """
import json, sys, time
import numpy as np, torch
wave = np.random.default_rng(0).uniform(-0.5, 0.5, 48_000).astype(np.float32)
began = time.perf_counter()
if sys.argv[1] == "voxanon":
    from voxanon.models.nets.ge2e import GE2EEncoder
    vector = GE2EEncoder().embed([wave])[0]
else:
    from resemblyzer import VoiceEncoder, preprocess_wav
    vector = VoiceEncoder("cpu", verbose=False).embed_utterance(preprocess_wav(wave, source_sr=16000))
print(json.dumps({"seconds": time.perf_counter() - began, "vector": vector.tolist()}))
"""


def compare_ge2e_start(rounds: int) -> None:
    """Seconds from a fresh process's first GE2E use to its first embedding, with each front end."""
    found: dict[str, list[dict]] = {"voxanon": [], "resemblyzer": []}
    for round_ in range(rounds):
        for front_end in (("voxanon", "resemblyzer") if round_ % 2 == 0 else ("resemblyzer", "voxanon")):
            output = subprocess.run([sys.executable, "-c", GE2E_START, front_end], check=True, capture_output=True,
                                    text=True).stdout
            found[front_end].append(json.loads(output.strip().splitlines()[-1]))
    medians = {name: statistics.median(r["seconds"] for r in runs) for name, runs in found.items()}
    difference = float(np.max(np.abs(np.array(found["voxanon"][0]["vector"])
                                      - np.array(found["resemblyzer"][0]["vector"]))))
    print(f"GE2E, a fresh process's first use to its first embedding (3 s of noise; torch imported before), "
          f"{rounds} alternating rounds")
    for name, runs in found.items():
        seconds = ", ".join(f"{r['seconds']:.2f}" for r in runs)
        print(f"  {name:12s} {seconds} s (median {medians[name]:.2f})")
    print(f"  voxanon's front end {medians['resemblyzer'] / medians['voxanon']:.1f}x faster to its first embedding; "
          f"largest difference between the two embeddings {difference:.1e}")


def compare_blas_pools(data, rounds: int, utterances: int | None) -> None:
    """GE2E and Whisper with NumPy's BLAS pool as NumPy leaves it and on one thread, alternating."""
    import contextlib
    from unittest import mock

    from voxanon.models.nets import ge2e
    from voxanon.models.recognisers import asr

    utts = data.utterances[:utterances]
    waves = [load_audio(data.audio_path(u), 16000).samples for u in utts]
    audio_seconds = sum(map(len, waves)) / 16000
    encoder, recogniser = ge2e.GE2EEncoder(), WhisperASR(decoding="per-utterance")
    jobs = {"GE2E, batches of 16": (encoder.embed, 16),
            "Whisper per-utterance, blocks of 8": (recogniser.transcribe_many, 8)}
    for run, _ in jobs.values():
        run(waves[:2])   # kernels and pools set up
    @contextlib.contextmanager
    def numpy_pool():   # the code before: no limit around GE2E's front end and Whisper's decoding
        with mock.patch.object(ge2e, "one_blas_thread", contextlib.nullcontext), \
                mock.patch.object(asr, "one_blas_thread", contextlib.nullcontext):
            yield

    pools = {"NumPy's pool": numpy_pool, "one thread": contextlib.nullcontext}
    print(f"NumPy's BLAS pool ({CORES} threads) against one thread, {len(utts)} original demo utterances "
          f"({audio_seconds:.0f} s), {rounds} alternating rounds, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for job, (run, batch_size) in jobs.items():
        seconds = {pool: [] for pool in pools}
        cpu = {pool: [] for pool in pools}
        outputs = {pool: [] for pool in pools}
        for round_ in range(rounds):
            for pool in (list(pools) if round_ % 2 == 0 else list(reversed(pools))):
                with pools[pool]():
                    start, cpu_start = time.perf_counter(), cpu_seconds()
                    found = [run(waves[i:i + batch_size]) for i in range(0, len(waves), batch_size)]
                    seconds[pool].append(time.perf_counter() - start)
                    cpu[pool].append(cpu_seconds() - cpu_start)
                outputs[pool].append(found)
        first = outputs["one thread"][0]
        same = all(all(map(np.array_equal, run_batches, first)) for runs in outputs.values() for run_batches in runs)
        medians = {pool: (statistics.median(seconds[pool]), statistics.median(cpu[pool])) for pool in pools}
        print(f"  {job}: " + "; ".join(f"{pool} wall {', '.join(f'{s:.2f}' for s in seconds[pool])} s, "
                                       f"CPU {', '.join(f'{c:.2f}' for c in cpu[pool])} s" for pool in pools))
        (pool_wall, pool_cpu), (one_wall, one_cpu) = medians["NumPy's pool"], medians["one thread"]
        print(f"    one thread {pool_wall / one_wall:.2f}x faster (wall), {pool_cpu / one_cpu:.2f}x less CPU; outputs "
              f"{'the same in every run' if same else 'DIFFER'}")


def embeddings_per_second(embed, waves: list[np.ndarray], batch_size: int) -> float:
    embed(waves[:2])
    start = time.perf_counter()
    for i in range(0, len(waves), batch_size):
        embed(waves[i:i + batch_size])
    return len(waves) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=48, help="utterances for the throughput figures")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each Whisper decoding")
    parser.add_argument("--asr-utterances", type=int, default=None,
                        help="original demo utterances for the decodings' comparison (default: all 182)")
    parser.add_argument("--asr-only", action="store_true", help="only the decodings' comparison")
    parser.add_argument("--decodings", nargs="+", choices=WHISPER_DECODINGS, default=list(WHISPER_DECODINGS),
                        help="the decodings compared (default: all)")
    parser.add_argument("--heap", choices=("kept", "default"), default="kept",
                        help="kept (as voxanon evaluate: one heap for all threads, freed blocks kept) or glibc's "
                             "default, for the decodings' comparison (the cold evaluations' transcriber keeps freed "
                             "blocks either way, as the evaluation does)")
    parser.add_argument("--heap-comparison", action="store_true",
                        help="only Whisper per-utterance with each heap, a process each")
    parser.add_argument("--ge2e-start", action="store_true",
                        help="only GE2E's time to a first embedding with each front end, a process each")
    parser.add_argument("--blas-comparison", action="store_true",
                        help="only GE2E and Whisper with NumPy's BLAS pool and on one BLAS thread, alternating")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)   # compare_heaps' processes
    args = parser.parse_args()
    if args.heap == "kept":
        share_one_heap()   # first, as voxanon evaluate does; the evaluation keeps freed blocks (computations.py)
    if args.heap_comparison:
        compare_heaps(args.rounds, args.asr_utterances)
        return
    if args.ge2e_start:
        compare_ge2e_start(args.rounds)
        return
    corpus = demo_corpus_dir()
    data = read_data_dir(corpus)
    if args.heap == "kept":
        reuse_freed_memory(every_block=True)   # as the evaluation does before its transcriber loads
    if args.blas_comparison:
        compare_blas_pools(data, args.rounds, args.asr_utterances or 128)
        return
    found = compare_decodings(data, args.rounds, args.asr_utterances, tuple(args.decodings))
    if args.json:
        print(json.dumps(found))
    if args.asr_only:
        return
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        anonymise_set(data, load_system_config("b2"), work / "demo_b2", progress=False)
        sets = discover_sets(corpus, work / "demo_b2")
        timings = {}
        for decoding in WHISPER_DECODINGS:
            protocol = load_protocol("vpc2022", [f"asr_decoding={decoding}"])
            cache = ContentCache(work / f"cache-{decoding}")
            timings[decoding] = (timed_evaluation(sets, protocol, cache), timed_evaluation(sets, protocol, cache))
    audio_seconds = sum(data.utt2dur.values())
    print(f"evaluate (vpc2022, GE2E + Whisper tiny.en) of B2 on the demo corpus ({audio_seconds:.0f} s of audio "
          f"each side), {CORES} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for decoding, ((cold, cold_cpu, computed_cold), (warm, _, computed_warm)) in timings.items():
        print(f"  {decoding:14s} cold: {cold:7.1f} s, CPU {cold_cpu:7.1f} s  ({computed_cold} embeddings/transcripts "
              f"computed, {2 * audio_seconds / cold_cpu:.2f} audio s per CPU s, {2 * audio_seconds / cold / CORES:.2f} "
              f"audio s/s per core)   warm: {warm:5.1f} s  ({computed_warm} computed)")

    waves = [load_audio(data.audio_path(u), 16000).samples for u in data.utterances[:args.utterances]]
    encoders = {}
    from voxanon.models.nets.ge2e import GE2EEncoder
    encoders["GE2E (resemblyzer weights)"] = GE2EEncoder().embed
    import torch
    from voxanon.models.nets.speaker import SSL_SAS_ECAPA, EcapaEncoder
    torch.manual_seed(0)
    encoders["ECAPA SSL-SAS size (random weights)"] = EcapaEncoder(SSL_SAS_ECAPA).eval().embed
    print(f"speaker embeddings per second on {len(waves)} demo utterances ({sum(map(len, waves)) / 16000:.0f} s)")
    for name, embed in encoders.items():
        single = embeddings_per_second(embed, waves, 1)
        batched = embeddings_per_second(embed, waves, 16)
        print(f"  {name:32s} batch 1: {single:6.1f}/s   batch 16: {batched:6.1f}/s   ratio {batched / single:.2f}x")


if __name__ == "__main__":
    main()
