"""B4's cost per audio second on the CPU, stage by stage, with full-size random weights (the published shapes).

Builds the networks in memory (no model set written; about 3 GB of float32 weights), anonymises one synthetic
utterance of ``--seconds`` seconds with a random voice of the same shapes as the release's, and prints each
stage's seconds, its seconds per audio second (the real-time factor), and the total, with ``--threads`` torch
threads. On a GPU (``--device cuda``) the coarse and fine stages run under bfloat16 autocast as the recipe does.

    .venv/bin/python -m benchmarks.nac [--seconds 3] [--threads 2] [--device cpu]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from voxanon.models.nets.nac.bark import COARSE_FULL, FINE_FULL, CoarseGPT, FineGPT, generate_coarse, generate_fine, \
        init_random
    from voxanon.models.nets.nac.encodec import EncodecConfig, EncodecDecoder
    from voxanon.models.nets.nac.encodec import init_random as init_encodec
    from voxanon.models.nets.hubert import HubertBackboneConfig, plain_hubert
    from voxanon.models.checkpoints.nac import random_voice
    from voxanon.models.dsp.resample import resample_kaiser_best
    from voxanon.models.nets.nac.semantic import SemanticQuantiser, semantic_tokens

    torch.manual_seed(0)
    device = torch.device(args.device)
    hubert, quantiser = plain_hubert(HubertBackboneConfig()), SemanticQuantiser().eval()
    coarse_model = init_random(CoarseGPT(COARSE_FULL)).eval().to(device)
    fine_model = init_random(FineGPT(FINE_FULL)).eval().to(device)
    decoder = init_encodec(EncodecDecoder(EncodecConfig())).eval()
    voice = random_voice(np.random.default_rng(0))
    t = np.arange(int(args.seconds * 16000)) / 16000
    wave = (0.3 * np.sin(2 * np.pi * 140 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    dtype = torch.bfloat16 if device.type == "cuda" else None

    print(f"B4, full-size random weights, {args.seconds:.1f} s of audio, {args.threads} thread(s), {args.device}",
          flush=True)
    times = {}

    def report(stage: str, seconds: float) -> None:
        times[stage] = seconds
        print(f"    {stage:40s} {seconds:8.1f} s   {seconds / args.seconds:7.2f} s per audio second", flush=True)

    start = time.perf_counter()
    semantic = semantic_tokens(hubert, quantiser, wave, 9)
    report("semantic (HuBERT + quantiser)", time.perf_counter() - start)
    start = time.perf_counter()
    coarse = generate_coarse(coarse_model, [semantic], [voice], [torch.Generator().manual_seed(1)], dtype=dtype)
    report("coarse (Bark GPT, KV cache)", time.perf_counter() - start)
    start = time.perf_counter()
    fine = generate_fine(fine_model, coarse, [voice], [torch.Generator().manual_seed(2)], dtype=dtype)
    report("fine (Bark GPT, 1024-frame windows)", time.perf_counter() - start)
    start = time.perf_counter()
    with torch.inference_mode():
        audio = decoder(torch.from_numpy(fine[0])[None])[0].numpy()
    resample_kaiser_best(audio, 24000, 16000)
    report("decode (EnCodec + kaiser_best)", time.perf_counter() - start)
    total = sum(times.values())
    print(f"    {'total':40s} {total:8.1f} s   {total / args.seconds:7.2f} s per audio second")


if __name__ == "__main__":
    main()
