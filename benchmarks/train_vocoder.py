"""Vocoder training speed: steps per second of ``voxanon train vocoder``'s training step.

The full-size SSL-SAS generator (14.2 M parameters, random weights: timing does not depend on
weight values) against jik876's full MPD + MSD, batch 2 and 8960-sample segments by default,
on the CPU (or ``--device cuda``). Features are synthetic arrays in the training cache layout,
so the figure is the training step alone (data loading from the memory-mapped cache included),
not the one-off feature extraction.

    .venv/bin/python -m benchmarks.train_vocoder [--steps 5] [--batch-size 2] [--device cpu]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def synthetic_features(root: Path, n_utterances: int, seconds: float, seed: int = 0):
    from voxanon.pipeline.training.vocoder.features import FeatureSet, UtteranceFeatures

    rng = np.random.default_rng(seed)
    frames = int(seconds * 50)
    utterances = []
    for i in range(n_utterances):
        arrays = {"audio": rng.uniform(-0.5, 0.5, frames * 320), "f0": rng.uniform(80, 250, 2 * frames),
                  "content": rng.standard_normal((frames, 200)), "speaker": rng.standard_normal(192)}
        paths = {}
        for kind, values in arrays.items():
            paths[kind] = root / f"{kind}-{i}.npy"
            np.save(paths[kind], values.astype(np.float32))
        utterances.append(UtteranceFeatures(f"synthetic/{i}", paths, frames))
    return FeatureSet(utterances, {}, n_utterances)


def install_benchmark_set(name: str) -> None:
    """The tiny random SSL-SAS encoders with the full-size generator (only the generator is timed)."""
    from voxanon.models.checkpoints.ssl_sas import random_ssl_sas
    from voxanon.models.nets.hifigan import GeneratorConfig, HifiganGenerator
    from voxanon.models.checkpoints.registry import write_model_set

    components, config = random_ssl_sas("tiny")
    generator = HifiganGenerator(GeneratorConfig())
    components["generator"] = generator.state_dict()
    config["generator"] = generator.config.to_dict()
    write_model_set(name, components, config, source="benchmark", random=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up step)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--segment", type=int, default=8960)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    parser.add_argument("--lambda-xv", type=float, default=0.0, help="also time the x-vector consistency loss")
    args = parser.parse_args()

    from voxanon.pipeline.training.vocoder.settings import VocoderTrainingOptions
    from voxanon.pipeline.training.vocoder.trainer import VocoderTrainer

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        os.environ["VOXANON_HOME"] = str(work / "home")
        install_benchmark_set("bench")
        features = synthetic_features(work, n_utterances=max(8, args.batch_size * 2), seconds=3.0)
        options = VocoderTrainingOptions(out=work / "out", models="bench", batch_size=args.batch_size,
                                         segment=args.segment, device=args.device, precision=args.precision,
                                         lambda_xv=args.lambda_xv, progress=False)
        trainer = VocoderTrainer(options, features)
        trainer.train_step()
        synchronise = torch.cuda.synchronize if trainer.device.type == "cuda" else (lambda: None)
        synchronise()
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        synchronise()
        elapsed = time.perf_counter() - start
    generator_params = sum(p.numel() for p in trainer.generator.parameters())
    discriminator_params = sum(p.numel() for m in (trainer.mpd, trainer.msd) for p in m.parameters())
    threads = f", {torch.get_num_threads()} torch threads" if trainer.device.type == "cpu" else ""
    print(f"train vocoder step: generator {generator_params / 1e6:.2f} M + discriminators "
          f"{discriminator_params / 1e6:.1f} M parameters, batch {args.batch_size} x {args.segment} samples, "
          f"{trainer.device} {trainer.precision}{threads}, lambda_xv {args.lambda_xv:g}")
    print(f"  {args.steps / elapsed:.3f} steps/s ({elapsed / args.steps:.2f} s per step over {args.steps} steps)")


if __name__ == "__main__":
    main()
