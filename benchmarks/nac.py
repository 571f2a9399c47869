"""B4's cost per audio second on the CPU, stage by stage, with full-size random weights (the published shapes).

Builds the networks in memory (no model set written; about 3 GB of float32 weights), anonymises one synthetic
utterance of ``--seconds`` seconds with a random voice of the same shapes as the release's, and prints each
stage's seconds, its seconds per audio second (the real-time factor), and the total, with ``--threads`` torch
threads. On a GPU (``--device cuda``) the coarse and fine stages run under bfloat16 autocast as the recipe does.

``--reference`` (CPU) also times the reference code on the same weights and inputs, in the order ours, reference,
reference, ours (a load that drifts during the run weighs on both alike), means of two runs each: Suno's
networks and the coqui fork's ``generate_coarse``/``generate_fine`` as ``tests/reference/bark.py`` transcribes them
(the networks share our tensors, so no second copy of the weights is made), and prints the ratio ours/reference
of each and of the two together (the stages that cost; the semantic and decode stages are not compared). The
reference draws from torch's global generator, so its tokens differ from ours; the work per step does not. The
load average is printed before and after, since the ratio is what a loaded machine still measures fairly.

    .venv/bin/python -m benchmarks.nac [--seconds 3] [--threads 2] [--device cpu] [--reference]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reference", action="store_true",
                        help="also time the reference code (tests/reference/bark.py) on the same weights")
    args = parser.parse_args()
    if args.reference and args.device != "cpu":
        parser.error("--reference runs on the CPU only (the reference loops as transcribed)")
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

    print(f"B4, full-size random weights, {args.seconds:.1f} s of audio, {args.threads} thread(s), {args.device}; "
          f"load average {load_average()}", flush=True)
    times: dict[str, float] = {}
    bark = reference_bark(coarse_model, fine_model) if args.reference else None
    history = (voice.semantic, voice.coarse, voice.fine)

    def timed(label: str, run):
        """``run()``, its seconds printed under ``label`` and kept (summed over repeats)."""
        start = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - start
        times[label] = times.get(label, 0.0) + seconds
        print(f"    {label:40s} {seconds:8.1f} s   {seconds / args.seconds:7.2f} s per audio second", flush=True)
        return result

    def ours_and_reference(label: str, ours, reference):
        """Ours alone; with ``--reference`` ours, the reference, the reference, ours (a load that drifts during
        the run weighs on both alike); ours' first result, and its mean seconds in ``times``."""
        result = timed(label, ours)
        if bark is not None:
            timed(f"  reference {label.split()[0]}", reference)
            timed(f"  reference {label.split()[0]}", reference)
            timed(label, ours)
            times[label] /= 2
            times[f"  reference {label.split()[0]}"] /= 2
        return result

    semantic = timed("semantic (HuBERT + quantiser)", lambda: semantic_tokens(hubert, quantiser, wave, 9))
    if bark is not None:
        from tests.reference import bark as ref

    def reference_coarse():
        torch.manual_seed(1)
        return ref.generate_coarse(semantic, bark, history_prompt=history, temp=0.7, silent=True)

    coarse = ours_and_reference("coarse (Bark GPT, KV cache)", lambda: generate_coarse(
        coarse_model, [semantic], [voice], [torch.Generator().manual_seed(1)], dtype=dtype), reference_coarse)

    def reference_fine():
        torch.manual_seed(2)
        return ref.generate_fine(coarse[0], bark, history_prompt=history, temp=0.5)

    fine = ours_and_reference("fine (Bark GPT, 1024-frame windows)", lambda: generate_fine(
        fine_model, coarse, [voice], [torch.Generator().manual_seed(2)], dtype=dtype), reference_fine)

    def decode():
        with torch.inference_mode():
            audio = decoder(torch.from_numpy(fine[0])[None])[0].numpy()
        return resample_kaiser_best(audio, 24000, 16000)

    timed("decode (EnCodec + kaiser_best)", decode)
    ours = {stage: times[label] for stage, label in (("coarse", "coarse (Bark GPT, KV cache)"),
                                                     ("fine", "fine (Bark GPT, 1024-frame windows)"))}
    total = sum(seconds for label, seconds in times.items() if not label.startswith("  reference"))
    print(f"    {'total (ours; coarse and fine: the mean of 2 runs)' if bark else 'total':40s} {total:8.1f} s   "
          f"{total / args.seconds:7.2f} s per audio second")
    if bark is not None:
        theirs = {stage: times[f"  reference {stage}"] for stage in ours}
        ours["coarse + fine"], theirs["coarse + fine"] = sum(ours.values()), sum(theirs.values())
        for stage in ours:
            print(f"    {stage:14s} ours {ours[stage] / args.seconds:7.2f}, reference {theirs[stage] / args.seconds:7.2f} "
                  f"s per audio second (means of 2 runs): ours / reference {ours[stage] / theirs[stage]:.3f}")
    print(f"load average {load_average()}")


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages: how many threads competed for the cores meanwhile."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def reference_bark(coarse_model, fine_model):
    """The reference's networks (``tests/reference/bark.py``) holding our models' tensors (no copy), in the
    ``model`` object its loops take."""
    import torch

    from tests.reference import bark as ref

    def sharing(reference_class, config_class, ours, **extra):
        with torch.device("meta"):
            reference = reference_class(config_class(**{**ours.config.to_dict(), **extra}))
        reference.load_state_dict(ours.state_dict(), assign=True)
        return reference.eval()

    return ref.BarkReference(sharing(ref.GPT, ref.GPTConfig, coarse_model, bias=False),
                             sharing(ref.FineGPT, ref.FineGPTConfig, fine_model), encodec=None)


if __name__ == "__main__":
    main()
