"""ASV attacker training speed: utterances/s of ``voxanon train asv`` with the challenge's full-size ECAPA.

The VoicePrivacy 2024 ECAPA-TDNN (channels 512x4/1536, 192-d, AAM softmax over 921 speakers,
Adam + cyclic LR) on random 3 s chunks of synthetic 16 kHz 16-bit WAV utterances (timing does not
depend on the audio; the utterances share 512 files, which the page cache holds, so the figures are
the CPU's and the GPU's, not the disk's). Three modes:

* ``--device cuda`` (batch 256, the challenge's; bf16 autocast where the GPU has it): the GPU
  comparison, in about a minute. Three figures, measured side by side in one process:

  - ``loader alone``: utterances/s that :class:`voxanon.pipeline.training.asv.trainer.AsvTrainer`'s
    DataLoader delivers (chunks read from the WAV files into int16 batches, handed over in shared
    memory and pinned) with the model step removed, its processes already started;
  - ``train asv``: the trainer's epoch loop (the first epoch is the warm-up, the second is timed:
    the loader's refill at the epoch's start included);
  - ``speechbrain step``: the recipe's bare step (Fbank, sentence mean norm, ECAPA_TDNN,
    Classifier, LogSoftmaxWrapper(AdditiveAngularMargin), backward, Adam) on one batch held in
    GPU memory, i.e. what speechbrain's ``Brain.fit_batch`` computes without data loading.

  The target (issue 23): ``train asv`` at 0.9 or more of the bare step. Without CUDA it prints one
  line and exits with code 2.
* ``--loader-only`` (batch 256): the first figure alone, on any machine (the CPU here), against
  the bare step's 3976 utterances/s measured on an NVIDIA H200 (bf16, batch 256): the loader must
  deliver well above that for the GPU to be the bottleneck.
* ``--device cpu`` (batch 32): the second and third figures on the CPU.

Then one epoch of train-clean-360 is extrapolated: 104,014 utterances (921 speakers); the
challenge trains on all of them (``num_utt: ALL``) minus its 10 % validation split, so
93,613 training utterances per epoch, and 10 epochs.

    .venv/bin/python -m benchmarks.train_asv --device cuda [--batch-size 256] [--batches 40] [--workers N]
    .venv/bin/python -m benchmarks.train_asv --loader-only [--workers N]
    .venv/bin/python -m benchmarks.train_asv --device cpu [--batch-size 32] [--batches 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch

TRAIN_CLEAN_360_UTTERANCES = 104_014
TRAIN_CLEAN_360_TRAINING = TRAIN_CLEAN_360_UTTERANCES - round(0.1 * TRAIN_CLEAN_360_UTTERANCES)
CHALLENGE_SPEAKERS = 921
H200_BARE_STEP = 3976.0   # utterances/s of the bare step on an NVIDIA H200, bf16, batch 256 (issue 23)
DISTINCT_FILES = 512
NO_CUDA_EXIT = 2


def synthetic_set(root: Path, n_utterances: int, n_speakers: int, seconds: float, seed: int = 0) -> Path:
    """A Kaldi data directory of ``n_utterances`` utterances over at most ``DISTINCT_FILES`` 16-bit WAV files."""
    from voxanon.data_prep.corpus import DataDir, write_data_dir

    rng = np.random.default_rng(seed)
    wav, utt2spk = {}, {}
    (root / "audio").mkdir(parents=True)
    for i in range(n_utterances):
        path = root / "audio" / f"{i % DISTINCT_FILES:04d}.wav"
        if i < DISTINCT_FILES:
            soundfile.write(path, (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32), 16000,
                            subtype="PCM_16")
        speaker = f"{i % n_speakers:04d}"
        utt = f"{speaker}-1-{i:05d}"
        wav[utt], utt2spk[utt] = str(path), speaker
    write_data_dir(DataDir(name="synthetic", wav=wav, utt2spk=utt2spk, path=root / "data"), root / "data")
    return root / "data"


def speechbrain_step_rate(trainer, batches: int) -> float:
    """Utterances/s of the bare recipe step on in-memory batches of the trainer's size and network."""
    from speechbrain.lobes.features import Fbank
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN, Classifier
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper
    from speechbrain.processing.features import InputNormalization

    h, device = trainer.h, trainer.device
    features, norm = Fbank(n_mels=h["n_mels"]).to(device), InputNormalization(norm_type="sentence", std_norm=False)
    embedding = ECAPA_TDNN(h["n_mels"], channels=h["channels"], kernel_sizes=h["kernel_sizes"],
                           dilations=h["dilations"], attention_channels=h["attention_channels"],
                           lin_neurons=h["lin_neurons"]).to(device)
    classifier = Classifier(h["lin_neurons"], out_neurons=CHALLENGE_SPEAKERS).to(device)
    loss_fn = LogSoftmaxWrapper(AdditiveAngularMargin(margin=h["margin"], scale=h["scale"]))
    optimizer = torch.optim.Adam([*embedding.parameters(), *classifier.parameters()], lr=h["lr"],
                                 weight_decay=h["weight_decay"])
    waves = torch.randn(h["batch_size"], trainer.chunk, device=device) * 0.1
    labels = torch.randint(CHALLENGE_SPEAKERS, (h["batch_size"], 1), device=device)
    lens = torch.ones(h["batch_size"], device=device)

    def step():
        feats = norm(features(waves), lens)
        with torch.autocast(device.type, dtype=trainer.autocast_dtype, enabled=trainer.autocast_dtype is not None):
            outputs = classifier(embedding(feats, lens))
        loss = loss_fn(outputs.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    _synchronise(device)
    started = time.perf_counter()
    for _ in range(batches):
        step()
    _synchronise(device)
    return batches * h["batch_size"] / (time.perf_counter() - started)


def loader_rate(trainer) -> tuple[float, float]:
    """(utterances/s of the trainer's DataLoader alone over one epoch's batches, its processes already started;
    seconds from the first pass's start to its first batch, process start-up included)."""
    from voxanon.pipeline.training.asv.loader import epoch_batches

    h = trainer.h
    trainer.keys.kind = "train"
    trainer.keys.batches = epoch_batches(len(trainer.data.train), trainer.choices, h["batch_size"], h["seed"], 0)
    started = time.perf_counter()
    batches = iter(trainer.loader)
    next(batches)
    first = time.perf_counter() - started
    for _ in batches:
        pass
    started, count = time.perf_counter(), 0
    for _, labels in trainer.loader:
        count += len(labels)
    return count / (time.perf_counter() - started), first


def _synchronise(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    from voxanon.pipeline.training.asv.data import prepare_training_data, read_training_sets
    from voxanon.pipeline.training.asv.settings import resolve_hparams
    from voxanon.pipeline.training.asv.trainer import AsvTrainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]: where the step runs")
    parser.add_argument("--loader-only", action="store_true", help="the DataLoader alone, no model step")
    parser.add_argument("--batch-size", type=int, help="default: 32 on the CPU, 256 on a GPU and --loader-only")
    parser.add_argument("--batches", type=int,
                        help="batches per epoch (one warm-up epoch, one timed): default 3 on the CPU, 40 otherwise")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    parser.add_argument("--workers", type=int, help="data-loading processes (default: train asv's for a GPU, also "
                                                    "with --loader-only: up to 8, one core left)")
    args = parser.parse_args()
    on_cpu = args.device == "cpu" and not args.loader_only
    if not on_cpu and not args.loader_only and not torch.cuda.is_available():
        print(f"benchmarks/train_asv.py --device {args.device}: no CUDA device here (torch {torch.__version__}), so "
              f"the GPU comparison was not measured (the loader alone: --loader-only); exit code {NO_CUDA_EXIT}")
        return NO_CUDA_EXIT
    batch_size = args.batch_size or (32 if on_cpu else 256)
    n_batches = args.batches or (3 if on_cpu else 40)
    if args.workers is None and args.loader_only:
        from voxanon.pipeline.training.asv.loader import default_workers

        args.workers = default_workers(torch.device("cuda"))

    # The training speakers of the synthetic set are padded to the challenge's 921 classifier outputs below.
    hparams = resolve_hparams({"batch_size": batch_size, "valid_ratio": 0.0, "number_of_epochs": 2})
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = synthetic_set(Path(tmp), batch_size * n_batches, n_speakers=16, seconds=5.0)
        data = prepare_training_data(read_training_sets([data_dir]), hparams, progress=False)
        data.speakers = data.speakers + [f"pad{i}" for i in range(CHALLENGE_SPEAKERS - len(data.speakers))]
        trainer = AsvTrainer(hparams, data, Path(tmp) / "model", device="cpu" if args.loader_only else args.device,
                             precision=args.precision, workers=args.workers, progress=False)
        print(f"batch {batch_size} x {hparams['sentence_len']:g} s chunks, {n_batches} batches per epoch, "
              f"{trainer.workers} loader process(es), {torch.get_num_threads()} threads")
        loader, first = loader_rate(trainer)
        versus = (f"; {loader / H200_BARE_STEP:.2f}x the bare step's {H200_BARE_STEP:.0f}/s on an H200 (bf16, batch 256)"
                  if batch_size == 256 else "")
        print(f"loader alone: {loader:.0f} utterances/s ({loader / batch_size:.1f} batches/s), first batch after "
              f"{first:.2f} s{versus}")
        if args.loader_only:
            trainer.close()
            return 0
        parameters = sum(p.numel() for p in trainer.model.parameters())
        print(f"device {trainer.device}, precision {trainer.precision}; ECAPA {hparams['channels']} + classifier over "
              f"{CHALLENGE_SPEAKERS} speakers: {parameters / 1e6:.2f} M parameters")
        trainer.train_epoch()
        trainer.finish_epoch()
        trainer.train_epoch()
        ours = trainer.running["count"] / trainer.running["seconds"]
        trainer.close()
    reference = speechbrain_step_rate(trainer, n_batches)
    print(f"train asv (chunks read from WAV files): {ours:.2f} utterances/s, "
          f"{batch_size / ours:.3f} s per batch of {batch_size}")
    print(f"speechbrain step (in-memory batch):      {reference:.2f} utterances/s; ratio ours/speechbrain "
          f"{ours / reference:.2f}")
    epoch_seconds = TRAIN_CLEAN_360_TRAINING / ours
    print(f"one epoch of train-clean-360 ({TRAIN_CLEAN_360_TRAINING} training utterances = all {TRAIN_CLEAN_360_UTTERANCES} "
          f"less the 10 % validation split): {epoch_seconds:.0f} s = {epoch_seconds / 3600:.1f} h; "
          f"10 epochs {10 * epoch_seconds / 3600:.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
