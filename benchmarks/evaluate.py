"""Evaluation speed: cold and warm runs on the demo corpus, and speaker-embedding throughput.

- cold: ``voxanon evaluate`` (vpc2022: GE2E ASV, similarity matrices, Whisper tiny.en WER) of
  B2 against the original demo corpus with an empty cache; warm: the same run again, served
  from the embedding/transcript cache. The B2 anonymisation is done beforehand and not timed.
- embeddings per second of GE2E and of an ECAPA of the SSL-SAS size (random weights; timing
  does not depend on weight values) at batch sizes 1 and 16.

    .venv/bin/python -m benchmarks.evaluate [--utterances 48]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.evaluation.protocols import load_protocol
from voxanon.pipeline.evaluation.computations import make_embedder, make_transcriber
from voxanon.pipeline.evaluation.evaluate import evaluate_sets
from voxanon.pipeline.evaluation.sets import discover_sets
from voxanon.pipeline.feature_cache import ContentCache
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config


def timed_evaluation(sets, protocol, cache: ContentCache) -> tuple[float, int]:
    start = time.perf_counter()
    found = evaluate_sets(sets, protocol, "b2", embedder=make_embedder(protocol["asv"]), cache=cache,
                          asr=make_transcriber(protocol.get("asr")))
    return time.perf_counter() - start, found.computed


def embeddings_per_second(embed, waves: list[np.ndarray], batch_size: int) -> float:
    embed(waves[:2])
    start = time.perf_counter()
    for i in range(0, len(waves), batch_size):
        embed(waves[i:i + batch_size])
    return len(waves) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=48, help="utterances for the throughput figures")
    args = parser.parse_args()
    corpus = demo_corpus_dir()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        data = read_data_dir(corpus)
        anonymise_set(data, load_system_config("b2"), work / "demo_b2", progress=False)
        sets = discover_sets(corpus, work / "demo_b2")
        protocol = load_protocol("vpc2022")
        cache = ContentCache(work / "cache")
        cold, computed_cold = timed_evaluation(sets, protocol, cache)
        warm, computed_warm = timed_evaluation(sets, protocol, cache)
    audio_seconds = sum(data.utt2dur.values())
    print(f"evaluate (vpc2022, GE2E + Whisper tiny.en) of B2 on the demo corpus ({audio_seconds:.0f} s of audio)")
    print(f"  cold: {cold:7.1f} s  ({computed_cold} embeddings/transcripts computed)")
    print(f"  warm: {warm:7.1f} s  ({computed_warm} computed)   speed-up {cold / warm:.1f}x")

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
